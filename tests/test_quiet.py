"""
The legacy Gym banner: procgen-mirror (the ``procgen`` extra) depends on the legacy ``gym`` package, which prints a
four-line banner on import, and SB3 imports ``gym`` whenever it is installed. Importing ``sb3_ewma`` first keeps it
quiet (:mod:`sb3_ewma._quiet`); every entry point does, and the documented script pattern does.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
BANNER = "Gym has been unmaintained"
requires_gym = pytest.mark.skipif(importlib.util.find_spec("gym") is None, reason="the legacy gym package is not installed")


def run_python(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO_ROOT, check=True)


@requires_gym
def test_the_documented_script_pattern_is_quiet() -> None:
    result = run_python("-c", "import sb3_ewma\nimport stable_baselines3\nfrom sb3_contrib import RecurrentPPO")
    assert result.stderr == ""


@requires_gym
def test_importing_sb3_first_prints_the_banner() -> None:
    # why the order matters: the banner is printed by gym's own import, before sb3_ewma can act
    result = run_python("-c", "import stable_baselines3\nimport sb3_ewma")
    assert BANNER in result.stderr


@requires_gym
@pytest.mark.parametrize("module", ["benchmarks.timing.threads_under_load", "benchmarks.timing.distributed_exit"])
def test_benchmark_entry_points_are_quiet(module: str) -> None:
    result = run_python("-m", module, "-h")
    assert BANNER not in result.stderr
