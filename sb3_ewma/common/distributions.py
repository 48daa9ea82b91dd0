"""
Helpers on SB3 action distributions: exact KL divergences, the parameters that define a distribution (to store a
policy's outputs, e.g. PPG's ``pi_old``), evaluation that also returns the distribution, and the lean evaluation of
categorical and diagonal Gaussian policies (the arithmetic of ``torch.distributions`` without its objects).
"""

import copy
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch as th
from stable_baselines3.common.distributions import (
    CategoricalDistribution,
    DiagGaussianDistribution,
    Distribution,
    kl_divergence,
)
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy
from stable_baselines3.common.type_aliases import PyTorchObs

if TYPE_CHECKING:
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy


def _torch_distributions(distribution: Distribution) -> list[th.distributions.Distribution]:
    components = getattr(distribution, "distributions", None)  # sb3-contrib's MaskableMultiCategoricalDistribution
    if components is not None:
        return list(components)
    inner = distribution.distribution
    return list(inner) if isinstance(inner, (list, tuple)) else [inner]


def distribution_kl(p: Distribution, q: Distribution) -> th.Tensor:
    """
    Exact ``KL[p, q]`` per sample between two SB3 distributions of the same kind (Categorical, MultiCategorical,
    Bernoulli (MultiBinary), diagonal Gaussian and gSDE): SB3's ``kl_divergence``, summed over the action dimensions
    (which it leaves separate for the Gaussian and Bernoulli distributions).

    :return: a tensor of shape ``(batch_size,)``
    """
    if hasattr(p, "distributions"):
        # sb3-contrib's MaskableMultiCategoricalDistribution, which SB3's kl_divergence does not know
        parts = zip(_torch_distributions(p), _torch_distributions(q), strict=True)
        return th.stack([th.distributions.kl_divergence(p_part, q_part) for p_part, q_part in parts], dim=1).sum(dim=1)
    kl = kl_divergence(p, q)
    return kl.sum(dim=tuple(range(1, kl.dim()))) if kl.dim() > 1 else kl


def distribution_parameters(distribution: Distribution) -> list[th.Tensor]:
    """
    The per-sample tensors that define an SB3 action distribution, one or two per torch distribution inside it:
    the logits of a Categorical (one per component of a MultiCategorical) or Bernoulli, the mean and standard
    deviation of a Gaussian (diagonal or gSDE). Each has shape ``(batch_size, n)``; store them (detached) to rebuild
    the distribution later with :func:`kl_from_parameters`.
    """
    parameters = []
    for part in _torch_distributions(distribution):
        if isinstance(part, th.distributions.Normal):
            parameters += [part.loc, part.scale]
        elif isinstance(part, (th.distributions.Categorical, th.distributions.Bernoulli)):
            parameters.append(part.logits)
        else:
            raise TypeError(f"Unsupported distribution {type(part).__name__}")
    return parameters


def kl_from_parameters(parameters: Sequence[th.Tensor], distribution: Distribution) -> th.Tensor:
    """
    Exact ``KL[p, distribution]`` per sample, where ``p`` is a distribution of the same kind given by the
    :func:`distribution_parameters` of an earlier output (e.g. PPG's ``pi_old`` in the auxiliary phase).

    :return: a tensor of shape ``(batch_size,)``, differentiable with respect to ``distribution``
    """
    remaining = iter(parameters)
    rebuilt: list[th.distributions.Distribution] = []
    for part in _torch_distributions(distribution):
        if isinstance(part, th.distributions.Normal):
            rebuilt.append(th.distributions.Normal(next(remaining), next(remaining)))
        elif isinstance(part, th.distributions.Categorical):
            rebuilt.append(th.distributions.Categorical(logits=next(remaining)))
        elif isinstance(part, th.distributions.Bernoulli):
            rebuilt.append(th.distributions.Bernoulli(logits=next(remaining)))
        else:
            raise TypeError(f"Unsupported distribution {type(part).__name__}")
    # an SB3 distribution of the same kind holding the stored torch distribution(s)
    stored = copy.copy(distribution)
    stored.distribution = rebuilt if isinstance(distribution.distribution, (list, tuple)) else rebuilt[0]
    return distribution_kl(stored, distribution)


