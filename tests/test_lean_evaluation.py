"""The lean evaluation of the policy in train(): SB3's (and sb3-contrib's masked) evaluate_actions' values and
gradients, bit for bit."""

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.envs import IdentityEnvMultiDiscrete, SimpleMultiObsEnv
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_ewma import PPO_EWMA, MaskablePPO_EWMA
from sb3_ewma.common.checks import NonFiniteError
from sb3_ewma.common.decoupled import algorithm as algorithm_module
from sb3_ewma.common.decoupled import proximal as proximal_module
from sb3_ewma.common.distributions import (
    has_lean_evaluation,
    has_lean_masked_evaluation,
    lean_action_log_prob,
    lean_evaluate_actions,
    lean_masked_action_log_prob,
    lean_masked_evaluate_actions,
    masked_action_dims,
)
from sb3_ewma.ppg_ewma import PPG_EWMA


def _perturbed_model(algorithm, env, policy="MlpPolicy", **kwargs):
    model = algorithm(policy, env, n_steps=64, batch_size=32, seed=0, device="cpu", **kwargs)
    with th.no_grad():
        for parameter in model.policy.parameters():  # away from the initialization (log_std = 0, zero heads)
            parameter.add_(0.3 * th.randn_like(parameter))
    return model


def _observations(space, n):
    if isinstance(space, spaces.Dict):
        return {key: _observations(subspace, n) for key, subspace in space.spaces.items()}
    return th.as_tensor(np.stack([space.sample() for _ in range(n)])).float()


def _evaluation_and_gradients(policy, evaluate, obs, actions):
    policy.optimizer.zero_grad()
    values, log_prob, entropy = evaluate(obs, actions)
    # every output reaches the loss, with distinct weights
    (values.square().mean() - 0.7 * log_prob.exp().mean() - 0.3 * entropy.mean()).backward()
    gradients = [parameter.grad.clone() for parameter in policy.parameters() if parameter.grad is not None]
    return [values.detach(), log_prob.detach(), entropy.detach()], gradients


def _assert_lean_evaluation_is_sb3s(policy, obs, actions) -> None:
    """The lean evaluation's values, log-probabilities, entropies and gradients are SB3's evaluate_actions', bit for bit."""
    lean, lean_gradients = _evaluation_and_gradients(policy, lambda o, a: lean_evaluate_actions(policy, o, a), obs, actions)
    reference, reference_gradients = _evaluation_and_gradients(policy, policy.evaluate_actions, obs, actions)
    assert [t.shape for t in lean] == [t.shape for t in reference] == [(64, 1), (64,), (64,)]
    assert all(th.equal(first, second) for first, second in zip(lean, reference, strict=True))
    assert len(lean_gradients) == len(reference_gradients) > 0
    assert all(th.equal(first, second) for first, second in zip(lean_gradients, reference_gradients, strict=True))


@pytest.mark.parametrize("algorithm", [PPO_EWMA, PPG_EWMA])
@pytest.mark.parametrize(
    "env, kwargs",
    [
        ("CartPole-v1", {}),
        ("CartPole-v1", {"policy_kwargs": {"share_features_extractor": False}}),
        ("Pendulum-v1", {}),
        ("Pendulum-v1", {"policy_kwargs": {"net_arch": [8]}}),
        (SimpleMultiObsEnv(random_start=False), {"policy": "MultiInputPolicy"}),
    ],
)
def test_lean_evaluation_equals_sb3s_bit_for_bit(algorithm, env, kwargs):
    model = _perturbed_model(algorithm, env, **kwargs)
    policy = model.policy
    assert has_lean_evaluation(policy)
    obs = _observations(model.observation_space, 64)
    actions = th.as_tensor(np.stack([model.action_space.sample() for _ in range(64)]))
    if actions.dim() == 1:
        actions = actions.long()
    _assert_lean_evaluation_is_sb3s(policy, obs, actions)


