"""
Pieces shared by PPO_EWMA and PPG_EWMA: hyperparameter checks, the decoupled policy objective applied to a
minibatch (with its diagnostics), advantage normalization and the choice of the proximal policy.
"""

import math
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.distributions import Distribution

from sb3_ewma.common.checks import warn_at_caller
from sb3_ewma.common.distributions import distribution_kl
from sb3_ewma.common.ewma import EWMAMoments, check_decay
from sb3_ewma.common.ewma_age import EWMA_DECAY_NAMES, ewma_decay_by_rule
from sb3_ewma.common.losses import capped_fraction, clip_fraction, decoupled_policy_loss, sampled_kl

KL_ESTIMATORS = ("sample", "exact")
ADVANTAGE_NORMALIZATIONS = ("minibatch", "ewma")
STALENESS_MODES = ("decoupled", "behavior", "proximal")


def mean_of(values: "list[float] | list[th.Tensor] | list[float | th.Tensor]") -> float:
    """Mean of numbers or 0-dim tensors (read once, after the optimization loop, so the device syncs once)."""
    return float(np.mean([float(value) for value in values]))


def check_decoupled_hyperparams(
    ewma_decay: float | str | None,
    kl_coef: float,
    kl_estimator: str,
    imp_samp_max: float,
    normalize_advantage: bool,
    advantage_normalization: str,
    advantage_ewma_decay: float,
    staleness: int,
    staleness_mode: str,
) -> None:
    """Raise a ``ValueError`` naming the first hyperparameter outside its allowed range."""
    if ewma_decay is not None and ewma_decay not in EWMA_DECAY_NAMES:
        if isinstance(ewma_decay, str):
            raise ValueError(f"ewma_decay must be a number in [0, 1), None or one of {EWMA_DECAY_NAMES}, got {ewma_decay!r}")
        check_decay("ewma_decay", ewma_decay)
    if not isinstance(kl_coef, (int, float)) or not math.isfinite(kl_coef) or kl_coef < 0:
        raise ValueError(f"kl_coef must be a finite number >= 0, got {kl_coef!r}")
    if kl_estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {kl_estimator!r}")
    if not isinstance(imp_samp_max, (int, float)) or not (imp_samp_max == 0 or imp_samp_max > 1):
        raise ValueError(f"imp_samp_max must be 0 (no cap) or a number > 1, got {imp_samp_max!r}")
    if advantage_normalization not in ADVANTAGE_NORMALIZATIONS:
        raise ValueError(f"advantage_normalization must be one of {ADVANTAGE_NORMALIZATIONS}, got {advantage_normalization!r}")
    check_decay("advantage_ewma_decay", advantage_ewma_decay)
    if advantage_normalization == "minibatch" and advantage_ewma_decay != 0:
        warn_at_caller(
            f"advantage_ewma_decay={advantage_ewma_decay!r} has no effect with advantage_normalization='minibatch' "
            "(each minibatch's own statistics): set advantage_normalization='ewma' to use it"
        )
    if advantage_normalization == "ewma" and not normalize_advantage:
        raise ValueError("advantage_normalization='ewma' needs normalize_advantage=True")
    if isinstance(staleness, bool) or not isinstance(staleness, (int, np.integer)) or staleness < 0:
        raise ValueError(f"staleness must be an integer >= 0 (iterations), got {staleness!r}")
    if staleness_mode not in STALENESS_MODES:
        raise ValueError(f"staleness_mode must be one of {STALENESS_MODES}, got {staleness_mode!r}")
    if ewma_decay is None and staleness > 0 and staleness_mode == "behavior" and kl_coef > 0 and kl_estimator == "exact":
        raise ValueError(
            "kl_estimator='exact' needs the proximal policy's distribution, which staleness_mode='behavior' with "
            "staleness > 0 and ewma_decay=None does not keep: use kl_estimator='sample'"
        )


def resolve_ewma_decay(ewma_decay: float | str | None, minibatches_per_epoch: int, n_epochs: int = 1) -> float | None:
    """
    The decay of the proximal-policy EWMA: ``None`` (no EWMA), the given number, or for a name (``"auto"``,
    ``"paper"``, ``"max_age"``, ``"mean_age"``) the decay of the center of mass that the rule gives for ``M`` =
    ``minibatches_per_epoch`` and ``E`` = ``n_epochs`` (:mod:`sb3_ewma.common.ewma_age`).
    """
    if ewma_decay is None:
        return None
    if isinstance(ewma_decay, str):
        return ewma_decay_by_rule(ewma_decay, minibatches_per_epoch, n_epochs)
    return float(ewma_decay)


