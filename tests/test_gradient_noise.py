"""The gradient noise scale B_simple (McCandlish et al. 2018): hand-computed cases, a linear model, the three algorithms."""

import csv
import inspect
import warnings

import numpy as np
import pytest
import torch as th
from stable_baselines3.common.logger import configure

from sb3_ewma import PPG, PPG_EWMA, PPO_EWMA
from sb3_ewma.common.gradient_noise import GradientNoiseScale, noise_scale_terms


def test_one_epoch_by_hand():
    # minibatches of 4 samples with gradients (1, 0) and (3, 0): |G_small|^2 = (1 + 9) / 2 = 5, |G_big|^2 = 2^2 = 4
    # |G|^2 = (8 * 4 - 4 * 5) / (8 - 4) = 3, tr(Sigma) = (5 - 4) / (1/4 - 1/8) = 8, B_simple = 8 / 3
    assert noise_scale_terms(5.0, 4.0, 4, 8) == pytest.approx((3.0, 8.0))
    tracker = GradientNoiseScale(batch_size=4, steps_per_epoch=2)
    assert tracker.observe([th.tensor([1.0]), th.tensor([0.0])]) is None
    estimate = tracker.observe([th.tensor([3.0]), th.tensor([0.0])])
    assert estimate.gradient_sq_norm == pytest.approx(3.0) and estimate.noise_trace == pytest.approx(8.0)
    assert estimate.noise_scale == pytest.approx(8 / 3)


def test_the_estimates_are_smoothed_separately_then_divided():
    tracker = GradientNoiseScale(batch_size=1, steps_per_epoch=2, decay=0.5)
    # epoch 1: g = 1, 3 -> |G|^2 = (2 * 4 - 5) / 1 = 3, tr = (5 - 4) / (1 - 1/2) = 2
    tracker.observe([th.tensor([1.0])])
    tracker.observe([th.tensor([3.0])])
    # epoch 2: g = 0, 2 -> |G|^2 = (2 * 1 - 2) / 1 = 0, tr = (2 - 1) / 0.5 = 2
    tracker.observe([th.tensor([0.0])])
    estimate = tracker.observe([th.tensor([2.0])])
    # bias-corrected EMAs with decay 0.5: (0.5 * 0.5 * x1 + 0.5 * x2) / 0.75
    assert estimate.gradient_sq_norm == pytest.approx((0.25 * 3 + 0.5 * 0) / 0.75)
    assert estimate.noise_trace == pytest.approx(2.0)
    assert estimate.noise_scale == pytest.approx(2.0 / 1.0)


def test_an_unfinished_epoch_is_dropped_when_the_iteration_changes():
    tracker = GradientNoiseScale(batch_size=1, steps_per_epoch=2)
    tracker.observe([th.tensor([100.0])], tag=1)  # cut short (target_kl)
    tracker.observe([th.tensor([1.0])], tag=2)
    estimate = tracker.observe([th.tensor([3.0])], tag=2)
    assert estimate.noise_trace == pytest.approx(2.0) and estimate.gradient_sq_norm == pytest.approx(3.0)


