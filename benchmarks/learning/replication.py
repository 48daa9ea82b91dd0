"""
The confirmatory replication on MinAtar's five games (``results/replication/minatar5/preregistration.md``): the
``minatar5`` presets of the EWMA comparison, the staleness experiment and the batch size-invariance experiment, run in
the pre-registered order under one deadline (each experiment's runs resume where they stopped), each experiment's own
report written as it goes, then the replication's aggregate report (``results/replication/minatar5/results.md``).

    OMP_NUM_THREADS=1 python -m benchmarks.learning.replication --max-minutes 60   # repeat until "all finished"
    OMP_NUM_THREADS=1 python -m benchmarks.learning.replication --report-only      # the aggregate report alone

The aggregate report implements the pre-registration's statistics exactly (:mod:`benchmarks.harness.aggregate`):
normalized scores, the IQM over runs and games, paired stratified bootstrap intervals (rliable, 50,000 resamples,
seed 0, percentile), the stratified Mann-Whitney test with Stouffer's combination, and the decision rules. An effect
whose runs have not all finished gets the number of runs of each cell and game, and nothing else: no interim look.
"""

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.harness import cli, results_store
from benchmarks.harness.aggregate import (
    REPS,
    SEED,
    Estimate,
    decision,
    normalized,
    stratified_estimates,
    stratified_mann_whitney,
    wilcoxon_over_pairs,
)
from benchmarks.harness.common import RESULTS_DIR, Experiment, Manifest, RunSpec
from benchmarks.harness.envs import short_name
from benchmarks.harness.report import (
    ALGORITHM_LABELS,
    final_values,
    load_evaluations,
    markdown_table,
    mean_std,
    new_figure,
    plot_curves,
    save_figure,
)
from benchmarks.harness.results_store import RUNS_FILE
from benchmarks.learning import batch_size_invariance, ewma_comparison, staleness
from benchmarks.learning.pilot import learns

NAME = "replication"
PRESET = "minatar5"
ORDER: tuple[Experiment, ...] = (ewma_comparison.EXPERIMENT, staleness.EXPERIMENT, batch_size_invariance.EXPERIMENT)
"""The pre-registered order: the EWMA comparison, then staleness, then batch size-invariance."""
RANDOM_RETURNS = {
    "MinAtar/Asterix-v1": 0.33,
    "MinAtar/Breakout-v1": 0.40,
    "MinAtar/Freeway-v1": 0.10,
    "MinAtar/Seaquest-v1": 0.06,
    "MinAtar/SpaceInvaders-v1": 4.2,
}
"""The uniform random policy's mean return per game, from the pilot's table in the pre-registration: the lower end of
the normalization."""
STALENESS_LEVEL = 1 - 0.05 / 3
"""The staleness contrasts' intervals: 98.33%, Bonferroni over the three."""
P3_LEVEL = 0.95
P3_MARGIN = 0.10
"""P3: the decoupled objective's loss from staleness 0 to 2 has an interval holding 0 and a point estimate below this."""
EWMA_LEVEL = 1 - 0.05 / 2
"""The EWMA pair's intervals: 97.5%, Bonferroni over the two."""
BSI_ALPHA = 0.05 / 4
"""The appendix-F tests' level: Bonferroni over the 4 hypotheses of a family of tests."""
DESCRIPTIVE_LEVEL = 0.95

Cell = tuple[Any, ...]


# ----------------------------------------------------------------------------------------------------------------------
# the runs of an effect


@dataclass
class EffectRuns:
    """An experiment's ``minatar5`` runs: its specs, the finished ones' records, and what identifies a cell."""

    experiment: Experiment
    keys: tuple[str, ...]
    specs: list[RunSpec]
    records: dict[str, dict[str, Any]]
    out_dir: Path

    @property
    def finished(self) -> list[RunSpec]:
        return [spec for spec in self.specs if spec.run_id in self.records]

    @property
    def complete(self) -> bool:
        return len(self.finished) == len(self.specs)

    @property
    def games(self) -> list[str]:
        return list(dict.fromkeys(spec.env for spec in self.specs))

    def cells_of(self, spec: RunSpec) -> list[Cell]:
        """The cells a run stands for: its variant's and its aliases' (``keys`` values)."""
        cells = []
        for variant in (spec.variant, *spec.aliases):
            values = {"variant": variant, "n_envs": spec.n_envs, **spec.labels}
            cells.append(tuple(values[key] for key in self.keys))
        return cells

    def counts(self) -> dict[Cell, dict[str, tuple[int, int]]]:
        """Per cell and game: (finished runs, runs)."""
        table: dict[Cell, dict[str, list[int]]] = {}
        for spec in self.specs:
            for cell in self.cells_of(spec):
                count = table.setdefault(cell, {}).setdefault(spec.env, [0, 0])
                count[0] += spec.run_id in self.records
                count[1] += 1
        return {cell: {env: (done, total) for env, (done, total) in games.items()} for cell, games in table.items()}

    def times(self) -> tuple[float, float | None]:
        """The finished runs' summed wall-clock and CPU times, in seconds (CPU None when a record lacks it)."""
        records = [self.records[spec.run_id] for spec in self.finished]
        cpu = [record.get("cpu_time") for record in records]
        return sum(float(record["wall_time"]) for record in records), (
            sum(float(value) for value in cpu) if None not in cpu else None
        )

    def evaluations(self) -> pd.DataFrame:
        """The finished runs' evaluations (one copy per variant a run stands for), ``value`` the mean return carried
        forward over evaluations without a finished episode."""
        frame = load_evaluations(self.specs, self.out_dir)
        if frame.empty:
            return frame
        return frame.assign(value=frame.groupby(["run_id", "variant"])["mean_return"].ffill())

    def finals(self, evaluations: pd.DataFrame) -> pd.DataFrame:
        """The final return (``value``) of every run, per game, cell and seed (:func:`report.final_values`)."""
        return final_values(evaluations, ["env", *self.keys])


