"""
Artificial staleness (paper section 5.1, figure 1): PPO whose data is trained on a fixed number of iterations after it
was collected (``StalePPO_EWMA(...).set_staleness(k, mode)``), with three choices of the old policy in the clipped objective:
``decoupled`` (the behavior policy for importance sampling, the recent policy, i.e. the policy at the start of the
iteration, for clipping), ``behavior`` (the behavior policy for both) and ``proximal`` (the recent policy for both).
As in the paper's figure 1 the proximal policy is the recent policy (no EWMA) and ``pi / pi_behav`` is capped at 100.
At staleness 0 the three are the same algorithm (PPO) and share one run. Where the preset table says ``ewma``,
PPO-EWMA too (variant ``ewma``: the EWMA of the class default as the clipping anchor, the behavior policy for
importance sampling, which the paper recommends for stale data). Reported: final return against staleness.

    python -m benchmarks.learning.staleness --preset cpu                    # MinAtar Breakout, 16 envs, staleness 0-8, 3 seeds
    python -m benchmarks.learning.staleness --preset breakout_preregistered --workers 1 --max-minutes 60   # repeat until done
    python -m benchmarks.learning.staleness --preset gpu --max-minutes 8     # Procgen starpilot; repeat until all finished

The Breakout presets (:data:`benchmarks.harness.settings.PRESETS`) share the pre-registered iteration (64
environments x 256 steps, ``results/staleness/breakout_preregistered/preregistration.md``):
``breakout_preregistered`` (clip range 0.2, with PPO-EWMA), ``breakout_large_steps`` (a policy that moves further
per iteration: clip range 0.5, Adam 2e-3, chosen by a pre-registered rule from
``python -m benchmarks.learning.regime_diagnostics --preset breakout_large_steps``) and ``breakout_clip0.3``
(clip range 0.3); ``minatar5`` is the confirmatory replication on MinAtar's five games (``results/replication/
minatar5/preregistration.md``): ``breakout_clip0.3``'s setting with PPO-EWMA beside the three modes, new seeds.

    python -m benchmarks.learning.staleness --preset breakout_clip0.3 --workers 2 --max-minutes 60   # repeat until done
    python -m benchmarks.learning.staleness --preset minatar5 --workers 1 --max-minutes 60   # repeat until done

Options of the preset table read here: ``staleness`` (the levels) and ``ewma`` (whether PPO-EWMA runs too).
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.harness import cli, results_store, statistics
from benchmarks.harness.common import Experiment, Manifest, RunSpec
from benchmarks.harness.report import (
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

NAME = "staleness"
MODES = {
    "decoupled": "decoupled (behavior for IS, recent for clipping)",
    "behavior": "old policy = behavior",
    "proximal": "old policy = recent",
}
EWMA_VARIANT = {"ewma": "PPO-EWMA (decoupled: behavior for IS, EWMA for clipping)"}
"""The variant with the EWMA on, at the presets whose table entry says ``ewma``."""


def build_specs(preset: str, overrides: dict[str, Any]) -> list[RunSpec]:
    """Every mode at every staleness level of the preset (one shared run at staleness 0), for every seed; PPO-EWMA at
    every level where the preset's entry says ``ewma``."""
    setting, scale, runs = preset_runs(preset, NAME, overrides)
    with_ewma = bool(runs.options.get("ewma"))
    specs = []
    for env in setting.envs:
        for seed in scale.seed_range:
            for staleness in runs.options["staleness"]:
                variants = [*(MODES if staleness else ["decoupled"]), *(EWMA_VARIANT if with_ewma else [])]
                for variant in variants:
                    mode = "decoupled" if variant in EWMA_VARIANT else variant
                    hyperparams = setting.hyperparams("ppo_ewma")
                    hyperparams.update(imp_samp_max=100.0, staleness=staleness, staleness_mode=mode)
                    if variant not in EWMA_VARIANT:
                        hyperparams.update(ewma_decay=None)  # the recent policy as the clipping anchor, as figure 1
                    aliases = tuple(other for other in MODES if other != mode) if staleness == 0 and variant in MODES else ()
                    spec = run_spec(
                        NAME,
                        setting,
                        scale,
                        env,
                        "ppo_ewma",
                        seed,
                        variant=variant,
                        hyperparams=hyperparams,
                        labels={"staleness": staleness},
                        aliases=aliases,
                        eval_episodes=overrides.get("eval_episodes"),
                    )
                    specs.append(spec)
    return specs


