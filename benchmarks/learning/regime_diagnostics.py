"""
Regime diagnostics (issue 49): short runs at candidate regimes, with the training diagnostics of
:mod:`benchmarks.harness.diagnostics`, from which the regime of each long experiment (``--preset cpu_regime`` of
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

At the ``cpu_moving`` preset (the follow-up of the staleness outcome at ``cpu_regime``), only the staleness
candidates, at that regime's iteration (64 x 256, minibatch 2,048) with larger Adam step sizes, more epochs or a
wider clip range, for a policy that moves further per iteration: the staleness preset ``cpu_moving`` takes its clip
range and step size from these runs by a pre-registered rule (``benchmarks/results/staleness/cpu_moving/
preregistration.md``).

Reported (``results.md``): per run, medians over the iterations of the first and the last half of training.

    python -m benchmarks.learning.regime_diagnostics --preset cpu --workers 1
    python -m benchmarks.learning.regime_diagnostics --preset cpu_moving --workers 1
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
from benchmarks.harness.settings import SETTINGS, Scale, run_spec
from benchmarks.learning.batch_size_invariance import reference_hyperparams, variant_hyperparams

NAME = "regime_diagnostics"
STALENESS_REGIMES = {"smoke": ((4, 16),), "cpu": ((16, 128), (64, 128), (64, 256)), "cpu_moving": ((64, 256),)}
"""(environments, steps per environment) of an iteration."""
STALENESS_CELLS = (("decoupled", 2), ("decoupled", 8), ("behavior", 2))
CANDIDATE_CHANGES: dict[str, tuple[dict[str, Any], ...]] = {
    "cpu_moving": (
        {"learning_rate": 1e-3},
        {"learning_rate": 2e-3},
        {"learning_rate": 4e-3},
        {"n_epochs": 6},
        {"n_epochs": 12},
        {"n_epochs": 12, "learning_rate": 1e-3},
        {"clip_range": 0.3},
        {"clip_range": 0.5},
        {"clip_range": 0.5, "learning_rate": 2e-3},
    )
}
"""The hyperparameters each staleness candidate changes from the setting's (default: none): Adam's step size
(5e-4), the epochs (3) and the clip range (0.2), what decides how far the policy moves in an iteration."""
_SHORT_NAMES = {"learning_rate": "lr", "n_epochs": "epochs", "clip_range": "clip"}
BASE_SETTING = {"smoke": "smoke", "cpu": "cpu", "cpu_moving": "cpu"}
BATCH_REFERENCE = {"smoke": 4, "cpu": 16}
BATCH_N_ENVS = {"smoke": (4, 1), "cpu": (16, 4, 1), "cpu_moving": ()}
SCALES = {
    "smoke": (Scale(timesteps=512, eval_every=256, seeds=1), Scale(timesteps=256, eval_every=128, seeds=1)),
    "cpu": (Scale(timesteps=2**19, eval_every=2**16, seeds=1), Scale(timesteps=10 * 2**15, eval_every=2**14, seeds=1)),
    "cpu_moving": (Scale(timesteps=2**19, eval_every=2**16, seeds=1), Scale(timesteps=2**14, eval_every=2**14, seeds=1)),
}
"""(staleness runs, batch-size runs)."""
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
    if preset not in STALENESS_REGIMES:
        raise ValueError(f"the regime diagnostics have the presets {sorted(STALENESS_REGIMES)}, got {preset!r}")
    base = replace(SETTINGS[BASE_SETTING[preset]], diagnostics=True).with_overrides(overrides)
    stale_scale, batch_scale = SCALES[preset]
    specs = []
    for n_envs, n_steps in STALENESS_REGIMES[preset]:
        setting = replace(base, n_envs=n_envs, common=dict(base.common, n_steps=n_steps))
        scale = stale_scale.with_overrides(overrides, setting.iteration_size)
        for changes in CANDIDATE_CHANGES.get(preset, ({},)):
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
    if not BATCH_N_ENVS[preset]:
        return specs
    setting = replace(base, n_envs=BATCH_REFERENCE[preset])
    scale = batch_scale.with_overrides(overrides, setting.iteration_size)
    reference = reference_hyperparams(setting)
    for n_envs in BATCH_N_ENVS[preset]:
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
    if preset == "cpu":  # the cpu preset's reference, 64 environments (minibatch 1024)
        setting = replace(base, n_envs=64)
        algo, hyperparams = variant_hyperparams(reference_hyperparams(setting), "ppg_ewma", 64)
        specs.append(
            run_spec(
                NAME,
                setting,
                scale,
                base.envs[0],
                algo,
                0,
                variant="ppg_ewma",
                n_envs=64,
                hyperparams=hyperparams,
                labels={"reference": 64},
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


EXPERIMENT = Experiment(
    NAME, "Regime diagnostics (issue 49)", __doc__ or "", build_specs, report, extra_presets=("cpu_moving",)
)


def main(argv: Sequence[str] | None = None) -> Path:
    """Run the experiment from the command line (see ``--help``); returns its results directory."""
    return cli.main(EXPERIMENT, argv)


if __name__ == "__main__":
    main()
