import math

import numpy as np
import pytest
import torch as th
from stable_baselines3.common.distributions import (
    BernoulliDistribution,
    CategoricalDistribution,
    DiagGaussianDistribution,
    MultiCategoricalDistribution,
)

from sb3_ewma.common.decoupled.objective import DecoupledPolicyObjective
from sb3_ewma.common.distributions import distribution_kl
from sb3_ewma.common.losses import (
    capped_behavior_log_prob,
    capped_fraction,
    clip_fraction,
    clipped_values,
    decoupled_policy_loss,
    log_clip_bounds,
    sampled_kl,
)


def t(*values: float) -> th.Tensor:
    return th.tensor(values, dtype=th.float64)


def test_decoupled_clipped_loss_hand_computed():
    # per sample: (pi, pi_prox, pi_behav, A)
    samples = [
        (0.30, 0.20, 0.25, 1.0),  # r = 1.5 > 1.2, A > 0: clipped at 1.2
        (0.10, 0.20, 0.25, -2.0),  # r = 0.5 < 0.8, A < 0: clipped at 0.8
        (0.21, 0.20, 0.10, 3.0),  # r = 1.05 inside: unclipped
        (0.30, 0.20, 0.25, -1.0),  # r = 1.5, A < 0: the unclipped term is the smaller objective
    ]
    eps = 0.2
    expected = []
    for pi, prox, behav, adv in samples:
        r = pi / prox
        objective = (prox / behav) * min(r * adv, min(max(r, 1 - eps), 1 + eps) * adv)
        expected.append(-objective)
    # by hand for the first two samples
    assert expected[0] == pytest.approx(-(0.20 / 0.25) * 1.2 * 1.0)
    assert expected[1] == pytest.approx(-(0.20 / 0.25) * 0.8 * -2.0)

    pi, prox, behav, adv = (t(*column) for column in zip(*samples))
    loss = decoupled_policy_loss(adv, pi.log(), prox.log(), behav.log(), clip_range=eps, imp_samp_max=0)
    assert loss.item() == pytest.approx(np.mean(expected), rel=1e-12)


def test_unclipped_loss_is_importance_sampled_policy_gradient():
    pi, prox, behav, adv = t(0.3, 0.1), t(0.2, 0.2), t(0.25, 0.4), t(1.0, -2.0)
    loss = decoupled_policy_loss(adv, pi.log(), prox.log(), behav.log(), clip_range=None)
    assert loss.item() == pytest.approx(-np.mean([0.3 / 0.25 * 1.0, 0.1 / 0.4 * -2.0]))


def test_clipping_happens_in_log_space():
    # log(1.2) and log(0.8) bound the log-ratio: exactly at the boundary nothing is clipped
    eps = 0.2
    log_prox = t(-1.0, -1.0)
    log_pi = log_prox + t(math.log(1 + eps), math.log(1 - eps))
    assert clip_fraction(log_pi, log_prox, eps).item() == 0.0
    assert clip_fraction(log_pi + t(1e-6, -1e-6), log_prox, eps).item() == 1.0


@pytest.mark.parametrize("clip_range", [0.0, -0.05, -1.4, -65.0])
def test_clip_range_at_or_below_zero_allows_no_movement(clip_range):
    # a lin_ schedule past the budget: the clipped ratio is pinned to the proximal ratio (r = pi / pi_prox = 1)
    # per sample: (pi, pi_prox, pi_behav, A)
    samples = [
        (0.30, 0.20, 0.25, 1.0),  # r = 1.5, A > 0: the pinned term
        (0.10, 0.20, 0.25, 1.0),  # r = 0.5, A > 0: the unclipped term is the smaller objective
        (0.30, 0.20, 0.25, -2.0),  # r = 1.5, A < 0: the unclipped term
        (0.10, 0.20, 0.25, -2.0),  # r = 0.5, A < 0: the pinned term
        (0.20, 0.20, 0.10, 3.0),  # r = 1: both
    ]
    # by hand: -(pi_prox / pi_behav) * min(r A, 1 * A)
    expected = [
        -(0.20 / 0.25) * 1.0,
        -(0.20 / 0.25) * 0.5 * 1.0,
        -(0.20 / 0.25) * 1.5 * -2.0,
        -(0.20 / 0.25) * -2.0,
        -(0.20 / 0.10) * 3.0,
    ]
    pi, prox, behav, adv = (t(*column) for column in zip(*samples))
    log_pi = pi.log().requires_grad_(True)
    loss = decoupled_policy_loss(adv, log_pi, prox.log(), behav.log(), clip_range=clip_range, imp_samp_max=0)
    assert loss.item() == pytest.approx(np.mean(expected), rel=1e-12)
    # no movement: no gradient, also where the unclipped term is taken (the loss keeps its graph)
    loss.backward()
    assert log_pi.grad.tolist() == [0.0] * len(samples)
    # every sample whose ratio is not 1 counts as clipped
    assert clip_fraction(log_pi.detach(), prox.log(), clip_range).item() == pytest.approx(4 / 5)
    # with a KL penalty the penalty's gradient remains (towards pi_prox)
    objective = DecoupledPolicyObjective(clip_range=clip_range, kl_coef=1.0)
    log_pi.grad = None
    objective(adv, log_pi, prox.log(), behav.log()).backward()
    expected_kl_grad = [(math.log(p) - math.log(q)) / len(samples) for p, q in zip(pi.tolist(), prox.tolist())]
    assert log_pi.grad.tolist() == pytest.approx(expected_kl_grad, rel=1e-12)


