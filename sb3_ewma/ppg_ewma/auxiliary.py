"""
The pieces of PPG's auxiliary phase (Cobbe et al. 2020, section 3; the phase itself is ``PPG._auxiliary_phase``):
``pi_old`` stored on the auxiliary buffer, and the joint loss ``0.5 * MSE(aux value, V_targ) + beta_clone *
KL[pi_old, pi]`` plus the value loss ``0.5 * MSE(V, V_targ)``.
"""

import numpy as np
import torch as th
from torch.nn import functional as F

from sb3_ewma.common.distributions import distribution_parameters, kl_from_parameters
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
