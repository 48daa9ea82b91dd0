"""What a callback sees during collection: the parent's rollout loop on the model, as with SB3's and sb3-contrib's."""

import pytest
from sb3_contrib import MaskablePPO, RecurrentPPO
from sb3_contrib.common.envs import InvalidActionEnvDiscrete
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_ewma import PPG, PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA
from sb3_ewma.common.collection.process import check_process_collector

SETTINGS = dict(n_steps=16, batch_size=16, n_epochs=1, seed=0, device="cpu")
needs_fork = pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="the collector process forks")
PPG_SETTINGS = dict(n_steps=16, batch_size=16, n_policy_iterations=1, n_aux_epochs=1, seed=0, device="cpu")


class LocalsRecorder(BaseCallback):
    """Records, at each ``on_step``, the keys of ``self.locals``, its ``self`` and that ``self``'s policy."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[tuple[frozenset[str], object, object]] = []
        self.new_obs: list[bool] = []  # whether locals["new_obs"] is None
        self.learn_locals: list[object] = []  # learn()'s own total_timesteps, as on_training_start gave it
        self.buffers: list[object] = []
        self.steps_at_end: list[int] = []  # n_steps at on_rollout_end

    def _on_step(self) -> bool:
        owner = self.locals["self"]
        self.steps.append((frozenset(self.locals), owner, owner.policy))
        self.new_obs.append(self.locals.get("new_obs") is None)
        self.learn_locals.append(self.locals.get("total_timesteps"))
        self.buffers.append(self.locals.get("rollout_buffer"))
        return True

    def _on_rollout_end(self) -> None:
        self.steps_at_end.append(self.locals["n_steps"])


def cartpole():
    return make_vec_env("CartPole-v1", n_envs=2, seed=0)


def masked_env():
    return DummyVecEnv([lambda: InvalidActionEnvDiscrete(dim=10, ep_length=20, n_invalid_actions=5) for _ in range(2)])


def recorded_steps(model_class, env, **kwargs) -> tuple[object, LocalsRecorder]:
    policy = "MlpLstmPolicy" if model_class in (RecurrentPPO, RecurrentPPO_EWMA) else "MlpPolicy"
    model = model_class(policy, env, **kwargs)
    callback = LocalsRecorder()
    model.learn(64, callback=callback)
    return model, callback


@pytest.mark.parametrize(
    "model_class, parent_class, make_env, settings",
    [
        (PPO_EWMA, PPO, cartpole, SETTINGS),
        (PPG_EWMA, PPO, cartpole, PPG_SETTINGS),
        (PPG, PPO, cartpole, PPG_SETTINGS),
        (RecurrentPPO_EWMA, RecurrentPPO, cartpole, SETTINGS),
        (MaskablePPO_EWMA, MaskablePPO, masked_env, SETTINGS),
    ],
)
def test_callbacks_see_the_model_and_the_parents_locals(model_class, parent_class, make_env, settings):
    model, callback = recorded_steps(model_class, make_env(), **settings)
    parent, parent_callback = recorded_steps(parent_class, make_env(), **SETTINGS)
    assert len(callback.steps) == len(parent_callback.steps) == 32
    assert {"self", "rollout_buffer", "new_obs", "infos"} <= parent_callback.steps[0][0]
    # step by step: the loop's variables (the first step has no `done` and `idx` yet)
    assert [keys for keys, _, _ in callback.steps] == [keys for keys, _, _ in parent_callback.steps]
    for _, owner, policy in callback.steps:
        assert owner is model and policy is model.policy
    assert all(owner is parent for _, owner, _ in parent_callback.steps)


@pytest.mark.parametrize("mode", [True, pytest.param("process", marks=needs_fork)])
def test_overlapped_collectors_replay_their_rollouts_to_callbacks_that_see_the_model(mode):
    if mode == "process":
        check_process_collector()
    model, callback = recorded_steps(PPO_EWMA, cartpole(), async_rollouts=mode, **SETTINGS)
    parent_keys = [keys for keys, _, _ in recorded_steps(PPO, cartpole(), **SETTINGS)[1].steps]
    assert len(callback.steps) == 32
    # the first rollout of learn is collected by the model, on this thread: SB3's locals
    first_rollout = callback.steps[:16]
    assert [keys for keys, _, _ in first_rollout] == parent_keys[:16]
    assert all(owner is model and policy is model.policy for _, owner, policy in first_rollout)
    # the others are replayed at the hand-off: `self` is the model, with the step's infos, dones, rewards, n_steps, env;
    # the loop's other variables are None (not the first rollout's last values)
    for keys, owner, policy in callback.steps[16:]:
        assert {"self", "infos", "dones", "rewards", "n_steps", "env"} <= keys
        assert owner is model and policy is model.policy
    assert callback.new_obs[:16] == [False] * 16 and callback.new_obs[16:] == [True] * 16
    # learn()'s own locals stay; the replayed rollout's buffer is the one trained on next; n_steps at the end as SB3's
    assert callback.learn_locals == [64] * 32
    assert callback.buffers[16] is model.rollout_buffer and callback.buffers[0] is not model.rollout_buffer
    assert callback.steps_at_end == [16, 16]
