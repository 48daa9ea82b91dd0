"""
Regime diagnostics: short runs at candidate regimes, with the training diagnostics of
:mod:`benchmarks.harness.diagnostics`, from which the regime of each long experiment (``--preset breakout_preregistered`` of
``staleness``, ``batch_size_invariance`` and ``ewma_comparison``) was chosen before any of its runs, by what the paper's
mechanism needs and not by returns:

- staleness (figure 1): PPO without EWMA, ``pi / pi_behav`` capped at 100, 3 epochs of 8 minibatches, at three sizes
  of iteration (16 x 128 as the ``cpu`` preset, 64 x 128, 64 x 256), in the ``decoupled`` mode at staleness 2 and 8
  and the ``behavior`` mode at staleness 2: the fraction of the samples outside the clip range at the start of an
  iteration, the recent-behavior KL, the importance weights' effective sample size per minibatch, the KL moved per
  iteration;
- batch size-invariance (figures 2-3): PPG-EWMA with all adjustments (``scale_hyperparams``) and without the Adam
  step size adjustment, rescaled from a 16-environment reference (16 x 128, minibatch 256) to 4 and 1 environments,
  and the ``cpu`` preset's 64-environment reference: ``B_simple`` against the minibatch size, the KL moved per
  environment step at each batch size.

At the ``breakout_large_steps`` preset, only the staleness candidates, at the pre-registered staleness iteration
(64 x 256, minibatch 2,048) with larger Adam step sizes, more epochs or a wider clip range, for a policy that moves
further per iteration: the staleness runs of ``breakout_large_steps`` take their clip range and step size from these
runs by a pre-registered rule (``benchmarks/results/staleness/breakout_large_steps/preregistration.md``).

Reported (``results.md``): per run, medians over the iterations of the first and the last half of training.

    python -m benchmarks.learning.regime_diagnostics --preset cpu --workers 1
    python -m benchmarks.learning.regime_diagnostics --preset breakout_large_steps --workers 1

Options of the preset table (:data:`benchmarks.harness.settings.PRESETS`) read here: ``staleness_regimes``
((environments, steps per environment) of an iteration), ``candidates`` (the hyperparameters each staleness candidate
changes from the setting's, default none), ``batch_reference``, ``batch_n_envs`` and ``batch_scale`` (the
batch-size candidates: the reference's environments, the numbers of environments, the runs' length; none without
``batch_n_envs``) and ``large_reference`` (the environments of an extra PPG-EWMA reference run).
"""

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.harness import cli, results_store
from benchmarks.harness.common import Experiment, Manifest, RunSpec
from benchmarks.harness.report import markdown_table
from benchmarks.harness.settings import preset_runs, run_spec
from benchmarks.learning.batch_size_invariance import reference_hyperparams, variant_hyperparams

NAME = "regime_diagnostics"
STALENESS_CELLS = (("decoupled", 2), ("decoupled", 8), ("behavior", 2))
_SHORT_NAMES = {"learning_rate": "lr", "n_epochs": "epochs", "clip_range": "clip"}
SUMMARY_COLUMNS = (
    "outside_clip",
    "recent_behavior_kl",
    "ess",
    "ess_fraction",
    "ess_min",
    "is_weight_max",
    "kl_moved",
    "kl_per_step",
    "clip_fraction",
    "gradient_noise_scale",
)


def build_specs(preset: str, overrides: dict[str, Any]) -> list[RunSpec]:
    """The staleness candidates, then the batch-size candidates (one seed: they measure mechanisms, not returns)."""
    base, _, runs = preset_runs(preset, NAME, overrides)
    options = runs.options
    specs = []
    for n_envs, n_steps in options["staleness_regimes"]:
        setting = replace(base, n_envs=n_envs, common=dict(base.common, n_steps=n_steps))
        scale = runs.scale.with_overrides(overrides, setting.iteration_size)
        for changes in options.get("candidates", ({},)):
            regime = ", ".join([f"{n_envs}x{n_steps}", *(f"{_SHORT_NAMES[key]} {value:g}" for key, value in changes.items())])
            for mode, staleness in STALENESS_CELLS:
                hyperparams = setting.hyperparams("ppo_ewma")
                hyperparams.update(ewma_decay=None, imp_samp_max=100.0, staleness=staleness, staleness_mode=mode)
                hyperparams.update(changes)
                labels = {"regime": regime, "staleness": staleness}
                specs.append(
                    run_spec(
                        NAME, setting, scale, base.envs[0], "ppo_ewma", 0, variant=mode, hyperparams=hyperparams, labels=labels
                    )
                )
    if not options.get("batch_n_envs"):
        return specs
    setting = replace(base, n_envs=options["batch_reference"])
    scale = options["batch_scale"].with_overrides(overrides, setting.iteration_size)
    reference = reference_hyperparams(setting)
    for n_envs in options["batch_n_envs"]:
        for variant in ("ppg_ewma", "no_lr") if n_envs != setting.n_envs else ("ppg_ewma",):
            algo, hyperparams = variant_hyperparams(reference, variant, n_envs)
            labels = {"reference": setting.n_envs}
            specs.append(
                run_spec(
                    NAME,
                    setting,
                    scale,
                    base.envs[0],
                    algo,
                    0,
                    variant=variant,
                    n_envs=n_envs,
                    hyperparams=hyperparams,
                    labels=labels,
                )
            )
    large = options.get("large_reference")
    if large:  # the reference of the cpu preset's batch size-invariance runs (64 environments: minibatch 1024)
        setting = replace(base, n_envs=large)
        algo, hyperparams = variant_hyperparams(reference_hyperparams(setting), "ppg_ewma", large)
        specs.append(
            run_spec(
                NAME,
                setting,
                scale,
                base.envs[0],
                algo,
                0,
                variant="ppg_ewma",
                n_envs=large,
                hyperparams=hyperparams,
                labels={"reference": large},
            )
        )
    return specs