def uses_proximal_network(ewma_decay: float | None, staleness: int, staleness_mode: str, exact_kl: bool = False) -> bool:
    """
    Whether the proximal policy needs a network of its own: an EWMA, or (EWMA off) a snapshot of the policy at the
    start of each iteration when the exact KL penalty needs its action distribution or when stale data is anchored at
    the recent policy (``"decoupled"``). Otherwise the proximal policy's log-probabilities are the rollout buffer's:
    the behavior policy's, or the recent policy's that replaced them (``"proximal"`` with stale data).
    """
    if ewma_decay is not None or exact_kl:
        return True
    return staleness > 0 and staleness_mode == "decoupled"


@dataclass
class DecoupledPolicyObjective:
    """
    The policy term of the loss for one minibatch: the decoupled clipped surrogate (or, with ``clip_range=None``, the
    importance-sampled policy gradient) plus ``kl_coef * KL[pi_prox, pi]``.

    :param clip_range: ``eps`` of the clipped surrogate, ``None`` for no clipping
    :param kl_coef: coefficient of the KL penalty (0: no penalty)
    :param kl_estimator: ``"sample"`` (``0.5 * mean(log-ratio^2)``) or ``"exact"`` (KL of the distributions)
    :param imp_samp_max: cap on ``pi / pi_behav`` (0: none)
    """

    clip_range: float | None
    kl_coef: float = 0.0
    kl_estimator: str = "sample"
    imp_samp_max: float = 0.0
    stats: dict[str, list[th.Tensor]] = field(default_factory=lambda: defaultdict(list))

    def __call__(
        self,
        advantages: th.Tensor,
        log_prob: th.Tensor,
        proximal_log_prob: th.Tensor,
        behavior_log_prob: th.Tensor,
        distribution: Distribution | None = None,
        proximal_distribution: Distribution | None = None,
    ) -> th.Tensor:
        """Return the loss to minimize; diagnostics are appended to ``self.stats`` (as tensors: no device sync)."""
        policy_loss = decoupled_policy_loss(
            advantages, log_prob, proximal_log_prob, behavior_log_prob, self.clip_range, self.imp_samp_max
        )
        with th.no_grad():
            proximal_kl = sampled_kl(log_prob, proximal_log_prob)
        loss = policy_loss
        if self.kl_coef > 0:
            if self.kl_estimator == "exact":
                assert distribution is not None and proximal_distribution is not None, "exact KL needs both distributions"
                kl_penalty = distribution_kl(proximal_distribution, distribution).mean()
            else:
                kl_penalty = sampled_kl(log_prob, proximal_log_prob)
            loss = loss + self.kl_coef * kl_penalty
            self.stats["kl_penalty"].append(kl_penalty.detach())
        self.stats["policy_gradient_loss"].append(policy_loss.detach())
        self.stats["proximal_kl"].append(proximal_kl)
        if self.clip_range is not None:
            self.stats["clip_fraction"].append(clip_fraction(log_prob, proximal_log_prob, self.clip_range))
        self.stats["imp_samp_capped_fraction"].append(capped_fraction(log_prob, behavior_log_prob, self.imp_samp_max))
        return loss

    def reset_stats(self) -> None:
        self.stats.clear()

    def mean_stats(self) -> dict[str, float]:
        """Mean of each diagnostic over the minibatches since the last ``reset_stats``."""
        return {key: mean_of(values) for key, values in self.stats.items() if values}


