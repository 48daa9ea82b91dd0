"""The lean proximal pass: the log-probabilities of the taken actions, bit for bit those of the distribution."""

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch as th
from minibatch import policy_terms
from stable_baselines3.common.envs import IdentityEnvMultiDiscrete
from stable_baselines3.common.policies import ActorCriticPolicy

from sb3_ewma import PPO_EWMA
from sb3_ewma.common.decoupled.objective import DecoupledPolicyObjective
from sb3_ewma.common.decoupled.proximal import proximal_action_log_prob
from sb3_ewma.common.decoupled.step import compile_unsupported
from sb3_ewma.common.distributions import has_lean_log_prob
from sb3_ewma.ppg_ewma import PPG_EWMA

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `benchmarks` is a directory of the repository, not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.timing.proximal_pass import distribution_pass  # noqa: E402


@pytest.mark.parametrize("algorithm", [PPO_EWMA, PPG_EWMA])
@pytest.mark.parametrize(
    "env, kwargs",
    [("CartPole-v1", {}), ("Pendulum-v1", {}), ("Pendulum-v1", {"use_sde": True}), (IdentityEnvMultiDiscrete(3), {})],
)
def test_log_probs_equal_those_of_the_distribution(algorithm, env, kwargs):
    model = algorithm("MlpPolicy", env, n_steps=64, batch_size=32, seed=0, device="cpu", **kwargs)
    proximal = model.proximal_ewma
    with th.no_grad():
        for parameter in proximal.average.parameters():  # away from the initialization (log_std = 0, zero heads)
            parameter.add_(0.3 * th.randn_like(parameter))
    obs = th.as_tensor(np.stack([model.observation_space.sample() for _ in range(64)])).float()
    actions = th.as_tensor(np.stack([model.action_space.sample() for _ in range(64)]))
    if actions.dim() == 1:
        actions = actions.long()
    lean = proximal_action_log_prob(proximal, obs, actions)
    reference = model.proximal.distribution(SimpleNamespace(observations=obs)).log_prob(actions)
    assert lean.shape == reference.shape == (64,)
    assert th.equal(lean, reference)
    assert not lean.requires_grad


class _OwnNoisePolicy(ActorCriticPolicy):
    """gSDE built its own way: the noise's variance from another latent (as SB3's former ``sde_net_arch``)."""

    def _get_action_dist_from_latent(self, latent_pi):
        return self.action_dist.proba_distribution(self.action_net(latent_pi), self.log_std, th.tanh(latent_pi))


class _OwnDistributionPolicy(ActorCriticPolicy):
    def get_distribution(self, obs):
        distribution = super().get_distribution(obs)
        distribution.distribution.loc = distribution.distribution.loc + 1.0
        return distribution


@pytest.mark.parametrize(
    "policy, kwargs",
    [(_OwnNoisePolicy, {"use_sde": True}), (_OwnDistributionPolicy, {}), (_OwnDistributionPolicy, {"use_sde": True})],
)
def test_a_policy_that_builds_its_distribution_its_own_way_takes_it(policy, kwargs):
    """The proximal pass, and the compiled step, follow a policy that overrides how its distribution is made."""
    model = PPO_EWMA(policy, "Pendulum-v1", n_steps=64, batch_size=32, seed=0, device="cpu", **kwargs)
    proximal = model.proximal_ewma
    with th.no_grad():
        for parameter in proximal.average.parameters():
            parameter.add_(0.3 * th.randn_like(parameter))
    obs = th.as_tensor(np.stack([model.observation_space.sample() for _ in range(16)]))
    actions = th.as_tensor(np.stack([model.action_space.sample() for _ in range(16)]))
    with th.no_grad():
        expected = proximal.average.get_distribution(obs).log_prob(actions)
    assert th.equal(proximal_action_log_prob(proximal, obs, actions), expected)
    assert not has_lean_log_prob(model.policy)
    assert "is not one of SB3's" in compile_unsupported(model.policy, model.device, "observations", needs_distributions=False)


def test_policy_loss_unchanged_by_the_lean_pass():
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=64, seed=0, device="cpu")
    model.learn(64)  # a filled buffer, and the EWMA away from the policy
    rollout_data = next(model.rollout_buffer.get(64))
    lean = policy_terms(model, rollout_data, DecoupledPolicyObjective(0.2))
    # the distribution path, as the exact KL takes it (and benchmarks.timing.proximal_pass times it)
    distribution_pass(model)
    reference = policy_terms(model, rollout_data, DecoupledPolicyObjective(0.2))
    for first, second in zip(lean, reference, strict=True):
        assert th.equal(first, second)
