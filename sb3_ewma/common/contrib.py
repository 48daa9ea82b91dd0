"""
What the EWMA versions of sb3-contrib's PPO variants (RecurrentPPO_EWMA, MaskablePPO_EWMA) share.

``RecurrentPPO.train`` and ``MaskablePPO.train`` are SB3 PPO's ``train`` with one change each: the policy is
evaluated on more than the observations (LSTM states and episode starts over padded sequences, or action masks), and
the recurrent losses are means over the valid (unpadded) steps only. So their EWMA versions run PPO_EWMA's training
iteration unchanged (the same function, not a copy), with two hooks supplied by each algorithm:
:meth:`DecoupledAlgorithmMixin._evaluate_policy` and :meth:`DecoupledAlgorithmMixin._proximal_distribution`; the
recurrent one also samples minibatches whose per-step tensors hold only the valid steps.
"""

from collections import deque
from typing import Any

import torch as th
from stable_baselines3.common.buffers import RolloutBuffer

from sb3_ewma.common.algorithm import DecoupledAlgorithmMixin
from sb3_ewma.common.checks import check_learn_arguments
from sb3_ewma.common.proximal import is_policy_parameter
from sb3_ewma.ppo_ewma.ppo_ewma import PPO_EWMA


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


class ContribDecoupledMixin(DecoupledAlgorithmMixin):
    """
    Mixed into an sb3-contrib PPO variant (before it in the bases): PPO_EWMA's ``train`` (with its staleness
    buffering and logs), the parent's ``_setup_model`` made to accept ``clip_range=None``, and the proximal policy.
    The algorithm's constructor sets the decoupled options (as PPO_EWMA's does) and ``staleness``/``staleness_mode``.
    """

    clip_range: Any
    clip_range_vf: Any
    staleness: int
    staleness_mode: str
    _stale_buffers: deque[RolloutBuffer]

    # PPO_EWMA's training iteration, used as it is (these functions only use what every PPO variant has, plus the
    # hooks above); see the module docstring for what the parents' train() change from PPO's
    train = PPO_EWMA.train
    _record_train_logs = PPO_EWMA._record_train_logs
    _make_rollout_buffer = PPO_EWMA._make_rollout_buffer

    def learn(self, total_timesteps: int, callback: Any = None, log_interval: int = 1, *args: Any, **kwargs: Any) -> Any:
        """The parent's ``learn`` (same arguments), after checking ``total_timesteps`` and ``log_interval``."""
        check_learn_arguments(total_timesteps, log_interval)
        return super().learn(total_timesteps, callback, log_interval, *args, **kwargs)  # type: ignore[misc]

    def _take_training_buffer(self) -> RolloutBuffer | None:
        """
        PPO_EWMA's staleness buffering, except that the advantages of a stale rollout stay those computed at
        collection (PPO_EWMA recomputes them at use from the current value function, which here would need the LSTM
        states of the rollout's end).
        """
        algorithm: Any = self
        if self.staleness == 0:
            return algorithm.rollout_buffer
        self._stale_buffers.append(algorithm.rollout_buffer)
        if len(self._stale_buffers) <= self.staleness:
            algorithm.rollout_buffer = algorithm._make_rollout_buffer()
            return None
        algorithm.rollout_buffer = self._stale_buffers.popleft()
        return algorithm.rollout_buffer

    @th.no_grad()
    def _proximal_action_log_prob(self, rollout_data: Any, actions: th.Tensor) -> th.Tensor:
        # the proximal policy needs the LSTM states or the action masks: through the algorithm's distribution hook
        return self._proximal_distribution(rollout_data).log_prob(actions)

    @staticmethod
    def _is_proximal_parameter(name: str) -> bool:
        """Which policy parameters the proximal EWMA averages (those the action distribution depends on)."""
        return is_policy_parameter(name)

    @property
    def minibatches_per_epoch(self) -> int:
        """Optimizer steps per epoch; ``batch_size=None`` (allowed by sb3-contrib) is the whole rollout."""
        n_samples = self.n_steps * self.n_envs  # type: ignore[attr-defined]
        batch_size = self.batch_size or n_samples  # type: ignore[attr-defined]
        return -(-n_samples // batch_size)

    def _setup_model(self) -> None:
        # The parent's _setup_model (same random-number sequence, so ewma_decay=None reproduces the parent) turns
        # clip_range into a schedule and cannot take None: it gets a placeholder, the real schedules are set after.
        clip_range, clip_range_vf = self.clip_range, self.clip_range_vf
        self.clip_range, self.clip_range_vf = 0.2, None
        super()._setup_model()  # type: ignore[misc]
        self.clip_range, self.clip_range_vf = clip_range, clip_range_vf
        self._setup_clip_schedules()
        self._setup_advantage_normalizer()
        self._setup_proximal_policy(self.staleness, self.staleness_mode, self._is_proximal_parameter)
        self._stale_buffers = deque()

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_stale_buffers"]  # type: ignore[misc]