class AdvantageNormalizer:
    """
    Advantage normalization, three ways:

    - ``"minibatch"``: SB3's, each minibatch by its own mean and std (skipped for minibatches of one sample);
    - ``"ewma"``: the whole iteration by the mean and std of EWMA moments over iterations (decay ``decay``;
      span ``2 / (1 - decay) - 1`` iterations), as in Hilton et al.;
    - off (``enabled=False``).

    :param enabled: normalize at all (SB3's ``normalize_advantage``)
    :param mode: ``"minibatch"`` or ``"ewma"``
    :param decay: decay of the moments per iteration, for ``"ewma"``
    :param reducer: sums a tensor over processes (data-parallel training): the moments are then those of all
        processes' advantages (``"ewma"``) or of the global minibatch (``"minibatch"``). Not saved.
    """

    def __init__(
        self,
        enabled: bool = True,
        mode: str = "minibatch",
        decay: float = 0.0,
        reducer: Callable[[th.Tensor], th.Tensor] | None = None,
    ) -> None:
        self.moments = EWMAMoments(decay)
        self.reducer = reducer
        self.configure(enabled, mode, decay)
        self.iteration_means: list[float | th.Tensor] = []
        self.iteration_stds: list[float | th.Tensor] = []
        self._epoch_moments: deque[tuple[float, float, float]] = deque()

    @property
    def pools_minibatches(self) -> bool:
        """Whether each minibatch is normalized by moments pooled over processes (``"minibatch"`` with a reducer)."""
        return self.reducer is not None and self.enabled and self.mode == "minibatch"

    def pool_epoch(self, minibatch_advantages: list[th.Tensor]) -> None:
        """
        Data-parallel ``"minibatch"`` mode: the moments of every global minibatch of an epoch in one reduction (one
        collective per epoch instead of one per minibatch), which :meth:`minibatch` then uses in order.
        """
        assert self.reducer is not None
        pooled = [values for values in minibatch_advantages if len(values) > 1]  # as `minibatch` skips the others
        self._epoch_moments.clear()
        if not pooled:
            return
        sums = th.stack(
            [
                # on the advantages' device: read back once, after the reduction
                th.stack(
                    [
                        values.new_tensor(float(values.numel()), dtype=th.float64),
                        values.double().sum(),
                        values.double().square().sum(),
                    ]
                )
                for values in pooled
            ]
        )
        for n, total, total_sq in self.reducer(sums).cpu().tolist():
            mean = total / n
            self._epoch_moments.append((n, mean, max(total_sq / n - mean**2, 0.0)))

    def configure(self, enabled: bool, mode: str, decay: float) -> None:
        """Set the options, keeping the moments accumulated so far (e.g. after ``load`` with other settings)."""
        self.enabled = enabled
        self.mode = mode
        self.moments.decay = float(decay)

    def start_iteration(self, advantages: np.ndarray) -> np.ndarray:
        """Called once per iteration with all its advantages; returns them, normalized in ``"ewma"`` mode."""
        self.iteration_means, self.iteration_stds = [], []
        if not (self.enabled and self.mode == "ewma"):
            return advantages
        if self.reducer is None:
            self.moments.update(advantages)
        else:
            n, mean, var = self._pooled_moments(th.as_tensor(advantages))
            self.moments.update_from_moments(n, mean, var)
        self.iteration_means.append(self.moments.mean)
        self.iteration_stds.append(self.moments.std)
        return self.moments.normalize(advantages).astype(advantages.dtype, copy=False)

    def minibatch(self, advantages: th.Tensor) -> th.Tensor:
        """Normalize one minibatch (``"minibatch"`` mode only; otherwise returned as given)."""
        if not (self.enabled and self.mode == "minibatch") or len(advantages) <= 1:
            return advantages
        if self.reducer is None:
            mean, std = advantages.mean(), advantages.std()
        else:
            n, pooled_mean, var = self._epoch_moments.popleft() if self._epoch_moments else self._pooled_moments(advantages)
            mean = th.as_tensor(pooled_mean, dtype=advantages.dtype, device=advantages.device)
            std = th.as_tensor(math.sqrt(var * n / max(n - 1, 1)), dtype=advantages.dtype, device=advantages.device)
        self.iteration_means.append(mean.detach())
        self.iteration_stds.append(std.detach())
        return (advantages - mean) / (std + 1e-8)

    def _pooled_moments(self, values: th.Tensor) -> tuple[float, float, float]:
        """Size, mean and biased variance of the values of all processes (one reduction of three sums)."""
        assert self.reducer is not None
        values = values.detach().reshape(-1).to(th.float64)
        sums = self.reducer(
            th.stack([th.tensor(float(values.numel()), dtype=th.float64), values.sum().cpu(), (values**2).sum().cpu()])
        )
        n, total, total_sq = (float(x) for x in sums.cpu())
        mean = total / n
        return n, mean, max(total_sq / n - mean**2, 0.0)

    def __getstate__(self) -> dict[str, Any]:
        # the reducer belongs to the running processes, not to a saved model
        return {**self.__dict__, "reducer": None, "_epoch_moments": deque()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"reducer": None, "_epoch_moments": deque(), **state})

    def stats(self) -> dict[str, float]:
        if not self.iteration_means:
            return {}
        return {"advantage_mean": mean_of(self.iteration_means), "advantage_std": mean_of(self.iteration_stds)}
