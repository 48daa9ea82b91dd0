"""
The batch size-invariance rules of Hilton, Cobbe & Schulman (2021), one pure function per rule.

Each takes the reference value and ``c = reference_n_envs / n_envs`` and returns the value for ``n_envs`` environments.
"""

import math
from fractions import Fraction


def adam_step_size(step_size: float, c: float) -> float:
    """Section 3.2 and appendix D: Adam's step size ``/ sqrt(c)``."""
    return step_size / math.sqrt(c)


def sgd_learning_rate(learning_rate: float, c: float) -> float:
    """Section 3.1: plain SGD's learning rate ``/ c``."""
    return learning_rate / c


def adam_betas(betas: tuple[float, float], c: float) -> tuple[float, float]:
    """Section 3.2 and appendix E (optional): Adam's ``beta1`` and ``beta2`` ``** (1 / c)``."""
    return (betas[0] ** (1.0 / c), betas[1] ** (1.0 / c))


def optimization_batch_size(batch_size: int, c: Fraction) -> Fraction:
    """Section 3.3: the optimization batch size ``/ c`` (a whole number only for suitable ``c``)."""
    return Fraction(batch_size) / c


def proximal_ewma_center_of_mass(center_of_mass: float, c: float) -> float:
    """Section 4: the center of mass of the proximal policy EWMA ``* c``."""
    return center_of_mass * c


def advantage_moments_span(span: float, c: float) -> float:
    """Section 4: the span (in iterations) of the advantage mean and variance estimates ``* c``."""
    return span * c


def ppg_policy_iterations(n_policy_iterations: int, c: Fraction) -> Fraction:
    """Section 4, PPG: the policy iterations per phase ``N_pi * c`` (a whole number only for suitable ``c``)."""
    return Fraction(n_policy_iterations) * c
