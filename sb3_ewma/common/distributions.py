"""Helpers on SB3 action distributions: exact KL divergences, and evaluation that also returns the distribution."""

import torch as th
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.type_aliases import PyTorchObs


def _torch_distributions(distribution: Distribution) -> list[th.distributions.Distribution]:
    inner = distribution.distribution
    return list(inner) if isinstance(inner, (list, tuple)) else [inner]


def distribution_kl(p: Distribution, q: Distribution) -> th.Tensor:
    """
    Exact ``KL[p, q]`` per sample (summed over action dimensions) between two SB3 distributions of the same kind:
    Categorical, MultiCategorical, Bernoulli (MultiBinary), diagonal Gaussian and gSDE.

    :return: a tensor of shape ``(batch_size,)``
    """
    total: th.Tensor | None = None
    for p_part, q_part in zip(_torch_distributions(p), _torch_distributions(q)):
        kl = th.distributions.kl_divergence(p_part, q_part)
        if kl.dim() > 1:
            kl = kl.sum(dim=tuple(range(1, kl.dim())))
        total = kl if total is None else total + kl
    assert total is not None, "empty distribution"
    return total


def evaluate_actions_with_distribution(
    policy: ActorCriticPolicy, obs: PyTorchObs, actions: th.Tensor
) -> tuple[th.Tensor, th.Tensor, th.Tensor | None, Distribution]:
    """
    Like ``ActorCriticPolicy.evaluate_actions`` (same computation, in the same order) but also returns the
    action distribution, for losses that need more than the log-probabilities of the taken actions.

    :return: values, log-probabilities of ``actions``, entropy (or None) and the distribution
    """
    features = policy.extract_features(obs)
    if policy.share_features_extractor:
        latent_pi, latent_vf = policy.mlp_extractor(features)
    else:
        pi_features, vf_features = features
        latent_pi = policy.mlp_extractor.forward_actor(pi_features)
        latent_vf = policy.mlp_extractor.forward_critic(vf_features)
    distribution = policy._get_action_dist_from_latent(latent_pi)
    log_prob = distribution.log_prob(actions)
    values = policy.value_net(latent_vf)
    entropy = distribution.entropy()
    return values, log_prob, entropy, distribution
