"""
The batch size-invariance rules of Hilton, Cobbe & Schulman (2021), one pure function per rule.

Each takes the reference value and ``c = reference_n_envs / n_envs``, the factor by which the optimization and the
iteration batch sizes are divided (``c < 1``: more environments), and returns the value for ``n_envs`` environments.
They hold below the critical batch size and with one policy epoch (section 4). :mod:`sb3_ewma.scale` applies them to
hyperparameter dicts and rl-zoo3 entries (defaults, schedules, rl-zoo3 strings, the report).
"""

import math
from fractions import Fraction


def adam_step_size(step_size: float, c: float) -> float:
    """Section 3.2 (and appendix D, which supports it against the linear rule): Adam's step size ``/ sqrt(c)``."""
    return step_size / math.sqrt(c)


def sgd_learning_rate(learning_rate: float, c: float) -> float:
    """Section 3.1: plain SGD's learning rate ``/ c`` (the linear rule)."""
    return learning_rate / c


def adam_betas(betas: tuple[float, float], c: float) -> tuple[float, float]:
    """Section 3.2 and appendix E (optional, small effect): Adam's ``beta1`` and ``beta2`` ``** (1 / c)``."""
    return (betas[0] ** (1.0 / c), betas[1] ** (1.0 / c))


def optimization_batch_size(batch_size: int, c: Fraction) -> Fraction:
    """
    Section 3.3: the optimization batch size ``/ c`` (with the iteration batch size, ``n_envs * n_steps``, divided by the
    same ``c`` through ``n_envs``: the number of minibatches per epoch is unchanged). A whole number only for suitable
    ``c``: the caller checks.
    """
    return Fraction(batch_size) / c


def proximal_ewma_center_of_mass(center_of_mass: float, c: float) -> float:
    """
    Section 4: the center of mass of the proximal policy EWMA (its age in gradient steps, ``beta / (1 - beta)``; see
    :func:`sb3_ewma.ewma_decay_from_center_of_mass`) ``* c``, which keeps the proximal policy's age constant in
    environment steps.
    """
    return center_of_mass * c


def advantage_moments_span(span: float, c: float) -> float:
    """
    Section 4: the number of iterations the advantage mean and variance are estimated over ``* c``; with EWMA
    estimates (the paper's), their span ``2 / (1 - d) - 1`` in iterations (see :func:`sb3_ewma.ewma_decay_from_span`).
    """
    return span * c


def ppg_policy_iterations(n_policy_iterations: int, c: Fraction) -> Fraction:
    """
    Section 4, PPG: the policy iterations per phase ``N_pi * c``, which holds the phase batch size constant (so the
    auxiliary phase is unchanged, appendix B). A whole number only for suitable ``c``: the caller checks.
    """
    return Fraction(n_policy_iterations) * c