def contrasts(frame: pd.DataFrame, levels: Sequence[int]) -> list[tuple[str, tuple[str, int], tuple[str, int], bool]]:
    """
    The contrasts of the pre-registration (``results/staleness/breakout_preregistered/preregistration.md``) present in
    ``frame``: ``(name, first cell, second cell, predicted)``, the difference being first minus second, ``predicted``
    whether the paper predicts it positive.
    """
    present = set(zip(frame["variant"], frame["staleness"].astype(int)))
    found = []
    for level in (level for level in levels if level > 0):
        candidates = [
            (f"decoupled - recent for both, staleness {level}", ("decoupled", level), ("proximal", level), True),
            (f"decoupled - behavior for both, staleness {level}", ("decoupled", level), ("behavior", level), level <= 2),
            (f"decoupled loss from 0 to {level}", ("decoupled", 0), ("decoupled", level), False),
            (f"PPO-EWMA - decoupled, staleness {level}", ("ewma", level), ("decoupled", level), False),
        ]
        found += [candidate for candidate in candidates if candidate[1] in present and candidate[2] in present]
    return found


def paired_finals(finals: pd.DataFrame, first: tuple[str, int], second: tuple[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """The final returns of two cells (``(variant, staleness)``) on the seeds both have, in the order of the seeds."""
    cells = [
        finals[(finals["variant"] == cell[0]) & (finals["staleness"].astype(int) == cell[1])].set_index("seed")["value"]
        for cell in (first, second)
    ]
    seeds = sorted(set(cells[0].index) & set(cells[1].index))
    return cells[0].loc[seeds].to_numpy(dtype=float), cells[1].loc[seeds].to_numpy(dtype=float)


def contrasts_table(frame: pd.DataFrame, levels: Sequence[int]) -> str:
    """
    Each pre-registered contrast, paired by seed (the cells share their seeds): the number of pairs, the mean of the
    paired differences with its 95% paired percentile bootstrap interval, and where the paper predicts a direction the
    one-sided Wilcoxon signed-rank p-value (paired) and the one-sided exact Mann-Whitney p-value (unpaired, the test
    the pre-registrations named).
    """
    finals = final_values(frame, ["variant", "staleness"])
    rows = []
    for name, first, second, predicted in contrasts(frame, levels):
        values = paired_finals(finals, first, second)
        if len(values[0]) == 0:
            continue
        estimate, low, high = statistics.paired_difference(*values)
        wilcoxon = f"{statistics.wilcoxon_p(*values):.3g}" if predicted else "-"
        mann_whitney = f"{statistics.mann_whitney_greater(*values)[1]:.3g}" if predicted else "-"
        direction = "> 0" if predicted else "-"
        interval = f"[{low:+.3g}, {high:+.3g}]"
        rows.append([name, len(values[0]), f"{estimate:+.3g}", interval, direction, wilcoxon, mann_whitney])
    header = [
        "contrast (first - second)",
        "seed pairs",
        "mean paired difference",
        "95% paired bootstrap interval",
        "paper",
        "Wilcoxon p (paired, one-sided)",
        "Mann-Whitney p (unpaired, one-sided)",
    ]
    return markdown_table(header, rows)


PAPER_DIRECTION = (
    "paper (figure 1): decoupled >= behavior at small staleness; recent for both unstable from small staleness; "
    "decoupled robust up to about 8 iterations"
)
DIAGNOSTICS_SHOWN = {
    "outside_clip": "outside the clip range at the iteration's start",
    "recent_behavior_kl": "KL[behav, recent]",
    "ess_min": "smallest effective minibatch (ESS)",
    "kl_moved": "KL moved per iteration",
}


def diagnostics_frame(specs: Sequence[RunSpec], out_dir: Path) -> pd.DataFrame:
    """
    The training diagnostics of the finished runs' trained iterations, one row per iteration, with the run's ``cell``
    (variant and staleness) and ``seed``; empty when no finished run recorded diagnostics.
    """
    manifest = Manifest(out_dir / results_store.RUNS_FILE)
    frames = []
    for spec in specs:
        record = manifest.records.get(spec.run_id)
        if record is None or record.get("spec_hash") != spec.spec_hash or not record.get("diagnostics"):
            continue
        data = record["diagnostics"]
        frame = pd.DataFrame(results_store.table_rows(data), columns=data["columns"])
        cell = f"{spec.variant}, staleness {spec.labels['staleness']}"
        frames.append(frame[frame["trained"] == 1].assign(cell=cell, seed=spec.seed))
    return pd.concat(frames) if frames else pd.DataFrame()


MECHANISM_COLUMNS = {
    "outside_clip": "outside the clip range at the iteration's start",
    "clip_fraction": "clipped during training",
    "recent_behavior_kl": "KL[behav, recent]",
    "ess_fraction": "ESS / minibatch",
    "ess_min": "smallest effective minibatch",
}


def mechanism_table(diagnostics: pd.DataFrame) -> str:
    """
    The pre-registration's mechanism check: per cell, the median over a run's trained iterations of each diagnostic,
    then the mean (and range) over the cell's seeds.
    """
    medians = diagnostics.groupby(["cell", "seed"])[list(MECHANISM_COLUMNS)].median()
    rows = []
    for cell, frame in medians.groupby(level="cell", sort=True):
        cells = [
            f"{frame[column].mean():.3g} ({frame[column].min():.3g}-{frame[column].max():.3g})" for column in MECHANISM_COLUMNS
        ]
        rows.append([cell, str(len(frame)), *cells])
    return markdown_table(["cell", "seeds", *MECHANISM_COLUMNS.values()], rows)


def diagnostics_figure(diagnostics: pd.DataFrame, out_dir: Path) -> str:
    """The training diagnostics against environment steps, mean over seeds per cell, one panel per diagnostic."""
    figure, axes = new_figure(1, len(DIAGNOSTICS_SHOWN), width=4.4)
    for ax, (column, title) in zip(axes[0], DIAGNOSTICS_SHOWN.items()):
        for position, (cell, frame) in enumerate(diagnostics.groupby("cell", sort=True)):
            curve = frame.groupby("timesteps")[column].mean().rolling(8, min_periods=1).mean()
            ax.plot(curve.index, curve, color=f"C{position % 10}", label=cell, linewidth=1)
        ax.set_title(f"{title}\n(mean over seeds, 8-iteration moving average)", fontsize=8)
        ax.set_xlabel("environment steps")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=6)
    return save_figure(figure, out_dir / f"{NAME}_diagnostics.png")


def report(evaluations: pd.DataFrame, specs: Sequence[RunSpec], out_dir: Path) -> str:
    """
    Final return against staleness per mode, and the learning curves of each mode (figure and table); for runs with
    diagnostics, 95% bootstrap intervals in place of standard deviations, the paper's
    direction on the figure and a figure of the diagnostics.
    """
    with_diagnostics = any(spec.diagnostics for spec in specs)
    levels = sorted({int(spec.labels["staleness"]) for spec in specs})
    present = {spec.variant for spec in specs} | {alias for spec in specs for alias in spec.aliases}
    variants = {key: label for key, label in {**MODES, **EWMA_VARIANT}.items() if key in present}
    all_panels = panels(evaluations, ["variant", "staleness"])
    figure, axes = new_figure(len(all_panels), len(variants) + 1, width=3.8)
    tables = []
    for row, (title, frame) in enumerate(all_panels):
        summary = summarize(frame, ["variant", "staleness"]).set_index(["variant", "staleness"])
        rows = []
        ax = axes[row, 0]
        for position, (mode, label) in enumerate(variants.items()):
            means = np.array([summary["mean"].get((mode, level), np.nan) for level in levels])
            stds = np.array([summary["std"].get((mode, level), np.nan) for level in levels])
            errors = stds
            if with_diagnostics:  # the 95% bootstrap interval of the mean over seeds
                finals = final_values(frame[frame["variant"] == mode], ["staleness"])
                intervals = [
                    (
                        statistics.mean_interval(finals[finals["staleness"] == level]["value"])
                        if (finals["staleness"] == level).any()
                        else (np.nan, np.nan)
                    )
                    for level in levels
                ]
                errors = np.array(
                    [
                        [mean - low for mean, (low, _) in zip(means, intervals)],
                        [high - mean for mean, (_, high) in zip(means, intervals)],
                    ]
                )
            ax.errorbar(range(len(levels)), means, yerr=errors, color=f"C{position}", marker="o", capsize=3, label=mode)
            cells = [mean_std(mean, std) for mean, std in zip(means, stds)]
            rows.append([label, *cells])
            curves = frame[frame["variant"] == mode]
            band = "ci" if with_diagnostics else "std"
            plot_curves(
                axes[row, position + 1], curves, "staleness", levels, lambda k: f"staleness {k}", f"{title}: {mode}", band
            )
        ax.set_xticks(range(len(levels)), [str(level) for level in levels])
        ax.set_xlabel("staleness (iterations)")
        ax.set_title(f"{title}: final return" + (" (95% bootstrap intervals)" if with_diagnostics else ""), fontsize=9)
        ax.set_ylabel("final return (last 25% of training)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        header = ["old policy", *(f"staleness {level}" for level in levels)]
        tables.append(f"### {title}: final return\n\n{markdown_table(header, rows)}")
        tables.append(f"### {title}: the pre-registered contrasts\n\n{contrasts_table(frame, levels)}")
    iteration = specs[0].iteration_size
    note = f"One iteration is {iteration} environment steps ({specs[0].n_envs} environments x {iteration // specs[0].n_envs})."
    if with_diagnostics:
        figure.suptitle(PAPER_DIRECTION, fontsize=9)
        note += " Curves: mean over seeds with the 95% bootstrap interval of the mean. " + PAPER_DIRECTION[0].upper()
        note += PAPER_DIRECTION[1:] + "."
    image = save_figure(figure, out_dir / f"{NAME}.png")
    parts = ["## Results", note, image, *tables]
    diagnostics = diagnostics_frame(specs, out_dir) if with_diagnostics else pd.DataFrame()
    if not diagnostics.empty:
        parts += [
            "## Training diagnostics",
            "Per iteration, from each run's `diagnostics` table in `runs.jsonl`. The mechanism check of the "
            "pre-registration: per cell, the median over a run's trained iterations, mean (range) over seeds.",
            mechanism_table(diagnostics),
            diagnostics_figure(diagnostics, out_dir),
        ]
    return "\n\n".join(parts)


EXPERIMENT = Experiment(
    NAME,
    "PPO with artificial staleness: decoupled vs coupled objectives (paper figure 1)",
    __doc__ or "",
    build_specs,
    report,
)


def main(argv: Sequence[str] | None = None) -> Path:
    """Run the experiment from the command line (see ``--help``); returns its results directory."""
    return cli.main(EXPERIMENT, argv)


if __name__ == "__main__":
    main()
