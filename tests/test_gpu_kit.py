"""
The GPU kit (.ci/gpu_kit, .ci/gpu_session): the modules it runs exist and take its arguments, its size check, and the
structure of the check stage (a GPU window's one command): its parts, their time budgets and the files it leaves.
"""

import argparse
import importlib
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SESSION = ROOT / ".ci" / "gpu_session"
KIT = ROOT / ".ci" / "gpu_kit"
if str(ROOT) not in sys.path:  # `benchmarks` is a directory of the repository, not an installed package
    sys.path.insert(0, str(ROOT))

# an interpreter run on a module: python -m X, python3 -m X, "$PY" -m X
_INTERPRETER_MODULE = re.compile(r"""(?:"\$PY"|\$PY\b|\bpython3?)\s+-m\s+([A-Za-z_][\w.]*)""")
# the module torchrun starts: ... -m torch.distributed.run <its options> -m X
_TORCHRUN_MODULE = re.compile(r"-m\s+torch\.distributed\.run\b[^\n]*?\s-m\s+([A-Za-z_][\w.]*)")


class _Parsed(Exception):
    """Raised once a module's parser has accepted the arguments: its work is not run."""


def session_lines() -> list[str]:
    """The lines of .ci/gpu_session, with the continuation lines joined."""
    return SESSION.read_text().replace("\\\n", " ").splitlines()


def session_modules() -> set[str]:
    text = "\n".join(session_lines())
    return set(_INTERPRETER_MODULE.findall(text)) | set(_TORCHRUN_MODULE.findall(text))


def test_gpu_session_runs_modules_that_exist():
    """Every module that .ci/gpu_session runs with `python -m` can be imported from this checkout (the benchmarks moved
    under benchmarks/timing once, and the session kept calling the old paths)."""
    modules = session_modules()
    expected = {"benchmarks.timing.throughput", "benchmarks.timing.forward_cost", "benchmarks.timing.proximal_precision"}
    assert expected | {"sb3_ewma.train", "torch.distributed.run", "pytest", "pip"} <= modules, modules
    missing = sorted(module for module in modules if importlib.util.find_spec(module) is None)
    assert not missing, f".ci/gpu_session runs modules that do not exist: {missing}"


def test_gpu_session_passes_arguments_the_benchmarks_take(monkeypatch):
    """Each benchmark command of .ci/gpu_session parses with that module's own command line (nothing is run)."""
    parse_args = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        parse_args(self, args, namespace)  # SystemExit(2) on an argument the module does not take
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    commands = [
        # a shell default ("${CURVES_MINUTES:-8}") read as its default
        shlex.split(re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", command))
        for line in session_lines()
        if not line.lstrip().startswith("#")
        for command in line.split("&&")
        if "-m benchmarks." in command
    ]
    assert len(commands) >= 3
    for command in commands:
        module_name = command[command.index("-m") + 1]
        arguments = command[command.index("-m") + 2 :]
        with pytest.raises(_Parsed):
            importlib.import_module(module_name).main(arguments)


def test_gpu_session_stages_exist():
    """The stages the session's header shows in its example calls are functions of the script."""
    text = SESSION.read_text()
    stages = {stage for call in re.findall(r"gpu_session ([\w ]+)\"", text) for stage in call.split()}
    assert {"setup", "check", "nccl", "bench", "tests", "contrib"} <= stages
    assert all(f"stage_{stage}() {{" in text for stage in stages | {"contrib_cpu", "plan"})


def _git_checkout() -> bool:
    if shutil.which("git") is None:
        return False
    result = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=ROOT, capture_output=True, text=True)
    return result.returncode == 0 and result.stdout.strip() == "true"