def test_log_clip_bounds():
    assert log_clip_bounds(0.2) == (math.log(0.8), math.log(1.2))
    assert log_clip_bounds(0.0) == (0.0, 0.0) == log_clip_bounds(-3.0)
    # a schedule above 1: no lower bound on the ratio (as SB3's clamp to 1 - eps <= 0 of a positive ratio)
    assert log_clip_bounds(1.5) == (-math.inf, math.log(2.5))
    log_pi, log_prox, adv = t(math.log(0.01)), t(math.log(0.5)), t(-1.0)
    loss = decoupled_policy_loss(adv, log_pi, log_prox, log_prox, clip_range=1.5)
    assert loss.item() == pytest.approx(0.01 / 0.5)


@pytest.mark.parametrize("clip_range_vf", [0.0, -0.2])
def test_value_clip_range_at_or_below_zero_keeps_the_old_values(clip_range_vf):
    values = t(1.0, 2.0, -1.0).requires_grad_(True)
    old_values = t(0.5, 2.0, 0.0)
    clipped = clipped_values(values, old_values, clip_range_vf)
    assert clipped.tolist() == [0.5, 2.0, 0.0]
    (clipped.sum() * 2).backward()  # the loss keeps its graph, with a zero gradient
    assert values.grad.tolist() == [0.0, 0.0, 0.0]
    # a positive clip range is SB3's, no clipping with None
    assert clipped_values(values, old_values, 0.25).tolist() == [0.75, 2.0, -0.25]
    assert clipped_values(values, old_values, None) is values


def test_importance_sampling_cap():
    # pi / pi_behav = 200, capped at 100
    log_pi, log_behav, adv = t(math.log(0.2)), t(math.log(0.001)), t(-1.0)
    adjusted = capped_behavior_log_prob(log_pi, log_behav, 100)
    assert math.exp(log_pi.item() - adjusted.item()) == pytest.approx(100.0)
    assert capped_fraction(log_pi, log_behav, 100).item() == 1.0
    unclipped = decoupled_policy_loss(adv, log_pi, log_pi, log_behav, clip_range=None, imp_samp_max=100)
    assert unclipped.item() == pytest.approx(100.0)
    no_cap = decoupled_policy_loss(adv, log_pi, log_pi, log_behav, clip_range=None, imp_samp_max=0)
    assert no_cap.item() == pytest.approx(200.0)
    # below the cap nothing changes
    assert capped_behavior_log_prob(t(math.log(0.2)), t(math.log(0.1)), 100).item() == pytest.approx(math.log(0.1))
    assert capped_fraction(t(math.log(0.2)), t(math.log(0.1)), 100).item() == 0.0
    # the cap does not carry gradient into the behavior policy: d loss / d log_pi = -A * 100 with the cap
    log_pi.requires_grad_(True)
    decoupled_policy_loss(adv, log_pi, log_pi.detach(), log_behav, clip_range=None, imp_samp_max=100).backward()
    assert log_pi.grad.item() == pytest.approx(100.0)


@pytest.mark.parametrize("clip_range", [0.1, 0.2, 0.3])
def test_equals_ppo_when_proximal_is_behavior(clip_range):
    generator = th.Generator().manual_seed(0)
    adv = th.randn(256, generator=generator, dtype=th.float64)
    log_behav = -th.rand(256, generator=generator, dtype=th.float64) * 3
    log_pi = (log_behav + 0.4 * th.randn(256, generator=generator, dtype=th.float64)).requires_grad_(True)

    ratio = th.exp(log_pi - log_behav)
    ppo_loss = -th.min(adv * ratio, adv * th.clamp(ratio, 1 - clip_range, 1 + clip_range)).mean()
    (ppo_grad,) = th.autograd.grad(ppo_loss, log_pi)
    loss = decoupled_policy_loss(adv, log_pi, log_behav, log_behav, clip_range, imp_samp_max=0)
    (grad,) = th.autograd.grad(loss, log_pi)
    assert loss.item() == pytest.approx(ppo_loss.item(), rel=1e-12)
    assert th.allclose(grad, ppo_grad, rtol=1e-12, atol=0)
    ppo_clip_fraction = th.mean((th.abs(ratio - 1) > clip_range).double())
    assert clip_fraction(log_pi.detach(), log_behav, clip_range).item() == pytest.approx(ppo_clip_fraction.item())


