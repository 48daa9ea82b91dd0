"""
Helpers on SB3 action distributions: exact KL divergences, the parameters that define a distribution (PPG's
``pi_old``), evaluation that also returns the distribution, and the lean evaluation (``torch.distributions``' arithmetic
without its objects) of SB3's categorical and Gaussian policies and of sb3-contrib's masked ones.
"""

import copy
import math
from collections.abc import Sequence
from typing import Any, cast

import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.distributions import MaskableCategoricalDistribution, MaskableMultiCategoricalDistribution
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3.common.distributions import (
    CategoricalDistribution,
    DiagGaussianDistribution,
    Distribution,
    StateDependentNoiseDistribution,
    kl_divergence,
)
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.type_aliases import PyTorchObs
from torch.nn import functional as F


def _torch_distributions(distribution: Distribution) -> list[th.distributions.Distribution]:
    components = getattr(distribution, "distributions", None)  # sb3-contrib's MaskableMultiCategoricalDistribution
    if components is not None:
        return list(components)
    inner = distribution.distribution
    return list(inner) if isinstance(inner, (list, tuple)) else [inner]


def distribution_kl(p: Distribution, q: Distribution) -> th.Tensor:
    """
    Exact ``KL[p, q]`` per sample between two SB3 distributions of the same kind (categorical, multi-categorical,
    Bernoulli, diagonal Gaussian, gSDE), summed over the action dimensions.

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
    The per-sample tensors that define an SB3 action distribution, each ``(batch_size, n)``: the logits of each
    categorical or Bernoulli part, the mean and standard deviation of a Gaussian; :func:`kl_from_parameters` reads them.
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
    Exact ``KL[p, distribution]`` per sample, ``p`` given by the :func:`distribution_parameters` of an earlier output.

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


ObservationPlan = tuple[Any, ...]
"""SB3's ``preprocess_obs`` for an observation space, decided outside a compiled graph so that ``torch.compile`` traces
the operations only: ``("box", divide_by_255)``, ``("discrete", n)``, ``("multi_discrete", sizes)``, ``("binary",)``
or ``("dict", ((key, plan), ...))``."""


def observation_plan(policy: BasePolicy) -> ObservationPlan | None:
    """``policy``'s :data:`ObservationPlan`, or None when it overrides ``extract_features`` (the lean functions call it)."""
    if type(policy).extract_features not in (ActorCriticPolicy.extract_features, MaskableActorCriticPolicy.extract_features):
        return None
    return observation_space_plan(policy.observation_space, policy.normalize_images)


def observation_space_plan(space: spaces.Space, normalize_images: bool) -> ObservationPlan:
    """The :data:`ObservationPlan` of SB3's ``preprocess_obs`` for ``space``."""
    if isinstance(space, spaces.Dict):
        return (
            "dict",
            tuple((key, observation_space_plan(subspace, normalize_images)) for key, subspace in space.spaces.items()),
        )
    if isinstance(space, spaces.Box):
        return ("box", normalize_images and is_image_space(space))
    if isinstance(space, spaces.Discrete):
        return ("discrete", int(space.n))
    if isinstance(space, spaces.MultiDiscrete):
        return ("multi_discrete", tuple(int(n) for n in space.nvec))
    if isinstance(space, spaces.MultiBinary):
        return ("binary",)
    raise NotImplementedError(f"Preprocessing not implemented for {space}")


def preprocessed_observations(obs: PyTorchObs, plan: ObservationPlan) -> PyTorchObs:
    """SB3's ``preprocess_obs(obs, space, normalize_images)``, the same operations, by the space's :data:`ObservationPlan`."""
    kind = plan[0]
    if kind == "dict":
        observations = cast(dict[str, th.Tensor], obs)
        return {key: cast(th.Tensor, preprocessed_observations(observations[key], subplan)) for key, subplan in plan[1]}
    tensor = cast(th.Tensor, obs)
    if kind == "box":
        return tensor.float() / 255.0 if plan[1] else tensor.float()
    if kind == "discrete":
        return F.one_hot(tensor.long(), num_classes=plan[1]).float()
    if kind == "multi_discrete":
        sizes = plan[1]
        one_hots = [
            F.one_hot(part.long(), num_classes=size).float() for part, size in zip(th.split(tensor.long(), 1, dim=1), sizes)
        ]
        return th.cat(one_hots, dim=-1).view(tensor.shape[0], sum(sizes))
    return tensor.float()


