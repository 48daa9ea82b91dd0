"""
NaN and infinity caught where they enter (``sb3_ewma.common.finite``): an environment's observation or reward at the
step that returned it, a schedule's value at its progress, a minibatch's gradient before the optimizer step. Each
names where it came from, and no update has used it: the weights are those before it.
"""

import math
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_ewma import PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA
from sb3_ewma.common.checks import NonFiniteError
from sb3_ewma.common.finite import check_finite_gradient_norm, check_finite_rollout, first_non_finite, scheduled_value

SMALL = dict(n_steps=16, batch_size=16, n_epochs=1, device="cpu", seed=0)


class BadAtStep(gym.Wrapper):
    """CartPole (or ``env_id``) whose step number ``at`` returns a NaN (or infinite) observation entry or reward."""

    def __init__(self, what: str, at: int, value: float = math.nan, env_id: str = "CartPole-v1") -> None:
        super().__init__(gym.make(env_id))
        self.what, self.at, self.value, self.steps = what, at, value, 0

    def step(self, action):  # type: ignore[no-untyped-def]
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps == self.at:
            if self.what == "observation":
                observation = observation.copy()
                observation[2] = self.value
            else:
                reward = self.value
        return observation, reward, terminated, truncated, info


def weights(model) -> list[th.Tensor]:  # type: ignore[no-untyped-def]
    return [parameter.detach().clone() for parameter in model.policy.parameters()]


def unchanged(before: list[th.Tensor], model) -> bool:  # type: ignore[no-untyped-def]
    return all(th.equal(a, b) for a, b in zip(before, model.policy.parameters()))


def test_first_non_finite() -> None:
    assert first_non_finite(np.zeros((3, 4), dtype=np.float32)) is None
    assert first_non_finite(np.full((2, 2), 255, dtype=np.uint8)) is None  # integers have none
    array = np.zeros((3, 4))
    array[2, 1] = -np.inf
    assert first_non_finite(array) == (2, 1)
    # finite entries whose sum overflows: the exact test finds none
    assert first_non_finite(np.full(4, 3e38, dtype=np.float32)) is None


@pytest.mark.parametrize("what", ["observation", "reward"])
@pytest.mark.parametrize("algorithm", [PPO_EWMA, PPG_EWMA])
def test_a_non_finite_step_is_named_before_any_update(algorithm: type, what: str) -> None:
    # environment 1 of 2 returns a NaN at its step 21, in the second rollout (16 steps each)
    env = DummyVecEnv([lambda: gym.make("CartPole-v1"), lambda: BadAtStep(what, at=21)])
    kwargs = dict(n_policy_iterations=1) if algorithm is PPG_EWMA else {}
    model = algorithm("MlpPolicy", env, **SMALL, **kwargs)
    model.learn(32)  # the first rollout and its update
    before = weights(model)
    with pytest.raises(NonFiniteError, match=rf"non-finite {what}.* \(nan\) in environment 1 at step 5 of the rollout"):
        model.learn(32, reset_num_timesteps=False)
    assert unchanged(before, model)


@pytest.mark.parametrize("async_rollouts", [True, "process"])
def test_an_overlapped_rollouts_non_finite_step_names_the_count_as_synchronously(async_rollouts: object) -> None:
    """A NaN in a rollout collected during an update: the same sentence as without overlap (the count the rollout
    had reached, not the count of the rollouts handed off)."""
    messages = []
    for overlap in (False, async_rollouts):
        env = DummyVecEnv([lambda: gym.make("CartPole-v1"), lambda: BadAtStep("observation", at=40)])
        model = PPO_EWMA("MlpPolicy", env, async_rollouts=overlap, **SMALL)
        with pytest.raises(NonFiniteError) as error:
            model.learn(10 * 32)
        messages.append(str(error.value))
    assert "num_timesteps 80" in messages[0] and messages[1] == messages[0]


