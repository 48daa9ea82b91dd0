"""
A pytest plugin for ``.ci/gpu_session check`` (``-p check_selection``, with ``.ci`` on ``PYTHONPATH``): which tests a
short GPU window runs, and, in the CPU dry run, a sample of them.

- ``--check-device DEVICE`` keeps the suite's device tests (those that take the ``device`` argument of
  ``tests/conftest.py``) on ``DEVICE`` only, and deselects every other test but the earlier failures;
- ``--check-failures FILE`` adds the tests that failed on CUDA before (``FILE``: pytest's ``FAILED <node id> - ...``
  lines or bare node ids, as ``.ci/cuda_failures.txt``). The ids were recorded before the device tests got their
  ``device`` parameter: a failure matches every test of its function whose parameter id holds all of the failure's
  parameter parts (``[PPO_EWMA-process]`` matches ``[cuda-PPO_EWMA-process]``), on ``--check-device`` where the test
  takes a device. A failure that matches no test is named in the report (a test renamed or removed);
- ``--check-sample N`` (the dry run) runs at most ``N`` of the selected tests of each file and says how many it left
  out, and why.

The terminal report names each count, so the log says what was selected, what was left out and why; under
pytest-xdist the workers select (the controller collects nothing), so ``--check-report FILE`` writes it to ``FILE``
too, for the caller to show.
"""

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

_FAILED = re.compile(r"^(?:FAILED|ERROR)\s+(\S+)")


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("check_selection", "the tests of .ci/gpu_session check")
    group.addoption("--check-device", default=None, help="keep the device tests on this device, and the earlier failures")
    group.addoption("--check-failures", default=None, help="a file of node ids (pytest's FAILED lines) to run too")
    group.addoption("--check-sample", type=int, default=0, help="run at most this many selected tests per file (dry run)")
    group.addoption("--check-report", default=None, help="also write the report of the selection to this file")


def read_failures(path: str | Path) -> list[str]:
    """The node ids of a file of pytest's ``FAILED <id> - message`` lines (or of bare ids; ``#`` starts a comment)."""
    ids = []
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _FAILED.match(line)
        ids.append(match.group(1) if match else line.split()[0])
    return ids


def split_id(node_id: str) -> tuple[str, list[str]]:
    """``file::function[a-b]`` -> (``file::function``, [a, b]); the parameter parts split on ``-`` (pytest's joiner)."""
    if "[" not in node_id:
        return node_id, []
    base, parameters = node_id.split("[", 1)
    return base, parameters[:-1].split("-") if parameters.endswith("]") else [parameters]


def failure_matches(failure: str, node_id: str) -> bool:
    """Whether a recorded failure's id names this test (its parameter parts a subset of the test's, in any order)."""
    failure_base, failure_parts = split_id(failure)
    base, parts = split_id(node_id)
    return failure_base == base and all(part in parts for part in failure_parts)


def _device_of(item: Any) -> str | None:
    callspec = getattr(item, "callspec", None)
    return None if callspec is None else callspec.params.get("device")


def select(node_ids: list[tuple[str, str | None]], device: str | None, failures: list[str]) -> tuple[list[int], dict]:
    """
    The indices of the tests to run among ``node_ids`` (each ``(node id, its device parameter or None)``), and the
    counts for the report: device tests kept, earlier failures kept, failures that matched nothing.
    """
    kept, device_tests, failed_before, matched = [], 0, 0, set()
    for index, (node_id, test_device) in enumerate(node_ids):
        on_device = test_device is None or device is None or test_device == device
        hits = [failure for failure in failures if failure_matches(failure, node_id)]
        matched.update(hits)
        if not on_device:
            continue
        if hits:
            kept.append(index)
            failed_before += 1
        elif device is not None and test_device is not None:
            kept.append(index)
            device_tests += 1
        elif device is None and not failures:
            kept.append(index)
    unmatched = [failure for failure in failures if failure not in matched]
    return kept, {"device tests": device_tests, "earlier failures": failed_before, "unmatched": unmatched}


def sample(node_ids: list[str], per_file: int) -> list[int]:
    """The indices of the first ``per_file`` tests of each file."""
    taken: dict[str, int] = defaultdict(int)
    kept = []
    for index, node_id in enumerate(node_ids):
        path = node_id.split("::", 1)[0]
        if taken[path] < per_file:
            taken[path] += 1
            kept.append(index)
    return kept


_REPORT: list[str] = []


@pytest.hookimpl(trylast=True)  # after pytest's own -k and -m, so that the sample and the counts are of what they keep
def pytest_collection_modifyitems(config: Any, items: list) -> None:
    device = config.getoption("check_device")
    failures_file = config.getoption("check_failures")
    per_file = config.getoption("check_sample")
    if device is None and failures_file is None and not per_file:
        return
    collected = len(items)
    selected = items
    if device is not None or failures_file is not None:
        failures = read_failures(failures_file) if failures_file else []
        indices, counts = select([(item.nodeid, _device_of(item)) for item in items], device, failures)
        selected = [items[index] for index in indices]
        _REPORT.append(
            f"check selection: {len(selected)} of {collected} tests: {counts['device tests']} device tests on {device} "
            f"and {counts['earlier failures']} tests of the {len(failures)} earlier failures ({failures_file}; on "
            f"{device} where a test takes a device); the other {collected - len(selected)} deselected (not device "
            "tests, or device tests on another device)"
        )
        for failure in counts["unmatched"]:
            _REPORT.append(f"check selection: WARNING: the earlier failure {failure} matches no test (renamed or removed?)")
    if per_file:
        indices = sample([item.nodeid for item in selected], per_file)
        left_out = len(selected) - len(indices)
        files = len({item.nodeid.split("::", 1)[0] for item in selected})
        _REPORT.append(
            f"check selection: dry run: {len(indices)} of the {len(selected)} selected tests run (the first {per_file} of "
            f"each of {files} files); the other {left_out} skipped: a CPU dry run checks the selection and the commands, "
            "the suite itself runs on the CPU in CI and on CUDA in the window"
        )
        selected = [selected[index] for index in indices]
    chosen = set(map(id, selected))
    deselected = [item for item in items if id(item) not in chosen]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    items[:] = selected
    report = config.getoption("check_report")
    if report:  # each xdist worker writes the same lines
        Path(report).write_text("".join(f"{line}\n" for line in _REPORT))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in _REPORT:
        terminalreporter.write_line(line)
