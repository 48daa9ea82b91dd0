"""
The legacy Gym banner: procgen-mirror (the ``procgen`` extra) depends on the legacy ``gym`` package, whose import
prints the notice that ``gym-notices`` holds for its version (four lines, "Gym has been unmaintained since 2022 ...",
since gym-notices 0.1.0), and SB3 imports ``gym`` whenever it is installed. At the root: the ``procgen`` extra pins
``gym-notices<0.1`` (0.0.8 has no notice for gym 0.26), so nothing is printed whatever is imported first. In an
environment installed before that pin, importing ``sb3_ewma`` first keeps it quiet (:mod:`sb3_ewma._quiet`); every
entry point does, and the documented script pattern does.
"""

import importlib.metadata
import importlib.util
import os
import re
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
def test_importing_sb3_first_prints_the_banner_only_with_gym_notices_0_1() -> None:
    # why the order matters there: the banner is printed by gym's own import (SB3's patch_gym), before sb3_ewma can act
    result = run_python("-c", "import stable_baselines3\nimport sb3_ewma")
    if tuple(int(part) for part in importlib.metadata.version("gym-notices").split(".")[:2]) >= (0, 1):
        assert BANNER in result.stderr  # an environment installed before the procgen extra's pin
    else:
        assert result.stderr == ""  # the procgen extra's gym-notices<0.1


@requires_gym
def test_gym_prints_only_the_notice_gym_notices_has_for_its_version(tmp_path: Path) -> None:
    # gym/__init__.py: notices.notices.get(__version__), printed when not empty; gym-notices 0.0.8 stops at 0.25.1
    (tmp_path / "gym_notices").mkdir()
    (tmp_path / "gym_notices" / "__init__.py").write_text("")
    (tmp_path / "gym_notices" / "notices.py").write_text('notices = {"0.25.1": ""}\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO_ROOT)])}
    result = subprocess.run(
        [sys.executable, "-c", "import stable_baselines3\nfrom sb3_contrib import RecurrentPPO"],
        capture_output=True, text=True, cwd=REPO_ROOT, env=env, check=True,
    )  # fmt: skip
    assert result.stderr == ""


def test_the_procgen_extra_pins_gym_notices_without_the_banner() -> None:
    setup = (REPO_ROOT / "setup.py").read_text()
    procgen = re.search(r'"procgen": \[([^\]]*)\]', setup)
    assert procgen is not None and '"gym-notices<0.1"' in procgen.group(1)


@requires_gym
@pytest.mark.parametrize("module", ["benchmarks.timing.threads_under_load", "benchmarks.timing.distributed_exit"])
def test_benchmark_entry_points_are_quiet(module: str) -> None:
    result = run_python("-m", module, "-h")
    assert BANNER not in result.stderr
