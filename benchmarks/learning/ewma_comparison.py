"""
EWMA comparison (paper section 5.3, figure 4): SB3's PPO against PPO-EWMA, and PPG against PPG-EWMA, on identical
settings (the EWMA variants use the paper's center of mass, the number of minibatches per epoch), over several
seeds. Learning curves (mean and sample standard deviation over seeds) and final returns. The presets are the table's
(:data:`benchmarks.harness.settings.PRESETS`); at ``breakout_preregistered`` the seeds come from a power calculation
made from the ``cpu`` preset's seed noise, with the training diagnostics
(``results/ewma_comparison/breakout_preregistered/preregistration.md``).

    python -m benchmarks.learning.ewma_comparison --preset cpu              # MinAtar Breakout, 3 seeds, 2^20 steps per run
    python -m benchmarks.learning.ewma_comparison --preset breakout_preregistered --workers 1 --max-minutes 60  # repeat
    python -m benchmarks.learning.ewma_comparison --preset gpu --max-minutes 9   # Procgen easy; repeat until done

``breakout_128_minibatches``: PPO against PPO-EWMA at the ``breakout_preregistered`` setting with 128 minibatches of
64 per epoch, a noisy proximal policy (the minibatch count a pre-registered rule chose from
:mod:`benchmarks.learning.proximal_noise`, ``results/ewma_comparison/breakout_128_minibatches/preregistration.md``);
``breakout_128_minibatches_ewma384`` the same with PPO-EWMA's center of mass at 384 optimizer steps.

    python -m benchmarks.learning.ewma_comparison --preset breakout_128_minibatches --workers 2 --max-minutes 60

``minatar5``: the confirmatory replication on MinAtar's five games (``results/replication/minatar5/
preregistration.md``): the ``breakout_preregistered`` setting, the four algorithms paired by seed, new seeds.

    python -m benchmarks.learning.ewma_comparison --preset minatar5 --workers 1 --max-minutes 60   # repeat until done

Options of the preset table read here: ``algos`` (default: all four) and ``ppo_ewma_decay`` (PPO-EWMA's
``ewma_decay``; default the class's, center of mass = minibatches per epoch).
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.harness import cli, statistics
from benchmarks.harness.common import ALGORITHMS, Experiment, RunSpec
from benchmarks.harness.report import (
    ALGORITHM_LABELS,
    final_values,
    markdown_table,
    mean_std,
    new_figure,
    panels,
    plot_curves,
    save_figure,
    summarize,
)
from benchmarks.harness.settings import preset_runs, run_spec

NAME = "ewma_comparison"
PAIRS = (("ppo", "ppo_ewma"), ("ppg", "ppg_ewma"))


def build_specs(preset: str, overrides: dict[str, Any]) -> list[RunSpec]:
    """The algorithms of the preset (default: all four) on every environment of the preset, for every seed."""
    setting, scale, runs = preset_runs(preset, NAME, overrides)
    ppo_ewma_decay = runs.options.get("ppo_ewma_decay")
    specs = []
    for env in setting.envs:
        for seed in scale.seed_range:
            for algo in runs.options.get("algos", ALGORITHMS):
                hyperparams = setting.hyperparams(algo)
                if algo == "ppo_ewma" and ppo_ewma_decay is not None:
                    hyperparams["ewma_decay"] = ppo_ewma_decay
                specs.append(
                    run_spec(
                        NAME,
                        setting,
                        scale,
                        env,
                        algo,
                        seed,
                        hyperparams=hyperparams,
                        eval_episodes=overrides.get("eval_episodes"),
                    )
                )
    return specs


def _table(frame: pd.DataFrame, summary: pd.DataFrame) -> str:
    """Final return of each algorithm (mean +- std over seeds, and per seed), and the EWMA's difference."""
    finals = final_values(frame, ["variant"])
    rows = []
    measured = set(finals["variant"])
    for baseline, ewma in PAIRS:
        if not {baseline, ewma} & measured:
            continue  # a pair left out of the runs (--algos)
        for algo in (baseline, ewma):
            seeds = ", ".join(f"{value:.3g}" for value in finals[finals["variant"] == algo]["value"])
            delta = f"{summary.loc[ewma, 'mean'] - summary.loc[baseline, 'mean']:+.3g}" if algo == ewma else ""
            final = mean_std(summary.loc[algo, "mean"], summary.loc[algo, "std"])
            rows.append([ALGORITHM_LABELS[algo], final, delta, seeds])
    return markdown_table(["algorithm", "final return", "EWMA - baseline", "per seed"], rows)


