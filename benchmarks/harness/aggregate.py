"""
Aggregates across games, with ``rliable`` (Agarwal et al. 2021, the field's tools for few runs on many tasks) and
``scipy.stats``, as the replication's pre-registration fixes them (``results/replication/minatar5/preregistration.md``):

- the interquartile mean (IQM) over all runs of all games of the normalized scores (``rliable.metrics.aggregate_iqm``),
- stratified bootstrap intervals (``rliable.library.get_interval_estimates``: seeds resampled with replacement within
  each game, games not resampled; percentile intervals; 50,000 resamples; seed 0), **paired**: the cells compared share
  their seeds, and every resample takes the runs of the same seeds from every cell,
- the probability of improvement (``rliable.metrics.probability_of_improvement``) with the same interval,
- the stratified one-sided Mann-Whitney test: per game ``scipy.stats.mannwhitneyu(..., method="exact")``, the games'
  p-values combined by Stouffer's method (``scipy.stats.combine_pvalues``).

How the pairing goes through rliable: ``get_interval_estimates`` resamples a ``(runs x games)`` array by drawing, for
every entry of a game's column, one of that game's rows (``StratifiedBootstrap``); a *list* of arrays would be
resampled independently of each other (``StratifiedIndependentBootstrap``: unpaired). So the array bootstrapped here
holds the seeds' row positions, and the statistic looks every cell up at the drawn positions: each resample draws the
same seeds for all cells. rliable 1.2 draws its indices from numpy's global generator (``np.random.choice``), not from
the ``random_state`` it is given, so :func:`stratified_estimates` seeds the global generator too (``np.random.seed``:
the stream of ``RandomState(seed)``) and restores it afterwards.

Speed: rliable's ``aggregate_iqm`` is ``scipy.stats.trim_mean(scores, 0.25, axis=None)`` and its probability of
improvement the mean over games of ``U / (n m)``, ``U`` the statistic of ``scipy.stats.mannwhitneyu``. Called once per
cell and resample they cost 60 us and 1.4 ms (scipy's argument handling, not the arithmetic): with 50,000 resamples, a
report of minutes. The statistic of a resample computes the same quantities for all cells at once with numpy (the
trimmed mean of the sorted scores, ``U`` as the count of pairs with ties counting one half), and
:func:`stratified_estimates` checks them against rliable's own functions on the data of every call.
"""

import contextlib
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

REPS = 50_000
"""Bootstrap resamples (the pre-registration's)."""
SEED = 0
"""``numpy.random.RandomState(SEED)``: the pre-registration's bootstrap generator."""
IQM_CUT = 0.25
"""The interquartile mean trims a quarter at each end (rliable's ``aggregate_iqm``)."""


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its interval."""

    point: float
    low: float
    high: float

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def normalized(raw: np.ndarray, random_return: Sequence[float], reference: Sequence[float]) -> np.ndarray:
    """
    Normalized scores of a ``(runs x games)`` array of returns: ``(R - R_random(g)) / (R_reference(g) - R_random(g))``
    per game ``g`` (a column): 0 is the random policy, 1 the reference.
    """
    random_return, reference = np.asarray(random_return, dtype=float), np.asarray(reference, dtype=float)
    return (np.asarray(raw, dtype=float) - random_return) / (reference - random_return)


@contextlib.contextmanager
def _global_numpy_seed(seed: int) -> Iterator[None]:
    """numpy's global generator seeded with ``seed`` (rliable 1.2 draws from it) for the block, then restored."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def _iqms(stacked: np.ndarray) -> np.ndarray:
    """
    The IQM of each cell of a ``(cells x runs x games)`` array: ``scipy.stats.trim_mean(cell, 0.25, axis=None)``
    (rliable's ``aggregate_iqm``), the mean of the sorted scores without the lowest and highest ``int(0.25 n)``.
    """
    flat = np.sort(stacked.reshape(len(stacked), -1), axis=1)
    cut = int(IQM_CUT * flat.shape[1])
    return flat[:, cut : flat.shape[1] - cut].mean(axis=1)


def _improvements(first: np.ndarray, second: np.ndarray, pairs: int) -> np.ndarray:
    """
    The probability of improvement of each pair: ``first`` and ``second`` are ``(runs x (pairs * games))`` (the pairs'
    games side by side); per game ``U / (n m)``, ``U`` the one-sided Mann-Whitney statistic (pairs of runs with the
    first above, ties counting one half: ``scipy.stats.mannwhitneyu``'s), averaged over the games (rliable's
    ``probability_of_improvement``; its ``0.5`` for two identical columns is their ``U / (n m)`` too).
    """
    above = (first[:, None, :] > second[None, :, :]).sum(axis=(0, 1))
    ties = (first[:, None, :] == second[None, :, :]).sum(axis=(0, 1))
    u = above + 0.5 * ties
    return u.reshape(pairs, -1).mean(axis=1) / (len(first) * len(second))