@pytest.mark.parametrize("algorithm", [PPO_EWMA, PPG_EWMA])
@pytest.mark.parametrize(
    "policy_kwargs", [{}, {"full_std": False}, {"use_expln": True}, {"net_arch": [8]}, {"share_features_extractor": False}]
)
def test_lean_gsde_evaluation_equals_sb3s_bit_for_bit(algorithm, policy_kwargs):
    """gSDE (what the compiled training step evaluates leanly): the same values, log-probabilities, entropies and
    gradients as SB3's StateDependentNoiseDistribution, its features detached from the noise's variance as SB3's."""
    model = _perturbed_model(algorithm, "Pendulum-v1", use_sde=True, policy_kwargs=policy_kwargs)
    policy = model.policy
    assert has_lean_evaluation(policy)
    obs = _observations(model.observation_space, 64)
    actions = th.as_tensor(np.stack([model.action_space.sample() for _ in range(64)]))
    _assert_lean_evaluation_is_sb3s(policy, obs, actions)
    with th.no_grad():
        expected = policy.get_distribution(obs).log_prob(actions)
    th.testing.assert_close(lean_action_log_prob(policy, obs, actions), expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    "env, kwargs",
    [("Pendulum-v1", {"use_sde": True, "policy_kwargs": {"squash_output": True}}), (IdentityEnvMultiDiscrete(3), {})],
)
def test_other_distributions_take_sb3s_evaluation(env, kwargs):
    model = PPO_EWMA("MlpPolicy", env, n_steps=64, batch_size=32, seed=0, device="cpu", **kwargs)
    assert not has_lean_evaluation(model.policy)


class _CountingPolicy(ActorCriticPolicy):
    calls = 0

    def evaluate_actions(self, obs, actions):
        type(self).calls += 1
        return super().evaluate_actions(obs, actions)


def test_a_policy_that_overrides_evaluate_actions_is_called_in_train():
    _CountingPolicy.calls = 0
    model = PPO_EWMA(_CountingPolicy, "CartPole-v1", n_steps=32, batch_size=16, n_epochs=2, seed=0, device="cpu")
    assert not has_lean_evaluation(model.policy)
    model.learn(32)
    assert _CountingPolicy.calls == 2 * 2  # 2 epochs of 2 minibatches


@pytest.mark.parametrize("kwargs", [{}, {"use_sde": True, "sde_sample_freq": 4}])
def test_train_runs_the_lean_evaluation_with_sb3s_numbers(monkeypatch, kwargs):
    # one iteration with the lean evaluation and one with SB3's, from the same state: the same parameters after it
    def trained() -> list[th.Tensor]:
        model = _pendulum_model(kwargs)
        model.learn(64)
        return [parameter.detach().clone() for parameter in model.policy.parameters()]

    lean = trained()
    monkeypatch.setattr(algorithm_module, "has_lean_evaluation", lambda policy, **_: False)
    monkeypatch.setattr(proximal_module, "has_lean_log_prob", lambda policy: False)  # the proximal pass too
    reference = trained()
    initial = [parameter.detach().clone() for parameter in _pendulum_model(kwargs).policy.parameters()]
    assert not all(th.equal(first, second) for first, second in zip(lean, initial, strict=True))
    assert all(th.equal(first, second) for first, second in zip(lean, reference, strict=True))


def _pendulum_model(kwargs: dict) -> PPO_EWMA:
    return PPO_EWMA("MlpPolicy", "Pendulum-v1", n_steps=64, batch_size=32, n_epochs=2, seed=3, device="cpu", **kwargs)


