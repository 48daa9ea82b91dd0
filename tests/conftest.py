import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from devices import apply_forced_device, available_devices

apply_forced_device()  # before torch, so that SB3_EWMA_TEST_DEVICE=cpu hides the GPUs from everything

import pytest  # noqa: E402
import torch as th  # noqa: E402

DEVICES = available_devices()

# CI has 2 cores: one thread per test process keeps small networks fast and runs reproducible
th.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that takes a ``device`` argument runs on every device present (tests/devices.py)."""
    parametrized = {mark.args[0] for mark in metafunc.definition.iter_markers("parametrize")}
    if "device" in metafunc.fixturenames and "device" not in parametrized:
        metafunc.parametrize("device", DEVICES)


def pytest_report_header(config: pytest.Config) -> str:
    return f"sb3-ewma test devices: {', '.join(DEVICES)}"


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

    from sb3_ewma import allocator

    def keep_freed_memory(*args, **kwargs) -> bool:
        return True

    monkeypatch.setattr(allocator, "keep_freed_memory", keep_freed_memory)
    # where the experiment manager calls it
    experiment = sys.modules.get("sb3_ewma.zoo.experiment")
    if experiment is not None:
        monkeypatch.setattr(experiment, "keep_freed_memory", keep_freed_memory)
    yield
