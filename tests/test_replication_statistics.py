"""The replication's statistics (benchmarks.harness.aggregate, benchmarks.learning.replication) on cases computed by
hand, the pre-registration's decision rules on synthetic results, and the report that concludes nothing from an
unfinished effect."""

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `benchmarks` is a directory of the repository, not an installed package
    sys.path.insert(0, str(ROOT))

pytest.importorskip("rliable")

from benchmarks.harness import aggregate, results_store  # noqa: E402
from benchmarks.harness.aggregate import Estimate  # noqa: E402
from benchmarks.harness.common import Manifest  # noqa: E402
from benchmarks.learning import replication  # noqa: E402

REPS = 400
"""Resamples in these tests (the report's are 50,000): enough for intervals of exact or well separated data."""
GAMES = list(replication.RANDOM_RETURNS)


def test_stratified_mann_whitney_by_hand():
    # 3 against 3, fully separated: U = 9, and 1 of the C(6, 3) = 20 assignments is as extreme: p = 1/20
    p_values, combined = aggregate.stratified_mann_whitney([[4.0, 5.0, 6.0]], [[1.0, 2.0, 3.0]])
    assert p_values == [pytest.approx(1 / 20)] and combined == pytest.approx(1 / 20)  # one stratum: its own p
    # 4 against 4, fully separated: 1 / C(8, 4) = 1/70; three such games: Stouffer's z = 3 z(1/70) / sqrt(3)
    separated = ([[5.0, 6.0, 7.0, 8.0]] * 3, [[1.0, 2.0, 3.0, 4.0]] * 3)
    p_values, combined = aggregate.stratified_mann_whitney(*separated)
    assert p_values == [pytest.approx(1 / 70)] * 3
    assert combined == pytest.approx(stats.norm.sf(3 * stats.norm.isf(1 / 70) / math.sqrt(3)))
    assert combined < replication.BSI_ALPHA < 1 / 70  # no game passes alone; three together do
    # Stouffer's combination is the normal formula for any p-values
    first, second = [[3.0, 1.0, 2.5], [0.5, 2.0, 1.0]], [[2.0, 0.0, 1.5], [1.5, 0.7, 0.2]]
    p_values, combined = aggregate.stratified_mann_whitney(first, second)
    assert combined == pytest.approx(stats.norm.sf(sum(stats.norm.isf(p) for p in p_values) / math.sqrt(2)))
    # every ablation departure below every full one: p = 1, z = -inf, and the combination is 1
    assert aggregate.stratified_mann_whitney([[1.0, 2.0], [5.0, 6.0]], [[3.0, 4.0], [1.0, 2.0]])[1] == 1.0


def test_the_paired_stratified_bootstrap():
    rng = np.random.default_rng(1)
    # seeds far apart (a wide spread between seeds), every pair 0.3 apart: the paired IQM difference is 0.3 in every
    # resample, its interval [0.3, 0.3] excludes 0; rliable's unpaired bootstrap of the same cells holds 0
    second = rng.normal(0.0, 3.0, size=(4, 5))
    first = second + 0.3
    result = aggregate.stratified_estimates({"a": first, "b": second}, {"a - b": ("a", "b")}, reps=REPS)
    estimate = result["difference"]["a - b"]
    assert (estimate.point, estimate.low, estimate.high) == pytest.approx((0.3, 0.3, 0.3))
    assert replication.decision(estimate) == "reproduced"
    from rliable import library, metrics

    np.random.seed(0)
    _, unpaired = library.get_interval_estimates(
        {"a - b": [first, second]}, lambda x, y: np.array([metrics.aggregate_iqm(x) - metrics.aggregate_iqm(y)]), reps=REPS
    )
    assert unpaired["a - b"][0, 0] < 0 < unpaired["a - b"][1, 0]
    # symmetric noise around no difference: the interval holds 0
    noise = np.where(np.arange(4)[:, None] % 2 == 0, 0.5, -0.5) * np.ones((4, 5))
    noisy = aggregate.stratified_estimates({"a": second + noise, "b": second}, {"a - b": ("a", "b")}, reps=REPS)
    assert noisy["difference"]["a - b"].contains(0.0)
    assert replication.decision(noisy["difference"]["a - b"]) == "not resolved"


