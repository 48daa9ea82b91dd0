"""The terms of one minibatch of the PPO family's ``train()``, computed as ``train()`` computes them, for tests."""

from typing import Any

import torch as th
from gymnasium import spaces

from sb3_ewma.common.decoupled.objective import DecoupledPolicyObjective


def policy_terms(model: Any, rollout_data: Any, objective: DecoupledPolicyObjective) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    """The policy loss, the entropy loss and the values of a minibatch, as ``DecoupledAlgorithm.train()`` has them."""
    actions = rollout_data.actions
    if isinstance(model.action_space, spaces.Discrete):
        actions = rollout_data.actions.long().flatten()
    values, log_prob, entropy, distribution = model._evaluate_policy(rollout_data, actions)
    proximal_log_prob, proximal_distribution = model.proximal.log_prob(
        rollout_data, actions, rollout_data.old_log_prob, model._needs_distributions
    )
    advantages = model.advantage_normalizer.minibatch(rollout_data.advantages)
    policy_loss = objective(
        advantages, log_prob, proximal_log_prob, rollout_data.old_log_prob, distribution, proximal_distribution
    )
    entropy_loss = -th.mean(-log_prob) if entropy is None else -th.mean(entropy)
    return policy_loss, entropy_loss, values.flatten()