def load_effect(experiment: Experiment, keys: Sequence[str], results_dir: Path = RESULTS_DIR) -> EffectRuns:
    """The ``minatar5`` runs of ``experiment`` under ``results_dir`` (its runs.jsonl), as its ``build_specs`` has them."""
    specs = experiment.build_specs(PRESET, {})
    out_dir = results_dir / experiment.name / PRESET
    manifest = Manifest(out_dir / RUNS_FILE)
    records = {spec.run_id: manifest.records[spec.run_id] for spec in specs if manifest.is_done(spec)}
    return EffectRuns(experiment, tuple(keys), specs, records, out_dir)


def score_matrices(finals: pd.DataFrame, keys: Sequence[str], games: Sequence[str], cells: Sequence[Cell]) -> dict:
    """
    The ``(seeds x games)`` final returns of each cell, rows in the order of the seeds (the same seeds in every cell:
    the runs are paired by seed).
    """
    matrices, seeds = {}, None
    for cell in cells:
        mask = np.ones(len(finals), dtype=bool)
        for key, value in zip(keys, cell):
            mask &= (finals[key] == value).to_numpy()
        table = finals[mask].pivot_table(index="seed", columns="env", values="value").reindex(columns=list(games))
        if seeds is None:
            seeds = list(table.index)
        if list(table.index) != seeds or table.isna().to_numpy().any():
            raise ValueError(f"cell {cell} lacks runs: seeds {list(table.index)}, games {list(games)}")
        matrices[cell] = table.to_numpy(dtype=float)
    return matrices


def random_returns(games: Sequence[str]) -> np.ndarray:
    return np.array([RANDOM_RETURNS[game] for game in games])


# ----------------------------------------------------------------------------------------------------------------------
# the decisions


def p3_decision(estimate: Estimate) -> tuple[str, str]:
    """P3 (a non-directional check): *reproduced* when the 95% interval holds 0 and the point estimate is below
    :data:`P3_MARGIN`; otherwise *not reproduced*, with the reason."""
    reasons = []
    if not estimate.contains(0.0):
        reasons.append("its 95% interval excludes 0")
    if not estimate.point < P3_MARGIN:
        reasons.append(f"its point estimate {estimate.point:+.3f} is not below {P3_MARGIN:.2f}")
    if reasons:
        return "not reproduced", " and ".join(reasons)
    return "reproduced", f"its 95% interval holds 0 and its point estimate {estimate.point:+.3f} is below {P3_MARGIN:.2f}"


def conjunction(words: Sequence[str]) -> str:
    """A conjunction of contrasts (P1) is *reproduced* only when each of them is; otherwise *not met*."""
    return "reproduced" if all(word == "reproduced" for word in words) else "not met"


def family_word(passes: Sequence[bool]) -> str:
    """The batch size-invariance effect for a family: *confirmed* when both batch sizes pass, *partly* when one does,
    *not found* when neither does."""
    return {2: "confirmed", 1: "partly", 0: "not found"}[sum(bool(value) for value in passes)]


def _interval(estimate: Estimate, digits: int = 3) -> str:
    return f"{estimate.point:+.{digits}f} [{estimate.low:+.{digits}f}, {estimate.high:+.{digits}f}]"


def _level(level: float) -> str:
    return f"{100 * level:.4g}%"


# ----------------------------------------------------------------------------------------------------------------------
# effect 1: staleness

STALENESS_KEYS = ("variant", "staleness")
STALENESS_CELLS: tuple[Cell, ...] = (
    ("decoupled", 0),
    ("decoupled", 2),
    ("decoupled", 8),
    ("behavior", 2),
    ("behavior", 8),
    ("proximal", 2),
    ("proximal", 8),
    ("ewma", 0),
    ("ewma", 2),
    ("ewma", 8),
)
STALENESS_PRIMARY = {
    "P1, staleness 2: decoupled - recent for both": (("decoupled", 2), ("proximal", 2)),
    "P1, staleness 8: decoupled - recent for both": (("decoupled", 8), ("proximal", 8)),
    "P2, staleness 2: decoupled - behavior for both": (("decoupled", 2), ("behavior", 2)),
}
STALENESS_P3 = {"P3: decoupled, staleness 0 - staleness 2": (("decoupled", 0), ("decoupled", 2))}
STALENESS_EXPLORATORY = {
    "PPO-EWMA - decoupled, staleness 2": (("ewma", 2), ("decoupled", 2)),
    "PPO-EWMA - decoupled, staleness 8": (("ewma", 8), ("decoupled", 8)),
}
STALENESS_REFERENCE: Cell = ("decoupled", 0)
STALENESS_PREDICTIONS = """\
- **P1 (figure 1a), a conjunction**: `proximal` (the recent policy for both roles) below `decoupled` at staleness 2
  **and** at staleness 8.
- **P2 (figure 1c)**: `behavior` (the behavior policy for both roles) below `decoupled` at staleness 2.
- **P3 (figure 1b)**: the decoupled objective's loss from staleness 0 to 2, `IQM(decoupled, 0) - IQM(decoupled, 2)`,
  has a 95% interval holding 0 and a point estimate below 0.10.
- Primary test: the paired IQM difference `decoupled - other` of each of P1's two contrasts and P2's, with its
  stratified bootstrap interval at **98.33% (Bonferroni over the three)**: *reproduced* above 0, *contradicted* below 0,
  *not resolved* otherwise; P1 is met only when both of its contrasts are reproduced. Normalized scores: 0 the random
  policy, 1 the staleness-0 cell's mean (fresh-data PPO at clip 0.3) on the same game."""