def test_stratified_estimates_match_rliable_and_do_not_depend_on_the_global_generator():
    from rliable import metrics

    rng = np.random.default_rng(2)
    cells = {name: rng.normal(size=(6, 3)) for name in ("x", "y", "z")}
    args = dict(differences={"x - y": ("x", "y")}, improvements={"x > y": ("x", "y")}, spreads={"all": ["x", "y", "z"]})
    np.random.seed(123)
    state = np.random.get_state()
    result = aggregate.stratified_estimates(cells, **args, level=0.9, reps=REPS)
    assert np.array_equal(np.random.get_state()[1], state[1])  # the global generator is left as it was
    np.random.seed(7)
    assert aggregate.stratified_estimates(cells, **args, level=0.9, reps=REPS) == result  # seed 0, whatever the global
    assert result["iqm"]["x"].point == pytest.approx(metrics.aggregate_iqm(cells["x"]))
    assert result["improvement"]["x > y"].point == pytest.approx(metrics.probability_of_improvement(cells["x"], cells["y"]))
    iqms = [metrics.aggregate_iqm(cells[name]) for name in "xyz"]
    assert result["spread"]["all"].point == pytest.approx(max(iqms) - min(iqms))
    for estimate in (*result["iqm"].values(), *result["difference"].values(), *result["improvement"].values()):
        assert estimate.low <= estimate.point <= estimate.high
    # the vectorized statistics of a resample are rliable's, ties included (scores on a grid of 3 values)
    grid = {name: rng.integers(0, 3, size=(5, 4)).astype(float) for name in ("x", "y")}
    stacked = np.stack([grid["x"], grid["y"]])
    for _ in range(20):
        positions = rng.integers(0, 5, size=(5, 4))
        x, y = (np.take_along_axis(grid[name], positions, axis=0) for name in ("x", "y"))
        iqms = aggregate._iqms(np.take_along_axis(stacked, positions[None], axis=1))
        assert iqms == pytest.approx([metrics.aggregate_iqm(x), metrics.aggregate_iqm(y)], abs=1e-12)
        assert aggregate._improvements(np.hstack([x, y]), np.hstack([y, x]), 2) == pytest.approx(
            [metrics.probability_of_improvement(x, y), metrics.probability_of_improvement(y, x)], abs=1e-12
        )
    # the probability of improvement by hand: one game, runs (2, 3) against (1, 4): 2 of 4 pairs
    one_game = aggregate.stratified_estimates(
        {"x": np.array([[2.0], [3.0]]), "y": np.array([[1.0], [4.0]])}, improvements={"x > y": ("x", "y")}, reps=50
    )
    assert one_game["improvement"]["x > y"].point == 0.5
    with pytest.raises(ValueError):
        aggregate.stratified_estimates({"x": np.full((2, 2), np.nan)}, reps=10)


def test_decision_words():
    assert replication.decision(Estimate(0.2, 0.01, 0.3)) == "reproduced"
    assert replication.decision(Estimate(-0.2, -0.3, -0.01)) == "contradicted"
    assert replication.decision(Estimate(0.2, -0.01, 0.3)) == "not resolved"
    assert replication.conjunction(["reproduced", "reproduced"]) == "reproduced"
    assert replication.conjunction(["reproduced", "not resolved"]) == "not met"
    assert replication.p3_decision(Estimate(0.05, -0.02, 0.12))[0] == "reproduced"
    assert replication.p3_decision(Estimate(0.12, -0.02, 0.3)) == (
        "not reproduced",
        "its point estimate +0.120 is not below 0.10",
    )
    assert replication.p3_decision(Estimate(0.05, 0.01, 0.1))[1] == "its 95% interval excludes 0"
    assert [replication.family_word(passes) for passes in ([True, True], [False, True], [False, False])] == [
        "confirmed",
        "partly",
        "not found",
    ]


