"""The decoupled policy objective applied to a minibatch, with its diagnostics."""

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import torch as th
from stable_baselines3.common.distributions import Distribution

from sb3_ewma.common.distributions import distribution_kl
from sb3_ewma.common.losses import capped_fraction, clip_fraction, decoupled_policy_loss, sampled_kl


def mean_of(values: "list[float] | list[th.Tensor] | list[float | th.Tensor]") -> np.float64:
    """
    Mean of numbers or 0-dim tensors (read once, after the optimization loop, so the device syncs once): a numpy float64,
    as SB3's ``np.mean`` of its ``.item()`` values.
    """
    return np.float64(np.mean([float(value) for value in values]))


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
    # each minibatch's (log pi, log pi_prox, log pi_behav), detached, for mean_stats
    log_probs: list[tuple[th.Tensor, th.Tensor, th.Tensor]] = field(default_factory=list)

    def __call__(
        self,
        advantages: th.Tensor,
        log_prob: th.Tensor,
        proximal_log_prob: th.Tensor,
        behavior_log_prob: th.Tensor,
        distribution: Distribution | None = None,
        proximal_distribution: Distribution | None = None,
    ) -> th.Tensor:
        """Return the loss to minimize, keeping the diagnostics' inputs for :meth:`mean_stats`."""
        policy_loss = decoupled_policy_loss(
            advantages, log_prob, proximal_log_prob, behavior_log_prob, self.clip_range, self.imp_samp_max
        )
        loss = policy_loss
        kl_penalty: th.Tensor | None = None
        if self.kl_coef > 0:
            if self.kl_estimator == "exact":
                assert distribution is not None and proximal_distribution is not None, "exact KL needs both distributions"
                kl_penalty = distribution_kl(proximal_distribution, distribution).mean()
            else:
                kl_penalty = sampled_kl(log_prob, proximal_log_prob)
            loss = loss + self.kl_coef * kl_penalty
        self.record(policy_loss, log_prob, proximal_log_prob, behavior_log_prob, kl_penalty)
        return loss

    def record(
        self,
        policy_loss: th.Tensor,
        log_prob: th.Tensor,
        proximal_log_prob: th.Tensor,
        behavior_log_prob: th.Tensor,
        kl_penalty: th.Tensor | None = None,
    ) -> None:
        """Keep a minibatch's diagnostics' inputs (detached), for :meth:`mean_stats` (a compiled step's too)."""
        if kl_penalty is not None:
            self.stats["kl_penalty"].append(kl_penalty.detach())
        self.stats["policy_gradient_loss"].append(policy_loss.detach())
        self.log_probs.append((log_prob.detach(), proximal_log_prob.detach(), behavior_log_prob.detach()))

    def mean_stats(self) -> dict[str, np.float64]:
        """Mean over the minibatches this objective computed (one iteration's) of each one's diagnostics (as SB3 logs them)."""
        stats = {key: mean_of(values) for key, values in self.stats.items() if values}
        per_minibatch: dict[str, list[th.Tensor]] = defaultdict(list)
        # the minibatches of one size stacked (n, size): one computation per size
        by_size: dict[int, list[tuple[th.Tensor, th.Tensor, th.Tensor]]] = defaultdict(list)
        for minibatch in self.log_probs:
            by_size[minibatch[0].numel()].append(minibatch)
        for minibatches in by_size.values():
            log_prob, proximal_log_prob, behavior_log_prob = (th.stack(column).flatten(1) for column in zip(*minibatches))
            per_minibatch["proximal_kl"].append(sampled_kl(log_prob, proximal_log_prob, dim=1))
            if self.clip_range is not None:
                per_minibatch["clip_fraction"].append(clip_fraction(log_prob, proximal_log_prob, self.clip_range, dim=1))
            capped = capped_fraction(log_prob, behavior_log_prob, self.imp_samp_max, dim=1)
            per_minibatch["imp_samp_capped_fraction"].append(capped)
        stats.update({key: np.float64(th.cat(values).double().mean()) for key, values in per_minibatch.items()})
        return stats