def staleness_label(cell: Cell) -> str:
    return f"{cell[0]}, staleness {cell[1]}"


def _label_pairs(pairs: dict[str, tuple[Cell, Cell]], label: Callable[[Cell], str]) -> dict[str, tuple[str, str]]:
    return {name: (label(first), label(second)) for name, (first, second) in pairs.items()}


def analyze_staleness(finals: pd.DataFrame, games: Sequence[str], reps: int = REPS, seed: int = SEED) -> dict[str, Any]:
    """The pre-registered statistics of the staleness effect from the final returns of every run (complete cells)."""
    raw = score_matrices(finals, STALENESS_KEYS, games, STALENESS_CELLS)
    reference = raw[STALENESS_REFERENCE].mean(axis=0)
    scores = {staleness_label(cell): normalized(values, random_returns(games), reference) for cell, values in raw.items()}
    primary_pairs = _label_pairs(STALENESS_PRIMARY, staleness_label)
    p3_pairs = _label_pairs(STALENESS_P3, staleness_label)
    primary = stratified_estimates(scores, primary_pairs, primary_pairs, level=STALENESS_LEVEL, reps=reps, seed=seed)
    exploratory = _label_pairs(STALENESS_EXPLORATORY, staleness_label)
    # P3 (95%, non-directional), the exploratory contrasts and the cells (95%)
    other = stratified_estimates(scores, {**p3_pairs, **exploratory}, p3_pairs, level=P3_LEVEL, reps=reps, seed=seed)
    words = {name: decision(primary["difference"][name]) for name in STALENESS_PRIMARY}
    p3_name = next(iter(STALENESS_P3))
    wilcoxon = {name: wilcoxon_over_pairs(scores[a], scores[b]) for name, (a, b) in {**primary_pairs, **p3_pairs}.items()}
    return {
        "games": list(games),
        "raw": raw,
        "reference": reference,
        "scores": scores,
        "primary": primary,
        "other": other,
        "words": words,
        "p3": p3_decision(other["difference"][p3_name]),
        "wilcoxon": wilcoxon,
    }


def staleness_verdict(words: dict[str, str], p3: tuple[str, str]) -> str:
    """The one-line verdict in the pre-registration's terms."""
    p1_names = [name for name in STALENESS_PRIMARY if name.startswith("P1")]
    p1 = conjunction([words[name] for name in p1_names])
    parts = ", ".join(f"staleness {STALENESS_PRIMARY[name][0][1]}: {words[name]}" for name in p1_names)
    p2 = words[next(name for name in STALENESS_PRIMARY if name.startswith("P2"))]
    return f"P1 (a conjunction) {p1} ({parts}); P2 {p2}; P3 {p3[0]} ({p3[1]})."


def behavior_recent_kl(effect: EffectRuns) -> dict[str, float]:
    """Per game, the median over the runs of the decoupled staleness-2 cell of each run's median ``KL[behav, recent]``
    over its trained iterations (exploratory: the quantity the Breakout runs pointed to)."""
    medians: dict[str, list[float]] = {}
    for spec in effect.finished:
        if spec.variant != "decoupled" or spec.labels.get("staleness") != 2:
            continue
        data = effect.records[spec.run_id].get("diagnostics")
        if not data:
            continue
        frame = pd.DataFrame(results_store.table_rows(data), columns=data["columns"])
        medians.setdefault(spec.env, []).append(float(frame[frame["trained"] == 1]["recent_behavior_kl"].median()))
    return {game: float(np.median(values)) for game, values in medians.items()}


# ----------------------------------------------------------------------------------------------------------------------
# effect 2: batch size-invariance

BSI_KEYS = ("variant", "n_envs")
BSI_REFERENCE = 16
BSI_SMALLER = (4, 1)
BSI_VARIANTS = ("ppg_ewma", "no_lr", "ppg", "ppo_ewma", "ppo_no_lr", "ppo")
BSI_PRIMARY = {"PPG-EWMA": ("no_lr", "ppg_ewma"), "PPO-EWMA": ("ppo_no_lr", "ppo_ewma")}
"""Per family: (the ablation without the Adam step size adjustment, all adjustments)."""
BSI_SECONDARY = {"PPG-EWMA": ("ppg", "ppg_ewma"), "PPO-EWMA": ("ppo", "ppo_ewma")}
"""Per family: (the ablation without the EWMA, all adjustments)."""
BSI_PREDICTIONS = """\
- **The effect** ("the Adam step size adjustment is what keeps training invariant"), appendix F's test: with
  `d(variant, n) = R(variant, n) - R(reference)` per game and seed (the reference: the same algorithm's 16-environment
  run of that seed), for each family (PPG-EWMA, PPO-EWMA) and each `n` in {4, 1}, `|d(no Adam adjustment, n)|` tends
  to be larger than `|d(all adjustments, n)|`: per game the one-sided exact Mann-Whitney U test on the 4 against 4
  values, the three games combined by Stouffer's method with equal weights. **4 hypotheses, Bonferroni level 0.0125.**
  *Confirmed* for a family when both its batch sizes pass, *partly* when one does, *not found* when neither does.
- Secondary (Bonferroni over its own 4): the same test for the no-EWMA arm against all adjustments.
- Descriptive: per variant, the IQM of normalized scores (0 the random policy, 1 the mean of the variant's own
  16-environment runs on the game) at 16, 4 and 1 environments with 95% stratified intervals, and the spread (max -
  min) of those three IQMs."""


def envs_label(n_envs: int) -> str:
    return f"{n_envs} env" + ("" if n_envs == 1 else "s")