def test_a_nan_in_the_policys_output_stops_train_before_the_step():
    # torch's argument validation does not run on the lean path: the gradient's finite check stops the NaN instead
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=16, seed=0, device="cpu")
    model.learn(32)  # a filled buffer
    assert has_lean_evaluation(model.policy)
    with th.no_grad():
        model.policy.action_net.bias[0] = float("nan")
    before = [parameter.detach().clone() for parameter in model.policy.parameters()]
    with pytest.raises(NonFiniteError, match="gradient"):
        model.train()
    after = list(model.policy.parameters())
    assert all(th.equal(first.nan_to_num(), second.detach().nan_to_num()) for first, second in zip(before, after, strict=True))


def _assert_rollout_step_is_sb3s(policy, obs) -> tuple[th.Tensor, ...]:
    """The policy's forward (the rollout's step) gives SB3's ActorCriticPolicy.forward's actions, values and log-probs
    bit for bit, and leaves torch's generator where SB3's does (the next draw is the same); returns them."""
    with th.no_grad():
        th.manual_seed(3)
        expected = ActorCriticPolicy.forward(policy, obs)
        expected_next = th.rand(1)
        th.manual_seed(3)
        lean = policy(obs)
        lean_next = th.rand(1)
    for value, reference in zip(lean, expected, strict=True):
        assert value.shape == reference.shape and value.dtype == reference.dtype
        assert th.equal(value, reference)
    assert th.equal(lean_next, expected_next)
    return lean


@pytest.mark.parametrize("algorithm", [PPO_EWMA, PPG_EWMA])
@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1", SimpleMultiObsEnv(random_start=False)])
def test_the_rollout_step_equals_sb3s_forward_bit_for_bit(algorithm, env):
    """The policies' forward (the rollout's step): SB3's ActorCriticPolicy.forward's actions, values and log-probs, and
    the same draws of torch's generator (the next draw after it is the same too)."""
    policy = "MultiInputPolicy" if isinstance(env, SimpleMultiObsEnv) else "MlpPolicy"
    model = _perturbed_model(algorithm, env, policy)
    lean = _assert_rollout_step_is_sb3s(model.policy, _observations(model.observation_space, 16))
    assert lean[0].shape[0] == 16


@pytest.mark.parametrize("algorithm", [PPO_EWMA, PPG_EWMA])
@pytest.mark.parametrize("policy_kwargs", [{}, {"full_std": False}, {"use_expln": True}])
@pytest.mark.parametrize("rows", [1, 4])
def test_the_gsde_rollout_step_equals_sb3s_forward_bit_for_bit(algorithm, policy_kwargs, rows):
    """gSDE's rollout step: SB3's forward's actions (the mean plus the noise of the exploration matrices, one or one per
    environment), values and log-probs, bit for bit, drawing nothing from torch's generator."""
    model = _perturbed_model(algorithm, "Pendulum-v1", use_sde=True, policy_kwargs=policy_kwargs)
    model.policy.reset_noise(rows)
    lean = _assert_rollout_step_is_sb3s(model.policy, _observations(model.observation_space, rows))
    assert [value.shape for value in lean] == [(rows, 1), (rows, 1), (rows,)]


def test_other_rollout_steps_are_sb3s(monkeypatch):
    """Deterministic actions and the distributions without a lean form go through SB3's forward."""
    from sb3_ewma.common import policies

    def unexpected(*args):
        raise AssertionError("the lean step was used")

    monkeypatch.setattr(policies, "lean_forward", unexpected)
    model = _perturbed_model(PPO_EWMA, IdentityEnvMultiDiscrete(3))
    obs = _observations(model.observation_space, 4)
    with th.no_grad():
        assert model.policy(obs)[0].shape == (4, 2)
        cartpole = _perturbed_model(PPO_EWMA, "CartPole-v1")
        assert cartpole.policy(_observations(cartpole.observation_space, 4), deterministic=True)[0].shape == (4,)


def _masked_model(action_space: spaces.Space, **policy_kwargs) -> MaskablePPO_EWMA:
    env = DummyVecEnv([lambda: _MaskedIdentity(action_space)])
    model = MaskablePPO_EWMA("MlpPolicy", env, n_steps=64, batch_size=32, seed=0, device="cpu", policy_kwargs=policy_kwargs)
    with th.no_grad():
        for parameter in model.policy.parameters():  # away from the initialization (zero heads)
            parameter.add_(0.3 * th.randn_like(parameter))
    return model


