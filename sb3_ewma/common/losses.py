"""
The decoupled policy objectives of Hilton et al. (2021), as small pure functions of per-sample tensors.

The current policy ``pi`` (``log_prob``, with gradients), the behavior policy (``behavior_log_prob``, for importance
sampling) and the proximal policy (``proximal_log_prob``, for clipping) are log-probabilities of the taken actions.
With ``proximal_log_prob == behavior_log_prob`` the losses are PPO's.
"""

import math
from typing import Any, cast

import torch as th


def capped_behavior_log_prob(log_prob: th.Tensor, behavior_log_prob: th.Tensor, imp_samp_max: float) -> th.Tensor:
    """
    Behavior log-probabilities capping ``pi / pi_behav`` at ``imp_samp_max``:
    ``max(behavior_log_prob, log_prob.detach() - log(imp_samp_max))``.

    :param imp_samp_max: the cap on ``pi / pi_behav``, ``> 1``; 0 turns the cap off
    """
    if imp_samp_max == 0:
        return behavior_log_prob
    return th.maximum(behavior_log_prob, log_prob.detach() - math.log(imp_samp_max))


def decoupled_policy_loss(
    advantages: th.Tensor,
    log_prob: th.Tensor,
    proximal_log_prob: th.Tensor,
    behavior_log_prob: th.Tensor,
    clip_range: float | None,
    imp_samp_max: float = 0.0,
) -> th.Tensor:
    """
    Negative decoupled clipped surrogate, averaged over the batch (computed in log space)::

        -(pi_prox / pi_behav) * min(r A, clip(r, 1 - eps, 1 + eps) A),  r = pi / pi_prox

    With ``clip_range=None`` it is the importance-sampled loss ``-(pi / pi_behav) A``, the advantage term of the
    KL-penalized objective. A clip range at or below 0 allows no movement: ``clip(r) = 1``, the surrogate's value with
    no gradient (SB3's ``PPO`` clamps to ``1 + eps < 1`` instead). A clip range of 1 or more leaves ``r`` unbounded below.

    :param advantages: ``A``
    :param log_prob: ``log pi(a|s)`` under the current policy (differentiable)
    :param proximal_log_prob: ``log pi_prox(a|s)``
    :param behavior_log_prob: ``log pi_behav(a|s)``
    :param clip_range: ``eps``; ``None`` for no clipping, ``<= 0`` for no movement (no gradient)
    :param imp_samp_max: cap on ``pi / pi_behav`` (0: no cap)
    """
    behavior_log_prob = capped_behavior_log_prob(log_prob, behavior_log_prob, imp_samp_max)
    unclipped = -advantages * th.exp(log_prob - behavior_log_prob)
    if clip_range is None:
        return unclipped.mean()
    # (proximal - behavior) first: exactly 0 when the proximal policy is the behavior policy, so this is PPO's term
    proximal_weight = proximal_log_prob - behavior_log_prob
    if clip_range <= 0:
        # the clipped ratio pinned to 1: the surrogate's value, with a zero gradient
        pinned = -advantages * th.exp(proximal_weight)
        return with_zero_gradient(th.maximum(unclipped.detach(), pinned), unclipped).mean()
    return clipped_surrogate_loss(
        advantages, log_prob, proximal_log_prob, unclipped, proximal_weight, *log_clip_bounds(clip_range)
    )


def clipped_surrogate_loss(
    advantages: th.Tensor,
    log_prob: th.Tensor,
    proximal_log_prob: th.Tensor,
    unclipped: th.Tensor,
    proximal_weight: th.Tensor,
    low: float | th.Tensor,
    high: float | th.Tensor,
) -> th.Tensor:
    """
    The clipped branch of :func:`decoupled_policy_loss`: ``mean(max(unclipped, -A (pi_prox / pi_behav) clip(r)))``,
    ``log(pi / pi_prox)`` clamped to ``[low, high]`` (:func:`log_clip_bounds`; 0-dim tensors when compiled).

    :param unclipped: ``-A pi / pi_behav`` (the behavior log-probabilities capped)
    :param proximal_weight: ``log pi_prox - log pi_behav``
    """
    log_ratio = log_prob - proximal_log_prob
    # (torch's stubs type clamp's bounds as all numbers or all tensors; both are taken)
    clipped = -advantages * th.exp(th.clamp(log_ratio, cast(Any, low), cast(Any, high)) + proximal_weight)
    return th.maximum(unclipped, clipped).mean()


def with_zero_gradient(value: th.Tensor, source: th.Tensor) -> th.Tensor:
    """``value`` in the autograd graph of ``source`` (same shape) with a zero gradient, so that a loss of it can backward."""
    return th.where(th.zeros_like(source, dtype=th.bool), source, value)


def log_clip_bounds(clip_range: float) -> tuple[float, float]:
    """``(log(1 - eps), log(1 + eps))``, ``eps`` taken as 0 when negative and ``log(1 - eps) = -inf`` when ``eps >= 1``."""
    eps = max(float(clip_range), 0.0)
    return (math.log(1 - eps) if eps < 1 else -math.inf), math.log(1 + eps)


def clipped_values(values: th.Tensor, old_values: th.Tensor, clip_range_vf: float | None) -> th.Tensor:
    """
    SB3's value clipping, ``old + clip(values - old, -eps_vf, eps_vf)``. A clip range at or below 0 allows no movement:
    the old values, with a zero gradient (SB3's ``PPO`` would use ``old + eps_vf``).

    :param values: the values predicted now (differentiable)
    :param old_values: the values predicted when the data was collected
    :param clip_range_vf: ``eps_vf``, or ``None`` for no clipping
    """
    if clip_range_vf is None:
        return values
    if clip_range_vf <= 0:
        return with_zero_gradient(old_values, values)
    return old_values + th.clamp(values - old_values, -clip_range_vf, clip_range_vf)


def sampled_kl(log_prob: th.Tensor, proximal_log_prob: th.Tensor, dim: int | None = None) -> th.Tensor:
    """
    Sampled-action estimate of ``KL[pi_prox, pi]``, the authors': ``0.5 * mean((log pi - log pi_prox)^2)``.

    :param dim: the dimension to average over (one estimate per minibatch of a stack); None: every element
    """
    return 0.5 * _mean(th.square(log_prob - proximal_log_prob), dim)


def clip_fraction(log_prob: th.Tensor, proximal_log_prob: th.Tensor, clip_range: float, dim: int | None = None) -> th.Tensor:
    """
    Fraction of samples whose ratio ``pi / pi_prox`` lies outside ``[1 - eps, 1 + eps]`` (:func:`log_clip_bounds`).

    :param dim: the dimension to average over (one fraction per minibatch of a stack); None: every element
    """
    log_ratio = log_prob - proximal_log_prob
    low, high = log_clip_bounds(clip_range)
    outside = (log_ratio < low) | (log_ratio > high)
    return _mean(outside.float(), dim)


def capped_fraction(
    log_prob: th.Tensor, behavior_log_prob: th.Tensor, imp_samp_max: float, dim: int | None = None
) -> th.Tensor:
    """
    Fraction of samples whose importance weight ``pi / pi_behav`` is at the cap ``imp_samp_max``.

    :param dim: the dimension to average over (one fraction per minibatch of a stack); None: every element
    """
    if imp_samp_max == 0:
        return _mean(th.zeros_like(log_prob), dim)
    return _mean((log_prob - math.log(imp_samp_max) > behavior_log_prob).float(), dim)


def _mean(values: th.Tensor, dim: int | None) -> th.Tensor:
    return values.mean() if dim is None else values.mean(dim)