def test_linear_regression_recovers_the_known_noise_scale():
    """
    Least squares on a fixed data set, parameters held still (lr 0), epochs of random minibatches without replacement.
    Per epoch the estimator's expectations are exact: tr(Sigma) -> trace of the (N-1)-normalized per-sample covariance
    S, |G|^2 -> |G|^2 - tr(S) / N, so B_simple -> tr(S) / (|G|^2 - tr(S) / N).
    """
    generator = th.Generator().manual_seed(0)
    n_samples, batch_size, dim = 256, 16, 3
    x = th.randn(n_samples, dim, generator=generator)
    y = x @ th.tensor([1.0, -2.0, 0.5]) + 0.5 * th.randn(n_samples, generator=generator) + 1.0
    weight = th.zeros(dim, requires_grad=True)
    per_sample = -(y[:, None] * x)  # gradient of 0.5 * (w.x - y)^2 at w = 0
    full = per_sample.mean(0)
    trace = per_sample.var(0, unbiased=True).sum()
    expected = float(trace / (full.square().sum() - trace / n_samples))

    # the minibatch gradient autograd computes is the mean of the per-sample gradients
    (0.5 * (x[:batch_size] @ weight - y[:batch_size]).square().mean()).backward()
    th.testing.assert_close(weight.grad, per_sample[:batch_size].mean(0))

    tracker = GradientNoiseScale(batch_size, n_samples // batch_size, decay=0.99)
    for _ in range(400):
        for rows in th.randperm(n_samples, generator=generator).split(batch_size):
            estimate = tracker.observe([per_sample[rows].mean(0)])
    assert estimate.noise_scale == pytest.approx(expected, rel=0.06)
    assert 1 < expected < n_samples  # a case where it matters


def read_progress(path):
    return list(csv.DictReader(open(path / "progress.csv")))


def values(rows, key):
    return [float(row[key]) for row in rows if row.get(key)]


@pytest.mark.parametrize(
    "cls, kwargs, prefixes",
    [
        (PPO_EWMA, dict(n_epochs=2), ["train"]),
        (PPG_EWMA, dict(n_policy_iterations=2, n_aux_epochs=2), ["train", "aux"]),
        (PPG, dict(n_policy_iterations=2, n_aux_epochs=2), ["train", "aux"]),
    ],
)
def test_logged_by_the_three_algorithms(tmp_path, cls, kwargs, prefixes):
    model = cls(
        "MlpPolicy", "CartPole-v1", n_steps=64, batch_size=16, seed=0, device="cpu", log_gradient_noise_scale=True, **kwargs
    )
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(4 * 64)
    rows = read_progress(tmp_path)
    for prefix in prefixes:
        logged = values(rows, f"{prefix}/gradient_noise_scale")
        assert logged and all(np.isfinite(logged)), prefix


def test_off_by_default_it_logs_nothing_and_changes_nothing(tmp_path):
    for cls in (PPO_EWMA, PPG_EWMA, PPG):
        assert inspect.signature(cls).parameters["log_gradient_noise_scale"].default is False
    params = []
    for flag in (True, False):
        model = PPO_EWMA(
            "MlpPolicy", "CartPole-v1", n_steps=64, batch_size=16, seed=0, device="cpu", log_gradient_noise_scale=flag
        )
        model.set_logger(configure(str(tmp_path / str(flag)), ["csv"]))
        model.learn(128)
        params.append(model.policy.parameters_to_vector())
        assert bool(values(read_progress(tmp_path / str(flag)), "train/gradient_noise_scale")) == flag
    np.testing.assert_array_equal(params[0], params[1])


def test_measured_before_gradient_clipping(monkeypatch):
    # with a tiny max_grad_norm every step is clipped; the tracker must see the raw gradients
    model = PPO_EWMA(
        "MlpPolicy",
        "CartPole-v1",
        n_steps=64,
        batch_size=16,
        n_epochs=1,
        max_grad_norm=1e-6,
        seed=0,
        device="cpu",
        log_gradient_noise_scale=True,
    )
    seen = []
    observe = GradientNoiseScale.observe

    def record(self, gradients, tag=None):
        seen.append(float(th.stack([g.norm() for g in gradients]).norm()))
        return observe(self, gradients, tag)

    monkeypatch.setattr(GradientNoiseScale, "observe", record)
    model.learn(64)
    assert len(seen) == 4 and min(seen) > 1e-3


def test_one_minibatch_per_epoch_is_said_to_the_constructor_s_caller(tmp_path):
    """The estimate needs at least 2 minibatches per epoch: with one (sb3-contrib's batch_size=None, the whole rollout)
    the constructor warns at the user's line that nothing will be logged; a load of such a model does not warn again."""
    from sb3_ewma import RecurrentPPO_EWMA

    with pytest.warns(UserWarning, match="logs no train/gradient_noise_scale with 1 minibatch per epoch") as caught:
        model = RecurrentPPO_EWMA("MlpLstmPolicy", "CartPole-v1", n_steps=16, batch_size=None, log_gradient_noise_scale=True)
    assert caught[0].filename == __file__
    model.save(tmp_path / "model.zip")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RecurrentPPO_EWMA.load(tmp_path / "model.zip")