def bsi_label(cell: Cell) -> str:
    return f"{cell[0]}, {envs_label(cell[1])}"


def appendix_f(raw: dict[Cell, np.ndarray], pairs: dict[str, tuple[str, str]]) -> dict[str, dict[int, dict[str, Any]]]:
    """
    Appendix F's stratified test of each family at each smaller batch size: per game the one-sided exact Mann-Whitney
    test of the ablation's ``|d|`` against all adjustments' (``d``: the final return minus the same variant's
    16-environment run of the same seed), Stouffer's combination over the games, and whether it passes at
    :data:`BSI_ALPHA`.
    """
    results: dict[str, dict[int, dict[str, Any]]] = {}
    for family, (ablation, full) in pairs.items():
        for n in BSI_SMALLER:
            departures = [np.abs(raw[(variant, n)] - raw[(variant, BSI_REFERENCE)]) for variant in (ablation, full)]
            games = departures[0].shape[1]
            p_values, combined = stratified_mann_whitney(
                [departures[0][:, game] for game in range(games)], [departures[1][:, game] for game in range(games)]
            )
            results.setdefault(family, {})[n] = {
                "p_values": p_values,
                "combined": combined,
                "passes": combined < BSI_ALPHA,
                "mean_departures": (float(departures[0].mean()), float(departures[1].mean())),
            }
    return results


def analyze_batch_size_invariance(
    finals: pd.DataFrame, games: Sequence[str], reps: int = REPS, seed: int = SEED
) -> dict[str, Any]:
    """The pre-registered statistics of the batch size-invariance effect (complete cells)."""
    cells = [(variant, n) for variant in BSI_VARIANTS for n in (BSI_REFERENCE, *BSI_SMALLER)]
    raw = score_matrices(finals, BSI_KEYS, games, cells)
    scores = {
        bsi_label(cell): normalized(values, random_returns(games), raw[(cell[0], BSI_REFERENCE)].mean(axis=0))
        for cell, values in raw.items()
    }
    spreads = {variant: [bsi_label((variant, n)) for n in (BSI_REFERENCE, *BSI_SMALLER)] for variant in BSI_VARIANTS}
    primary = appendix_f(raw, BSI_PRIMARY)
    return {
        "games": list(games),
        "raw": raw,
        "primary": primary,
        "secondary": appendix_f(raw, BSI_SECONDARY),
        "words": {family: family_word([primary[family][n]["passes"] for n in BSI_SMALLER]) for family in BSI_PRIMARY},
        "descriptive": stratified_estimates(scores, spreads=spreads, level=DESCRIPTIVE_LEVEL, reps=reps, seed=seed),
    }


def bsi_verdict(words: dict[str, str], primary: dict[str, dict[int, dict[str, Any]]]) -> str:
    """The one-line verdict in the pre-registration's terms."""
    parts = []
    for family, word in words.items():
        tests = ", ".join(
            f"{envs_label(n)}: {'passes' if primary[family][n]['passes'] else 'fails'} "
            f"(p = {primary[family][n]['combined']:.3g})"
            for n in BSI_SMALLER
        )
        parts.append(f"{family}: {word} ({tests})")
    return "; ".join(parts) + f", at the Bonferroni level {BSI_ALPHA:g}."


# ----------------------------------------------------------------------------------------------------------------------
# effect 3: EWMA against none

EWMA_KEYS = ("variant",)
EWMA_CELLS: tuple[Cell, ...] = (("ppo",), ("ppo_ewma",), ("ppg",), ("ppg_ewma",))
EWMA_PRIMARY = {
    "P1: PPO-EWMA - PPO": (("ppo_ewma",), ("ppo",)),
    "P2: PPG-EWMA - PPG": (("ppg_ewma",), ("ppg",)),
}
EWMA_PREDICTIONS = """\
- **P1**: PPO-EWMA above PPO; **P2**: PPG-EWMA above PPG.
- Primary test: the paired IQM difference (EWMA minus none) with its stratified bootstrap interval at **97.5%
  (Bonferroni over the two)**: *reproduced* above 0, *contradicted* below 0, *not resolved* otherwise, with the gain
  the interval rules out stated. Normalized scores: 0 the random policy, 1 SB3 PPO's mean on the same game."""


def ewma_label(cell: Cell) -> str:
    return ALGORITHM_LABELS[cell[0]]


def analyze_ewma(finals: pd.DataFrame, games: Sequence[str], reps: int = REPS, seed: int = SEED) -> dict[str, Any]:
    """The pre-registered statistics of the EWMA comparison (complete cells)."""
    raw = score_matrices(finals, EWMA_KEYS, games, EWMA_CELLS)
    reference = raw[("ppo",)].mean(axis=0)
    scores = {ewma_label(cell): normalized(values, random_returns(games), reference) for cell, values in raw.items()}
    pairs = _label_pairs(EWMA_PRIMARY, ewma_label)
    primary = stratified_estimates(scores, pairs, pairs, level=EWMA_LEVEL, reps=reps, seed=seed)
    return {
        "games": list(games),
        "raw": raw,
        "reference": reference,
        "scores": scores,
        "primary": primary,
        "cells": stratified_estimates(scores, level=DESCRIPTIVE_LEVEL, reps=reps, seed=seed),
        "words": {name: decision(primary["difference"][name]) for name in EWMA_PRIMARY},
        "wilcoxon": {name: wilcoxon_over_pairs(scores[a], scores[b]) for name, (a, b) in pairs.items()},
    }


