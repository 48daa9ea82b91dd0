"""
A budget shorter than one rollout trains, as SB3's PPO does: the progress remaining then goes below 0 and rl-zoo3's
``lin_`` schedules below 0 with it. A clip range at or below 0 allows no movement (the policy terms have no gradient
that moves the policy away from the proximal one); the learning rate is used as it is, as SB3 does.
"""

from typing import Any

import numpy as np
import pytest
import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

from sb3_ewma import PPG, PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA
from sb3_ewma.envs.action_masks import ActionMaskOrAllValid

N_ENVS, N_STEPS, BUDGET = 2, 16, 4
# progress remaining after the one rollout: 1 - 32 / 4 = -7
PROGRESS = 1 - N_ENVS * N_STEPS / BUDGET

ALGORITHMS: dict[str, tuple[type, str, dict[str, Any]]] = {
    "PPO_EWMA": (PPO_EWMA, "MlpPolicy", {}),
    # two policy iterations per phase: the one iteration trained is a policy-phase one
    "PPG_EWMA": (PPG_EWMA, "MlpPolicy", {"n_policy_iterations": 2, "n_value_epochs": 2}),
    "PPG": (PPG, "MlpPolicy", {"n_policy_iterations": 2}),
    "RecurrentPPO_EWMA": (RecurrentPPO_EWMA, "MlpLstmPolicy", {"policy_kwargs": {"lstm_hidden_size": 8}}),
    "MaskablePPO_EWMA": (MaskablePPO_EWMA, "MlpPolicy", {}),
}


def lin(initial_value: float):
    """rl-zoo3's ``lin_<value>`` schedule: ``progress_remaining * value`` (negative past the budget)."""
    return lambda progress_remaining: progress_remaining * initial_value


def make(name: str, **kwargs: Any):
    algorithm, policy, settings = ALGORITHMS[name]
    wrapper = ActionMaskOrAllValid if name == "MaskablePPO_EWMA" else None
    env = make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=0, wrapper_class=wrapper)
    settings = {"n_steps": N_STEPS, "batch_size": 16, "seed": 0, "device": "cpu", **settings, **kwargs}
    return algorithm(policy, env, **settings)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_lin_schedules_past_the_budget_train_and_move_nothing(name: str) -> None:
    model = make(name, clip_range=lin(0.2), clip_range_vf=lin(0.2), learning_rate=lin(1e-3))
    before = {key: value.clone() for key, value in model.policy.state_dict().items()}
    model.learn(BUDGET)
    assert model.num_timesteps == N_ENVS * N_STEPS
    logged = model.logger.name_to_value
    assert logged["train/clip_range"] == pytest.approx(0.2 * PROGRESS)  # -1.4: log(1 + eps) is undefined
    assert logged["train/clip_range_vf"] == pytest.approx(0.2 * PROGRESS)
    assert logged["train/learning_rate"] == pytest.approx(1e-3 * PROGRESS)
    # no movement: the policy and the values start at the proximal policy and the rollout's values, and the
    # policy terms pull nothing away from them (the entropy coefficient is 0)
    for key, value in model.policy.state_dict().items():
        th.testing.assert_close(value, before[key], rtol=0, atol=0, msg=key)
    assert logged["train/approx_kl"] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_a_clip_range_past_the_budget_holds_the_policy_and_trains_the_value_function(name: str) -> None:
    model = make(name, clip_range=lin(0.2), learning_rate=1e-3)
    before = {key: value.clone() for key, value in model.policy.state_dict().items()}
    model.learn(BUDGET)
    assert model.logger.name_to_value["train/clip_range"] == pytest.approx(0.2 * PROGRESS)
    after = model.policy.state_dict()
    th.testing.assert_close(after["action_net.weight"], before["action_net.weight"], rtol=0, atol=0)
    assert not th.equal(after["value_net.weight"], before["value_net.weight"])
    obs = np.stack([model.observation_space.sample() for _ in range(8)])
    assert np.all(np.isfinite(model.predict(obs, deterministic=True)[0]))


def test_learning_rate_past_the_budget_is_sb3s() -> None:
    # SB3 sets the schedule's value, negative past the budget, on the optimizer; so does every algorithm here
    sb3 = PPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=0), n_steps=N_STEPS, batch_size=16, seed=0)
    sb3.learning_rate = lin(1e-3)
    sb3._setup_lr_schedule()
    sb3.learn(BUDGET)
    expected = sb3.policy.optimizer.param_groups[0]["lr"]
    assert expected == pytest.approx(1e-3 * PROGRESS)
    for name in ALGORITHMS:
        model = make(name, learning_rate=lin(1e-3))
        model.learn(BUDGET)
        assert model.policy.optimizer.param_groups[0]["lr"] == pytest.approx(expected), name
