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


@pytest.fixture(autouse=True)
def _malloc_untouched(monkeypatch: pytest.MonkeyPatch):
    """
    ``keep_freed_memory`` changes glibc's malloc for the whole worker process. Tests that train through the CLI, the
    README or the benchmarks get a stand-in, so each test runs with the allocator it started with; tests of the
    allocator itself (test_allocator.py, which binds the real function at import) are unaffected.
    """
    import sys

    import sb3_ewma

    def keep_freed_memory(*args, **kwargs) -> bool:
        return True

    monkeypatch.setattr(sb3_ewma, "keep_freed_memory", keep_freed_memory)
    # where the experiment manager calls it
    experiment = sys.modules.get("sb3_ewma.zoo.experiment")
    if experiment is not None:
        monkeypatch.setattr(experiment, "keep_freed_memory", keep_freed_memory)
    yield
