"""
The optimizer step in foreach calls gives SB3's numbers bit for bit, chosen where the package's policies build their
optimizer (``optimizer_kwargs``), never by rewriting an optimizer during training.
"""

import pytest
import torch as th
from sb3_contrib.common.envs import InvalidActionEnvDiscrete
from stable_baselines3.common.env_util import make_vec_env

from sb3_ewma import PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA
from sb3_ewma.common.optim import with_foreach_default


def _network() -> th.nn.Module:
    th.manual_seed(0)
    return th.nn.Sequential(th.nn.Linear(4, 64), th.nn.Tanh(), th.nn.Linear(64, 64), th.nn.Tanh(), th.nn.Linear(64, 3))


@pytest.mark.parametrize("max_norm", [0.5, 1e6, float("inf")])
def test_foreach_clipping_equals_the_default_clipping(max_norm: float) -> None:
    # what DecoupledAlgorithm._apply_gradients calls, against SB3's call (torch's choice: single tensors on CPU)
    ours, theirs = _network(), _network()
    th.manual_seed(1)
    x = th.randn(32, 4)
    for network in (ours, theirs):
        network(x).square().sum().backward()
    ours[2].bias.grad = None  # a parameter without gradient is skipped
    theirs[2].bias.grad = None
    norm = th.nn.utils.clip_grad_norm_(ours.parameters(), max_norm, foreach=True)
    expected = th.nn.utils.clip_grad_norm_(theirs.parameters(), max_norm)
    assert th.equal(norm, expected)
    for mine, reference in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert (mine.grad is None and reference.grad is None) or th.equal(mine.grad, reference.grad)


@pytest.mark.parametrize("optimizer_class", [th.optim.Adam, th.optim.AdamW])
def test_foreach_step_is_bit_for_bit_the_single_tensor_step(optimizer_class: type) -> None:
    networks = [_network(), _network()]
    optimizers = [
        optimizer_class(network.parameters(), lr=1e-2, **with_foreach_default(optimizer_class, {"eps": 1e-5}))
        for network in networks[:1]
    ] + [optimizer_class(networks[1].parameters(), lr=1e-2, eps=1e-5)]
    assert optimizers[0].param_groups[0]["foreach"] is True and optimizers[1].param_groups[0]["foreach"] is None
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


def test_with_foreach_default_keeps_explicit_choices_and_other_optimizers() -> None:
    for kwargs in ({"foreach": False}, {"fused": True}, {"differentiable": True}, {"foreach": None}):
        given = dict(kwargs)
        assert with_foreach_default(th.optim.Adam, given) == kwargs and given == kwargs
    assert with_foreach_default(th.optim.SGD, {"momentum": 0.9}) == {"momentum": 0.9}
    given = {"eps": 1e-5, "betas": (0.8, 0.9)}
    chosen = with_foreach_default(th.optim.AdamW, given)
    assert chosen == {"eps": 1e-5, "betas": (0.8, 0.9), "foreach": True} and "foreach" not in given


@pytest.mark.parametrize("model_class", [PPO_EWMA, PPG_EWMA])
def test_the_packages_policies_choose_foreach_in_optimizer_kwargs(tmp_path, model_class) -> None:
    model = model_class("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, seed=0, device="cpu")
    # SB3's Adam default (eps) is kept; the choice is in the policy's optimizer_kwargs, which a user sees
    assert model.policy.optimizer_kwargs == {"eps": 1e-5, "foreach": True}
    assert model.policy.optimizer.param_groups[0]["foreach"] is True
    assert model.policy.optimizer.param_groups[0]["eps"] == 1e-5
    model.save(tmp_path / "model")
    loaded = model_class.load(tmp_path / "model", env=model.get_env(), device="cpu")
    assert loaded.policy.optimizer.param_groups[0]["foreach"] is True


@pytest.mark.parametrize("model_class", [PPO_EWMA, PPG_EWMA])
def test_a_users_optimizer_kwargs_win_and_are_left_as_they_are(model_class) -> None:
    optimizer_kwargs = {"eps": 1e-7, "foreach": False}
    policy_kwargs = {"optimizer_kwargs": optimizer_kwargs}
    model = model_class("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, policy_kwargs=policy_kwargs, device="cpu")
    groups_before = [{k: v for k, v in group.items() if k != "params"} for group in model.policy.optimizer.param_groups]
    assert groups_before[0]["foreach"] is False and groups_before[0]["eps"] == 1e-7
    model.learn(64)
    # nothing rewrites the optimizer during training, nor the user's dicts
    groups_after = [{k: v for k, v in group.items() if k != "params"} for group in model.policy.optimizer.param_groups]
    assert groups_after == groups_before
    assert optimizer_kwargs == {"eps": 1e-7, "foreach": False} and policy_kwargs == {"optimizer_kwargs": optimizer_kwargs}


def test_sb3_contrib_policies_build_their_optimizer_as_sb3_contrib() -> None:
    # sb3-contrib's policies (MaskablePPO_EWMA's, RecurrentPPO_EWMA's) build their optimizer as sb3-contrib does
    env = make_vec_env(lambda: InvalidActionEnvDiscrete(dim=10, n_invalid_actions=5), n_envs=1)
    model = MaskablePPO_EWMA("MlpPolicy", env, n_steps=32, batch_size=32, device="cpu")
    group = {k: v for k, v in model.policy.optimizer.param_groups[0].items() if k != "params"}
    assert group["foreach"] is None
    model.learn(64)
    assert {k: v for k, v in model.policy.optimizer.param_groups[0].items() if k != "params"} == group
