"""
How an epoch is split into minibatches: random steps (SB3's), or whole rollouts of environments in random order (the
authors' ``minibatch_gen``; contiguous pieces of one rollout when ``batch_size < n_steps``).
"""

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.type_aliases import RolloutBufferSamples

MINIBATCH_SAMPLINGS = ("steps", "rollouts")


def check_minibatch_sampling(name: str, sampling: str, batch_name: str, batch_size: int | None, n_steps: int) -> None:
    """
    ``sampling`` is one of :data:`MINIBATCH_SAMPLINGS`; with ``"rollouts"``, ``batch_size`` is a multiple of ``n_steps``
    (whole rollouts) or divides it (contiguous pieces of one rollout).
    """
    if sampling not in MINIBATCH_SAMPLINGS:
        raise ValueError(f"{name} must be one of {MINIBATCH_SAMPLINGS}, got {sampling!r}")
    if sampling == "rollouts" and batch_size is not None and batch_size % n_steps != 0 and n_steps % batch_size != 0:
        raise ValueError(
            f"{name}='rollouts' samples whole rollouts of n_steps={n_steps} steps (or contiguous pieces of one): "
            f"{batch_name} must be a multiple or a divisor of n_steps, got {batch_size}"
        )


def rollout_row_indices(segments: np.ndarray, segment_length: int) -> np.ndarray:
    """The rows of the given segments when segment ``s`` occupies rows ``s * segment_length ... + segment_length - 1``."""
    return (segments[:, None] * segment_length + np.arange(segment_length)).ravel()


def shuffled_rollout_indices(n_segments: int, segment_length: int, batch_size: int) -> Iterator[np.ndarray]:
    """
    One epoch over ``n_segments`` contiguous segments (rollouts) in random order: ``batch_size // segment_length``
    whole segments per minibatch or, when ``batch_size`` is smaller, each segment cut into pieces in time order.
    """
    order = np.random.permutation(n_segments)
    if batch_size >= segment_length:
        per_minibatch = batch_size // segment_length
        for start in range(0, n_segments, per_minibatch):
            yield rollout_row_indices(order[start : start + per_minibatch], segment_length)
        return
    for segment in order:
        rows = rollout_row_indices(np.array([segment]), segment_length)
        for start in range(0, segment_length, batch_size):
            yield rows[start : start + batch_size]


def _flatten(buffer: RolloutBuffer) -> None:
    """
    Flatten the buffer to ``(n_envs * n_steps, ...)``, environment-major, through SB3's own ``get`` (which draws one
    permutation from numpy's global generator, as at each epoch of SB3's sampling).
    """
    if buffer.generator_ready:
        return
    generator = buffer.get(1)
    next(generator)
    generator.close()


def rollout_minibatches(
    buffer: RolloutBuffer, batch_size: int, sample: Callable[[np.ndarray], Any] | None = None
) -> Iterator[RolloutBufferSamples]:
    """
    One epoch over a full rollout buffer in minibatches of whole rollouts of environments (the authors' split).

    :param sample: the minibatch of the given rows (default: the buffer's ``_get_samples``)
    """
    _flatten(buffer)
    get_samples = buffer._get_samples if sample is None else sample
    for indices in shuffled_rollout_indices(buffer.n_envs, buffer.buffer_size, batch_size):
        yield get_samples(indices)
