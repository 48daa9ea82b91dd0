"""A process killed mid-training ends the job with a clear error, fast, with no orphan; the last checkpoint continues."""

from pathlib import Path

import pytest
from faults import FaultOutcome, kill_one_rank, kill_the_collector
from stable_baselines3.common.env_util import make_vec_env

from sb3_ewma import PPO_EWMA

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process states are read from /proc (Linux)")


def assert_continues_from(checkpoint: Path) -> None:
    model = PPO_EWMA.load(checkpoint, env=make_vec_env("CartPole-v1", n_envs=2), device="cpu")
    start = model.num_timesteps
    assert start >= 64
    model.learn(64, reset_num_timesteps=False)
    assert model.num_timesteps > start


@pytest.mark.slow
def test_a_killed_rank_ends_the_job(tmp_path: Path) -> None:
    outcome: FaultOutcome = kill_one_rank(tmp_path)
    assert outcome.returncode != 0
    # torchrun names the rank that failed and the signal
    assert "SIGKILL" in outcome.output or "exitcode: -9" in outcome.output, outcome.output[-3000:]
    assert outcome.seconds_to_exit < 60
    assert outcome.orphans == []
    assert_continues_from(outcome.checkpoint)


def test_a_killed_collector_process_ends_learn_with_a_clear_error(tmp_path: Path) -> None:
    outcome = kill_the_collector(tmp_path)
    assert outcome.returncode != 0
    assert "the rollout collector process died (exit status -9)" in outcome.output, outcome.output[-3000:]
    assert outcome.seconds_to_exit < 60
    assert outcome.orphans == []
    assert_continues_from(outcome.checkpoint)
