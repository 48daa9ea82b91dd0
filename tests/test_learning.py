"""
Slow learning tests on CPU: PPO_EWMA, PPG and PPG_EWMA solve CartPole-v1 and clearly improve on Pendulum-v1 (continuous
actions, gSDE). The trainings are in learning_cases.py.

Float kernels differ from one CPU to the next, so an outcome is one draw from a distribution: each threshold is set
well below the worst outcome measured over 10 seeds (``python tests/learning_cases.py --seeds 10``, one torch thread,
an Intel Xeon machine of the project's kind), written beside it.
"""

import pytest
from learning_cases import ppg_cartpole, ppg_ewma_pendulum, ppo_ewma_cartpole, ppo_ewma_pendulum

from sb3_ewma import PPG, PPG_EWMA

pytestmark = pytest.mark.slow


def test_ppo_ewma_solves_cartpole():
    # 10 seeds: 500 in all (the maximum)
    outcome = ppo_ewma_cartpole(seed=0)
    assert outcome["mean_return"] >= 450


@pytest.mark.parametrize("algorithm", [PPG, PPG_EWMA])
def test_ppg_solves_cartpole(algorithm):
    # 10 seeds, PPG and PPG_EWMA each: 500 in all
    outcome = ppg_cartpole(seed=0, algorithm=algorithm)
    assert outcome["n_aux_phases"] == 100_000 // (8 * 256)
    assert outcome["mean_return"] >= 450


def test_ppo_ewma_improves_on_pendulum():
    outcome = ppo_ewma_pendulum(seed=0)
    assert outcome["before"] < -1000  # a random policy (10 seeds: -1370 to -1156)
    # 10 seeds, rl-zoo3's Pendulum entry for 61,440 steps with the default EWMA age (center of mass 10 x 64 / 2 = 320):
    # after -229 to -117, improvement 995 to 1,221
    assert outcome["after"] > -700 and outcome["after"] - outcome["before"] > 500


# PPG_EWMA only: plain PPG (the same class with ewma_decay=None) learns CartPole above, and this is the costliest test
def test_ppg_ewma_improves_on_pendulum():
    outcome = ppg_ewma_pendulum(seed=0)
    assert outcome["before"] < -1000  # a random policy (10 seeds: -1411 to -1075)
    # 10 seeds: after -501 to -138, improvement 605 to 1,205
    assert outcome["after"] > -800 and outcome["after"] - outcome["before"] > 300