def _finals(cells: dict[tuple, np.ndarray], keys: tuple[str, ...], games: list[str]) -> pd.DataFrame:
    """A finals frame: one row per cell, game and seed (seeds 100...), from (seeds x games) returns."""
    rows = []
    for cell, values in cells.items():
        for seed_index, row in enumerate(values):
            for game, value in zip(games, row):
                rows.append({"env": game, **dict(zip(keys, cell)), "seed": 100 + seed_index, "value": float(value)})
    return pd.DataFrame(rows)


def _staleness_cells(proximal_2_shift: float) -> dict[tuple, np.ndarray]:
    """Every cell a copy of fresh-data PPO's returns (seeds apart) plus a shift in units of PPO minus random: decoupled
    loses nothing, proximal loses a lot at 8 and shifts by ``proximal_2_shift`` at 2, behavior loses a little at 2."""
    rng = np.random.default_rng(3)
    random_returns = replication.random_returns(GAMES)
    base = random_returns + (1.0 + rng.normal(0, 0.05, size=(4, 5))) * (10 - random_returns)
    shifts = {("proximal", 8): -0.5, ("proximal", 2): proximal_2_shift, ("behavior", 2): -0.01, ("behavior", 8): -0.3}
    step = 10 - random_returns  # the reference minus random, about: a shift of 0.1 is a tenth of PPO's score
    return {cell: base + shifts.get(cell, 0.0) * step for cell in replication.STALENESS_CELLS}


def test_the_staleness_decisions_on_synthetic_results():
    finals = _finals(_staleness_cells(-0.4), replication.STALENESS_KEYS, GAMES)
    result = replication.analyze_staleness(finals, GAMES, reps=REPS)
    assert result["words"] == {
        "P1, staleness 2: decoupled - recent for both": "reproduced",
        "P1, staleness 8: decoupled - recent for both": "reproduced",
        "P2, staleness 2: decoupled - behavior for both": "reproduced",
    }
    assert result["p3"][0] == "reproduced"  # decoupled at 2 is decoupled at 0: no loss
    verdict = replication.staleness_verdict(result["words"], result["p3"])
    assert verdict.startswith(
        "P1 (a conjunction) reproduced (staleness 2: reproduced, staleness 8: reproduced); P2 reproduced"
    )
    # the recent policy better than decoupled at staleness 2: the conjunction fails although staleness 8 holds
    result = replication.analyze_staleness(
        _finals(_staleness_cells(+0.4), replication.STALENESS_KEYS, GAMES), GAMES, reps=REPS
    )
    verdict = replication.staleness_verdict(result["words"], result["p3"])
    assert verdict.startswith("P1 (a conjunction) not met (staleness 2: contradicted, staleness 8: reproduced)")
    # a cell without all of its runs is refused
    with pytest.raises(ValueError, match="lacks runs"):
        replication.analyze_staleness(finals[finals["seed"] != 101].iloc[1:], GAMES, reps=REPS)


def test_the_batch_size_invariance_decisions_on_synthetic_results():
    games = GAMES[:3]
    rng = np.random.default_rng(4)
    cells = {}
    for variant in replication.BSI_VARIANTS:
        reference = 5 + rng.normal(0, 1, size=(4, 3))
        for n in (16, 4, 1):
            # all adjustments and the no-EWMA arm depart little; without the Adam adjustment: far at 1 env (every game),
            # not at 4 (PPG-EWMA) or at both (PPO-EWMA)
            far = variant == "ppo_no_lr" or (variant == "no_lr" and n == 1)
            departure = (2.0 + rng.uniform(0, 1, size=(4, 3))) if far and n != 16 else rng.uniform(-0.1, 0.1, size=(4, 3))
            cells[(variant, n)] = reference + (0 if n == 16 else departure)
    result = replication.analyze_batch_size_invariance(_finals(cells, replication.BSI_KEYS, games), games, reps=REPS)
    assert result["words"] == {"PPG-EWMA": "partly", "PPO-EWMA": "confirmed"}
    assert result["primary"]["PPO-EWMA"][1]["p_values"] == [pytest.approx(1 / 70)] * 3
    assert not any(test["passes"] for family in result["secondary"].values() for test in family.values())
    verdict = replication.bsi_verdict(result["words"], result["primary"])
    assert verdict.startswith("PPG-EWMA: partly (4 envs: fails") and "PPO-EWMA: confirmed (4 envs: passes" in verdict
    # each variant's 16-environment IQM is about 1 (normalized by its own mean); the no-Adam spread the largest
    spreads = result["descriptive"]["spread"]
    assert max(spreads, key=lambda variant: spreads[variant].point) == "ppo_no_lr"


