"""
sb3-contrib's recurrent rollout buffers, with minibatches whose per-step tensors hold only the valid steps (``mask``);
the observations, LSTM states, episode starts and ``mask`` stay padded, for the LSTM. Plain means over the per-step
tensors are then RecurrentPPO's masked means.
"""

from typing import TypeVar

import numpy as np
from sb3_contrib.common.recurrent.buffers import RecurrentDictRolloutBuffer, RecurrentRolloutBuffer
from sb3_contrib.common.recurrent.type_aliases import RecurrentDictRolloutBufferSamples, RecurrentRolloutBufferSamples
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.vec_env import VecNormalize

# the tensors with one entry per step (the others, the sequences the LSTM runs on, stay padded)
PER_STEP_FIELDS = ("actions", "old_values", "old_log_prob", "advantages", "returns")

RecurrentSamples = TypeVar("RecurrentSamples", RecurrentRolloutBufferSamples, RecurrentDictRolloutBufferSamples)


def keep_valid_steps(samples: RecurrentSamples) -> RecurrentSamples:
    """``samples`` with its per-step tensors (:data:`PER_STEP_FIELDS`) restricted to the valid steps (``mask``)."""
    valid = samples.mask > 1e-8
    return samples._replace(**{name: getattr(samples, name)[valid] for name in PER_STEP_FIELDS})


def rollout_env_change(buffer: RolloutBuffer) -> np.ndarray:
    """As sb3-contrib's ``get()``: the first step of each environment's rollout, flattened as the buffer is."""
    env_change = np.zeros((buffer.buffer_size, buffer.n_envs))
    env_change[0, :] = 1.0
    return buffer.swap_and_flatten(env_change)


class ValidStepsRecurrentRolloutBuffer(RecurrentRolloutBuffer):
    """sb3-contrib's ``RecurrentRolloutBuffer`` with valid-step minibatches (see the module's description)."""

    # sb3-contrib's recurrent buffers add an ``env_change`` argument to SB3's ``_get_samples``: mypy refuses any override
    def _get_samples(  # type: ignore[override]
        self, batch_inds: np.ndarray, env_change: np.ndarray, env: VecNormalize | None = None
    ) -> RecurrentRolloutBufferSamples:
        return keep_valid_steps(super()._get_samples(batch_inds, env_change, env))

    def rollout_samples(self, batch_inds: np.ndarray) -> RecurrentRolloutBufferSamples:
        """
        The minibatch of the given rows of the flattened buffer (``minibatch_sampling="rollouts"``), its sequences cut
        as in :meth:`get`'s minibatches.
        """
        return self._get_samples(batch_inds, rollout_env_change(self))


class ValidStepsRecurrentDictRolloutBuffer(RecurrentDictRolloutBuffer):
    """sb3-contrib's ``RecurrentDictRolloutBuffer`` with valid-step minibatches (see the module's description)."""

    # incompatible with SB3's signature, as ValidStepsRecurrentRolloutBuffer._get_samples is
    def _get_samples(  # type: ignore[override]
        self, batch_inds: np.ndarray, env_change: np.ndarray, env: VecNormalize | None = None
    ) -> RecurrentDictRolloutBufferSamples:
        return keep_valid_steps(super()._get_samples(batch_inds, env_change, env))

    def rollout_samples(self, batch_inds: np.ndarray) -> RecurrentDictRolloutBufferSamples:
        """The minibatch of the given rows, as :meth:`ValidStepsRecurrentRolloutBuffer.rollout_samples`."""
        return self._get_samples(batch_inds, rollout_env_change(self))