def differences_table(frame: pd.DataFrame) -> str:
    """
    The pre-registered statistics of each pair, paired by seed (the four algorithms share their seeds): the mean of the
    paired differences (EWMA minus none) with its 95% paired percentile bootstrap interval, the one-sided p-values (EWMA
    greater) of the Wilcoxon signed-rank test (paired) and of the Mann-Whitney test (unpaired, as pre-registered), the
    sample standard deviation of the paired differences and the difference a two-sided paired t-test at 5% detects
    with 80% power over these pairs.
    """
    finals = final_values(frame, ["variant"])
    rows = []
    for baseline, ewma in PAIRS:
        cells = [finals[finals["variant"] == algo].set_index("seed")["value"] for algo in (ewma, baseline)]
        seeds = sorted(set(cells[0].index) & set(cells[1].index))
        if len(seeds) < 2:
            continue
        first, second = (cell.loc[seeds].to_numpy(dtype=float) for cell in cells)
        estimate, low, high = statistics.paired_difference(first, second)
        wilcoxon = statistics.wilcoxon_p(first, second)
        mann_whitney = statistics.mann_whitney_greater(first, second)[1]
        sigma = float(np.std(first - second, ddof=1))
        detectable = statistics.detectable_difference(sigma, len(seeds))
        rows.append(
            [f"{ALGORITHM_LABELS[ewma]} - {ALGORITHM_LABELS[baseline]}", len(seeds), f"{estimate:+.3g}",
             f"[{low:+.3g}, {high:+.3g}]", f"{wilcoxon:.3g}", f"{mann_whitney:.3g}", f"{sigma:.3g}", f"{detectable:.2f}"]
        )  # fmt: skip
    header = ["difference", "seed pairs", "mean paired difference", "95% paired bootstrap interval"]
    header += ["Wilcoxon p (paired, EWMA greater)", "Mann-Whitney p (unpaired, EWMA greater)", "sd of the paired differences"]
    return markdown_table([*header, "detectable at 80% power (paired t-test)"], rows)


def report(evaluations: pd.DataFrame, specs: Sequence[RunSpec], out_dir: Path) -> str:
    """Curves of each pair and the final returns (figure), final returns per algorithm and seed (table)."""
    all_panels = panels(evaluations, ["variant"])
    run_algos = {spec.algo for spec in specs}
    pairs = [pair for pair in PAIRS if run_algos & set(pair)]  # the pairs run (breakout_128_minibatches: PPO's alone)
    algos = [algo for pair in pairs for algo in pair]
    figure, axes = new_figure(len(all_panels), len(pairs) + 1)
    tables = []
    for row, (title, frame) in enumerate(all_panels):
        for column, pair in enumerate(pairs):
            name = f"{title}: {ALGORITHM_LABELS[pair[0]]} vs {ALGORITHM_LABELS[pair[1]]}"
            band = "ci" if any(spec.diagnostics for spec in specs) else "std"
            plot_curves(axes[row, column], frame, "variant", pair, ALGORITHM_LABELS.get, name, band)
        summary = summarize(frame, ["variant"]).set_index("variant").reindex(algos)
        labels = [ALGORITHM_LABELS[algo] for algo in algos]
        bars = axes[row, len(pairs)]
        bars.bar(labels, summary["mean"], yerr=summary["std"], color=["C0", "C1"] * len(pairs), capsize=3)
        bars.set_title(f"{title}: final return (mean +- sample std over seeds)", fontsize=9)
        bars.tick_params(axis="x", labelsize=7)
        bars.grid(alpha=0.3, axis="y")
        tables.append(f"### {title}\n\n{_table(frame, summary)}")
        if any(spec.diagnostics for spec in specs):  # the pre-registered statistics (runs with diagnostics)
            tables.append(f"### {title}: EWMA minus none\n\n{differences_table(frame)}")
    figure.suptitle(PAPER_DIRECTION, fontsize=9)
    image = save_figure(figure, out_dir / f"{NAME}.png")
    with_diagnostics = any(spec.diagnostics for spec in specs)
    band_note = "the 95% bootstrap interval of the mean." if with_diagnostics else "+- one sample standard deviation."
    note = f"Curves: mean episode return over seeds, with {band_note}"
    return "\n\n".join(["## Results", f"{note} {PAPER_DIRECTION[0].upper()}{PAPER_DIRECTION[1:]}.", image, *tables])


PAPER_DIRECTION = (
    "paper (figure 4): with the EWMA slightly above without, for PPO and for PPG (small but consistent across its 16 "
    "Procgen games)"
)


EXPERIMENT = Experiment(
    NAME,
    "EWMA comparison: PPO vs PPO-EWMA, PPG vs PPG-EWMA (paper figure 4)",
    __doc__ or "",
    build_specs,
    report,
)


def main(argv: Sequence[str] | None = None) -> Path:
    """Run the experiment from the command line (see ``--help``); returns its results directory."""
    return cli.main(EXPERIMENT, argv)


if __name__ == "__main__":
    main()