def ewma_verdict(words: dict[str, str], differences: dict[str, Estimate]) -> str:
    """The one-line verdict in the pre-registration's terms, with the gain each interval rules out."""
    parts = []
    for name, word in words.items():
        estimate = differences[name]
        bound = f"rules out a gain above {estimate.high:+.3f} ({100 * estimate.high:.1f}% of PPO's normalized return)"
        parts.append(f"{name.split(':')[0]} {word}: {_interval(estimate)} at {_level(EWMA_LEVEL)}, {bound}")
    return "; ".join(parts) + "."


# ----------------------------------------------------------------------------------------------------------------------
# tables and figures


def counts_table(effect: EffectRuns, label: Callable[[Cell], str]) -> str:
    """Finished runs / runs of each cell on each game."""
    counts = effect.counts()
    header = ["cell", *(short_name(game) for game in effect.games)]
    rows = [[label(cell), *(f"{games[game][0]}/{games[game][1]}" for game in effect.games)] for cell, games in counts.items()]
    return markdown_table(header, rows)


def partial_section(effect: EffectRuns, label: Callable[[Cell], str]) -> str:
    """An effect whose runs have not all finished: its runs per cell and game, and nothing concluded."""
    done, total = len(effect.finished), len(effect.specs)
    return "\n\n".join(
        [
            f"**Not finished: {done} of {total} runs.** Nothing is concluded and no statistic is computed until every "
            "run of the effect's cells has finished (the pre-registration: no interim look decides anything). Finished "
            "runs / runs of each cell on each game:",
            counts_table(effect, label),
        ]
    )


def final_returns_table(raw: dict[Cell, np.ndarray], games: Sequence[str], label: Callable[[Cell], str]) -> str:
    """Per cell and game: the mean +- sample standard deviation of the final returns over seeds, beside the random
    policy's return."""
    rows = [["random policy (pilot)", *(f"{RANDOM_RETURNS[game]:.3g}" for game in games)]]
    for cell, values in raw.items():
        rows.append([label(cell), *(mean_std(values[:, g].mean(), values[:, g].std(ddof=1)) for g in range(len(games)))])
    return markdown_table(["cell", *(short_name(game) for game in games)], rows)


def per_game_differences(scores: dict[str, np.ndarray], pairs: dict[str, tuple[str, str]], games: Sequence[str]) -> str:
    """Per contrast and game: the mean over seeds of the paired differences of normalized scores."""
    rows = [
        [name, *(f"{(scores[a][:, g] - scores[b][:, g]).mean():+.3f}" for g in range(len(games)))]
        for name, (a, b) in pairs.items()
    ]
    return markdown_table(["contrast (normalized)", *(short_name(game) for game in games)], rows)


def unstable_games(reference: np.ndarray, games: Sequence[str]) -> str:
    """The pre-registration's note on a game whose reference does not learn by the pilot's criterion (empty if none)."""
    failing = [game for game, value in zip(games, reference) if not learns(float(value), RANDOM_RETURNS[game])]
    if not failing:
        return ""
    names = ", ".join(short_name(game) for game in failing)
    return (
        f"On {names} the reference does not beat the random policy by the pilot's criterion (twice its return and one "
        "point above): the game stays in the aggregate, and its normalization is unstable."
    )


def contrasts_table(
    estimates: dict[str, Estimate],
    level: float,
    words: dict[str, str] | None = None,
    improvements: dict[str, Estimate] | None = None,
    wilcoxon: dict[str, float] | None = None,
) -> str:
    """The IQM differences with their intervals, the decision, and the secondary statistics (where given)."""
    rows = []
    for name, estimate in estimates.items():
        row = [name, f"{estimate.point:+.3f}", f"[{estimate.low:+.3f}, {estimate.high:+.3f}]"]
        if words is not None:
            row.append(words.get(name, "-"))
        if improvements is not None:
            poi = improvements.get(name)
            row.append("-" if poi is None else f"{poi.point:.3f} [{poi.low:.3f}, {poi.high:.3f}]")
        if wilcoxon is not None:
            row.append(f"{wilcoxon[name]:.3g}" if name in wilcoxon else "-")
        rows.append(row)
    header = ["contrast (first - second)", "IQM difference", f"{_level(level)} interval"]
    header += [*(["decision"] if words is not None else [])]
    header += [*([f"probability of improvement [{_level(level)}]"] if improvements is not None else [])]
    header += [*(["Wilcoxon p (one-sided, first greater)"] if wilcoxon is not None else [])]
    return markdown_table(header, rows)


def cells_table(estimates: dict[str, Estimate], level: float) -> str:
    rows = [[name, f"{e.point:.3f}", f"[{e.low:.3f}, {e.high:.3f}]"] for name, e in estimates.items()]
    return markdown_table(["cell", "IQM of normalized scores", f"{_level(level)} interval"], rows)


def aggregate_figure(
    cells: dict[str, Estimate],
    contrasts: dict[str, tuple[Estimate, float]],
    path: Path,
    title: str,
    contrast_label: str = "IQM difference",
) -> str:
    """The cells' IQMs with their intervals (left) and the contrasts' IQM differences with theirs (right)."""
    figure, axes = new_figure(1, 2, width=6.0, height=0.35 * max(len(cells), len(contrasts)) + 1.6)
    for ax, items, xlabel in (
        (axes[0, 0], {name: (estimate, DESCRIPTIVE_LEVEL) for name, estimate in cells.items()}, "IQM of normalized scores"),
        (axes[0, 1], contrasts, contrast_label),
    ):
        names = list(items)[::-1]
        points = np.array([items[name][0].point for name in names])
        lows = points - np.array([items[name][0].low for name in names])
        highs = np.array([items[name][0].high for name in names]) - points
        ax.errorbar(points, range(len(names)), xerr=[lows, highs], fmt="o", capsize=3)
        ax.set_yticks(range(len(names)), [f"{name} ({_level(items[name][1])})" for name in names], fontsize=7)
        ax.axvline(0 if ax is axes[0, 1] else 1, color="grey", linewidth=0.8, linestyle="--")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3, axis="x")
    figure.suptitle(title, fontsize=9)
    return save_figure(figure, path)


