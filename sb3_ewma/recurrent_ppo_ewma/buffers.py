"""sb3-contrib's recurrent rollout buffers, with minibatches whose per-step tensors hold only the valid steps."""

from typing import Any

import numpy as np
from sb3_contrib.common.recurrent.buffers import RecurrentDictRolloutBuffer, RecurrentRolloutBuffer

# the tensors with one entry per step (the others, the sequences the LSTM runs on, stay padded)
PER_STEP_FIELDS = ("actions", "old_values", "old_log_prob", "advantages", "returns")


class ValidStepsMixin:
    """
    Minibatches as sb3-contrib samples them (whole sequences, padded to the same length), except that the per-step
    tensors (actions, values, log-probabilities, advantages, returns) keep only the valid steps (``mask``): the
    observations, LSTM states, episode starts and ``mask`` stay padded, for the LSTM. Losses that are plain means over
    these per-step tensors are then RecurrentPPO's masked means.
    """

    def _get_samples(self, batch_inds: np.ndarray, env_change: np.ndarray, env: Any = None) -> Any:
        samples = super()._get_samples(batch_inds, env_change, env)  # type: ignore[misc]
        valid = samples.mask > 1e-8
        return samples._replace(**{name: getattr(samples, name)[valid] for name in PER_STEP_FIELDS})

    def rollout_samples(self, batch_inds: np.ndarray) -> Any:
        """
        The minibatch of the given rows of the flattened buffer (``minibatch_sampling="rollouts"``: whole rollouts of
        environments, or contiguous pieces of one): a sequence starts at each environment's first step, at each
        episode start and at the first row, each from the LSTM states stored at its first step, as in
        :meth:`get`'s minibatches.
        """
        # as sb3-contrib's get(): the first step of each environment's rollout, flattened as the buffer is
        env_change = np.zeros((self.buffer_size, self.n_envs))  # type: ignore[attr-defined]
        env_change[0, :] = 1.0
        return self._get_samples(batch_inds, self.swap_and_flatten(env_change))  # type: ignore[attr-defined]


class ValidStepsRecurrentRolloutBuffer(ValidStepsMixin, RecurrentRolloutBuffer):  # type: ignore[misc]
    """sb3-contrib's ``RecurrentRolloutBuffer`` with valid-step minibatches (see :class:`ValidStepsMixin`)."""


class ValidStepsRecurrentDictRolloutBuffer(ValidStepsMixin, RecurrentDictRolloutBuffer):  # type: ignore[misc]
    """sb3-contrib's ``RecurrentDictRolloutBuffer`` with valid-step minibatches (see :class:`ValidStepsMixin`)."""
