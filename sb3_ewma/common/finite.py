"""
Non-finite numbers caught where they enter training, each with a :class:`~sb3_ewma.common.checks.NonFiniteError`
that says where it came from, before any update uses it:

- an environment's observation or reward, at the step of the rollout that returned it (:class:`FiniteStepsVecEnv`,
  :func:`check_finite_observation`);
- a schedule's value (learning rate, clip range), at the progress it was asked for (:func:`scheduled_value`);
- a minibatch's gradient, before the optimizer step (:func:`check_finite_gradient_norm`): the weights stay as they were.
"""

from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs, VecEnvStepReturn

from sb3_ewma.common.checks import NonFiniteError
from sb3_ewma.common.checks import scheduled_value as scheduled_value  # beside check_schedule, which uses it


def first_non_finite(array: np.ndarray) -> tuple[int, ...] | None:
    """
    The index of the first NaN or infinite entry of a floating-point array, or None (integer and boolean arrays have
    none). The common case costs one sum: a sum of finite numbers is finite unless it overflows, and only then are the
    entries tested one by one.
    """
    if array.dtype.kind not in "fc" or np.isfinite(array.sum()):
        return None
    bad = np.argwhere(~np.isfinite(array))
    return tuple(int(i) for i in bad[0]) if len(bad) else None


def _arrays_of(observation: Any) -> list[tuple[str, np.ndarray]]:
    if isinstance(observation, dict):
        return [(f"[{key!r}]", np.asarray(value)) for key, value in observation.items()]
    if isinstance(observation, tuple):
        return [(f"[{index}]", np.asarray(value)) for index, value in enumerate(observation)]
    return [("", np.asarray(observation))]


_ADVICE = (
    "training stopped before any update used it. Fix the environment, or filter its output (a gymnasium "
    "wrapper; VecNormalize does not remove NaN)"
)


def check_finite_observation(observation: Any, where: Callable[[], str], batched: bool = True) -> None:
    """
    Raise a ``NonFiniteError`` if an observation (an array, or a dict or tuple of arrays) holds a NaN or an infinity.

    :param observation: the observations of a step, one row per environment when ``batched``
    :param where: the step that returned it, for the message (``"at step 3 of the rollout (num_timesteps 1024)"``),
        built only when the check fails
    :param batched: whether the first axis is the environment (a ``VecEnv``'s observations); else one observation
    """
    for key, array in _arrays_of(observation):
        index = first_non_finite(array)
        if index is None:
            continue
        value = array[index]
        place = f"in environment {index[0]}" if batched else "in an environment's final observation"
        raise NonFiniteError(f"the environment returned a non-finite observation{key} ({value}) {place} {where()}: {_ADVICE}")


def check_finite_prediction_input(observation: Any) -> None:
    """
    Raise a ``NonFiniteError`` if an observation given to ``predict`` (an array, or a dict or tuple of arrays) holds a
    NaN or an infinity, which the policy would turn into NaN action parameters (torch's "Expected parameter logits ...
    found invalid values", which names the policy's output, not its input). One sum per array.
    """
    try:
        arrays = _arrays_of(observation)
    except (TypeError, ValueError):
        return  # not arrays (a ragged list): predict's own message says what it expects
    for key, array in arrays:
        index = first_non_finite(array)
        if index is not None:
            raise NonFiniteError(
                f"predict was given a non-finite observation{key} ({array[index]} at index {index}): the policy acts on "
                "finite observations only; check the environment or the code that built the observation"
            )


def check_finite_rewards(rewards: np.ndarray, where: Callable[[], str]) -> None:
    """Raise a ``NonFiniteError`` if a step's rewards (one per environment) hold a NaN or an infinity."""
    index = first_non_finite(np.asarray(rewards))
    if index is not None:
        raise NonFiniteError(
            f"the environment returned a non-finite reward ({rewards[index]}) in environment {index[0]} {where()}: {_ADVICE}"
        )


class FiniteStepsVecEnv(VecEnvWrapper):
    """
    The environment of the rollouts, whose every step is checked: observations, rewards and the final observations of
    the episodes that end (:func:`check_finite_observation`, :func:`check_finite_rewards`). The parent's rollout loop
    steps it in place of the model's ``VecEnv``; ``model.env`` is unchanged.

    :param venv: the environment the rollouts step
    """

    def __init__(self, venv: VecEnv) -> None:
        super().__init__(venv)
        self.num_timesteps = 0
        self.timesteps_per_step = venv.num_envs
        self.steps = 0

    def start_rollout(self, num_timesteps: int, timesteps_per_step: int) -> "FiniteStepsVecEnv":
        """
        Count the steps of a new rollout, for the messages.

        :param num_timesteps: the model's ``num_timesteps`` when the rollout starts
        :param timesteps_per_step: the timesteps one step counts for (``n_envs``, times the ranks when data-parallel)
        """
        self.num_timesteps, self.timesteps_per_step, self.steps = num_timesteps, timesteps_per_step, 0
        return self

    def reset(self) -> VecEnvObs:
        observation = self.venv.reset()
        check_finite_observation(observation, lambda: "at reset")
        return observation

    def step_async(self, actions: np.ndarray) -> None:
        self.venv.step_async(actions)

    def step_wait(self) -> VecEnvStepReturn:
        observation, rewards, dones, infos = self.venv.step_wait()
        self.steps += 1
        check_finite_rewards(rewards, self._where)
        check_finite_observation(observation, self._where)
        for info in infos if dones.any() else ():
            terminal = info.get("terminal_observation")
            if terminal is not None:
                check_finite_observation(terminal, self._where, batched=False)
        return observation, rewards, dones, infos

    def _where(self) -> str:
        timesteps = self.num_timesteps + self.steps * self.timesteps_per_step
        return f"at step {self.steps} of the rollout (num_timesteps {timesteps})"


def check_finite_gradient_norm(total_norm: th.Tensor, log_prefix: str, n_updates: int) -> None:
    """
    Raise a ``NonFiniteError`` before the optimizer step when a minibatch's gradient norm is NaN or infinite (a
    non-finite loss, or a loss whose gradient overflows): the weights and the optimizer's state stay as they were.

    :param log_prefix: the phase whose loss it is, as its logs name it (``"train"``, PPG's ``"aux"``)
    :param n_updates: the model's ``_n_updates`` (``train/n_updates``), to say when
    """
    if not bool(th.isfinite(total_norm)):
        raise NonFiniteError(
            f"the gradient of a minibatch's loss is {total_norm.item()} ({log_prefix}/ logs, n_updates {n_updates}): "
            f"training stopped before the optimizer step, the weights are left as they were. Lower the learning rate, "
            f"clip the gradients (max_grad_norm) or scale the rewards (VecNormalize)"
        )
