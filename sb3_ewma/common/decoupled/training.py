"""
PPO's training iteration with the decoupled objective, shared by PPO_EWMA and sb3-contrib's PPO variants
(:mod:`sb3_ewma.common.decoupled.contrib`): SB3 PPO's ``train`` with the policy terms of
:class:`~sb3_ewma.common.decoupled.mixin.DecoupledAlgorithmMixin`, artificial staleness, and SB3's logs followed by
the decoupled objective's diagnostics.
"""

from collections import deque
from typing import Any

from stable_baselines3.common.buffers import RolloutBuffer
from torch.nn import functional as F

from sb3_ewma.common.decoupled.mixin import DecoupledAlgorithmMixin
from sb3_ewma.common.decoupled.objective import DecoupledPolicyObjective
from sb3_ewma.common.losses import clipped_values
from sb3_ewma.common.staleness import StaleRollout, recompute_advantages, replace_behavior_log_probs


class DecoupledTrainingMixin(DecoupledAlgorithmMixin):
    """
    SB3 PPO's ``train`` with the decoupled objective, mixed into a PPO variant (before it in the bases). The
    algorithm supplies the policy evaluations when its policy takes more than the observations
    (:meth:`_evaluate_policy`, :meth:`_proximal_distribution`).
    """

    # rollouts waiting for their turn under artificial staleness (see _take_training_buffer)
    _stale_buffers: deque[Any]

    def _setup_stale_buffers(self) -> None:
        self._stale_buffers = deque()

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_stale_buffers"]

    def _take_training_buffer(self) -> RolloutBuffer | None:
        """
        The buffer to train on this iteration: the one just collected, or with staleness ``k`` the one collected
        ``k`` iterations ago (None while fewer have been collected), prepared as the authors do (see
        :mod:`sb3_ewma.common.staleness`). Buffers are recycled: the one trained on is filled by the next rollout.
        """
        if self.staleness == 0:
            return self.rollout_buffer
        assert self._last_obs is not None and self._last_episode_starts is not None, "set by the rollout"
        self._stale_buffers.append(StaleRollout.capture(self.rollout_buffer, self._last_obs, self._last_episode_starts))
        if len(self._stale_buffers) <= self.staleness:
            self.rollout_buffer = self._make_rollout_buffer()
            return None
        stale = self._stale_buffers.popleft()
        recompute_advantages(self.policy, stale)
        if self.staleness_mode == "proximal":
            replace_behavior_log_probs(self.policy, stale.buffer, self._minibatch_size)
        self.rollout_buffer = stale.buffer
        return self.rollout_buffer

    def train(self) -> None:
        """
        Update policy using the rollout buffer (or, with staleness, the one collected ``staleness`` iterations ago).
        """
        buffer = self._take_training_buffer()
        if buffer is None:
            self.logger.record("train/stale_iterations_buffered", len(self._stale_buffers))
            return
        # Switch to train mode (this affects batch norm / dropout)
        self.policy.set_training_mode(True)
        # Update optimizer learning rate
        self._update_learning_rate(self.policy.optimizer)
        # Compute current clip ranges (None: no clipping)
        clip_range, clip_range_vf = self._current_clip_ranges()

        buffer.advantages = self.advantage_normalizer.start_iteration(buffer.advantages)
        self._snapshot_proximal_policy()
        policy_objective = DecoupledPolicyObjective(clip_range, self.kl_coef, self.kl_estimator, self.imp_samp_max)

        entropy_losses, value_losses = [], []
        continue_training = True
        # train for n_epochs epochs
        for epoch in range(self.n_epochs):
            approx_kl_divs = []
            # Do a complete pass on the rollout buffer
            for rollout_data in self._minibatches(buffer):
                policy_loss, entropy_loss, values, approx_kl_div = self._policy_terms(rollout_data, policy_objective)
                entropy_losses.append(entropy_loss.detach())
                approx_kl_divs.append(approx_kl_div)

                # Clip the difference between old and new value (None: no clipping; <= 0: no movement)
                # NOTE: this depends on the reward scaling
                values_pred = clipped_values(values, rollout_data.old_values, clip_range_vf)
                # Value loss using the TD(gae_lambda) target
                value_loss = F.mse_loss(rollout_data.returns, values_pred)
                value_losses.append(value_loss.detach())

                loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss

                # Early stopping on the KL from the behavior policy (read from the device only when needed)
                if self._kl_exceeds_target(approx_kl_div):
                    continue_training = False
                    if self.verbose >= 1:
                        print(f"Early stopping at step {epoch} due to reaching max kl: {approx_kl_div:.2f}")
                    break

                # Optimization step
                self.policy.optimizer.zero_grad()
                loss.backward()
                self._apply_gradients(self.policy.optimizer)
                self._update_proximal_policy()

            self._n_updates += 1
            if not continue_training:
                break

        self._record_train_logs(
            buffer,
            policy_objective.mean_stats(),
            entropy_losses,
            value_losses,
            approx_kl_divs,
            loss,
            clip_range,
            clip_range_vf,
        )