def summarize_diagnostics(rows: pd.DataFrame) -> dict[str, float]:
    """
    Medians of the diagnostics over the trained iterations of the first half (``early_``) and the last half
    (``late_``) of a run, and the number of trained iterations. The KL moved is the policy phase's: PPG's iterations
    that end with an auxiliary phase are left out of it.
    """
    trained = rows[rows["trained"] == 1].reset_index(drop=True)
    half = len(trained) // 2
    summary: dict[str, float] = {"iterations": float(len(trained))}
    for part, frame in (("early", trained.iloc[:half]), ("late", trained.iloc[half:])):
        for column in SUMMARY_COLUMNS:
            selected = frame[frame["aux_phase"] == 0] if column.startswith("kl_") and "aux_phase" in frame else frame
            values = pd.to_numeric(selected[column], errors="coerce").dropna() if column in frame else pd.Series(dtype=float)
            summary[f"{part}_{column}"] = float(np.median(values)) if len(values) else float("nan")
    return summary


def diagnostics_frame(record: dict[str, Any]) -> pd.DataFrame:
    """A finished run's diagnostics table (from its record in ``runs.jsonl``)."""
    data = record.get("diagnostics") or {"columns": [], "rows": []}
    return pd.DataFrame(results_store.table_rows(data), columns=data["columns"])


def _cell(value: float) -> str:
    return "" if not np.isfinite(value) else f"{value:.3g}"


def report(evaluations: pd.DataFrame, specs: Sequence[RunSpec], out_dir: Path) -> str:
    """The tables of the diagnostics per run (medians over the first and last half of the iterations)."""
    manifest = Manifest(out_dir / results_store.RUNS_FILE)
    stale_rows, batch_rows = [], []
    for spec in specs:
        if not manifest.is_done(spec):
            continue
        record = manifest.records[spec.run_id]
        summary = summarize_diagnostics(diagnostics_frame(record))
        minibatch = int(spec.hyperparams["batch_size"])
        if "staleness" in spec.labels:
            cells = [
                _cell(summary[f"{part}_{column}"])
                for column in ("outside_clip", "recent_behavior_kl", "ess_fraction", "ess_min", "is_weight_max", "kl_moved")
                for part in ("early", "late")
            ]
            stale_rows.append(
                [
                    spec.labels["regime"],
                    minibatch,
                    spec.variant,
                    spec.labels["staleness"],
                    *cells,
                    _cell(record["final_return"]),
                ]
            )
        else:
            cells = [
                _cell(summary[f"{part}_{column}"])
                for column in ("gradient_noise_scale", "kl_per_step", "clip_fraction")
                for part in ("early", "late")
            ]
            batch_rows.append(
                [spec.labels["reference"], spec.variant, spec.n_envs, minibatch, *cells, _cell(record["final_return"])]
            )
    pairs = ("early", "late")
    stale_header = ["regime", "minibatch", "mode", "staleness"]
    for name in ("outside clip", "KL recent-behav", "ESS / minibatch", "min ESS", "max w", "KL moved / iter"):
        stale_header += [f"{name} ({part})" for part in pairs]
    batch_header = ["reference envs", "variant", "envs", "minibatch"]
    for name in ("B_simple", "KL / env step", "clip fraction"):
        batch_header += [f"{name} ({part})" for part in pairs]
    note = (
        "Medians over the trained iterations of the first (early) and the last (late) half of each run; one seed. "
        "The final return is shown for completeness only: the regimes were chosen from the diagnostics."
    )
    return "\n\n".join(
        [
            "## Results",
            note,
            "### Staleness candidates",
            markdown_table([*stale_header, "final return"], stale_rows),
            "### Batch-size candidates",
            markdown_table([*batch_header, "final return"], batch_rows),
        ]
    )


EXPERIMENT = Experiment(NAME, "Regime diagnostics", __doc__ or "", build_specs, report)


def main(argv: Sequence[str] | None = None) -> Path:
    """Run the experiment from the command line (see ``--help``); returns its results directory."""
    return cli.main(EXPERIMENT, argv)


if __name__ == "__main__":
    main()
