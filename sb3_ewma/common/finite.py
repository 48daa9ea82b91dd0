"""
Non-finite numbers caught where they enter training (an environment's observation or reward, a schedule's value, a
minibatch's gradient), each with a :class:`~sb3_ewma.common.checks.NonFiniteError` that says where it came from,
before any update uses it.
"""

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch as th

from sb3_ewma.common.checks import HyperparameterError, NonFiniteError


def first_non_finite(array: np.ndarray) -> tuple[int, ...] | None:
    """
    The index of the first NaN or infinite entry of a floating-point array, or None. The common case costs one sum
    (finite unless an entry is not, or it overflows).
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


def _first_nan(array: np.ndarray) -> tuple[int, ...] | None:
    if array.dtype.kind not in "fc" or not np.isnan(array.sum()):
        return None
    bad = np.argwhere(np.isnan(array))
    return tuple(int(i) for i in bad[0]) if len(bad) else None


def check_finite_prediction_input(observation: Any, nan_only: bool = False) -> None:
    """
    Raise a ``NonFiniteError`` if an observation given to ``predict`` (arrays, or a dict or tuple of them) is not finite
    (``nan_only``: holds NaN).
    """
    try:
        arrays = _arrays_of(observation)
    except (TypeError, ValueError):
        return  # not arrays (a ragged list): predict's own message says what it expects
    for key, array in arrays:
        index = _first_nan(array) if nan_only else first_non_finite(array)
        if index is not None:
            raise NonFiniteError(
                f"predict was given a non-finite observation{key} ({array[index]} at index {index}): the policy acts on "
                "finite observations only; check the environment or the code that built the observation"
            )


def _first_non_finite_of(observation: Any) -> tuple[str, np.ndarray, tuple[int, ...]] | None:
    """The key (``""`` or ``"['image']"``), the array and the index of the first non-finite entry, or None."""
    for key, array in _arrays_of(observation):
        index = first_non_finite(array)
        if index is not None:
            return key, array, index
    return None


@contextlib.contextmanager
def naming_non_finite_observations(observation: Any) -> Iterator[None]:
    """
    Around a parent's ``predict``: an observation holding NaN is refused first (SB3's action distribution refuses what
    the policy makes of it, unless a ``torch.compile`` in this process turned torch's validation of distributions off);
    an infinity only where the parent fails on it (a tanh network may keep its outputs finite, and then SB3 predicts).
    """
    check_finite_prediction_input(observation, nan_only=True)
    try:
        yield
    except (ValueError, RuntimeError):
        # torch's "Expected parameter logits ... found invalid values" names the policy's output, not the input
        check_finite_prediction_input(observation)
        raise


def check_finite_rollout(buffer: Any, last_observation: Any, num_timesteps: int) -> None:
    """
    Raise a ``NonFiniteError`` naming the environment and the step of the rollout that returned a NaN or an infinity,
    in the rollout buffer's rewards or stored observations, or in ``last_observation``.

    :param buffer: the rollout buffer the parent's rollout loop fills
    :param last_observation: the model's ``_last_obs``: the observation returned by the last step taken
    :param num_timesteps: the model's ``num_timesteps``, for the message
    """
    steps = buffer.buffer_size if buffer.full else buffer.pos
    rewards = buffer.rewards[:steps]
    index = first_non_finite(rewards)
    if index is not None:
        raise NonFiniteError(
            f"the environment returned a non-finite reward ({rewards[index]}) in environment {index[1]} at step "
            f"{index[0] + 1} of the rollout (num_timesteps {num_timesteps}; or the value of a truncated episode's final "
            f"observation, which SB3 adds to the reward, was not finite): {_ADVICE}"
        )
    observations = buffer.observations
    stored = (
        {key: value[:steps] for key, value in observations.items()} if isinstance(observations, dict) else observations[:steps]
    )
    found = _first_non_finite_of(stored)
    if found is not None:
        key, array, index = found
        place = "at the start of the rollout" if index[0] == 0 else f"at step {index[0]} of the rollout"
        raise NonFiniteError(
            f"the environment returned a non-finite observation{key} ({array[index]}) in environment {index[1]} {place} "
            f"(num_timesteps {num_timesteps}): {_ADVICE}"
        )
    found = _first_non_finite_of(last_observation)
    if found is not None:
        key, array, index = found
        place = "at the start of the rollout" if steps == 0 else f"at step {steps} of the rollout"
        raise NonFiniteError(
            f"the environment returned a non-finite observation{key} ({array[index]}) in environment {index[0]} {place} "
            f"(num_timesteps {num_timesteps}): {_ADVICE}"
        )


def check_finite_gradient_norm(total_norm: th.Tensor, log_prefix: str, n_updates: int) -> None:
    """
    Raise a ``NonFiniteError`` before the optimizer step when a minibatch's gradient norm is NaN or infinite.

    :param log_prefix: the phase whose loss it is, as its logs name it (``"train"``, PPG's ``"aux"``)
    :param n_updates: the model's ``_n_updates`` (``train/n_updates``), to say when
    """
    if not math.isfinite(total_norm.item()):  # one read of the norm (a device sync on a GPU, as a GradScaler's)
        raise NonFiniteError(
            f"the gradient of a minibatch's loss is {total_norm.item()} ({log_prefix}/ logs, n_updates {n_updates}): "
            f"training stopped before the optimizer step, the weights are left as they were. Lower the learning rate, "
            f"clip the gradients (max_grad_norm) or scale the rewards (VecNormalize)"
        )


def scheduled_value(
    name: str, schedule: Callable[[float], Any], progress_remaining: float, infinity_allowed: bool = False
) -> float:
    """``schedule(progress_remaining)``, or a ``NonFiniteError`` if it is NaN (or infinite, unless ``infinity_allowed``)."""
    try:
        # SB3 wraps a schedule in FloatSchedule, which converts the value itself
        value = float(schedule(progress_remaining))
    except (TypeError, ValueError) as error:
        raise HyperparameterError(
            f"the {name} schedule gave no number at progress_remaining={progress_remaining:.6g} ({type(error).__name__}: "
            f"{error}): a schedule must return a finite number at every progress from 1 (start) to 0 (end)"
        ) from error
    if math.isnan(value) or (math.isinf(value) and not infinity_allowed):
        raise NonFiniteError(
            f"the {name} schedule returned {value} at progress_remaining={progress_remaining:.6g}: a schedule must "
            f"return a finite number at every progress from 1 (start) to 0 (end)"
        )
    return value
