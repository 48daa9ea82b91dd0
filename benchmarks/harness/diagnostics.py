"""
Training diagnostics of the learning benchmarks: the quantities that the paper's reasoning says decide
whether each of its effects can appear, logged once per training iteration by the harness (not by the library).

- **Staleness** (figure 1), of the data trained on, measured before the iteration's first optimizer step, when the
  policy is the *recent* policy: the fraction of the samples whose ratio ``pi_recent / pi_behav`` lies outside the
  clip range ``[1 - eps, 1 + eps]`` (``outside_clip``: what the first minibatch of the ``behavior`` mode clips; the
  ``decoupled`` mode clips against the recent policy, so nothing at its first minibatch), and the KL between the
  behavior and the recent policies, ``KL[pi_behav, pi_recent]`` (``recent_behavior_kl``, estimated on the stored
  actions, which the behavior policy sampled, by the unbiased ``mean(r - 1 - log r)``, ``r = pi_recent / pi_behav``).
  Both use every sample of the iteration (the first minibatch is a random eighth of them, and the policy is the
  recent one for all of them).
- **Importance weights**, per minibatch, as the objective uses them (``w = pi / pi_old``, with ``pi_old`` the buffer's
  log-probabilities: the behavior policy's, or in the ``proximal`` staleness mode the recent policy's written over
  them; capped at ``imp_samp_max`` as the objective caps them): their mean, maximum and effective sample size
  ``(sum w)^2 / sum w^2``; per iteration the mean over minibatches (``is_weight_mean``, ``ess``, ``ess_fraction``
  = ESS / minibatch size), the maximum (``is_weight_max``) and the smallest ESS (``ess_min``).
- **How far the policy moves**: ``KL[pi_before, pi_after]`` of the policy's action distributions before and after the
  iteration's training (PPG: the auxiliary phase included when it ends the iteration, ``aux_phase = 1``), averaged
  over the states of the iteration's rollout (``kl_moved``), and per environment step of the iteration
  (``kl_per_step = kl_moved / (n_steps * n_envs)``).
- **The gradient noise scale** ``B_simple`` of the policy optimizer after the iteration (``gradient_noise_scale``:
  the library's smoothed estimate, :mod:`sb3_ewma.common.gradient_noise`, NaN until its first full epoch), beside the
  minibatch size (``minibatch_size``).
- The library's own logs of the iteration, read from the model's logger: ``clip_fraction`` (against the clipping
  anchor, over all minibatches) and ``imp_samp_capped_fraction``.

:func:`diagnosed` makes the class that records them (the algorithm's class with :class:`TrainingDiagnostics` before
it). Its training is the algorithm's: the diagnostics are extra forward passes without gradients, which draw no
random numbers (``tests/test_benchmarks.py`` checks that the parameters come out identical). The rows wait in
``model.diagnostic_rows`` until the harness takes them (:meth:`TrainingDiagnostics.take_diagnostic_rows`).
"""

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.utils import obs_as_tensor

DIAGNOSTIC_COLUMNS = (
    "timesteps",
    "trained",
    "minibatch_size",
    "outside_clip",
    "recent_behavior_kl",
    "is_weight_mean",
    "is_weight_max",
    "ess",
    "ess_fraction",
    "ess_min",
    "kl_moved",
    "kl_per_step",
    "aux_phase",
    "gradient_noise_scale",
    "clip_fraction",
    "imp_samp_capped_fraction",
)
"""The columns of a run's diagnostics table, one row per training iteration."""


# ----------------------------------------------------------------------------------------------------------------------
# the quantities, pure


def capped_weights(log_prob: th.Tensor, old_log_prob: th.Tensor, imp_samp_max: float = 0.0) -> th.Tensor:
    """The importance weights ``pi / pi_old`` as the decoupled objective uses them: capped at ``imp_samp_max`` (0: no
    cap)."""
    log_weights = log_prob - old_log_prob
    if imp_samp_max > 0:
        log_weights = th.clamp(log_weights, max=math.log(imp_samp_max))
    return th.exp(log_weights)


def effective_sample_size(weights: th.Tensor) -> th.Tensor:
    """Kish's effective sample size of importance weights, ``(sum w)^2 / sum w^2`` (``n`` for equal weights)."""
    return weights.sum().square() / weights.square().sum()


def weight_stats(weights: th.Tensor) -> dict[str, float]:
    """The mean, the maximum and the effective sample size of one minibatch's importance weights, and the ESS as a
    fraction of the minibatch."""
    ess = float(effective_sample_size(weights))
    return {"mean": float(weights.mean()), "max": float(weights.max()), "ess": ess, "ess_fraction": ess / weights.numel()}