@pytest.mark.skipif(not _git_checkout(), reason="needs a git checkout (the kit counts git's files)")
def test_the_kit_pins_versions_the_package_allows():
    """Every pin of .ci/gpu_requirements.txt meets what the package's requirements, extras included, say of it (the
    procgen extra's gym-notices<0.1, without which the GPU machine's every gym import prints gym's banner)."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    allowed: dict[str, list[Requirement]] = {}
    for line in requires("sb3-ewma") or []:
        requirement = Requirement(line)
        allowed.setdefault(canonicalize_name(requirement.name), []).append(requirement)
    pins = [line for line in (ROOT / ".ci" / "gpu_requirements.txt").read_text().splitlines() if line and line[0] != "#"]
    checked = 0
    for pin in pins:
        name, version = pin.split("==")
        for requirement in allowed.get(canonicalize_name(name), []):
            assert requirement.specifier.contains(version, prereleases=True), f"{pin} in the GPU kit, {requirement}"
            checked += 1
    assert checked >= 5, "the kit pins the package's main requirements (SB3, sb3-contrib, gymnasium, gym-notices, ...)"


def test_gpu_kit_checks_what_a_runner_carries():
    """`.ci/gpu_kit --check` adds up the repository, shared/ and .gpu (a part not prepared counted at its usual size)
    and fails above the 64 MiB a remote GPU runner carries, naming the largest parts of the repository."""
    environment = {key: value for key, value in os.environ.items() if key != "GPU_KIT_LIMIT_MIB"}
    result = subprocess.run(["bash", str(KIT), "--check"], cwd=ROOT, capture_output=True, text=True, env=environment)
    assert re.search(r"repository \(\d+ files\)", result.stdout) and ".gpu/wheels" in result.stdout, result.stdout
    assert "MiB of 64 MiB" in result.stdout
    assert result.returncode == 0, f"the repository and the GPU kit exceed what a GPU runner carries:\n{result.stdout}"
    small = subprocess.run(
        ["bash", str(KIT), "--check"], cwd=ROOT, capture_output=True, text=True, env={**environment, "GPU_KIT_LIMIT_MIB": "1"}
    )
    assert small.returncode == 1 and "exceeds the 1 MiB a remote GPU runner carries" in small.stdout
    assert "The largest parts of the repository:" in small.stdout


def test_contrib_conftest_swaps_the_classes_in(monkeypatch):
    """The conftest that gpu_session's contrib stage puts beside sb3-contrib's tests makes `from sb3_contrib import
    RecurrentPPO, MaskablePPO` give the EWMA classes."""
    import sb3_contrib

    from sb3_ewma import MaskablePPO_EWMA, RecurrentPPO_EWMA

    for name in ("RecurrentPPO", "MaskablePPO"):
        monkeypatch.setattr(sb3_contrib, name, getattr(sb3_contrib, name))  # restored afterwards
    spec = importlib.util.spec_from_file_location("contrib_conftest", ROOT / ".ci" / "contrib_conftest.py")
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    from sb3_contrib import MaskablePPO, RecurrentPPO

    assert RecurrentPPO is RecurrentPPO_EWMA and MaskablePPO is MaskablePPO_EWMA


# ----------------------------------------------------------------------------------------------------------------------
# the check stage: `bash .ci/gpu_session setup check`, one command for a GPU window of 15 minutes (at most 10 a command)

CHECK_PARTS = ["suite", "sb3", "contrib", "ranks", "collector", "throughput"]
"""The parts of the check, most important first (each later part runs only if time is left)."""
WINDOW_LIMIT_S = 480
"""The check's command (setup and every part) ends within 8 minutes on the GPU machine."""
FILES_BACK = 8
"""At most 8 files come back from $OUT."""


def check_plan(tmp_path: Path) -> dict[str, Any]:
    """What `gpu_session plan` prints: the limit, setup's budget, each part's, the total and the files."""
    result = subprocess.run(
        ["bash", str(SESSION), "plan"], capture_output=True, text=True, env={**os.environ, "OUT": str(tmp_path)}, check=True
    )
    assert "stage plan done" in result.stdout, result.stdout
    lines = (tmp_path / "plan.log").read_text().splitlines()
    plan: dict[str, Any] = {"parts": []}
    for line in lines:
        words = line.split()
        if words[0] == "part":
            plan["parts"].append((words[1], int(words[2])))
        elif words[0] == "files":
            plan["files"] = words[1:]
        else:
            plan[words[0]] = int(words[1])
    return plan


