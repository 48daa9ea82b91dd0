"""``sb3_ewma.common.optim``: the optimizer step in foreach calls gives SB3's numbers bit for bit."""

import pytest
import torch as th

from sb3_ewma import PPO_EWMA
from sb3_ewma.common.optim import clip_grad_norm, prefer_foreach


def _network() -> th.nn.Module:
    th.manual_seed(0)
    return th.nn.Sequential(th.nn.Linear(4, 64), th.nn.Tanh(), th.nn.Linear(64, 64), th.nn.Tanh(), th.nn.Linear(64, 3))


@pytest.mark.parametrize("max_norm", [0.5, 1e6, float("inf")])
def test_clip_grad_norm_equals_torch(max_norm: float) -> None:
    ours, theirs = _network(), _network()
    th.manual_seed(1)
    x = th.randn(32, 4)
    for network in (ours, theirs):
        network(x).square().sum().backward()
    ours[2].bias.grad = None  # a parameter without gradient is skipped, as torch does
    theirs[2].bias.grad = None
    norm = clip_grad_norm(ours.parameters(), max_norm)
    expected = th.nn.utils.clip_grad_norm_(theirs.parameters(), max_norm)
    assert th.equal(norm, expected)
    for mine, reference in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert (mine.grad is None and reference.grad is None) or th.equal(mine.grad, reference.grad)
    if max_norm == 0.5:
        # the norm is well above 0.5 here: clipped gradients have norm max_norm (up to the 1e-6 of the formula)
        clipped = th.linalg.vector_norm(th.stack([p.grad.norm() for p in ours.parameters() if p.grad is not None]))
        assert norm > 1 and clipped.item() == pytest.approx(0.5, rel=1e-5)


def test_clip_grad_norm_without_gradients() -> None:
    assert clip_grad_norm(_network().parameters(), 0.5).item() == 0.0


@pytest.mark.parametrize("optimizer_class", [th.optim.Adam, th.optim.AdamW])
def test_prefer_foreach_steps_bit_for_bit_like_the_single_tensor_step(optimizer_class: type) -> None:
    networks = [_network(), _network()]
    optimizers = [optimizer_class(network.parameters(), lr=1e-2, eps=1e-5) for network in networks]
    prefer_foreach(optimizers[0])
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


def test_prefer_foreach_keeps_explicit_choices_and_other_optimizers() -> None:
    params = list(_network().parameters())
    explicit = th.optim.Adam(params, foreach=False)
    fused = th.optim.Adam(params, fused=True)
    sgd = th.optim.SGD(params, lr=0.1)
    for optimizer in (explicit, fused, sgd):
        before = optimizer.param_groups[0]["foreach"]
        prefer_foreach(optimizer)
        assert optimizer.param_groups[0]["foreach"] == before


def test_ppo_ewma_steps_adam_with_foreach_after_load(tmp_path) -> None:
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(32)
    assert model.policy.optimizer.param_groups[0]["foreach"] is True
    # SB3's Adam defaults are kept: only the implementation changes
    assert model.policy.optimizer.param_groups[0]["eps"] == 1e-5
    model.save(tmp_path / "model")
    loaded = PPO_EWMA.load(tmp_path / "model", env=model.get_env(), device="cpu")
    loaded.policy.optimizer.param_groups[0]["foreach"] = None  # as in a file saved before this choice
    loaded.learn(32)
    assert loaded.policy.optimizer.param_groups[0]["foreach"] is True