def fraction_outside_clip(log_ratio: th.Tensor, clip_range: float) -> float:
    """The fraction of the ratios ``exp(log_ratio)`` outside ``[1 - clip_range, 1 + clip_range]``."""
    ratio = th.exp(log_ratio)
    return float(((ratio < 1 - clip_range) | (ratio > 1 + clip_range)).float().mean())


def sampled_kl(log_ratio: th.Tensor) -> float:
    """
    ``KL[p, q]`` from ``log_ratio = log q(x) - log p(x)`` at samples ``x`` of ``p``: the unbiased, never negative
    estimate ``mean(r - 1 - log r)``, ``r = q / p`` (Schulman's "k3").
    """
    return float((th.expm1(log_ratio) - log_ratio).mean())


def distribution_kl(before: th.distributions.Distribution, after: th.distributions.Distribution) -> th.Tensor:
    """``KL[before, after]`` per state (summed over the action dimensions of a diagonal Gaussian)."""
    kl = th.distributions.kl_divergence(before, after)
    return kl.sum(dim=tuple(range(1, kl.dim()))) if kl.dim() > 1 else kl


# ----------------------------------------------------------------------------------------------------------------------
# reading a rollout buffer


def flat_observations(buffer: RolloutBuffer) -> np.ndarray:
    """The buffer's observations, one row per sample (a filled, not yet sampled buffer: ``(n_steps, n_envs, ...)``)."""
    observations = buffer.observations
    if isinstance(observations, dict):
        raise TypeError("the diagnostics take array observations, not dictionaries")
    if buffer.generator_ready:  # already flattened by sampling
        return observations
    return observations.reshape(-1, *observations.shape[2:])


def flat_actions(buffer: RolloutBuffer) -> np.ndarray:
    """The buffer's actions, one row per sample."""
    return buffer.actions if buffer.generator_ready else buffer.actions.reshape(buffer.buffer_size * buffer.n_envs, -1)


@th.no_grad()
def action_distributions(policy: Any, observations: np.ndarray, chunk: int = 4096) -> list[th.distributions.Distribution]:
    """The policy's torch action distributions at ``observations``, in chunks (evaluation mode)."""
    training = policy.training
    policy.set_training_mode(False)
    try:
        return [
            policy.get_distribution(obs_as_tensor(observations[start : start + chunk], policy.device)).distribution
            for start in range(0, len(observations), chunk)
        ]
    finally:
        policy.set_training_mode(training)


@th.no_grad()
def log_probs_of(policy: Any, buffer: RolloutBuffer, chunk: int = 4096) -> th.Tensor:
    """The policy's log-probabilities of the buffer's actions (evaluation mode), flat."""
    observations, actions = flat_observations(buffer), flat_actions(buffer)
    training = policy.training
    policy.set_training_mode(False)
    try:
        parts = []
        for start in range(0, len(observations), chunk):
            action = th.as_tensor(actions[start : start + chunk], device=policy.device)
            if isinstance(policy.action_space, spaces.Discrete):
                action = action.long().flatten()
            distribution = policy.get_distribution(obs_as_tensor(observations[start : start + chunk], policy.device))
            parts.append(distribution.log_prob(action))
        return th.cat(parts).flatten()
    finally:
        policy.set_training_mode(training)


def kl_between(before: Sequence[th.distributions.Distribution], after: Sequence[th.distributions.Distribution]) -> float:
    """The mean over states of ``KL[before, after]`` (chunks of the same states)."""
    kls = th.cat([distribution_kl(old, new) for old, new in zip(before, after)])
    return float(kls.mean())


# ----------------------------------------------------------------------------------------------------------------------
# the algorithm with diagnostics