def curves_figure(
    evaluations: pd.DataFrame,
    games: Sequence[str],
    panels: Sequence[tuple[str, Callable[[pd.DataFrame], pd.DataFrame], str, Sequence[Any], Callable[[Any], str]]],
    path: Path,
) -> str:
    """Per game (rows) and panel (columns): the learning curves (mean over seeds, +- one sample standard deviation)
    of the panel's runs, one curve per value of its hue column."""
    figure, axes = new_figure(len(games), len(panels), width=3.8, height=2.9)
    for row, game in enumerate(games):
        frame = evaluations[evaluations["env"] == game]
        for column, (title, select, hue, order, label) in enumerate(panels):
            plot_curves(axes[row, column], select(frame), hue, order, label, f"{short_name(game)}: {title}", band="std")
    return save_figure(figure, path)


# ----------------------------------------------------------------------------------------------------------------------
# the sections


def staleness_section(effect: EffectRuns, out_dir: Path, reps: int = REPS) -> str:
    lines = ["## Effect 1: staleness (paper figure 1)", "Pre-registered predictions and test:", STALENESS_PREDICTIONS]
    if not effect.complete:
        return "\n\n".join([*lines, partial_section(effect, staleness_label)])
    evaluations = effect.evaluations()
    result = analyze_staleness(effect.finals(evaluations), effect.games, reps)
    games = result["games"]
    primary, other = result["primary"], result["other"]
    p3_name = next(iter(STALENESS_P3))
    contrasts = {name: (primary["difference"][name], STALENESS_LEVEL) for name in STALENESS_PRIMARY}
    contrasts.update({name: (other["difference"][name], P3_LEVEL) for name in (*STALENESS_P3, *STALENESS_EXPLORATORY)})
    figure = aggregate_figure(
        other["iqm"], contrasts, out_dir / "replication_staleness_aggregate.png", "staleness: IQM of normalized scores"
    )
    levels = sorted({cell[1] for cell in STALENESS_CELLS})
    panels = [
        (
            f"staleness {level}",
            lambda frame, level=level: frame[frame["staleness"] == level],
            "variant",
            [cell[0] for cell in STALENESS_CELLS if cell[1] == level],
            str,
        )
        for level in levels
    ]
    curves = curves_figure(evaluations, games, panels, out_dir / "replication_staleness_curves.png")
    kl = behavior_recent_kl(effect)
    kl_table = markdown_table(
        ["game", "median KL[behav, recent], decoupled at staleness 2"],
        [[short_name(game), f"{kl[game]:.4g}" if game in kl else "-"] for game in games],
    )
    p3_pairs = _label_pairs(STALENESS_P3, staleness_label)
    return "\n\n".join(
        [
            *lines,
            f"**Verdict: {staleness_verdict(result['words'], result['p3'])}**",
            "### Primary tests (aggregate over the five games)",
            contrasts_table(
                {name: primary["difference"][name] for name in STALENESS_PRIMARY},
                STALENESS_LEVEL,
                result["words"],
                primary["improvement"],
                result["wilcoxon"],
            ),
            contrasts_table(
                {p3_name: other["difference"][p3_name]},
                P3_LEVEL,
                {p3_name: result["p3"][0]},
                other["improvement"],
                result["wilcoxon"],
            ),
            "The probability of improvement and the Wilcoxon signed-rank test (over the (game, seed) pairs of "
            "normalized scores) are secondary: they decide nothing.",
            figure,
            "### Cells",
            cells_table(other["iqm"], DESCRIPTIVE_LEVEL),
            unstable_games(result["reference"], games),
            "### Per game",
            "Final returns (mean +- sample standard deviation over seeds):",
            final_returns_table(result["raw"], games, staleness_label),
            "Mean paired difference of normalized scores per game:",
            per_game_differences(
                result["scores"],
                {**_label_pairs(STALENESS_PRIMARY, staleness_label), **p3_pairs},
                games,
            ),
            "Learning curves (mean over seeds +- one sample standard deviation):",
            curves,
            "### Exploratory (no prediction)",
            contrasts_table({name: other["difference"][name] for name in STALENESS_EXPLORATORY}, P3_LEVEL),
            kl_table,
        ]
    )


def stouffer_note(result: dict[str, Any]) -> str:
    """A note where a game's exact p-value is 1: its z is -inf, and Stouffer's combination of its test is then 1."""
    tests = [test for kind in ("primary", "secondary") for family in result[kind].values() for test in family.values()]
    if not any(p == 1.0 for test in tests for p in test["p_values"]):
        return ""
    return (
        "A game whose exact p-value is 1 (every departure of the ablation below every one of all adjustments) has "
        "z = -inf in Stouffer's combination, whose p-value is then 1 whatever the other games give."
    )


