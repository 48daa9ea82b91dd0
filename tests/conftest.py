import os

import pytest
import torch as th

# CI has 2 cores: one thread per test process keeps small networks fast and runs reproducible
th.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _one_thread():
    th.set_num_threads(1)
    yield