def policy_latents(
    policy: ActorCriticPolicy | MaskableActorCriticPolicy, obs: PyTorchObs, plan: ObservationPlan | None = None
) -> tuple[th.Tensor, th.Tensor]:
    """
    The policy and value latents, as ``evaluate_actions`` computes them; with ``plan``, the observations preprocessed by
    it instead of by ``extract_features``.
    """
    if plan is None:
        features = policy.extract_features(obs)
    else:
        preprocessed = preprocessed_observations(obs, plan)
        if policy.share_features_extractor:
            features = policy.features_extractor(preprocessed)
        else:
            features = policy.pi_features_extractor(preprocessed), policy.vf_features_extractor(preprocessed)
    if policy.share_features_extractor:
        return policy.mlp_extractor(features)
    pi_features, vf_features = features
    return policy.mlp_extractor.forward_actor(pi_features), policy.mlp_extractor.forward_critic(vf_features)


def actor_features(policy: BasePolicy, obs: PyTorchObs, plan: ObservationPlan | None = None) -> th.Tensor:
    """The actor's features (SB3's ``extract_features(obs, policy.pi_features_extractor)``), by ``plan`` if given."""
    extractor = cast(BaseFeaturesExtractor, policy.pi_features_extractor)
    if plan is None:
        return BasePolicy.extract_features(policy, obs, extractor)
    return extractor(preprocessed_observations(obs, plan))


def evaluate_actions_with_distribution(
    policy: ActorCriticPolicy, obs: PyTorchObs, actions: th.Tensor
) -> tuple[th.Tensor, th.Tensor, th.Tensor | None, Distribution]:
    """
    ``ActorCriticPolicy.evaluate_actions`` (the same computation, in the same order) that also returns the distribution.

    :return: values, log-probabilities of ``actions``, entropy (or None) and the distribution
    """
    latent_pi, latent_vf = policy_latents(policy, obs)
    distribution = policy._get_action_dist_from_latent(latent_pi)
    log_prob = distribution.log_prob(actions)
    values = policy.value_net(latent_vf)
    entropy = distribution.entropy()
    return values, log_prob, entropy, distribution


# The lean evaluation: the tensors of torch's Categorical and Normal with the same operations in the same order (the same
# values and gradients, bit for bit), without their validation and Python objects.