def batch_size_invariance_section(effect: EffectRuns, out_dir: Path, reps: int = REPS) -> str:
    lines = [
        "## Effect 2: batch size-invariance (paper figures 2-3, appendix F)",
        "Pre-registered predictions and test:",
        BSI_PREDICTIONS,
    ]
    if not effect.complete:
        return "\n\n".join([*lines, partial_section(effect, bsi_label)])
    evaluations = effect.evaluations()
    result = analyze_batch_size_invariance(effect.finals(evaluations), effect.games, reps)
    games = result["games"]

    def tests_table(tests: dict[str, dict[int, dict[str, Any]]], pairs: dict[str, tuple[str, str]]) -> str:
        rows = []
        for family, (ablation, full) in pairs.items():
            for n, test in tests[family].items():
                per_game = ", ".join(f"{short_name(game)} {p:.3g}" for game, p in zip(games, test["p_values"]))
                means = f"{test['mean_departures'][0]:.3g} / {test['mean_departures'][1]:.3g}"
                verdict = "passes" if test["passes"] else "fails"
                rows.append([f"{family}: {ablation} vs {full}", n, means, per_game, f"{test['combined']:.3g}", verdict])
        header = ["family: ablation vs all adjustments", "envs", "mean abs(d): ablation / all", "exact p per game"]
        return markdown_table([*header, "Stouffer p", f"at {BSI_ALPHA:g}"], rows)

    descriptive = result["descriptive"]
    rows = []
    for variant in BSI_VARIANTS:
        cells = [descriptive["iqm"][bsi_label((variant, n))] for n in (BSI_REFERENCE, *BSI_SMALLER)]
        spread = descriptive["spread"][variant]
        rows.append([variant, *(f"{e.point:.3f} [{e.low:.3f}, {e.high:.3f}]" for e in cells)])
        rows[-1].append(f"{spread.point:.3f} [{spread.low:.3f}, {spread.high:.3f}]")
    header = ["variant", *(envs_label(n) for n in (BSI_REFERENCE, *BSI_SMALLER)), "spread"]
    figure = aggregate_figure(
        descriptive["iqm"],
        {f"spread of {variant}": (descriptive["spread"][variant], DESCRIPTIVE_LEVEL) for variant in BSI_VARIANTS},
        out_dir / "replication_batch_size_invariance_aggregate.png",
        "batch size-invariance: IQM of normalized scores (1 = the variant's own 16-environment mean)",
        "spread (max - min) of a variant's three IQMs",
    )
    panels = [
        (
            variant,
            lambda frame, variant=variant: frame[frame["variant"] == variant],
            "n_envs",
            [BSI_REFERENCE, *BSI_SMALLER],
            envs_label,
        )
        for variant in BSI_VARIANTS
    ]
    curves = curves_figure(evaluations, games, panels, out_dir / "replication_batch_size_invariance_curves.png")
    return "\n\n".join(
        [
            *lines,
            f"**Verdict: {bsi_verdict(result['words'], result['primary'])}**",
            "### Primary test: appendix F, without the Adam step size adjustment against all adjustments",
            tests_table(result["primary"], BSI_PRIMARY),
            "### Secondary: without the EWMA against all adjustments (Bonferroni over its own 4)",
            tests_table(result["secondary"], BSI_SECONDARY),
            stouffer_note(result),
            f"### Descriptive: IQM of normalized scores [{_level(DESCRIPTIVE_LEVEL)}] and the spread over batch sizes",
            markdown_table(header, rows),
            figure,
            "### Per game",
            "Final returns (mean +- sample standard deviation over seeds):",
            final_returns_table(result["raw"], games, bsi_label),
            "Learning curves (mean over seeds +- one sample standard deviation), one panel per variant:",
            curves,
        ]
    )


def ewma_section(effect: EffectRuns, out_dir: Path, reps: int = REPS) -> str:
    lines = ["## Effect 3: EWMA against none (paper figure 4)", "Pre-registered predictions and test:", EWMA_PREDICTIONS]
    if not effect.complete:
        return "\n\n".join([*lines, partial_section(effect, ewma_label)])
    evaluations = effect.evaluations()
    result = analyze_ewma(effect.finals(evaluations), effect.games, reps)
    games = result["games"]
    primary = result["primary"]
    differences = {name: primary["difference"][name] for name in EWMA_PRIMARY}
    figure = aggregate_figure(
        result["cells"]["iqm"],
        {name: (estimate, EWMA_LEVEL) for name, estimate in differences.items()},
        out_dir / "replication_ewma_comparison_aggregate.png",
        "EWMA against none: IQM of normalized scores (1 = PPO's mean)",
    )
    panels = [
        (
            f"{ALGORITHM_LABELS[baseline]} vs {ALGORITHM_LABELS[ewma]}",
            lambda frame: frame,
            "variant",
            [baseline, ewma],
            ALGORITHM_LABELS.get,
        )
        for baseline, ewma in ewma_comparison.PAIRS
    ]
    curves = curves_figure(evaluations, games, panels, out_dir / "replication_ewma_comparison_curves.png")
    return "\n\n".join(
        [
            *lines,
            f"**Verdict: {ewma_verdict(result['words'], differences)}**",
            "### Primary tests (aggregate over the five games)",
            contrasts_table(differences, EWMA_LEVEL, result["words"], primary["improvement"], result["wilcoxon"]),
            "The probability of improvement and the Wilcoxon signed-rank test (over the (game, seed) pairs of "
            "normalized scores) are secondary: they decide nothing.",
            figure,
            "### Cells",
            cells_table(result["cells"]["iqm"], DESCRIPTIVE_LEVEL),
            unstable_games(result["reference"], games),
            "### Per game",
            "Final returns (mean +- sample standard deviation over seeds):",
            final_returns_table(result["raw"], games, ewma_label),
            "Mean paired difference of normalized scores per game:",
            per_game_differences(result["scores"], _label_pairs(EWMA_PRIMARY, ewma_label), games),
            "Learning curves (mean over seeds +- one sample standard deviation):",
            curves,
        ]
    )


EFFECTS: tuple[tuple[Experiment, tuple[str, ...], Callable[[EffectRuns, Path, int], str]], ...] = (
    (staleness.EXPERIMENT, STALENESS_KEYS, staleness_section),
    (batch_size_invariance.EXPERIMENT, BSI_KEYS, batch_size_invariance_section),
    (ewma_comparison.EXPERIMENT, EWMA_KEYS, ewma_section),
)
"""The effects in the pre-registration's order, each with what identifies its cells and its section."""

