"""
The decoupled policy objectives of Hilton et al. (2021), as small pure functions of per-sample tensors.

Three policies appear: the current policy ``pi`` (``log_prob``, with gradients), the behavior policy that collected
the data (``behavior_log_prob``, used only for importance sampling) and the proximal policy (``proximal_log_prob``,
used only to limit how fast ``pi`` moves). All are log-probabilities of the taken actions. With
``proximal_log_prob == behavior_log_prob`` the losses are exactly PPO's.
"""

import math
from typing import Any, cast

import torch as th


def capped_behavior_log_prob(log_prob: th.Tensor, behavior_log_prob: th.Tensor, imp_samp_max: float) -> th.Tensor:
    """
    Behavior log-probabilities raised where needed so that the importance weight ``pi / pi_behav`` is at most
    ``imp_samp_max``: ``max(behavior_log_prob, log_prob.detach() - log(imp_samp_max))``.

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

    With ``clip_range=None`` it is the importance-sampled policy gradient loss ``-(pi / pi_behav) A``, the
    advantage term of the decoupled KL-penalized objective (add ``kl_coef * KL[pi_prox, pi]`` to it).

    A clip range at or below 0 (what a linear schedule gives past the end of the budget, where the progress remaining
    is negative) allows no movement: the interval of the clipped ratio shrinks to the proximal ratio itself,
    ``clip(r) = 1``, where the surrogate is already at its best, so the loss is the surrogate's value
    ``-(pi_prox / pi_behav) * min(r A, A)`` with no gradient. (Keeping the gradient of the unclipped term where it
    is the larger one would give every sample that rounding puts on the wrong side of ``r = 1`` a full-size
    gradient.) SB3's ``PPO`` instead clamps the ratio into the empty interval ``[1 - eps, 1 + eps]``, which torch
    resolves to ``1 + eps < 1``, and still pushes down the probability of every action with a negative advantage
    until its ratio reaches ``1 + eps``. A clip range of 1 or more leaves the ratio unbounded below
    (``log(1 - eps)`` is taken as ``-inf``).

    :param advantages: ``A``
    :param log_prob: ``log pi(a|s)`` under the current policy (differentiable)
    :param proximal_log_prob: ``log pi_prox(a|s)``
    :param behavior_log_prob: ``log pi_behav(a|s)``
    :param clip_range: ``eps``; ``None`` for no clipping, ``<= 0`` for no movement (no gradient)
    :param imp_samp_max: cap on ``pi / pi_behav`` (0: no cap), see :func:`capped_behavior_log_prob`
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
    with the log-ratio ``log(pi / pi_prox)`` clamped to ``[low, high]`` (:func:`log_clip_bounds`; numbers, or 0-dim
    tensors in a compiled step, where a changing clip range must not be a constant of the graph).

    :param unclipped: ``-A pi / pi_behav`` (the behavior log-probabilities capped)
    :param proximal_weight: ``log pi_prox - log pi_behav``
    """
    log_ratio = log_prob - proximal_log_prob
    # (torch's stubs type clamp's bounds as all numbers or all tensors; both are taken)
    clipped = -advantages * th.exp(th.clamp(log_ratio, cast(Any, low), cast(Any, high)) + proximal_weight)
    return th.maximum(unclipped, clipped).mean()


def with_zero_gradient(value: th.Tensor, source: th.Tensor) -> th.Tensor:
    """
    ``value``, in the autograd graph of ``source`` (same shape) with a zero gradient: a loss made of it still has a
    graph to ``backward`` through (a value-only step of PPG, say), and its parameters get zeros, not NaN.
    """
    return th.where(th.zeros_like(source, dtype=th.bool), source, value)


def log_clip_bounds(clip_range: float) -> tuple[float, float]:
    """
    The bounds ``(log(1 - eps), log(1 + eps))`` of the log-ratio, for a clip range ``eps`` taken as 0 when it is
    negative (no movement) and with ``log(1 - eps) = -inf`` when ``eps >= 1`` (no lower bound).
    """
    eps = max(float(clip_range), 0.0)
    return (math.log(1 - eps) if eps < 1 else -math.inf), math.log(1 + eps)


def clipped_values(values: th.Tensor, old_values: th.Tensor, clip_range_vf: float | None) -> th.Tensor:
    """
    SB3's value clipping: the predicted values kept within ``clip_range_vf`` of the values predicted at collection,
    ``old + clip(values - old, -eps_vf, eps_vf)`` (``None``: the values as they are). A clip range at or below 0 (a
    schedule past the end of the budget) allows no movement: the old values, with a zero gradient (the loss keeps its
    graph). SB3's ``PPO`` would clamp into the empty interval and use ``old + eps_vf``, below the old values.

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
    Sampled-action estimate of ``KL[pi_prox, pi]``: ``0.5 * mean((log pi - log pi_prox)^2)`` (the authors' choice;
    accurate to second order when the two policies are close, with actions drawn from the behavior policy).

    :param dim: the dimension to average over (one estimate per minibatch of a stack); None: every element
    """
    return 0.5 * _mean(th.square(log_prob - proximal_log_prob), dim)


def clip_fraction(log_prob: th.Tensor, proximal_log_prob: th.Tensor, clip_range: float, dim: int | None = None) -> th.Tensor:
    """
    Fraction of samples whose ratio ``pi / pi_prox`` lies outside ``[1 - eps, 1 + eps]`` (tested in log space; a clip
    range at or below 0 counts every sample whose ratio is not 1, see :func:`log_clip_bounds`).

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