def test_kl_penalized_objective():
    log_pi, log_prox, log_behav, adv = t(-1.0, -2.0), t(-1.5, -1.0), t(-1.2, -2.2), t(1.0, 0.5)
    assert sampled_kl(log_pi, log_prox).item() == pytest.approx(0.5 * (0.5**2 + 1.0**2) / 2)
    objective = DecoupledPolicyObjective(clip_range=None, kl_coef=2.0)
    loss = objective(adv, log_pi, log_prox, log_behav)
    pg = -np.mean([math.exp(-1.0 + 1.2) * 1.0, math.exp(-2.0 + 2.2) * 0.5])
    assert loss.item() == pytest.approx(pg + 2.0 * 0.5 * (0.25 + 1.0) / 2)
    stats = objective.mean_stats()
    assert stats["policy_gradient_loss"] == pytest.approx(pg)
    assert stats["kl_penalty"] == pytest.approx(0.3125)
    assert "clip_fraction" not in stats


def test_exact_kl_penalty_uses_distributions():
    logits_pi = th.tensor([[0.0, 1.0], [2.0, 0.0]])
    logits_prox = th.tensor([[0.0, 0.0], [0.0, 0.0]])
    pi = CategoricalDistribution(2).proba_distribution(logits_pi)
    prox = CategoricalDistribution(2).proba_distribution(logits_prox)
    kl = distribution_kl(prox, pi)
    # KL[uniform, softmax(l)] = sum 0.5 * (log 0.5 - log p)
    expected = [sum(0.5 * (math.log(0.5) - math.log(p)) for p in th.softmax(row, 0).tolist()) for row in logits_pi]
    assert kl.tolist() == pytest.approx(expected, rel=1e-6)
    objective = DecoupledPolicyObjective(clip_range=0.2, kl_coef=1.0, kl_estimator="exact")
    actions = th.tensor([0, 1])
    adv = th.zeros(2)
    loss = objective(adv, pi.log_prob(actions), prox.log_prob(actions), prox.log_prob(actions), pi, prox)
    assert loss.item() == pytest.approx(float(np.mean(expected)), rel=1e-6)


def test_distribution_kl_gaussian_multicategorical_bernoulli():
    gaussian = DiagGaussianDistribution(2)
    p = gaussian.proba_distribution(th.tensor([[0.0, 1.0]]), th.tensor([0.0, math.log(2.0)]))
    q = DiagGaussianDistribution(2).proba_distribution(th.tensor([[1.0, 1.0]]), th.tensor([0.0, 0.0]))
    # KL[N(m1, s1), N(m2, s2)] = log(s2/s1) + (s1^2 + (m1-m2)^2) / (2 s2^2) - 1/2, summed over dimensions
    expected = (0 + (1 + 1) / 2 - 0.5) + (math.log(1 / 2) + 4 / 2 - 0.5)
    assert distribution_kl(p, q).item() == pytest.approx(expected, rel=1e-6)

    multi = MultiCategoricalDistribution([2, 3])
    p_multi = multi.proba_distribution(th.tensor([[0.0, 0.0, 1.0, 2.0, 3.0]]))
    q_multi = MultiCategoricalDistribution([2, 3]).proba_distribution(th.zeros(1, 5))
    probs = th.softmax(th.tensor([1.0, 2.0, 3.0]), 0)
    expected_multi = sum(p * math.log(p * 3) for p in probs.tolist())  # first part: identical, KL 0
    assert distribution_kl(p_multi, q_multi).item() == pytest.approx(expected_multi, rel=1e-5)

    p_bern = BernoulliDistribution(2).proba_distribution(th.tensor([[0.0, 0.0]]))
    q_bern = BernoulliDistribution(2).proba_distribution(th.tensor([[0.0, math.log(3.0)]]))  # p = 0.75
    expected_bern = 0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25)
    assert distribution_kl(p_bern, q_bern).item() == pytest.approx(expected_bern, rel=1e-6)


def test_the_objectives_diagnostics_are_each_minibatchs_value_averaged_over_minibatches():
    """Computed once from the kept log-probabilities, they equal the per-minibatch functions' values averaged, with
    minibatches of different sizes (an epoch's shorter last one) each counting once."""
    generator = th.Generator().manual_seed(0)
    objective = DecoupledPolicyObjective(clip_range=0.2, imp_samp_max=1.5)
    expected: dict[str, list[float]] = {"proximal_kl": [], "clip_fraction": [], "imp_samp_capped_fraction": []}
    for size in (8, 8, 3, 8, 3):
        log_behav = -th.rand(size, generator=generator)
        log_prox = log_behav + 0.3 * th.randn(size, generator=generator)
        log_pi = (log_prox + 0.3 * th.randn(size, generator=generator)).requires_grad_(True)
        objective(th.randn(size, generator=generator), log_pi, log_prox, log_behav)
        expected["proximal_kl"].append(sampled_kl(log_pi, log_prox).item())
        expected["clip_fraction"].append(clip_fraction(log_pi, log_prox, 0.2).item())
        expected["imp_samp_capped_fraction"].append(capped_fraction(log_pi, log_behav, 1.5).item())
    stats = objective.mean_stats()
    for key, values in expected.items():
        assert stats[key] == pytest.approx(np.mean(values), rel=1e-6), key
    assert 0 < stats["clip_fraction"] < 1 and 0 < stats["imp_samp_capped_fraction"] < 1  # the data exercises both
