"""
The legacy Gym banner, removed at its root: procgen-mirror (the ``procgen`` extra) depends on the legacy ``gym``
package, whose import prints the notice that ``gym-notices`` holds for its version (four lines, "Gym has been
unmaintained since 2022 ...", since gym-notices 0.1.0), and SB3 imports ``gym`` whenever it is installed. The
``procgen`` extra pins ``gym-notices<0.1`` (0.0.8 has no notice for gym 0.26), so nothing is printed whatever is
imported first; ``import sb3_ewma`` redirects no stream and silences nothing.
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
requires_pinned_notices = pytest.mark.skipif(
    importlib.util.find_spec("gym_notices") is not None
    and tuple(int(part) for part in importlib.metadata.version("gym-notices").split(".")[:2]) >= (0, 1),
    reason="gym-notices >= 0.1: an environment installed before the procgen extra's pin",
)


def run_python(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO_ROOT, check=True)


def test_import_sb3_ewma_prints_nothing_and_leaves_stderr_alone() -> None:
    # stderr is the process's own object and fd 2 the same open file before and after the import, and nothing in
    # sb3_ewma replaced or wrapped sys.stderr's write on the way (a redirect would leave sys.stderr elsewhere, or
    # dup2 fd 2, while it runs)
    code = """
import os, sys, contextlib
stderr, fd2 = sys.stderr, os.fstat(2)
seen = []
class Watch:
    def __init__(self, stream):
        self.stream = stream
    def write(self, text):
        return self.stream.write(text)
    def __getattr__(self, name):
        return getattr(self.stream, name)
watched = Watch(sys.stderr)
sys.stderr = watched
real_dup2 = os.dup2
os.dup2 = lambda *args, **kwargs: (seen.append(args), real_dup2(*args, **kwargs))[1]
real_redirect = contextlib.redirect_stderr
contextlib.redirect_stderr = lambda *args: (seen.append(("redirect_stderr",)), real_redirect(*args))[1]
import sb3_ewma
from sb3_ewma import PPO_EWMA, PPG_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA
assert sys.stderr is watched, sys.stderr
assert os.fstat(2) == fd2
assert not seen, seen
print("ok")
"""
    result = run_python("-c", code)
    assert result.stdout == "ok\n"
    assert result.stderr == ""


@requires_gym
@requires_pinned_notices
@pytest.mark.parametrize(
    "code",
    ["import gym", "import stable_baselines3\nimport sb3_ewma", "import sb3_ewma\nfrom sb3_contrib import RecurrentPPO"],
)
def test_with_the_pin_gym_prints_nothing_whatever_comes_first(code: str) -> None:
    assert run_python("-c", code).stderr == ""


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
@requires_pinned_notices
@pytest.mark.parametrize("module", ["benchmarks.timing.threads_under_load", "benchmarks.timing.distributed_exit"])
def test_benchmark_entry_points_are_quiet(module: str) -> None:
    result = run_python("-m", module, "-h")
    assert BANNER not in result.stderr
