"""
The ``conftest.py`` of sb3-contrib's own tests when ``.ci/gpu_session contrib`` runs them: the tests import
``RecurrentPPO`` and ``MaskablePPO`` from ``sb3_contrib``, which here are sb3-ewma's ``RecurrentPPO_EWMA`` and
``MaskablePPO_EWMA`` (pytest loads this file before it imports the test modules beside it).

With ``CONTRIB_STACK_EVERY=<seconds>`` a test still running after that long writes every thread's Python stack to
stderr, and again at each further interval (pytest's ``faulthandler_timeout`` writes it once): stacks that move on
show a slow test, the same wait point again and again shows a hang (each stack names the test function).
"""

import faulthandler
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import sb3_contrib
import torch as th

from sb3_ewma import MaskablePPO_EWMA, RecurrentPPO_EWMA

sb3_contrib.RecurrentPPO = RecurrentPPO_EWMA
sb3_contrib.MaskablePPO = MaskablePPO_EWMA

STACK_EVERY = float(os.environ.get("CONTRIB_STACK_EVERY", "0"))
_stack_fd: list[int] = []  # a copy of stderr's descriptor, taken before pytest captures the tests' output


def pytest_configure(config: Any) -> None:
    """Register sb3-contrib's marker (its own pytest settings are not copied); keep stderr for the stacks."""
    config.addinivalue_line("markers", "slow: marks tests as slow (deselect with '-m \"not slow\"')")
    if STACK_EVERY > 0 and not _stack_fd:
        _stack_fd.append(os.dup(sys.stderr.fileno()))


def pytest_report_header(config: Any) -> list[str]:
    """Say which classes and which device (the tests' ``device="auto"``) the run uses."""
    device = f"cuda ({th.cuda.get_device_name(0)})" if th.cuda.is_available() else "cpu"
    stacks = f"; stacks every {STACK_EVERY:g} s of a test" if STACK_EVERY > 0 else ""
    return [f"sb3-contrib's tests with RecurrentPPO_EWMA and MaskablePPO_EWMA swapped in; device 'auto' is {device}{stacks}"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any) -> Iterator[None]:
    """Dump the stacks every ``STACK_EVERY`` seconds while ``item`` runs."""
    if not _stack_fd:
        yield
        return
    faulthandler.dump_traceback_later(STACK_EVERY, repeat=True, file=_stack_fd[0])
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
