"""`sb3_ewma.allocator.keep_freed_memory`: glibc's malloc keeps freed blocks, so activations stop faulting in."""

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from sb3_ewma import allocator
from sb3_ewma.allocator import keep_freed_memory

REPO_ROOT = Path(__file__).resolve().parents[1]
IS_GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# a no-grad CNN forward, as in the proximal pass: every activation (1-4 MiB) is freed as soon as it is used
FORWARD_PASSES = """
import resource, sys, torch as th
th.set_num_threads(1)
if sys.argv[1] == "keep":
    from sb3_ewma.allocator import keep_freed_memory
    assert keep_freed_memory()
net = th.nn.Sequential(th.nn.Conv2d(3, 16, 3, padding=1), th.nn.ReLU(), th.nn.Conv2d(16, 16, 3, padding=1), th.nn.ReLU())
frames = th.rand(16, 3, 64, 64)
def forward():
    with th.no_grad():
        net(frames).sum()
forward()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    forward()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _page_faults(mode: str) -> int:
    result = subprocess.run(
        [sys.executable, "-c", FORWARD_PASSES, mode], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split()[-1])


@pytest.mark.skipif(not IS_GLIBC, reason="glibc only")
def test_keep_freed_memory_stops_page_faults_of_repeated_activations() -> None:
    # 20 passes of 4 activations of 4 MiB: glibc's default returns them to the system (about 1,000 faults each);
    # kept, they are reused
    default, kept = _page_faults("default"), _page_faults("keep")
    assert default > 20 * 1000
    assert kept < default / 10


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(mmap_threshold=0), "mmap_threshold must be an integer in \\[1, 33554432\\]"),
        (dict(mmap_threshold=64 << 20), "mmap_threshold must be an integer in \\[1, 33554432\\]"),
        (dict(mmap_threshold=1.5), "mmap_threshold"),
        (dict(trim_threshold=-1), "trim_threshold must be an integer in \\[0, 2147483647\\]"),
        (dict(trim_threshold=2**31), "trim_threshold"),
        (dict(trim_threshold=True), "trim_threshold"),
    ],
)
def test_keep_freed_memory_refuses_bad_thresholds(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        keep_freed_memory(**kwargs)


def test_keep_freed_memory_changes_nothing_without_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    allocator._glibc.cache_clear()
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("", ""))
    try:
        assert keep_freed_memory() is False
    finally:
        allocator._glibc.cache_clear()


def test_keep_freed_memory_reports_a_refused_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    class RefusingLibc:
        @staticmethod
        def mallopt(parameter: int, value: int) -> int:
            calls.append((parameter, value))
            return 0 if parameter == allocator.M_MMAP_THRESHOLD else 1

    monkeypatch.setattr(allocator, "_glibc", lambda: RefusingLibc())
    with pytest.raises(OSError, match="mmap_threshold=4096"):
        keep_freed_memory(mmap_threshold=4096, trim_threshold=8192)
    # the trim threshold goes first, so a refused mmap threshold leaves only a harmless change behind
    assert calls == [(allocator.M_TRIM_THRESHOLD, 8192), (allocator.M_MMAP_THRESHOLD, 4096)]
