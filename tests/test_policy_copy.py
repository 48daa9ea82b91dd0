"""policy_copy: the copy behind the proximal EWMA and the thread collector's behavior policy."""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

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


class Unpicklable:
    def __deepcopy__(self, memo):
        raise TypeError("not copyable")


def test_the_copy_keeps_the_hooks_and_shares_their_outside_owners():
    policy = ActorCriticPolicy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), lambda _: 1e-3)
    log = ActivationLog(model=Unpicklable())
    policy.mlp_extractor.register_forward_hook(log.record)
    copied = policy_copy(policy)
    with th.no_grad():
        copied(th.zeros(1, 3))
    assert log.calls == 1  # the same logger, not a copy of it (nor of what it holds)


class WeightNormExtractor(BaseFeaturesExtractor):
    def __init__(self, observation_space, features_dim: int = 8):
        super().__init__(observation_space, features_dim)
        self.linear = th.nn.utils.weight_norm(th.nn.Linear(observation_space.shape[0], features_dim))

    def forward(self, observations):
        return th.relu(self.linear(observations))


def test_the_copy_computes_the_policy_s_function_after_new_parameters():
    """weight_norm computes the weight in a forward pre-hook: the copy keeps it, so new parameters reach its output."""
    space = gym.spaces.Box(-1, 1, (3,))
    policy = ActorCriticPolicy(space, gym.spaces.Discrete(2), lambda _: 1e-3, features_extractor_class=WeightNormExtractor)
    copied = policy_copy(policy)
    obs = th.as_tensor(np.stack([space.sample() for _ in range(4)]))
    with th.no_grad():
        for original, parameter in zip(policy.parameters(), copied.parameters(), strict=True):
            new = th.randn_like(original)
            original.copy_(new)
            parameter.copy_(new)
        policy.set_training_mode(False)
        assert th.allclose(policy.predict_values(obs), copied.predict_values(obs))
        actions = th.zeros(4, dtype=th.long)
        th.testing.assert_close(policy.get_distribution(obs).log_prob(actions), copied.get_distribution(obs).log_prob(actions))