class TrainingDiagnostics:
    """
    Placed before an algorithm's class (:func:`diagnosed`): records a row of diagnostics (:data:`DIAGNOSTIC_COLUMNS`,
    see the module docstring) at every ``train()``. The importance weights per minibatch need the decoupled
    ``train()`` (``_evaluate_policy``, :class:`sb3_ewma.common.decoupled.algorithm.DecoupledAlgorithm`); with SB3's
    ``PPO`` they stay NaN.
    """

    diagnostic_rows: list[dict[str, Any]]
    _minibatch_weights: list[dict[str, float]]

    def _diagnostic_state(self) -> None:
        if "diagnostic_rows" not in vars(self):
            self.diagnostic_rows = []
            self._minibatch_weights = []

    def take_diagnostic_rows(self) -> list[dict[str, Any]]:
        """The rows recorded since the last call (and forget them)."""
        self._diagnostic_state()
        rows, self.diagnostic_rows = self.diagnostic_rows, []
        return rows

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "diagnostic_rows", "_minibatch_weights"]  # type: ignore[misc]

    def _trained_buffer(self) -> RolloutBuffer | None:
        """The buffer ``train()`` will train on: the current rollout, or with artificial staleness the one collected
        ``staleness`` iterations ago (None while the first rollouts are only queued)."""
        staleness = int(getattr(self, "staleness", 0))
        if staleness == 0:
            return self.rollout_buffer  # type: ignore[attr-defined]
        queued = getattr(self, "stale_rollouts", ())
        return queued[0].buffer if len(queued) == staleness else None

    def train(self) -> None:
        self._diagnostic_state()
        policy = self.policy  # type: ignore[attr-defined]
        fresh = self.rollout_buffer  # type: ignore[attr-defined]
        iteration_size = fresh.buffer_size * fresh.n_envs
        observations = flat_observations(fresh)
        before = action_distributions(policy, observations)
        row: dict[str, Any] = {column: math.nan for column in DIAGNOSTIC_COLUMNS}
        row["timesteps"] = self.num_timesteps  # type: ignore[attr-defined]
        trained = self._trained_buffer()
        if trained is not None:
            # the recent policy (now) against the behavior policy (the buffer's log-probabilities, before the proximal
            # mode writes over them)
            log_ratio = log_probs_of(policy, trained) - th.as_tensor(trained.log_probs, device=policy.device).flatten()
            clip_range = self.clip_range(self._current_progress_remaining)  # type: ignore[attr-defined]
            row["outside_clip"] = fraction_outside_clip(log_ratio, clip_range)
            row["recent_behavior_kl"] = sampled_kl(log_ratio)
        self._minibatch_weights = []
        aux_phases = getattr(self, "n_aux_phases", 0)
        super().train()  # type: ignore[misc]
        row["trained"] = int(trained is not None)
        row["minibatch_size"] = int(getattr(self, "_minibatch_size", getattr(self, "batch_size", 0)))
        if self._minibatch_weights:
            row["is_weight_mean"] = float(np.mean([stats["mean"] for stats in self._minibatch_weights]))
            row["is_weight_max"] = float(np.max([stats["max"] for stats in self._minibatch_weights]))
            row["ess"] = float(np.mean([stats["ess"] for stats in self._minibatch_weights]))
            row["ess_fraction"] = float(np.mean([stats["ess_fraction"] for stats in self._minibatch_weights]))
            row["ess_min"] = float(np.min([stats["ess"] for stats in self._minibatch_weights]))
        row["kl_moved"] = kl_between(before, action_distributions(policy, observations))
        row["kl_per_step"] = row["kl_moved"] / iteration_size
        row["aux_phase"] = int(getattr(self, "n_aux_phases", 0) != aux_phases)
        tracker = getattr(self, "gradient_noise", None)
        if tracker is not None and tracker.latest is not None and tracker.latest.noise_scale is not None:
            row["gradient_noise_scale"] = float(tracker.latest.noise_scale)
        logged = self.logger.name_to_value  # type: ignore[attr-defined]
        for key in ("clip_fraction", "imp_samp_capped_fraction"):
            if trained is not None and f"train/{key}" in logged:
                row[key] = float(logged[f"train/{key}"])
        self.diagnostic_rows.append(row)

    def _evaluate_policy(self, rollout_data: Any, actions: th.Tensor) -> Any:
        outputs = super()._evaluate_policy(rollout_data, actions)  # type: ignore[misc]
        log_prob = outputs[1]
        with th.no_grad():
            weights = capped_weights(log_prob.detach(), rollout_data.old_log_prob, float(getattr(self, "imp_samp_max", 0.0)))
            self._minibatch_weights.append(weight_stats(weights))
        return outputs


_DIAGNOSED: dict[type, type] = {}


def diagnosed(algorithm: type) -> type:
    """The class of ``algorithm`` with :class:`TrainingDiagnostics` before it (one class per algorithm)."""
    if algorithm not in _DIAGNOSED:
        _DIAGNOSED[algorithm] = type(
            f"Diagnosed{algorithm.__name__}", (TrainingDiagnostics, algorithm), {"__module__": __name__}
        )
    return _DIAGNOSED[algorithm]