def _fake_runs(experiment, results_dir: Path, returns, done=lambda spec: True) -> None:
    """runs.jsonl records for the experiment's minatar5 runs that ``done`` selects: evaluations at every eval_every
    step with the mean return ``returns(spec)`` at the end (rising linearly from 0)."""
    out_dir = results_dir / experiment.name / replication.PRESET
    manifest = Manifest(out_dir / results_store.RUNS_FILE)
    for spec in experiment.build_specs(replication.PRESET, {}):
        if not done(spec):
            continue
        steps = range(spec.eval_every, spec.total_timesteps + 1, spec.eval_every)
        final = returns(spec)
        rows = [
            {**spec.columns(), "timesteps": t, "mean_return": final * t / spec.total_timesteps, "episodes": 10} for t in steps
        ]
        evaluations = results_store.table([{key: str(value) for key, value in row.items()} for row in rows])
        manifest.add(
            {
                "run_id": spec.run_id,
                "spec_hash": spec.spec_hash,
                "wall_time": 60.0,
                "cpu_time": 30.0,
                "evaluations": evaluations,
            }
        )


def test_the_report_concludes_nothing_from_an_unfinished_effect(tmp_path):
    from benchmarks.learning import ewma_comparison

    # two runs of PPG on Asterix finished, nothing else
    _fake_runs(
        ewma_comparison.EXPERIMENT,
        tmp_path,
        lambda spec: 1.0,
        lambda spec: spec.algo == "ppg" and spec.env == "MinAtar/Asterix-v1" and spec.seed < 102,
    )
    text = replication.write_report(tmp_path, reps=REPS).read_text()
    assert "Verdict" not in text and text.count("**Not finished:") == 3
    assert "**Not finished: 2 of 240 runs.**" in text and "| PPG | 2/12 | 0/12 | 0/12 | 0/12 | 0/12 |" in text
    assert "| ewma_comparison | 2 of 240 | 0.03 | 0.02 |" in text  # 2 x 60 s of wall time, 2 x 30 s of CPU time
    assert "| staleness | 0 of 200 |" in text and "| no_lr, 1 env | 0/4 | 0/4 | 0/4 |" in text
    assert not list((tmp_path / "replication" / "minatar5").glob("*.png"))  # no figure of a partial effect


def test_the_report_of_a_finished_effect(tmp_path):
    from benchmarks.learning import ewma_comparison

    def returns(spec):  # PPO-EWMA a third of the way from PPO to twice PPO's score; PPG-EWMA as PPG
        base = replication.RANDOM_RETURNS[spec.env] + 2.0 + 0.2 * (spec.seed - 100)
        return base + (0.7 if spec.algo == "ppo_ewma" else 0.0)

    _fake_runs(ewma_comparison.EXPERIMENT, tmp_path, returns)
    text = replication.write_report(tmp_path, reps=REPS).read_text()
    assert text.count("**Not finished:") == 2 and "**Not finished: 0 of 240" not in text
    assert "**Verdict: P1 reproduced: " in text and "; P2 not resolved: +0.000 [+0.000, +0.000] at 97.5%" in text
    assert "rules out a gain above +0.000 (0.0% of PPO's normalized return)." in text
    assert "| ewma_comparison | 240 of 240 | 4.00 | 2.00 |" in text
    out_dir = tmp_path / "replication" / "minatar5"
    for figure in ("replication_ewma_comparison_aggregate", "replication_ewma_comparison_curves"):
        assert f"![{figure}]({figure}.png)" in text and (out_dir / f"{figure}.png").stat().st_size > 0
