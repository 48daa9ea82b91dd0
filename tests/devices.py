"""
The devices the test suite runs on, shared by every test file (through ``conftest.py``).

- ``SB3_EWMA_TEST_DEVICE`` forces the device of the whole suite: ``cpu`` hides the GPUs from it and from the processes
  it starts (``CUDA_VISIBLE_DEVICES=""``, set before CUDA is initialized), so that ``device="auto"`` is the CPU
  everywhere; ``cuda`` requires a GPU (the suite stops at once without one); ``auto`` (or unset) uses what is present.
- Tests of CPU semantics (numbers compared with numpy, exact equalities with a CPU computation) pin ``device="cpu"``.
- Tests of device handling (save/load, the proximal state, the collectors, export, data-parallel training) take a
  ``device`` argument: they run once per entry of :data:`DEVICES`, the CPU always and CUDA when it is present.
"""

import os

DEVICE_VARIABLE = "SB3_EWMA_TEST_DEVICE"
DEVICE_CHOICES = ("auto", "cpu", "cuda")


def forced_device() -> str:
    """The value of ``SB3_EWMA_TEST_DEVICE`` (``"auto"`` when unset), checked."""
    value = os.environ.get(DEVICE_VARIABLE, "").strip().lower() or "auto"
    if value not in DEVICE_CHOICES:
        raise ValueError(f"{DEVICE_VARIABLE}={value!r} is not a test device: choose one of {', '.join(DEVICE_CHOICES)}")
    return value


def apply_forced_device() -> None:
    """Hide the GPUs when the suite is forced onto the CPU: call before anything initializes CUDA."""
    if forced_device() == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""


def available_devices() -> list[str]:
    """The devices tests of device handling run on: the CPU, and CUDA when present (and not hidden)."""
    import torch as th

    if forced_device() == "cuda" and not th.cuda.is_available():
        raise RuntimeError(f"{DEVICE_VARIABLE}=cuda, but torch sees no CUDA device")
    return ["cpu", *(["cuda"] if th.cuda.is_available() else [])]


def subprocess_environment(device: str) -> dict[str, str]:
    """Environment variables that make a child process's ``device="auto"`` resolve to ``device``."""
    return {"CUDA_VISIBLE_DEVICES": ""} if device == "cpu" else {}
