"""
The decoupled policy objectives of Hilton et al. (2021), as small pure functions of per-sample tensors.

Three policies appear: the current policy ``pi`` (``log_prob``, with gradients), the behavior policy that collected
the data (``behavior_log_prob``, used only for importance sampling) and the proximal policy (``proximal_log_prob``,
used only to limit how fast ``pi`` moves). All are log-probabilities of the taken actions. With
``proximal_log_prob == behavior_log_prob`` the losses are exactly PPO's.
"""

import math

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

    :param advantages: ``A``
    :param log_prob: ``log pi(a|s)`` under the current policy (differentiable)
    :param proximal_log_prob: ``log pi_prox(a|s)``
    :param behavior_log_prob: ``log pi_behav(a|s)``
    :param clip_range: ``eps``; ``None`` for no clipping
    :param imp_samp_max: cap on ``pi / pi_behav`` (0: no cap), see :func:`capped_behavior_log_prob`
    """
    behavior_log_prob = capped_behavior_log_prob(log_prob, behavior_log_prob, imp_samp_max)
    unclipped = -advantages * th.exp(log_prob - behavior_log_prob)
    if clip_range is None:
        return unclipped.mean()
    log_ratio = log_prob - proximal_log_prob
    clipped_log_ratio = th.clamp(log_ratio, math.log(1 - clip_range), math.log(1 + clip_range))
    # (proximal - behavior) first: exactly 0 when the proximal policy is the behavior policy, so this is PPO's term
    clipped = -advantages * th.exp(clipped_log_ratio + (proximal_log_prob - behavior_log_prob))
    return th.maximum(unclipped, clipped).mean()


def sampled_kl(log_prob: th.Tensor, proximal_log_prob: th.Tensor) -> th.Tensor:
    """
    Sampled-action estimate of ``KL[pi_prox, pi]``: ``0.5 * mean((log pi - log pi_prox)^2)`` (the authors' choice;
    accurate to second order when the two policies are close, with actions drawn from the behavior policy).
    """
    return 0.5 * th.mean(th.square(log_prob - proximal_log_prob))


def clip_fraction(log_prob: th.Tensor, proximal_log_prob: th.Tensor, clip_range: float) -> th.Tensor:
    """Fraction of samples whose ratio ``pi / pi_prox`` lies outside ``[1 - eps, 1 + eps]`` (tested in log space)."""
    log_ratio = log_prob - proximal_log_prob
    outside = (log_ratio < math.log(1 - clip_range)) | (log_ratio > math.log(1 + clip_range))
    return th.mean(outside.float())


def capped_fraction(log_prob: th.Tensor, behavior_log_prob: th.Tensor, imp_samp_max: float) -> th.Tensor:
    """Fraction of samples whose importance weight ``pi / pi_behav`` is at the cap ``imp_samp_max``."""
    if imp_samp_max == 0:
        return th.zeros((), device=log_prob.device)
    return th.mean((log_prob - math.log(imp_samp_max) > behavior_log_prob).float())