@pytest.mark.parametrize("kwargs", [{}, {"use_sde": True, "sde_sample_freq": 4}])
@pytest.mark.parametrize("algorithm", [PPO_EWMA, PPG_EWMA])
def test_a_nan_observation_stops_a_gaussian_rollout_at_its_step(algorithm: type, kwargs: dict) -> None:
    """The lean Gaussian and gSDE steps refuse a NaN observation where SB3's Normal does: at the step it came from,
    before any NaN action reaches an environment."""
    env = DummyVecEnv([lambda: gym.make("Pendulum-v1"), lambda: BadAtStep("observation", at=21, env_id="Pendulum-v1")])
    extra = dict(n_policy_iterations=1) if algorithm is PPG_EWMA else {}
    model = algorithm("MlpPolicy", env, **SMALL, **extra, **kwargs)
    model.learn(32)
    before = weights(model)
    with pytest.raises(NonFiniteError, match=r"non-finite observation.* \(nan\) in environment 1 at step 5 of the rollout"):
        model.learn(32, reset_num_timesteps=False)
    assert unchanged(before, model) and model.num_timesteps == 32 + 2 * 5


def test_infinity_and_dict_observations_are_named() -> None:
    # a Dict observation space's buffer: one array per key, (n_steps, n_envs, ...)
    buffer = SimpleNamespace(
        buffer_size=4,
        full=False,
        pos=3,
        rewards=np.zeros((4, 2), dtype=np.float32),
        observations={"image": np.zeros((4, 2, 3)), "vector": np.zeros((4, 2, 2))},
    )
    buffer.observations["vector"][3, 1, 0] = np.nan  # not stored yet (pos 3): not read
    check_finite_rollout(buffer, {"image": np.zeros((2, 3)), "vector": np.zeros((2, 2))}, 96)
    buffer.observations["vector"][2, 1, 0] = np.inf
    with pytest.raises(NonFiniteError, match=r"observation\['vector'\] \(inf\) in environment 1 at step 2 of the rollout"):
        check_finite_rollout(buffer, None, 96)


class NaNAtEnd(gym.Wrapper):
    """CartPole whose final observation of an episode is NaN."""

    def step(self, action):  # type: ignore[no-untyped-def]
        observation, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            observation = np.full_like(observation, np.nan)
        return observation, reward, terminated, truncated, info


def test_a_truncated_episodes_non_finite_final_observation_is_named() -> None:
    # SB3 adds the value of a truncated episode's final observation to its last reward: that reward is not finite
    env = DummyVecEnv([lambda: NaNAtEnd(gym.make("CartPole-v1", max_episode_steps=5))])
    model = PPO_EWMA("MlpPolicy", env, **SMALL)
    with pytest.raises(
        NonFiniteError, match=r"non-finite reward \(nan\) in environment 0 at step 5 of the rollout.*truncated"
    ):
        model.learn(16)


def test_a_terminated_episodes_final_observation_is_not_read_as_in_sb3() -> None:
    # SB3 reads the final observation of a truncated episode only: a terminated one's NaN trains, as with SB3's PPO
    from stable_baselines3 import PPO

    class TerminatedNaNAtEnd(NaNAtEnd):
        def step(self, action):  # type: ignore[no-untyped-def]
            observation, reward, terminated, truncated, info = super().step(action)
            return observation, reward, terminated or truncated, False, info

    for algorithm in (PPO, PPO_EWMA):
        env = DummyVecEnv([lambda: TerminatedNaNAtEnd(gym.make("CartPole-v1", max_episode_steps=5))])
        assert algorithm("MlpPolicy", env, **SMALL).learn(32).num_timesteps == 32


def test_a_non_finite_first_observation_is_named() -> None:
    class NaNReset(gym.Wrapper):
        def reset(self, **kwargs):  # type: ignore[no-untyped-def]
            observation, info = self.env.reset(**kwargs)
            return np.full_like(observation, np.nan), info

    model = PPO_EWMA("MlpPolicy", DummyVecEnv([lambda: NaNReset(gym.make("CartPole-v1"))]), **SMALL)
    with pytest.raises(NonFiniteError, match=r"in environment 0 at the start of the rollout \(num_timesteps 0\)"):
        model.learn(16)


