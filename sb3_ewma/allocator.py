"""
CPU memory reuse for training loops (glibc only): :func:`keep_freed_memory` makes freed blocks stay in the process for
the next minibatch instead of coming back as fresh pages that the kernel faults in and zeroes. It changes the whole
process's ``malloc``, so the library does not call it by itself: ``python -m sb3_ewma.train`` does, and scripts may call
it once before training. See :ref:`performance`.
"""

import ctypes
import ctypes.util
import platform
from functools import cache

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc refuses an mmap threshold above HEAP_MAX_SIZE / 2 (32 MiB on 64-bit systems)
MAX_MMAP_THRESHOLD = 32 * 1024 * 1024
DEFAULT_TRIM_THRESHOLD = 1024 * 1024 * 1024
# mallopt takes a C int
MAX_TRIM_THRESHOLD = 2**31 - 1


@cache
def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (Linux), else None."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return libc


def keep_freed_memory(
    mmap_threshold: int = MAX_MMAP_THRESHOLD,
    trim_threshold: int = DEFAULT_TRIM_THRESHOLD,
) -> bool:
    """
    Make glibc's ``malloc`` keep freed memory for reuse instead of returning it to the operating system. The process
    then holds on to its peak memory (up to ``trim_threshold`` more than it uses).

    :param mmap_threshold: largest block served from the heap, in bytes, in ``[1, 32 MiB]``
    :param trim_threshold: free bytes at the top of the heap kept before trimming, in ``[0, 2**31 - 1]``
    :return: whether the thresholds were set (False where the C library is not glibc: nothing changes there)
    :raises ValueError: for a threshold out of its range
    :raises OSError: if glibc refuses a threshold (the trim threshold is set first and stays set)
    """
    if (
        isinstance(mmap_threshold, bool)
        or not isinstance(mmap_threshold, int)
        or not 1 <= mmap_threshold <= MAX_MMAP_THRESHOLD
    ):
        raise ValueError(f"mmap_threshold must be an integer in [1, {MAX_MMAP_THRESHOLD}] (bytes), got {mmap_threshold!r}")
    if (
        isinstance(trim_threshold, bool)
        or not isinstance(trim_threshold, int)
        or not 0 <= trim_threshold <= MAX_TRIM_THRESHOLD
    ):
        raise ValueError(f"trim_threshold must be an integer in [0, {MAX_TRIM_THRESHOLD}] (bytes), got {trim_threshold!r}")
    libc = _glibc()
    if libc is None:
        return False
    # mallopt returns 1 on success, 0 on error. The trim threshold first: if the mmap threshold is then refused, the
    # heap only keeps more free memory than before, which is harmless; the other order is not.
    for name, parameter, value in (
        ("trim_threshold", M_TRIM_THRESHOLD, trim_threshold),
        ("mmap_threshold", M_MMAP_THRESHOLD, mmap_threshold),
    ):
        if libc.mallopt(parameter, value) != 1:
            raise OSError(f"glibc's mallopt refused {name}={value}")
    return True
