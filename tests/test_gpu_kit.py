"""The GPU kit (.ci/gpu_kit, .ci/gpu_session): the modules it runs exist and take its arguments, its size check."""

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
        shlex.split(command)
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
    assert {"setup", "nccl", "bench", "tests", "contrib"} <= stages
    assert all(f"stage_{stage}() {{" in text for stage in stages | {"contrib_cpu"})


def _git_checkout() -> bool:
    if shutil.which("git") is None:
        return False
    result = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=ROOT, capture_output=True, text=True)
    return result.returncode == 0 and result.stdout.strip() == "true"


@pytest.mark.skipif(not _git_checkout(), reason="needs a git checkout (the kit counts git's files)")
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
