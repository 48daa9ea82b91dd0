"""policy_copy: the copy behind the proximal EWMA and the thread collector's behavior policy."""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.policies import ActorCriticPolicy

from sb3_ewma.common.policies import policy_copy


def trained_once(policy, observation_space, action_space, **evaluate_kwargs):
    """The policy after one optimizer step, so that its distributions hold tensors of an autograd graph."""
    obs = th.as_tensor(np.stack([observation_space.sample() for _ in range(8)]))
    actions = th.as_tensor(np.stack([action_space.sample() for _ in range(8)]))
    values, log_prob, entropy = policy.evaluate_actions(obs, actions, **evaluate_kwargs)
    loss = values.mean() + log_prob.mean() + (0 if entropy is None else entropy.mean())
    policy.optimizer.zero_grad()
    loss.backward()
    policy.optimizer.step()
    return policy, obs


CASES = {
    "gsde": (gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,)), ActorCriticPolicy, {"use_sde": True}),
    "multidiscrete": (gym.spaces.Box(-1, 1, (3,)), gym.spaces.MultiDiscrete([3, 2]), ActorCriticPolicy, {}),
    "masked": (gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(4), MaskableActorCriticPolicy, {}),
}


@pytest.mark.parametrize("case", CASES)
def test_copy_of_a_trained_policy(case):
    observation_space, action_space, policy_class, kwargs = CASES[case]
    th.manual_seed(0)
    policy = policy_class(observation_space, action_space, lambda _: 1e-3, **kwargs)
    evaluate_kwargs = {"action_masks": np.ones((8, 4), dtype=bool)} if case == "masked" else {}
    policy, obs = trained_once(policy, observation_space, action_space, **evaluate_kwargs)
    if case == "gsde":  # the noise matrices are computed from log_std: a plain deepcopy refuses them
        with pytest.raises(RuntimeError, match="deepcopy"):
            copy.deepcopy(policy)

    rng_state = th.get_rng_state()
    copied = policy_copy(policy)
    # no random numbers drawn, no optimizer, evaluation mode, the same parameters in tensors of its own
    assert th.equal(th.get_rng_state(), rng_state)
    assert copied.optimizer is None and policy.optimizer is not None
    assert not copied.training
    for (name, original), (copied_name, parameter) in zip(policy.named_parameters(), copied.named_parameters(), strict=True):
        assert name == copied_name and th.equal(original, parameter)
        assert parameter.data_ptr() != original.data_ptr()
    # it acts as the policy does
    with th.no_grad():
        policy.set_training_mode(False)
        assert th.equal(policy.predict_values(obs), copied.predict_values(obs))
        if case == "gsde":
            assert th.equal(copied.action_dist.exploration_mat, policy.action_dist.exploration_mat)
            assert th.equal(copied.get_distribution(obs).get_actions(), policy.get_distribution(obs).get_actions())
    # and is independent of it
    with th.no_grad():
        next(copied.parameters()).add_(1.0)
    assert not th.equal(next(copied.parameters()), next(policy.parameters()))


class ActivationLog:
    """A forward hook's owner that holds more than the policy (as a user's logger holding the model would)."""

    def __init__(self, model):
        self.model = model
        self.calls = 0

    def record(self, module, inputs, output):
        self.calls += 1


def test_the_copy_leaves_the_modules_hooks_with_the_policy():
    policy = ActorCriticPolicy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), lambda _: 1e-3)
    log = ActivationLog(model=object())
    policy.mlp_extractor.register_forward_hook(log.record)
    policy.register_forward_pre_hook(lambda module, inputs: None)
    copied = policy_copy(policy)
    with th.no_grad():
        copied(th.zeros(1, 3))
    assert log.calls == 0
    assert not copied.mlp_extractor._forward_hooks and not copied._forward_pre_hooks
    with th.no_grad():
        policy(th.zeros(1, 3))
    assert log.calls == 1 and len(policy._forward_pre_hooks) == 1