def shell_function(name: str) -> str:
    """The body of a function of .ci/gpu_session, its continuation lines joined."""
    text = SESSION.read_text().replace("\\\n", " ")
    match = re.search(rf"^{name}\(\) {{\n(.*?)^}}\n", text, flags=re.M | re.S)
    assert match, f"no function {name} in .ci/gpu_session"
    return match.group(1)


def test_check_stage_parts_and_budgets_fit_the_window(tmp_path):
    """The parts come in the order of priority, each with a budget, and setup's and theirs add up to under 8 minutes."""
    plan = check_plan(tmp_path)
    assert [part for part, _ in plan["parts"]] == CHECK_PARTS
    assert plan["limit"] == WINDOW_LIMIT_S
    budgets = [budget for _, budget in plan["parts"]]
    assert plan["total"] == plan["setup"] + sum(budgets) < WINDOW_LIMIT_S, plan
    # setup installs about 55 MB of wheels (18 s on the H200 of 2026-11-28); every part has time to start
    assert plan["setup"] >= 30 and all(budget >= 20 for budget in budgets), plan


def test_check_stage_leaves_at_most_8_files(tmp_path):
    """setup.log, check.log and one log per part: what comes back from a window."""
    plan = check_plan(tmp_path)
    assert plan["files"] == ["setup.log", "check.log", *(f"check_{part}.log" for part in CHECK_PARTS)]
    assert len(plan["files"]) <= FILES_BACK
    stage = shell_function("stage_check")
    assert '"check_$part" "$budget" > "$OUT/check_$part.log" 2>&1' in stage
    # what the parts write in between goes to scratch folders, removed at the end (the zoo's logs, the results tables)
    for function in ("check_suite", "check_sb3", "check_throughput", "nccl_train"):
        body = shell_function(function)
        assert "mktemp" in body and "rm -" in body, function
        assert "$OUT/" not in body, f"{function} writes into $OUT"


def test_every_part_of_the_check_is_time_boxed():
    """Each command of the parts that runs Python runs under `timeout` (check_kill), with the part's budget."""
    functions = [f"check_{part}" for part in CHECK_PARTS] + ["nccl_train", "contrib_part", "contrib_suite", "check_kill"]
    for function in functions:
        body = shell_function(function)
        for line in body.splitlines():
            if re.search(r'"\$PY" (-m|\.ci/|-c|-)', line):
                assert re.search(r"\b(check_kill|timeout)\b", line), f"{function}: not time-boxed: {line.strip()}"
    assert "timeout -s INT -k 10" in shell_function("check_kill")
    stage = shell_function("stage_check")
    assert "left=$((limit - SECONDS))" in stage and "CHECK_MIN_PART" in stage  # the parts end within the limit
    for part in CHECK_PARTS:
        assert f"check_{part}() {{" in SESSION.read_text()


def test_check_stage_has_a_dry_run_that_skips_nothing_silently():
    """GPU_SESSION_DRY_RUN=1 runs every part on the CPU; each place that differs says so in the log."""
    text = SESSION.read_text()
    assert "DRY_RUN=${GPU_SESSION_DRY_RUN:-0}" in text
    for function in (
        "stage_setup",
        "stage_check",
        "check_suite",
        "check_sb3",
        "check_contrib",
        "check_ranks",
        "check_throughput",
    ):
        body = shell_function(function)
        assert "dry_run" in body, function
    for function in ("stage_setup", "stage_check", "check_ranks", "check_throughput"):
        assert 'echo "DRY RUN' in shell_function(function), f"{function} does not say what its dry run changes"
    # the samples of the test selections are reported by the plugin (.ci/check_selection.py)
    assert "--check-sample" in shell_function("check_suite") and "--check-sample" in shell_function("check_sb3")


