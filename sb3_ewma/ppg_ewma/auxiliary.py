"""
PPG's auxiliary phase (Cobbe et al. 2020, section 3): ``pi_old`` stored on the auxiliary buffer, then ``n_aux_epochs``
epochs of the joint loss ``0.5 * MSE(aux value, V_targ) + beta_clone * KL[pi_old, pi]`` plus the value loss
``0.5 * MSE(V, V_targ)``, with the auxiliary optimizer.
"""

import time
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.utils import update_learning_rate
from torch.nn import functional as F

from sb3_ewma.common.decoupled.objective import mean_of
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


def auxiliary_phase(model: Any) -> None:
    """
    The auxiliary phase of ``model`` (a :class:`~sb3_ewma.ppg_ewma.PPG_EWMA`): ``n_aux_epochs`` epochs over its
    auxiliary buffer, each minibatch's gradient accumulated over micro-batches of ``aux_micro_batch_size`` rows and
    applied by the model's optimizer step (gradient averaging under data-parallel training, clipping); its logs under
    ``aux/``.
    """
    start = time.perf_counter()
    buffer = model.aux_buffer
    assert buffer is not None
    model._compute_old_policy()
    # Switch to train mode (this affects batch norm / dropout)
    model.policy.set_training_mode(True)
    learning_rate = model.aux_lr_schedule(model._current_progress_remaining)
    update_learning_rate(model.aux_optimizer, learning_rate)

    stats: dict[str, list[th.Tensor]] = {"aux_value_loss": [], "clone_kl": [], "value_loss": [], "loss": []}
    n_steps = 0
    for _ in range(model.n_aux_epochs):
        for minibatch in buffer.minibatch_indices(model.aux_batch_size, model._aux_rollout_length):
            model.aux_optimizer.zero_grad()
            for start_idx in range(0, len(minibatch), model.aux_micro_batch_size):
                indices = minibatch[start_idx : start_idx + model.aux_micro_batch_size]
                with model.training_precision.forward(model.device):
                    losses = auxiliary_losses(model.policy, buffer, indices, model.beta_clone)
                # the minibatch loss is the mean over its samples: weight each micro-batch by its share
                (losses[-1] * (len(indices) / len(minibatch))).backward()
                for key, value in zip(stats, losses):
                    stats[key].append(value.detach())
            model._apply_gradients(model.aux_optimizer)
            n_steps += 1

    model.n_aux_phases += 1
    for key, history in stats.items():
        model.logger.record(f"aux/{key}", mean_of(history))
    model.logger.record("aux/learning_rate", learning_rate)
    model.logger.record("aux/n_updates", n_steps)
    model.logger.record("aux/n_samples", buffer.size)
    model.logger.record("aux/n_phases", model.n_aux_phases)
    model.logger.record("time/aux_phase_s", time.perf_counter() - start)
