"""
The statistics of the effects experiments' reports on one game, from the libraries made for them: ``scipy.stats``
(bootstrap intervals, the Mann-Whitney U test, the Wilcoxon signed-rank test) and ``statsmodels`` (the power of a
t-test). The aggregates across games of the replication (``rliable``) are in :mod:`benchmarks.harness.aggregate`.

The cells of an experiment share their seeds (seed ``i`` of every cell starts from the same initial weights and
environments), so a comparison of two cells is paired by seed: the paired bootstrap of the mean difference and the
Wilcoxon signed-rank test. The pre-registrations of the Breakout presets named the unpaired one-sided Mann-Whitney
test (appendix F's test, whose van Elteren form has one stratum with one environment); it is reported as they named
it.
"""

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

EXACT_LIMIT = 200_000
"""Up to this many assignments of the pooled samples to the two groups (``C(n + m, n)``), the Mann-Whitney p-value is
exact (as the pre-registrations of the Breakout presets fixed it); above, the normal approximation without
continuity correction."""


def _stats() -> Any:
    """``scipy.stats``, imported when a report computes: the runs (on a GPU machine, say) need only the package."""
    from scipy import stats

    return stats


def _bootstrap(data: tuple[np.ndarray, ...], statistic, level: float, resamples: int, seed: int, paired: bool):
    """``scipy.stats.bootstrap``'s percentile interval (the method the pre-registrations named)."""
    return (
        _stats()
        .bootstrap(
            data,
            statistic,
            paired=paired,
            vectorized=True,
            n_resamples=resamples,
            confidence_level=level,
            method="percentile",
            rng=np.random.default_rng(seed),
        )
        .confidence_interval
    )


def mean_interval(values: Sequence[float], level: float = 0.95, resamples: int = 2_000, seed: int = 0) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of ``values`` (the seeds of one point of a learning curve); a
    single value is its own interval."""
    array = np.asarray(values, dtype=float)
    if len(array) < 2:
        return (float(array[0]), float(array[0])) if len(array) else (math.nan, math.nan)
    interval = _bootstrap((array,), np.mean, level, resamples, seed, paired=False)
    return float(interval.low), float(interval.high)


def _mean_difference(first: np.ndarray, second: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(first - second, axis=axis)


def paired_difference(
    first: Sequence[float], second: Sequence[float], level: float = 0.95, resamples: int = 10_000, seed: int = 0
) -> tuple[float, float, float]:
    """
    ``mean(first - second)`` over pairs (the same seed in both cells) and its paired percentile bootstrap interval
    (``scipy.stats.bootstrap(..., paired=True)``: each resample draws seeds, and takes both cells' runs of each).

    :return: ``(estimate, low, high)``
    """
    first, second = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    if len(first) != len(second) or len(first) == 0:
        raise ValueError(f"paired samples need the same, non-zero length, got {len(first)} and {len(second)}")
    estimate = float(np.mean(first - second))
    if len(first) < 2:
        return estimate, estimate, estimate
    interval = _bootstrap((first, second), _mean_difference, level, resamples, seed, paired=True)
    return estimate, float(interval.low), float(interval.high)


def _spread_of_means(*groups: np.ndarray, axis: int = -1) -> np.ndarray:
    means = np.stack([np.mean(group, axis=axis) for group in groups])
    return means.max(axis=0) - means.min(axis=0)


def paired_spread(
    groups: Sequence[Sequence[float]], level: float = 0.95, resamples: int = 10_000, seed: int = 0
) -> tuple[float, float, float]:
    """
    The spread (max - min) of the groups' means (the batch size-invariance metric over batch sizes) and its paired
    percentile bootstrap interval: ``groups`` hold the same seeds in the same order, and a resample draws seeds.

    :return: ``(estimate, low, high)``
    """
    arrays = tuple(np.asarray(group, dtype=float) for group in groups)
    if len({len(array) for array in arrays}) != 1 or len(arrays[0]) == 0:
        raise ValueError("the groups must hold the same, non-zero number of seeds")
    estimate = float(_spread_of_means(*arrays))
    if len(arrays[0]) < 2:
        return estimate, estimate, estimate
    interval = _bootstrap(arrays, _spread_of_means, level, resamples, seed, paired=True)
    return estimate, float(interval.low), float(interval.high)


def mann_whitney_greater(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, float]:
    """
    The one-sided Mann-Whitney U test of "``x`` tends to be larger than ``y``" (``scipy.stats.mannwhitneyu``): ``U``
    (pairs with ``x > y``, ties counting one half), its p-value (exact up to :data:`EXACT_LIMIT` assignments, else the
    normal approximation) and the Z-score of the normal approximation (tie-corrected, no continuity correction).

    :return: ``(U, p, z)``
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) == 0 or len(y) == 0:
        raise ValueError("both samples need at least one value")
    exact = math.comb(len(x) + len(y), len(x)) <= EXACT_LIMIT
    result = _stats().mannwhitneyu(
        x, y, alternative="greater", method="exact" if exact else "asymptotic", use_continuity=False
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        normal = _stats().mannwhitneyu(x, y, alternative="greater", method="asymptotic", use_continuity=False).pvalue
    return float(result.statistic), float(result.pvalue), float(_stats().norm.isf(normal))


def wilcoxon_p(first: Sequence[float], second: Sequence[float], alternative: str = "greater") -> float:
    """
    The Wilcoxon signed-rank test of the paired differences ``first - second`` (``scipy.stats.wilcoxon``; one-sided
    "``first`` tends to be larger" by default; pairs with no difference are left out, as Wilcoxon's own rule); NaN
    when every pair is tied.
    """
    differences = np.asarray(first, dtype=float) - np.asarray(second, dtype=float)
    if not np.any(differences != 0):
        return math.nan
    return float(_stats().wilcoxon(differences, alternative=alternative).pvalue)


def detectable_difference(sigma: float, pairs: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """
    The smallest true mean difference that a two-sided paired t-test at level ``alpha`` detects with probability
    ``power`` over ``pairs`` pairs whose differences have standard deviation ``sigma``
    (``statsmodels.stats.power.TTestPower``); NaN with fewer than 2 pairs.
    """
    if pairs < 2 or not sigma > 0:
        return math.nan
    from statsmodels.stats.power import TTestPower

    effect = TTestPower().solve_power(effect_size=None, nobs=pairs, alpha=alpha, power=power, alternative="two-sided")
    return float(effect) * sigma