METHODS = f"""\
- Final return of a run: the mean of its evaluations in the last 25% of training (an evaluation: the mean return of
  the training episodes that ended since the previous one, carried forward when none ended).
- Normalized score on a game: `(R - R_random) / (R_reference - R_random)`, `R_random` the pilot's random-policy return
  (pre-registration's table), `R_reference` the mean over seeds of the effect's reference cell on that game.
- Aggregate: the interquartile mean (IQM) over all runs of all games (`rliable.metrics.aggregate_iqm`); a difference
  is `IQM(first) - IQM(second)`.
- Intervals: `rliable.library.get_interval_estimates`, stratified bootstrap over seeds within each game (games not
  resampled), percentile, {REPS:,} resamples, seed {SEED}; **paired**: each resample draws the same seeds for every
  cell (`benchmarks/harness/aggregate.py` says how: rliable resamples a list of arrays independently, so the array
  resampled holds the seeds' positions; and rliable 1.2 draws from numpy's global generator, seeded with {SEED} for
  each call).
- Secondary, deciding nothing: the probability of improvement (`rliable.metrics.probability_of_improvement`, same
  interval) and the one-sided Wilcoxon signed-rank test over the (game, seed) pairs (`scipy.stats.wilcoxon`).
- Standard deviations are sample standard deviations (n - 1)."""


def times_table(effects: Sequence[EffectRuns]) -> str:
    rows = []
    total_wall, total_cpu = 0.0, 0.0
    for effect in effects:
        wall, cpu = effect.times()
        total_wall += wall
        total_cpu += cpu or 0.0
        cpu_text = "-" if cpu is None else f"{cpu / 3600:.2f}"
        rows.append([effect.experiment.name, f"{len(effect.finished)} of {len(effect.specs)}", f"{wall / 3600:.2f}", cpu_text])
    total_runs = sum(len(effect.finished) for effect in effects), sum(len(effect.specs) for effect in effects)
    rows.append(["all", f"{total_runs[0]} of {total_runs[1]}", f"{total_wall / 3600:.2f}", f"{total_cpu / 3600:.2f}"])
    return markdown_table(["experiment", "runs finished", "wall time of the runs (h)", "CPU time of the runs (h)"], rows)


def write_report(results_dir: Path = RESULTS_DIR, reps: int = REPS, command: str = "") -> Path:
    """Write ``<results_dir>/replication/minatar5/results.md`` and its figures from the three experiments' runs."""
    out_dir = results_dir / NAME / PRESET
    out_dir.mkdir(parents=True, exist_ok=True)
    effects = [(load_effect(experiment, keys, results_dir), section) for experiment, keys, section in EFFECTS]
    parts = [
        "# The paper's three effects on MinAtar's five games: the confirmatory replication",
        "The pre-registration, committed before any of these runs: [preregistration.md](preregistration.md). Each "
        "effect below gives its pre-registered prediction and test, and once all of its runs have finished, the "
        "aggregate result with its interval, the per-game tables and curves and a one-line verdict in the "
        "pre-registration's terms.",
        f"- command: `{command or 'python -m benchmarks.learning.replication --report-only'}`; report written "
        f"{time.strftime('%Y-%m-%d %H:%M')} (machine: {platform.machine()}, {os.cpu_count()} cores)",
        "## Runs and compute",
        times_table([effect for effect, _ in effects]),
        "Wall and CPU times are the sums over the finished runs of their records in each experiment's `runs.jsonl` "
        "(one torch thread per run; one or two runs at a time on a 2-core machine, beside other work, and paused while "
        "timing benchmarks ran, so a run's wall time includes its waits for a core and its pauses, and its CPU time is "
        "the better measure of its cost).",
        "## Methods (the pre-registration's)",
        METHODS,
    ]
    parts += [section(effect, out_dir, reps) for effect, section in effects]
    path = out_dir / "results.md"
    path.write_text("\n\n".join(part for part in parts if part) + "\n")
    print(f"report: {path}")
    return path


def unfinished(experiment: Experiment) -> int:
    """The number of the experiment's ``minatar5`` runs that have not finished."""
    specs = experiment.build_specs(PRESET, {})
    manifest = Manifest(RESULTS_DIR / experiment.name / PRESET / RUNS_FILE)
    return sum(not manifest.is_done(spec) for spec in specs)


def main(argv: Sequence[str] | None = None) -> None:
    """Run (or resume) the replication's runs in order, within ``--max-minutes``, then write the aggregate report."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-minutes", type=float, default=None, help="stop (checkpointing runs) within this time")
    parser.add_argument("--workers", type=int, default=1, help="parallel runs")
    parser.add_argument("--report-only", action="store_true", help="only write the aggregate report")
    args = parser.parse_args(argv)
    command = "python -m benchmarks.learning.replication " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.report_only:
        write_report(command=command.strip())
        return
    deadline = time.time() + 60 * args.max_minutes if args.max_minutes else None
    for experiment in ORDER:
        if not unfinished(experiment):
            print(f"{experiment.name}: all finished")
            continue
        left = None if deadline is None else (deadline - time.time()) / 60
        if left is not None and left < 1:
            break
        arguments = ["--preset", PRESET, "--workers", str(args.workers)]
        cli.main(experiment, [*arguments, *([] if left is None else ["--max-minutes", f"{left:.2f}"])])
    pending = {experiment.name: unfinished(experiment) for experiment in ORDER}
    if any(pending.values()):
        print(f"runs left: {pending}; run the same command again to continue")
    else:
        print("all finished")
    write_report(command="python -m benchmarks.learning.replication --report-only")


if __name__ == "__main__":
    main()
