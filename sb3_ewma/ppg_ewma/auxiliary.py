"""
The pieces of PPG's auxiliary phase (Cobbe et al. 2020, section 3; the phase itself is ``PPG._auxiliary_phase``):
``pi_old`` stored on the auxiliary buffer, and the joint loss ``0.5 * MSE(aux value, V_targ) + beta_clone *
KL[pi_old, pi]`` plus the value loss ``0.5 * MSE(V, V_targ)``.
"""

import numpy as np
import torch as th
from stable_baselines3.common.distributions import CategoricalDistribution, StateDependentNoiseDistribution
from stable_baselines3.common.type_aliases import PyTorchObs
from torch.nn import functional as F

from sb3_ewma.common.distributions import (
    ObservationPlan,
    distribution_parameters,
    gsde_std,
    kl_from_parameters,
    policy_latents,
)
from sb3_ewma.common.precision import autocast
from sb3_ewma.ppg_ewma.buffers import AuxiliaryBuffer
from sb3_ewma.ppg_ewma.policies import PPGPolicy


@th.no_grad()
def compute_old_policy(policy: PPGPolicy, buffer: AuxiliaryBuffer, micro_batch_size: int) -> None:
    """Store ``pi_old``, the policy's action distribution on every state of ``buffer``, before the phase."""
    policy.set_training_mode(False)
    for indices in buffer.sequential_indices(micro_batch_size):
        distribution = policy.get_distribution(buffer.observations(indices))
        buffer.store_old_policy(indices, distribution_parameters(distribution))


def auxiliary_losses(
    policy: PPGPolicy, buffer: AuxiliaryBuffer, indices: np.ndarray, beta_clone: float
) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
    """
    The auxiliary phase's losses on the rows ``indices`` of ``buffer``: the auxiliary value loss, the behavioral
    cloning KL ``KL[pi_old, pi]``, the value loss, and the joint loss they make.
    """
    distribution, aux_values, values = policy.forward_auxiliary(buffer.observations(indices))
    targets = buffer.value_targets(indices)
    aux_value_loss = 0.5 * F.mse_loss(aux_values.flatten(), targets)
    clone_kl = kl_from_parameters(buffer.old_policy(indices), distribution).mean()
    value_loss = 0.5 * F.mse_loss(values.flatten(), targets)
    return aux_value_loss, clone_kl, value_loss, aux_value_loss + beta_clone * clone_kl + value_loss


def lean_auxiliary_losses(
    policy: PPGPolicy,
    observations: PyTorchObs,
    value_targets: th.Tensor,
    old_policy: list[th.Tensor],
    beta_clone: float,
    autocast_dtype: th.dtype | None = None,
    observation_plan: ObservationPlan | None = None,
) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
    """
    :func:`auxiliary_losses` from the rows' observations, value targets and stored ``pi_old``, for a policy with a
    categorical, diagonal Gaussian or gSDE action distribution (``has_lean_evaluation``), without building
    distributions: a pure function, which ``compile_step`` compiles::

        loss = 0.5 * MSE(aux value, V_targ) + beta_clone * KL[pi_old, pi] + 0.5 * MSE(V, V_targ)

    :param old_policy: ``pi_old``'s stored parameters: the normalized logits of a categorical, or the mean and the
        standard deviation of a Gaussian
    :param observation_plan: the policy's :data:`~sb3_ewma.common.distributions.ObservationPlan` (compiled)
    :return: the auxiliary value loss, the cloning KL, the value loss, and the joint loss
    """
    device_type = value_targets.device.type
    with autocast(device_type, autocast_dtype):
        latent_pi, latent_vf = policy_latents(policy, observations, observation_plan)
        action_head = policy.action_net(latent_pi)
        aux_values = policy.aux_value_net(latent_pi)
        values = policy.value_net(latent_vf)
    action_head, aux_values, values = action_head.float(), aux_values.float(), values.float()
    if isinstance(policy.action_dist, CategoricalDistribution):
        # KL of categoricals: sum_a p_old(a) (log p_old(a) - log p(a)), terms of p_old(a) = 0 left out, as torch does
        old_log_pmf = old_policy[0]
        old_probs = th.exp(old_log_pmf)
        log_pmf = action_head - action_head.logsumexp(dim=-1, keepdim=True)
        per_action = th.where(old_probs > 0, old_probs * (old_log_pmf - log_pmf), th.zeros_like(log_pmf))
        clone_kl = per_action.sum(dim=-1).mean()
    else:
        # KL of diagonal Gaussians, summed over the action dimensions
        old_mean, old_std = old_policy
        if isinstance(policy.action_dist, StateDependentNoiseDistribution):
            std = gsde_std(policy.action_dist, latent_pi.float(), policy.log_std)
        else:
            std = th.ones_like(action_head) * policy.log_std.exp()
        per_dimension = th.log(std / old_std) + (old_std**2 + (old_mean - action_head) ** 2) / (2 * std**2) - 0.5
        clone_kl = per_dimension.sum(dim=-1).mean()
    aux_value_loss = 0.5 * F.mse_loss(aux_values.flatten(), value_targets)
    value_loss = 0.5 * F.mse_loss(values.flatten(), value_targets)
    return aux_value_loss, clone_kl, value_loss, aux_value_loss + beta_clone * clone_kl + value_loss