def test_the_kit_prepares_what_the_check_reads():
    """Every folder of .gpu that the session reads is one that .ci/gpu_kit prepares."""
    read = set(re.findall(r"\.gpu/(\w+)", SESSION.read_text()))
    prepared = set(re.findall(r"\.gpu/(\w+)", KIT.read_text()))
    assert {"wheels", "gl", "sb3_tests", "sb3_contrib_tests"} <= read <= prepared, (read, prepared)


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / ".ci" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_earlier_cuda_failures_name_tests_that_exist():
    """Each test of .ci/cuda_failures.txt (recorded on CUDA) is still a test function of the suite: a renamed test
    would leave the check without it (the plugin also names a failure that matches nothing)."""
    selection = _load("check_selection")
    failures = selection.read_failures(ROOT / ".ci" / "cuda_failures.txt")
    assert len(failures) == 47
    for failure in failures:
        path, function = selection.split_id(failure)[0].split("::")
        assert re.search(rf"^def {function}\(", (ROOT / path).read_text(), flags=re.M), f"{failure}: no such test"


def test_check_selection_keeps_device_tests_on_the_device_and_the_earlier_failures():
    selection = _load("check_selection")
    tests = [
        ("tests/test_a.py::test_device[cpu-PPO_EWMA]", "cpu"),
        ("tests/test_a.py::test_device[cuda-PPO_EWMA]", "cuda"),
        ("tests/test_a.py::test_plain", None),
        ("tests/test_b.py::test_failed[cpu-PPO_EWMA-process]", "cpu"),
        ("tests/test_b.py::test_failed[cuda-PPO_EWMA-process]", "cuda"),
        ("tests/test_b.py::test_failed[cuda-PPG-process]", "cuda"),
        ("tests/test_b.py::test_whole", None),
        ("tests/test_readme.py::test_example[docs/guide/async_rollouts.md[0]]", None),
        ("tests/test_readme.py::test_example[docs/guide/other.md[0]]", None),
    ]
    failures = [
        "tests/test_b.py::test_failed[PPO_EWMA-process]",
        "tests/test_b.py::test_whole",
        "tests/test_readme.py::test_example[docs/guide/async_rollouts.md[0]]",
        "tests/test_gone.py::test_renamed",
    ]
    kept, counts = selection.select(tests, "cuda", failures)
    assert [tests[index][0] for index in kept] == [
        "tests/test_a.py::test_device[cuda-PPO_EWMA]",
        "tests/test_b.py::test_failed[cuda-PPO_EWMA-process]",
        "tests/test_b.py::test_failed[cuda-PPG-process]",  # a device test
        "tests/test_b.py::test_whole",
        "tests/test_readme.py::test_example[docs/guide/async_rollouts.md[0]]",
    ]
    assert counts == {"device tests": 2, "earlier failures": 3, "unmatched": ["tests/test_gone.py::test_renamed"]}
    assert selection.read_failures(ROOT / ".ci" / "cuda_failures.txt")[0].startswith("tests/")
    assert selection.sample([name for name, _ in tests], 2) == [0, 1, 3, 4, 7, 8]


def test_sb3_conftest_swaps_ppo_ewma_in(monkeypatch):
    """The conftest that the check puts beside SB3's tests makes `from stable_baselines3 import PPO` give PPO_EWMA."""
    import stable_baselines3

    from sb3_ewma import PPO_EWMA

    monkeypatch.setattr(stable_baselines3, "PPO", stable_baselines3.PPO)  # restored afterwards
    _load("sb3_conftest")
    from stable_baselines3 import PPO

    assert PPO is PPO_EWMA


def test_gpu_check_commands_parse(monkeypatch):
    """The session's .ci/gpu_check.py commands parse with its command line (nothing is run)."""
    parse_args = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        parse_args(self, args, namespace)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    gpu_check = _load("gpu_check")
    commands = [
        shlex.split(line) for line in session_lines() if ".ci/gpu_check.py" in line and not line.lstrip().startswith("#")
    ]
    assert {command[command.index(".ci/gpu_check.py") + 1] for command in commands} == {"ranks", "collector"}
    for command in commands:
        with pytest.raises(_Parsed):
            gpu_check.main(command[command.index(".ci/gpu_check.py") + 1 :])
