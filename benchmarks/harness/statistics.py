"""
The statistics the pre-registered experiments of issue 49 report (``benchmarks/results/*/cpu_regime/preregistration.md``):
percentile bootstrap confidence intervals over seeds, the one-sided Mann-Whitney test of the paper's appendix F (with one
environment, the van Elteren test has one stratum and is the Mann-Whitney U test), and the seeds a two-sample comparison
needs. Standard library and numpy only.
"""

import itertools
import math
from collections.abc import Callable, Sequence
from statistics import NormalDist

import numpy as np

EXACT_LIMIT = 200_000
"""Above this many assignments of the pooled samples to the groups, the Mann-Whitney p-value is the normal approximation."""


def bootstrap_ci(
    groups: Sequence[Sequence[float]],
    statistic: Callable[[list[np.ndarray]], float],
    level: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """
    The statistic of ``groups`` (independent samples, e.g. the final returns of the seeds of each cell) and its
    percentile bootstrap interval: every group resampled with replacement, independently.

    :return: ``(estimate, low, high)``
    """
    arrays = [np.asarray(group, dtype=float) for group in groups]
    if any(len(array) == 0 for array in arrays):
        raise ValueError("every group needs at least one sample")
    rng = np.random.default_rng(seed)
    values = np.empty(resamples)
    for index in range(resamples):
        values[index] = statistic([array[rng.integers(0, len(array), len(array))] for array in arrays])
    tail = (1 - level) / 2
    return float(statistic(arrays)), float(np.quantile(values, tail)), float(np.quantile(values, 1 - tail))


def mean_interval(values: Sequence[float], level: float = 0.95, resamples: int = 2_000, seed: int = 0) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of ``values`` (the seeds of one point of a learning curve)."""
    array = np.asarray(values, dtype=float)
    means = np.random.default_rng(seed).choice(array, size=(resamples, len(array)), replace=True).mean(axis=1)
    tail = (1 - level) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


def mean_difference(groups: list[np.ndarray]) -> float:
    """``mean(groups[1]) - mean(groups[0])``."""
    return float(np.mean(groups[1]) - np.mean(groups[0]))


def spread_of_means(groups: list[np.ndarray]) -> float:
    """The spread (max - min) of the groups' means: the batch size-invariance metric over batch sizes."""
    means = [float(np.mean(group)) for group in groups]
    return max(means) - min(means)


def mann_whitney_greater(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, float]:
    """
    The one-sided Mann-Whitney U test of "``x`` tends to be larger than ``y``": ``U`` (pairs with ``x > y``, ties
    counting one half), its p-value (exact over every assignment of the pooled samples when there are at most
    :data:`EXACT_LIMIT` of them, else the normal approximation) and the Z-score of the normal approximation.

    :return: ``(U, p, z)``
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n, m = len(x), len(y)
    if n == 0 or m == 0:
        raise ValueError("both samples need at least one value")

    def u_of(first: np.ndarray, second: np.ndarray) -> float:
        return float((first[:, None] > second[None, :]).sum() + 0.5 * (first[:, None] == second[None, :]).sum())

    u = u_of(x, y)
    mean, std = n * m / 2, math.sqrt(n * m * (n + m + 1) / 12)
    z = (u - mean) / std
    if math.comb(n + m, n) <= EXACT_LIMIT:
        pooled = np.concatenate([x, y])
        count = total = 0
        for chosen in itertools.combinations(range(n + m), n):
            mask = np.zeros(n + m, dtype=bool)
            mask[list(chosen)] = True
            count += u_of(pooled[mask], pooled[~mask]) >= u - 1e-9
            total += 1
        return u, count / total, z
    return u, 1 - NormalDist().cdf(z), z


def seeds_for_difference(sigma: float, delta: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """
    Seeds per arm for a two-sided two-sample comparison of means at level ``alpha`` to detect a true difference
    ``delta`` with probability ``power``, when each arm's seeds have standard deviation ``sigma``: the normal
    approximation ``2 (z_{1-alpha/2} + z_power)^2 sigma^2 / delta^2`` plus ``z_{1-alpha/2}^2 / 4`` for the t-test's
    heavier tails, rounded up.
    """
    if sigma <= 0 or delta <= 0:
        raise ValueError(f"sigma and delta must be > 0, got {sigma}, {delta}")
    z_alpha, z_power = NormalDist().inv_cdf(1 - alpha / 2), NormalDist().inv_cdf(power)
    return math.ceil(2 * (z_alpha + z_power) ** 2 * sigma**2 / delta**2 + z_alpha**2 / 4)