def policy_latents(policy: "ActorCriticPolicy | MaskableActorCriticPolicy", obs: PyTorchObs) -> tuple[th.Tensor, th.Tensor]:
    """
    The policy and value latents of an ``ActorCriticPolicy`` or sb3-contrib's ``MaskableActorCriticPolicy`` (as in
    their ``evaluate_actions``), in one pass.
    """
    features = policy.extract_features(obs)
    if policy.share_features_extractor:
        return policy.mlp_extractor(features)
    pi_features, vf_features = features
    return policy.mlp_extractor.forward_actor(pi_features), policy.mlp_extractor.forward_critic(vf_features)


def evaluate_actions_with_distribution(
    policy: ActorCriticPolicy, obs: PyTorchObs, actions: th.Tensor
) -> tuple[th.Tensor, th.Tensor, th.Tensor | None, Distribution]:
    """
    Like ``ActorCriticPolicy.evaluate_actions`` (same computation, in the same order) but also returns the
    action distribution, for losses that need more than the log-probabilities of the taken actions.

    :return: values, log-probabilities of ``actions``, entropy (or None) and the distribution
    """
    latent_pi, latent_vf = policy_latents(policy, obs)
    distribution = policy._get_action_dist_from_latent(latent_pi)
    log_prob = distribution.log_prob(actions)
    values = policy.value_net(latent_vf)
    entropy = distribution.entropy()
    return values, log_prob, entropy, distribution


# The lean evaluation. torch's Categorical and Normal normalize their parameters, validate them and the actions (a
# dozen small operations and a host synchronization each) and build Python objects: a large share of a small network's
# forward and backward pass (benchmarks page, `benchmarks.timing.forward_cost`). The functions below compute the same
# tensors with the same operations in the same order (the same values and gradients, bit for bit;
# tests/test_lean_evaluation.py).