def categorical_log_prob(logits: th.Tensor, actions: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
    """``Categorical(logits=logits)``'s normalized logits (every action's log-probability) and ``log_prob(actions)``."""
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
    """SB3's ``DiagGaussianDistribution.proba_distribution(mean, log_std)``: the standard deviations and
    ``log_prob(actions)``."""
    std = th.ones_like(mean) * log_std.exp()
    log_prob = -((actions - mean) ** 2) / (2 * std**2) - std.log() - math.log(math.sqrt(2 * math.pi))
    return std, _sum_action_dimensions(log_prob)


def diag_gaussian_entropy(std: th.Tensor) -> th.Tensor:
    """``DiagGaussianDistribution.entropy()`` from the standard deviations of :func:`diag_gaussian_log_prob` (and
    ``StateDependentNoiseDistribution.entropy()`` from those of :func:`gsde_log_prob`)."""
    return _sum_action_dimensions(0.5 + 0.5 * math.log(2 * math.pi) + th.log(std))


def gsde_std(distribution: StateDependentNoiseDistribution, latent_pi: th.Tensor, log_std: th.Tensor) -> th.Tensor:
    """The standard deviations of SB3's gSDE distribution at the actor's latent, ``sqrt(latent_sde**2 @ std**2 +
    epsilon)`` (its ``proba_distribution``)."""
    latent_sde = latent_pi if distribution.learn_features else latent_pi.detach()
    variance = th.mm(latent_sde**2, distribution.get_std(log_std) ** 2)
    return th.sqrt(variance + distribution.epsilon)


def gsde_noise(distribution: StateDependentNoiseDistribution, latent_pi: th.Tensor) -> th.Tensor:
    """SB3's ``StateDependentNoiseDistribution.get_noise``: the noise at the actor's latent, through the exploration matrix
    (or one per row)."""
    latent_sde = latent_pi if distribution.learn_features else latent_pi.detach()
    matrices = distribution.exploration_matrices
    if len(latent_sde) == 1 or len(latent_sde) != len(matrices):
        return th.mm(latent_sde, distribution.exploration_mat)
    return th.bmm(latent_sde.unsqueeze(dim=1), matrices).squeeze(dim=1)


def gsde_log_prob(
    distribution: StateDependentNoiseDistribution,
    latent_pi: th.Tensor,
    mean: th.Tensor,
    log_std: th.Tensor,
    actions: th.Tensor,
) -> tuple[th.Tensor, th.Tensor]:
    """SB3's unsquashed ``StateDependentNoiseDistribution.proba_distribution(mean, log_std, latent_pi)``: the standard
    deviations (:func:`gsde_std`) and ``log_prob(actions)``."""
    std = gsde_std(distribution, latent_pi, log_std)
    log_prob = -((actions - mean) ** 2) / (2 * std**2) - std.log() - math.log(math.sqrt(2 * math.pi))
    return std, _sum_action_dimensions(log_prob)


def is_lean_gsde(distribution: object) -> bool:
    """Whether ``distribution`` is SB3's gSDE without squashing (what :func:`gsde_log_prob` computes)."""
    return type(distribution) is StateDependentNoiseDistribution and distribution.bijector is None


def has_lean_evaluation(policy: object) -> bool:
    """
    Whether :func:`lean_evaluate_actions` computes ``policy.evaluate_actions``: an ``ActorCriticPolicy`` with SB3's own
    evaluation and exactly SB3's categorical, diagonal Gaussian or unsquashed gSDE distribution.
    """
    return (
        isinstance(policy, ActorCriticPolicy)
        and type(policy).evaluate_actions is ActorCriticPolicy.evaluate_actions
        and type(policy)._get_action_dist_from_latent is ActorCriticPolicy._get_action_dist_from_latent
        and (
            type(policy.action_dist) in (CategoricalDistribution, DiagGaussianDistribution) or is_lean_gsde(policy.action_dist)
        )
    )


def has_lean_recurrent_evaluation(policy: object) -> bool:
    """
    Whether :func:`lean_evaluate_latents` computes an sb3-contrib ``RecurrentActorCriticPolicy``'s evaluation from its
    LSTM outputs: sb3-contrib's own evaluation, with SB3's categorical, diagonal Gaussian or unsquashed gSDE distribution.
    """
    return (
        isinstance(policy, RecurrentActorCriticPolicy)
        and type(policy).evaluate_actions is RecurrentActorCriticPolicy.evaluate_actions
        and type(policy).get_distribution is RecurrentActorCriticPolicy.get_distribution
        and type(policy)._process_sequence is RecurrentActorCriticPolicy._process_sequence
        and type(policy).extract_features is ActorCriticPolicy.extract_features
        and type(policy)._get_action_dist_from_latent is ActorCriticPolicy._get_action_dist_from_latent
        and (
            type(policy.action_dist) in (CategoricalDistribution, DiagGaussianDistribution) or is_lean_gsde(policy.action_dist)
        )
    )


def has_lean_log_prob(policy: object) -> bool:
    """
    Whether :func:`lean_action_log_prob` computes ``policy.get_distribution(obs).log_prob(actions)``:
    :func:`has_lean_evaluation`, with SB3's own ``get_distribution`` and ``extract_features``.
    """
    return (
        isinstance(policy, ActorCriticPolicy)
        and has_lean_evaluation(policy)
        and type(policy).get_distribution is ActorCriticPolicy.get_distribution
        and type(policy).extract_features is ActorCriticPolicy.extract_features
    )


def _lean_log_prob(
    policy: ActorCriticPolicy, latent_pi: th.Tensor, actions: th.Tensor
) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    """The action head's output, ``log_prob(actions)`` and what the entropy is computed from (normalized logits or std)."""
    action_head = policy.action_net(latent_pi)
    if isinstance(policy.action_dist, CategoricalDistribution):
        log_pmf, log_prob = categorical_log_prob(action_head, actions)
        return action_head, log_prob, log_pmf
    if isinstance(policy.action_dist, StateDependentNoiseDistribution):
        std, log_prob = gsde_log_prob(policy.action_dist, latent_pi, action_head, policy.log_std, actions)
        return action_head, log_prob, std
    std, log_prob = diag_gaussian_log_prob(action_head, policy.log_std, actions)
    return action_head, log_prob, std


def lean_evaluate_actions(
    policy: ActorCriticPolicy, obs: PyTorchObs, actions: th.Tensor, plan: ObservationPlan | None = None
) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    """
    ``policy.evaluate_actions(obs, actions)`` for a policy where :func:`has_lean_evaluation`, without building the
    distribution (``plan``: the policy's :data:`ObservationPlan`).
    """
    latent_pi, latent_vf = policy_latents(policy, obs, plan)
    return lean_evaluate_latents(policy, latent_pi, latent_vf, actions)


def lean_evaluate_latents(
    policy: ActorCriticPolicy, latent_pi: th.Tensor, latent_vf: th.Tensor, actions: th.Tensor
) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    """:func:`lean_evaluate_actions` from the actor's and the critic's latents (``mlp_extractor``'s outputs)."""
    _, log_prob, spread = _lean_log_prob(policy, latent_pi, actions)
    values = policy.value_net(latent_vf)
    if isinstance(policy.action_dist, CategoricalDistribution):
        return values, log_prob, categorical_entropy(spread)
    return values, log_prob, diag_gaussian_entropy(spread)


def lean_latent_log_prob(policy: ActorCriticPolicy, latent_pi: th.Tensor, actions: th.Tensor) -> th.Tensor:
    """:func:`lean_action_log_prob` from the actor's latent (``mlp_extractor``'s output)."""
    return _lean_log_prob(policy, latent_pi, actions)[1]


def lean_action_log_prob(
    policy: ActorCriticPolicy, obs: PyTorchObs, actions: th.Tensor, plan: ObservationPlan | None = None
) -> th.Tensor:
    """``policy.get_distribution(obs).log_prob(actions)`` for a policy where :func:`has_lean_log_prob` (actor only)."""
    latent_pi = policy.mlp_extractor.forward_actor(actor_features(policy, obs, plan))
    return _lean_log_prob(policy, latent_pi, actions)[1]


def lean_forward(
    policy: ActorCriticPolicy, obs: PyTorchObs, plan: ObservationPlan | None = None
) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    """
    ``ActorCriticPolicy.forward(obs)`` with sampled actions for a policy where :func:`has_lean_evaluation`, without
    building the distribution: the same operations and random draws (gSDE draws nothing here: its noise is the
    exploration matrices), so the same results, bit for bit.

    :return: actions, values and the log-probabilities of the actions
    """
    latent_pi, latent_vf = policy_latents(policy, obs, plan)
    values = policy.value_net(latent_vf)
    action_head = policy.action_net(latent_pi)
    if isinstance(policy.action_dist, CategoricalDistribution):
        # torch's Categorical(logits=...): normalized logits, probabilities by softmax, one multinomial draw per row
        log_pmf = action_head - action_head.logsumexp(dim=-1, keepdim=True)
        probs = th.softmax(log_pmf, dim=-1)
        actions = th.multinomial(probs.reshape(-1, probs.shape[-1]), 1, True).T.reshape(probs.shape[:-1])
        log_prob = log_pmf.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    else:
        if isinstance(policy.action_dist, StateDependentNoiseDistribution):
            # SB3's gSDE: the mean plus the latent's noise through the exploration matrices (get_noise), no draw
            std = gsde_std(policy.action_dist, latent_pi, policy.log_std)
            actions = action_head + gsde_noise(policy.action_dist, latent_pi)
        else:
            # SB3's DiagGaussianDistribution: Normal(mean, std).rsample()
            std = th.ones_like(action_head) * policy.log_std.exp()
            noise = th.empty(action_head.shape, dtype=action_head.dtype, device=action_head.device).normal_()
            actions = action_head + noise * std
        # Normal(mean, std).log_prob(actions), summed over the dimensions
        log_prob = _sum_action_dimensions(
            -((actions - action_head) ** 2) / (2 * std**2) - std.log() - math.log(math.sqrt(2 * math.pi))
        )
    return actions.reshape((-1, *policy.action_space.shape)), values, log_prob  # type: ignore[misc]


# The lean evaluation of sb3-contrib's maskable policies, with the rollout buffer's masks.

MASKED_LOGIT = -1e8
"""The logit sb3-contrib's ``MaskableCategorical`` gives an invalid action."""


def has_lean_masked_evaluation(policy: object) -> bool:
    """
    Whether :func:`lean_masked_evaluate_actions` computes ``policy.evaluate_actions(obs, actions, action_masks)``: a
    ``MaskableActorCriticPolicy`` with sb3-contrib's own evaluation and masked (multi-)categorical distribution.
    """
    return (
        isinstance(policy, MaskableActorCriticPolicy)
        and type(policy).evaluate_actions is MaskableActorCriticPolicy.evaluate_actions
        and type(policy)._get_action_dist_from_latent is MaskableActorCriticPolicy._get_action_dist_from_latent
        and type(policy.action_dist) in (MaskableCategoricalDistribution, MaskableMultiCategoricalDistribution)
    )


def masked_action_dims(policy: MaskableActorCriticPolicy) -> tuple[int, ...]:
    """The number of actions of each component of a maskable policy's (multi-)categorical distribution, as Python
    integers (a multi-discrete space holds numpy ones, which ``torch.compile`` cannot trace)."""
    action_dist = policy.action_dist
    if isinstance(action_dist, MaskableCategoricalDistribution):
        return (int(action_dist.action_dim),)
    return tuple(int(dim) for dim in cast(MaskableMultiCategoricalDistribution, action_dist).action_dims)


def _masked_categoricals(
    action_dims: Sequence[int], action_logits: th.Tensor, actions: th.Tensor, action_masks: th.Tensor
) -> tuple[th.Tensor, list[tuple[th.Tensor, th.Tensor]]]:
    """The log-probabilities of ``actions`` (summed over a multi-categorical's components), and each component's
    masked normalized logits with its masks."""
    dims = list(action_dims)
    logits = th.split(action_logits.view(-1, sum(dims)), dims, dim=1)
    masks = th.split(action_masks.to(th.bool).view(-1, sum(dims)), dims, dim=1)
    components = []
    log_probs = []
    for component_logits, component_masks, component_actions in zip(
        logits, masks, th.unbind(actions.view(-1, len(dims)), dim=1), strict=True
    ):
        # MaskableCategorical: Categorical(logits) normalizes, the mask sets -1e8, Categorical normalizes again
        normalized = component_logits - component_logits.logsumexp(dim=-1, keepdim=True)
        masked_logit = th.tensor(MASKED_LOGIT, dtype=normalized.dtype, device=normalized.device)
        log_pmf, log_prob = categorical_log_prob(th.where(component_masks, normalized, masked_logit), component_actions)
        components.append((log_pmf, component_masks))
        log_probs.append(log_prob)
    if len(dims) == 1:
        return log_probs[0], components
    return th.stack(log_probs, dim=1).sum(dim=1), components


def _masked_entropy(components: list[tuple[th.Tensor, th.Tensor]]) -> th.Tensor:
    # MaskableCategorical.entropy: the masked actions contribute nothing
    entropies = []
    for log_pmf, masks in components:
        p_log_p = log_pmf * th.softmax(log_pmf, dim=-1)
        entropies.append(-th.where(masks, p_log_p, th.tensor(0.0, device=log_pmf.device)).sum(-1))
    return entropies[0] if len(entropies) == 1 else th.stack(entropies, dim=1).sum(dim=1)


def lean_masked_evaluate_actions(
    policy: MaskableActorCriticPolicy,
    obs: PyTorchObs,
    actions: th.Tensor,
    action_masks: th.Tensor,
    action_dims: Sequence[int],
    plan: ObservationPlan | None = None,
) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    """
    ``policy.evaluate_actions(obs, actions, action_masks)`` for a policy where :func:`has_lean_masked_evaluation`,
    without building the distribution.

    :param action_dims: :func:`masked_action_dims` of ``policy``
    :param plan: the policy's :data:`ObservationPlan`
    """
    latent_pi, latent_vf = policy_latents(policy, obs, plan)
    log_prob, components = _masked_categoricals(action_dims, policy.action_net(latent_pi), actions, action_masks)
    values = policy.value_net(latent_vf)
    return values, log_prob, _masked_entropy(components)


def lean_masked_action_log_prob(
    policy: MaskableActorCriticPolicy,
    obs: PyTorchObs,
    actions: th.Tensor,
    action_masks: th.Tensor,
    action_dims: Sequence[int],
    plan: ObservationPlan | None = None,
) -> th.Tensor:
    """``policy.get_distribution(obs, action_masks).log_prob(actions)`` where :func:`has_lean_masked_evaluation`."""
    action_logits = policy.action_net(policy.mlp_extractor.forward_actor(actor_features(policy, obs, plan)))
    return _masked_categoricals(action_dims, action_logits, actions, action_masks)[0]
