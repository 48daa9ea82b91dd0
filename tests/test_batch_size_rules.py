"""The paper's rules, one function each, on hand-computed values (c = reference n_envs / n_envs)."""

from fractions import Fraction

import pytest

from sb3_ewma.scale import batch_size_rules as rules


def test_step_size_rules():
    assert rules.adam_step_size(5e-4, 16) == pytest.approx(1.25e-4)  # / sqrt(16)
    assert rules.adam_step_size(5e-4, 0.25) == pytest.approx(1e-3)  # 4x more environments: * 2
    assert rules.sgd_learning_rate(1e-2, 4) == pytest.approx(2.5e-3)  # / 4
    beta1, beta2 = rules.adam_betas((0.9, 0.999), 2)
    assert beta1 == pytest.approx(0.9486832980505138) and beta2 == pytest.approx(0.9994998749)  # square roots


def test_batch_size_and_ppg_phase_rules():
    assert rules.optimization_batch_size(2048, Fraction(16)) == 128
    assert rules.optimization_batch_size(128, Fraction(1, 4)) == 512
    assert rules.optimization_batch_size(100, Fraction(3)) == Fraction(100, 3)  # not whole: the caller refuses it
    assert rules.ppg_policy_iterations(32, Fraction(16)) == 512
    assert rules.ppg_policy_iterations(32, Fraction(1, 4)) == 8


def test_age_rules():
    assert rules.proximal_ewma_center_of_mass(8, 16) == 128  # the paper's 8 minibatches, 64 -> 4 envs
    assert rules.proximal_ewma_center_of_mass(8, 0.5) == 4
    assert rules.advantage_moments_span(1, 16) == 16
    assert rules.advantage_moments_span(3, 1 / 3) == pytest.approx(1)