def categorical_log_prob(logits: th.Tensor, actions: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
    """
    ``Categorical(logits=logits)``'s normalized logits and ``log_prob(actions)``, as torch computes them.

    :return: the normalized logits (log-probabilities of every action) and the log-probabilities of ``actions``
    """
    log_pmf = logits - logits.logsumexp(dim=-1, keepdim=True)
    return log_pmf, log_pmf.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


def categorical_entropy(log_pmf: th.Tensor) -> th.Tensor:
    """``Categorical(logits=...).entropy()`` from the normalized logits of :func:`categorical_log_prob`."""
    p_log_p = th.clamp(log_pmf, min=th.finfo(log_pmf.dtype).min) * th.softmax(log_pmf, dim=-1)
    return -p_log_p.sum(-1)


def _sum_action_dimensions(tensor: th.Tensor) -> th.Tensor:
    # SB3's sum_independent_dims
    return tensor.sum(dim=1) if tensor.dim() > 1 else tensor.sum()


def diag_gaussian_log_prob(mean: th.Tensor, log_std: th.Tensor, actions: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
    """
    SB3's ``DiagGaussianDistribution.proba_distribution(mean, log_std)``: the standard deviations and
    ``log_prob(actions)`` (``torch.distributions.Normal``'s, summed over the action dimensions).
    """
    std = th.ones_like(mean) * log_std.exp()
    log_prob = -((actions - mean) ** 2) / (2 * std**2) - std.log() - math.log(math.sqrt(2 * math.pi))
    return std, _sum_action_dimensions(log_prob)


def diag_gaussian_entropy(std: th.Tensor) -> th.Tensor:
    """``DiagGaussianDistribution.entropy()`` from the standard deviations of :func:`diag_gaussian_log_prob`."""
    return _sum_action_dimensions(0.5 + 0.5 * math.log(2 * math.pi) + th.log(std))


def has_lean_evaluation(policy: object) -> bool:
    """
    Whether :func:`lean_evaluate_actions` computes ``policy.evaluate_actions``: an ``ActorCriticPolicy`` whose
    evaluation is SB3's own (not overridden by a subclass) and whose action distribution is exactly SB3's categorical
    or diagonal Gaussian one (not gSDE nor a squashed Gaussian).
    """
    return (
        isinstance(policy, ActorCriticPolicy)
        and type(policy).evaluate_actions is ActorCriticPolicy.evaluate_actions
        and type(policy)._get_action_dist_from_latent is ActorCriticPolicy._get_action_dist_from_latent
        and type(policy.action_dist) in (CategoricalDistribution, DiagGaussianDistribution)
    )


def lean_evaluate_actions(
    policy: ActorCriticPolicy, obs: PyTorchObs, actions: th.Tensor
) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    """
    ``policy.evaluate_actions(obs, actions)`` (the values, the log-probabilities of ``actions`` and the entropy) for a
    policy where :func:`has_lean_evaluation`, without building the action distribution.
    """
    latent_pi, latent_vf = policy_latents(policy, obs)
    action_head = policy.action_net(latent_pi)
    if isinstance(policy.action_dist, CategoricalDistribution):
        log_pmf, log_prob = categorical_log_prob(action_head, actions)
        values = policy.value_net(latent_vf)
        return values, log_prob, categorical_entropy(log_pmf)
    std, log_prob = diag_gaussian_log_prob(action_head, policy.log_std, actions)
    values = policy.value_net(latent_vf)
    return values, log_prob, diag_gaussian_entropy(std)


def lean_action_log_prob(policy: ActorCriticPolicy, obs: PyTorchObs, actions: th.Tensor) -> th.Tensor:
    """
    ``policy.get_distribution(obs).log_prob(actions)`` for a categorical or diagonal Gaussian ``ActorCriticPolicy``
    (the actor's path only: no value head), without building the distribution.
    """
    features = BasePolicy.extract_features(policy, obs, policy.pi_features_extractor)
    action_head = policy.action_net(policy.mlp_extractor.forward_actor(features))
    if isinstance(policy.action_dist, CategoricalDistribution):
        return categorical_log_prob(action_head, actions)[1]
    return diag_gaussian_log_prob(action_head, policy.log_std, actions)[1]


def lean_forward(policy: ActorCriticPolicy, obs: PyTorchObs) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    """
    ``ActorCriticPolicy.forward(obs)`` with sampled actions (what SB3's rollout loop calls at every step) for a policy
    where :func:`has_lean_evaluation`, without building the distribution: the same operations and the same draws of
    torch's random number generator (``multinomial`` of the categorical's probabilities, ``normal_`` for the Gaussian),
    so the same actions, values and log-probabilities, bit for bit.

    :return: actions, values and the log-probabilities of the actions
    """
    latent_pi, latent_vf = policy_latents(policy, obs)
    values = policy.value_net(latent_vf)
    action_head = policy.action_net(latent_pi)
    if isinstance(policy.action_dist, CategoricalDistribution):
        # torch's Categorical(logits=...): normalized logits, probabilities by softmax, one multinomial draw per row
        log_pmf = action_head - action_head.logsumexp(dim=-1, keepdim=True)
        probs = th.softmax(log_pmf, dim=-1)
        actions = th.multinomial(probs.reshape(-1, probs.shape[-1]), 1, True).T.reshape(probs.shape[:-1])
        log_prob = log_pmf.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    else:
        # SB3's DiagGaussianDistribution: Normal(mean, std).rsample(), then its log_prob summed over the dimensions
        std = th.ones_like(action_head) * policy.log_std.exp()
        actions = action_head + th.empty(action_head.shape, dtype=action_head.dtype, device=action_head.device).normal_() * std
        log_prob = _sum_action_dimensions(
            -((actions - action_head) ** 2) / (2 * std**2) - std.log() - math.log(math.sqrt(2 * math.pi))
        )
    return actions.reshape((-1, *policy.action_space.shape)), values, log_prob  # type: ignore[misc]