@pytest.mark.parametrize("setting", ["learning_rate", "clip_range"])
def test_a_schedule_turning_nan_is_named_with_its_progress(setting: str) -> None:
    def schedule(progress_remaining: float) -> float:
        return 0.2 if progress_remaining > 0.5 else math.nan

    model = PPO_EWMA("MlpPolicy", "CartPole-v1", **{**SMALL, setting: schedule})
    with pytest.raises(NonFiniteError, match=rf"the {setting} schedule returned nan at progress_remaining=0\.5"):
        model.learn(64)
    assert model.num_timesteps == 32  # the first two iterations trained; the third stopped before its update


def test_an_infinite_clip_range_is_no_clipping() -> None:
    assert scheduled_value("clip_range", lambda _: math.inf, 1.0, infinity_allowed=True) == math.inf
    with pytest.raises(NonFiniteError, match=r"the learning_rate schedule returned inf at progress_remaining=0\.25"):
        scheduled_value("learning_rate", lambda _: math.inf, 0.25)


@pytest.mark.parametrize("algorithm", [PPO_EWMA, RecurrentPPO_EWMA, MaskablePPO_EWMA])
def test_a_non_finite_loss_stops_before_the_optimizer_step(algorithm: type) -> None:
    policy = "MlpLstmPolicy" if algorithm is RecurrentPPO_EWMA else "MlpPolicy"
    model = algorithm(policy, "CartPole-v1", **SMALL)
    model.learn(16, **({"use_masking": False} if algorithm is MaskablePPO_EWMA else {}))
    before = weights(model)
    optimizer_state = {key: value for key, value in model.policy.optimizer.state_dict()["state"].items()}
    model.rollout_buffer.returns[:] = np.inf  # every minibatch's value loss is infinite
    with pytest.raises(NonFiniteError, match=r"the gradient of a minibatch's loss is nan \(train/ logs, n_updates 1\)"):
        model.train()
    assert unchanged(before, model)
    after_state = model.policy.optimizer.state_dict()["state"]
    for key, state in optimizer_state.items():
        assert th.equal(state["exp_avg"], after_state[key]["exp_avg"])


def test_check_finite_gradient_norm() -> None:
    check_finite_gradient_norm(th.tensor(3.0), "train", 0)
    with pytest.raises(NonFiniteError, match=r"is inf \(aux/ logs, n_updates 4\)"):
        check_finite_gradient_norm(th.tensor(math.inf), "aux", 4)


def test_callbacks_see_the_models_environment_as_in_sb3() -> None:
    # the checks read the rollout buffer: the parent's loop steps the model's own VecEnv (locals["env"])
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import VecNormalize

    seen = []

    class Record(BaseCallback):
        def _on_step(self) -> bool:
            seen.append(self.locals["env"])
            return True

    env = VecNormalize(DummyVecEnv([lambda: gym.make("CartPole-v1")]))
    model = PPO_EWMA("MlpPolicy", env, **SMALL).learn(16, callback=Record())
    assert model.get_env() is env and all(item is env for item in seen) and len(seen) == 16
    assert isinstance(model.observation_space, spaces.Box)


def test_the_cost_benchmark_times_both_and_restores_the_checks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import sb3_ewma.common.decoupled.algorithm as algorithm_module
    from benchmarks.timing import finite_checks

    result = finite_checks.main(["--timesteps", "512", "--repeats", "1", "--out", str(tmp_path)])
    assert len(result["cpu_seconds"]["checked"]) == len(result["cpu_seconds"]["unchecked"]) == 1
    assert result["median_ratio_checked_over_unchecked"] > 0
    assert (tmp_path / "results.json").is_file()
    assert algorithm_module.check_finite_rollout is check_finite_rollout