class _MaskedIdentity(gym.Env):
    """Observations of 4 numbers, ``action_space`` actions, and masks with at least one valid action per component."""

    def __init__(self, action_space: spaces.Space) -> None:
        self.observation_space = spaces.Box(-1, 1, (4,))
        self.action_space = action_space

    def reset(self, *, seed=None, options=None):
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}

    def action_masks(self) -> np.ndarray:
        return np.ones(sum(_action_dims(self.action_space)), dtype=bool)


def _action_dims(space: spaces.Space) -> list[int]:
    return [int(space.n)] if isinstance(space, spaces.Discrete) else [int(n) for n in space.nvec]


def _random_masks(space: spaces.Space, actions: th.Tensor, generator: th.Generator) -> th.Tensor:
    """Random masks where the taken action of each component stays valid."""
    masks = []
    for component, n in enumerate(_action_dims(space)):
        component_masks = th.rand((len(actions), n), generator=generator) < 0.5
        taken = actions.view(len(actions), -1)[:, component].long()
        component_masks[th.arange(len(actions)), taken] = True
        masks.append(component_masks)
    return th.cat(masks, dim=1).float()  # stored as float32 in the rollout buffer


@pytest.mark.parametrize(
    "action_space, policy_kwargs",
    [
        (spaces.Discrete(6), {}),
        (spaces.Discrete(6), {"share_features_extractor": False}),
        (spaces.MultiDiscrete([3, 5, 2]), {}),
    ],
)
def test_lean_masked_evaluation_equals_sb3_contribs_bit_for_bit(action_space, policy_kwargs):
    model = _masked_model(action_space, **policy_kwargs)
    policy = model.policy
    assert has_lean_masked_evaluation(policy) and not has_lean_evaluation(policy)
    generator = th.Generator().manual_seed(0)
    obs = th.rand((64, 4), generator=generator) * 2 - 1
    actions = th.as_tensor(np.stack([action_space.sample() for _ in range(64)]))
    masks = _random_masks(action_space, actions, generator)
    if actions.dim() == 1:
        actions = actions.long()
    lean, lean_gradients = _evaluation_and_gradients(
        policy, lambda o, a: lean_masked_evaluate_actions(policy, o, a, masks, masked_action_dims(policy)), obs, actions
    )
    reference, reference_gradients = _evaluation_and_gradients(
        policy, lambda o, a: policy.evaluate_actions(o, a, action_masks=masks), obs, actions
    )
    assert [t.shape for t in lean] == [t.shape for t in reference] == [(64, 1), (64,), (64,)]
    assert all(th.equal(first, second) for first, second in zip(lean, reference, strict=True))
    assert len(lean_gradients) == len(reference_gradients) > 0
    assert all(th.equal(first, second) for first, second in zip(lean_gradients, reference_gradients, strict=True))
    # the actor's path alone: the proximal policy's log-probabilities
    with th.no_grad():
        expected = policy.get_distribution(obs, action_masks=masks).log_prob(actions)
        assert th.equal(lean_masked_action_log_prob(policy, obs, actions, masks, masked_action_dims(policy)), expected)
    # the masks matter: without them, other numbers
    assert not th.equal(
        lean_masked_evaluate_actions(policy, obs, actions, th.ones_like(masks), masked_action_dims(policy))[1], lean[1]
    )


def test_the_masked_bernoulli_takes_sb3_contribs_evaluation():
    model = MaskablePPO_EWMA("MlpPolicy", DummyVecEnv([lambda: _MaskedIdentity(spaces.MultiBinary(3))]), n_steps=64)
    assert not has_lean_masked_evaluation(model.policy)
