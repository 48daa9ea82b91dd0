"""
Helpers on SB3 action distributions: exact KL divergences, the parameters that define a distribution (to store a
policy's outputs, e.g. PPG's ``pi_old``), and evaluation that also returns the distribution.
"""

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch as th
from stable_baselines3.common.distributions import Distribution, kl_divergence
from stable_baselines3.common.policies import ActorCriticPolicy
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
