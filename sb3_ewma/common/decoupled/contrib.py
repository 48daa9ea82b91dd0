"""
What the EWMA versions of sb3-contrib's PPO variants (RecurrentPPO_EWMA, MaskablePPO_EWMA) share.

``RecurrentPPO.train`` and ``MaskablePPO.train`` are SB3 PPO's ``train`` with one change each: the policy is
evaluated on more than the observations (LSTM states and episode starts over padded sequences, or action masks), and
the recurrent losses are means over the valid (unpadded) steps only. So their EWMA versions run the training
iteration of PPO_EWMA (:class:`~sb3_ewma.common.decoupled.training.DecoupledTrainingMixin`) unchanged, with two hooks
supplied by each algorithm: :meth:`DecoupledAlgorithmMixin._evaluate_policy` and
:meth:`DecoupledAlgorithmMixin._proximal_distribution`; the recurrent one also samples minibatches whose per-step
tensors hold only the valid steps.
"""

from typing import Any

import torch as th
from stable_baselines3.common.buffers import RolloutBuffer

from sb3_ewma.common.decoupled.proximal import is_policy_parameter
from sb3_ewma.common.decoupled.training import DecoupledTrainingMixin


def check_contrib_staleness(staleness: int, staleness_mode: str) -> None:
    """
    Artificial staleness in the sb3-contrib variants: ``"decoupled"`` and ``"behavior"`` only. The ``"proximal"`` mode
    needs the recent policy's log-probabilities on the stored data, which these policies only give with the LSTM states
    or action masks of the rollout.
    """
    if staleness > 0 and staleness_mode == "proximal":
        raise ValueError(
            "staleness_mode must be 'decoupled' or 'behavior' with staleness > 0 for RecurrentPPO_EWMA and "
            f"MaskablePPO_EWMA ('proximal' is PPO_EWMA's only), got {staleness_mode!r}"
        )


class ContribDecoupledMixin(DecoupledTrainingMixin):
    """
    Mixed into an sb3-contrib PPO variant (before it in the bases, after the mixins of data-parallel training and
    rollout collection): PPO_EWMA's ``train`` (with its staleness buffering and logs), the parent's ``_setup_model``
    made to accept ``clip_range=None``, and the proximal policy. The algorithm's constructor sets the decoupled options
    (:meth:`_set_decoupled_options`), as PPO_EWMA's does, and supplies the parent's rollout loop with an explicit
    policy (:meth:`~sb3_ewma.common.collection.rollout.RolloutCollectionMixin._collect_rollout_with`).
    """

    def _take_training_buffer(self) -> RolloutBuffer | None:
        """
        PPO_EWMA's staleness buffering, except that the advantages of a stale rollout stay those computed at
        collection (PPO_EWMA recomputes them at use from the current value function, which here would need the LSTM
        states of the rollout's end).
        """
        if self.staleness == 0:
            return self.rollout_buffer
        self._stale_buffers.append(self.rollout_buffer)
        if len(self._stale_buffers) <= self.staleness:
            self.rollout_buffer = self._make_rollout_buffer()
            return None
        self.rollout_buffer = self._stale_buffers.popleft()
        return self.rollout_buffer

    @th.no_grad()
    def _proximal_action_log_prob(self, rollout_data: Any, actions: th.Tensor) -> th.Tensor:
        # the proximal policy needs the LSTM states or the action masks: through the algorithm's distribution hook
        return self._proximal_distribution(rollout_data).log_prob(actions)

    @staticmethod
    def _is_proximal_parameter(name: str) -> bool:
        """Which policy parameters the proximal EWMA averages (those the action distribution depends on)."""
        return is_policy_parameter(name)

    def _setup_model(self) -> None:
        # The parent's _setup_model (same random-number sequence, so ewma_decay=None reproduces the parent) turns
        # clip_range into a schedule and cannot take None: it gets a placeholder, the real schedules are set after.
        clip_ranges = {"clip_range": self.clip_range, "clip_range_vf": self.clip_range_vf}
        self.__dict__.update(clip_range=0.2, clip_range_vf=None)  # SB3's defaults
        super()._setup_model()
        self.__dict__.update(clip_ranges)
        self._setup_clip_schedules()
        self._setup_advantage_normalizer()
        self._setup_proximal_policy(self._rollout_staleness, self.staleness_mode, self._is_proximal_parameter)
        self._setup_stale_buffers()