def stratified_estimates(
    cells: Mapping[str, np.ndarray],
    differences: Mapping[str, tuple[str, str]] | None = None,
    improvements: Mapping[str, tuple[str, str]] | None = None,
    spreads: Mapping[str, Sequence[str]] | None = None,
    level: float = 0.95,
    reps: int = REPS,
    seed: int = SEED,
) -> dict[str, dict[str, Estimate]]:
    """
    The IQM of each cell, and of the comparisons asked for, with their paired stratified bootstrap intervals
    (``rliable.library.get_interval_estimates``, percentile, ``reps`` resamples, seed ``seed``; module docstring).

    :param cells: ``(runs x games)`` normalized scores of each cell; row ``i`` of every cell is the same seed
    :param differences: ``name -> (first, second)``: ``IQM(first) - IQM(second)``
    :param improvements: ``name -> (first, second)``: the probability that a run of ``first`` beats one of ``second``
        on the same game, averaged over games (``rliable.metrics.probability_of_improvement``)
    :param spreads: ``name -> cells``: max - min of the cells' IQMs
    :param level: the intervals' coverage
    :return: ``{"iqm": {cell: ...}, "difference": {name: ...}, "improvement": {...}, "spread": {...}}``
    """
    from rliable import library, metrics

    differences, improvements, spreads = dict(differences or {}), dict(improvements or {}), dict(spreads or {})
    names = list(cells)
    stacked = np.stack([np.asarray(cells[name], dtype=float) for name in names])
    if stacked.ndim != 3 or np.isnan(stacked).any():
        raise ValueError(f"every cell needs the same (runs x games) scores, without NaN; got shape {stacked.shape}")
    _, runs, games = stacked.shape
    index = {name: position for position, name in enumerate(names)}
    difference_pairs = [(index[a], index[b]) for a, b in differences.values()]
    spread_sets = [[index[name] for name in members] for members in spreads.values()]
    # the pairs' first and second cells, their games side by side: (runs x (pairs * games))
    improvement_first, improvement_second = (
        np.concatenate([stacked[index[pair[side]]] for pair in improvements.values()], axis=1) if improvements else None
        for side in (0, 1)
    )

    def statistic(positions: np.ndarray) -> np.ndarray:
        """Every statistic of the resample that takes, in each game, the runs of the seeds at ``positions``."""
        iqms = _iqms(np.take_along_axis(stacked, positions[None].astype(int), axis=1))
        values = [iqms, [iqms[a] - iqms[b] for a, b in difference_pairs]]
        values.append([iqms[members].max() - iqms[members].min() for members in spread_sets])
        if improvement_first is not None and improvement_second is not None:
            tiled = np.tile(positions.astype(int), (1, len(improvements)))
            first = np.take_along_axis(improvement_first, tiled, axis=0)
            values.append(_improvements(first, np.take_along_axis(improvement_second, tiled, axis=0), len(improvements)))
        return np.concatenate([np.asarray(value, dtype=float) for value in values])

    identity = np.broadcast_to(np.arange(runs)[:, None], (runs, games)).astype(float)
    # the point estimates from rliable's own functions; the vectorized statistic must give the same
    iqm_points = {name: float(metrics.aggregate_iqm(stacked[index[name]])) for name in names}
    points = [*iqm_points.values()]
    points += [iqm_points[a] - iqm_points[b] for a, b in differences.values()]
    points += [max(iqm_points[m] for m in members) - min(iqm_points[m] for m in members) for members in spreads.values()]
    points += [float(metrics.probability_of_improvement(cells[a], cells[b])) for a, b in improvements.values()]
    if not np.allclose(statistic(identity), points, rtol=1e-9, atol=1e-12):
        raise AssertionError("the vectorized statistics differ from rliable's aggregate_iqm / probability_of_improvement")
    with _global_numpy_seed(seed), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # arch: random_state is deprecated (rliable 1.2 passes it on)
        _, intervals = library.get_interval_estimates(
            {"all": identity},
            statistic,
            method="percentile",
            reps=reps,
            confidence_interval_size=level,
            random_state=np.random.RandomState(seed),
        )
    low, high = np.asarray(intervals["all"], dtype=float)
    estimates = [Estimate(float(point), float(lo), float(hi)) for point, lo, hi in zip(points, low, high)]
    result: dict[str, dict[str, Estimate]] = {}
    position = 0
    for kind, keys in (("iqm", names), ("difference", differences), ("spread", spreads), ("improvement", improvements)):
        result[kind] = dict(zip(keys, estimates[position : position + len(keys)]))
        position += len(keys)
    return result


def decision(estimate: Estimate) -> str:
    """A directional contrast's word: *reproduced* when its interval lies above 0, *contradicted* when below, *not
    resolved* otherwise."""
    if estimate.low > 0:
        return "reproduced"
    if estimate.high < 0:
        return "contradicted"
    return "not resolved"


def stratified_mann_whitney(first: Sequence[Sequence[float]], second: Sequence[Sequence[float]]) -> tuple[list[float], float]:
    """
    The stratified one-sided test of "``first`` tends to be larger than ``second``": per stratum (game) the exact
    Mann-Whitney U test (``scipy.stats.mannwhitneyu(..., alternative="greater", method="exact")``), the strata's
    p-values combined by Stouffer's method with equal weights (``scipy.stats.combine_pvalues(..., method="stouffer")``).

    :return: the strata's p-values and the combined p-value
    """
    if len(first) != len(second) or not len(first):
        raise ValueError("both sides need the same, non-zero number of strata")
    p_values = [
        float(stats.mannwhitneyu(np.asarray(x, float), np.asarray(y, float), alternative="greater", method="exact").pvalue)
        for x, y in zip(first, second)
    ]
    with np.errstate(divide="ignore", invalid="ignore"):  # a stratum with p = 1 has z = -inf, and the combination p = 1
        combined = float(stats.combine_pvalues(p_values, method="stouffer").pvalue)
    return p_values, combined


def wilcoxon_over_pairs(first: np.ndarray, second: np.ndarray, alternative: str = "greater") -> float:
    """The Wilcoxon signed-rank test over every (game, seed) pair of two ``(runs x games)`` arrays
    (:func:`benchmarks.harness.statistics.wilcoxon_p`); NaN when no pair differs."""
    from benchmarks.harness.statistics import wilcoxon_p

    return wilcoxon_p(np.ravel(first), np.ravel(second), alternative)
