"""
The policies build their optimizer as SB3's do: ``optimizer_kwargs`` as given (SB3's ``eps=1e-5`` default for Adam),
torch choosing the step's implementation (foreach on CUDA, single tensors on CPU); a user's choice is kept, and
nothing rewrites an optimizer during training.
"""

import pytest
import torch as th
from sb3_contrib.common.envs import InvalidActionEnvDiscrete
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

from sb3_ewma import PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA


def _network() -> th.nn.Module:
    th.manual_seed(0)
    return th.nn.Sequential(th.nn.Linear(4, 64), th.nn.Tanh(), th.nn.Linear(64, 64), th.nn.Tanh(), th.nn.Linear(64, 3))


def settings(group: dict) -> dict:
    return {key: value for key, value in group.items() if key != "params"}


@pytest.mark.parametrize("optimizer_class", [th.optim.Adam, th.optim.AdamW])
def test_the_foreach_step_a_user_may_choose_on_cpu_is_the_single_tensor_step_bit_for_bit(optimizer_class: type) -> None:
    # what the performance guide suggests (optimizer_kwargs=dict(eps=1e-5, foreach=True)): the same numbers, faster
    networks = [_network(), _network()]
    optimizers = [
        optimizer_class(networks[0].parameters(), lr=1e-2, eps=1e-5, foreach=True),
        optimizer_class(networks[1].parameters(), lr=1e-2, eps=1e-5),
    ]
    th.manual_seed(2)
    for _ in range(50):
        x = th.randn(64, 4)
        for network, optimizer in zip(networks, optimizers, strict=True):
            optimizer.zero_grad()
            network(x).square().mean().backward()
            optimizer.step()
    moved = [not th.equal(p, q) for p, q in zip(networks[0].parameters(), _network().parameters(), strict=True)]
    assert all(moved)
    for mine, reference in zip(networks[0].parameters(), networks[1].parameters(), strict=True):
        assert th.equal(mine, reference)


@pytest.mark.parametrize("model_class", [PPO_EWMA, PPG_EWMA])
def test_the_packages_policies_build_their_optimizer_as_sb3s(tmp_path, model_class) -> None:
    model = model_class("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, seed=0, device="cpu")
    sb3 = PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, seed=0, device="cpu")
    # SB3's Adam default (eps), nothing added; torch chooses the implementation of the step (foreach: None)
    assert model.policy.optimizer_kwargs == sb3.policy.optimizer_kwargs == {"eps": 1e-5}
    assert settings(model.policy.optimizer.param_groups[0]) == settings(sb3.policy.optimizer.param_groups[0])
    assert model.policy.optimizer.param_groups[0]["foreach"] is None
    model.learn(64)
    model.save(tmp_path / "model")
    loaded = model_class.load(tmp_path / "model", env=model.get_env(), device="cpu")
    assert loaded.policy.optimizer_kwargs == {"eps": 1e-5} and loaded.policy.optimizer.param_groups[0]["foreach"] is None
    # SB3's own load of the file gets SB3's optimizer settings
    if model_class is PPO_EWMA:
        opened = PPO.load(tmp_path / "model", env=model.get_env(), device="cpu")
        assert settings(opened.policy.optimizer.param_groups[0]) == settings(sb3.policy.optimizer.param_groups[0])


@pytest.mark.parametrize("model_class", [PPO_EWMA, PPG_EWMA])
def test_a_users_optimizer_kwargs_win_and_are_left_as_they_are(model_class) -> None:
    optimizer_kwargs = {"eps": 1e-7, "foreach": True}
    policy_kwargs = {"optimizer_kwargs": optimizer_kwargs}
    model = model_class("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, policy_kwargs=policy_kwargs, device="cpu")
    groups_before = [settings(group) for group in model.policy.optimizer.param_groups]
    assert groups_before[0]["foreach"] is True and groups_before[0]["eps"] == 1e-7
    model.learn(64)
    # nothing rewrites the optimizer during training, nor the user's dicts
    assert [settings(group) for group in model.policy.optimizer.param_groups] == groups_before
    assert optimizer_kwargs == {"eps": 1e-7, "foreach": True} and policy_kwargs == {"optimizer_kwargs": optimizer_kwargs}


def test_sb3_contrib_policies_build_their_optimizer_as_sb3_contrib() -> None:
    # sb3-contrib's policies (MaskablePPO_EWMA's, RecurrentPPO_EWMA's) build their optimizer as sb3-contrib does
    env = make_vec_env(lambda: InvalidActionEnvDiscrete(dim=10, n_invalid_actions=5), n_envs=1)
    model = MaskablePPO_EWMA("MlpPolicy", env, n_steps=32, batch_size=32, device="cpu")
    group = settings(model.policy.optimizer.param_groups[0])
    assert group["foreach"] is None
    model.learn(64)
    assert settings(model.policy.optimizer.param_groups[0]) == group
