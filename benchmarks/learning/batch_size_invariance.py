"""
Batch size-invariance (paper section 5.2, figures 2 and 3): PPG-EWMA with fewer and fewer parallel environments
(64, 16, 4, 1 at the cpu and gpu presets), its hyperparameters rescaled from the 64-environment reference by
``sb3_ewma.scale_hyperparams`` (Adam step size / sqrt(c), EWMA center of mass * c, advantage-normalization span * c,
N_pi * c, minibatch size / c; the auxiliary phase unchanged), against ablations that each leave one adjustment out:
the Adam step size, the EWMA, the advantage normalization, and plain PPG (no EWMA, the other adjustments made).
The reference normalizes advantages with EWMA moments (span 1 iteration) so that there is a span to rescale.
Reported: learning curves per variant and the spread (max - min) of the final return across batch sizes.
At the ``breakout_preregistered`` preset (``results/batch_size_invariance/breakout_preregistered/preregistration.md``)
and ``minatar5`` the reference is 16 environments (its minibatch of 256 steps below the measured critical batch size),
rescaled to 4 and 1, for PPG-EWMA (all adjustments, without the Adam step size adjustment, PPG) and PPO-EWMA with one
epoch (all adjustments, without the Adam step size adjustment, PPO: PPO-EWMA without its EWMA), with the training
diagnostics of every iteration.

    python -m benchmarks.learning.batch_size_invariance --preset cpu                # MinAtar Breakout, 64/16/4/1 envs, 2 seeds
    python -m benchmarks.learning.batch_size_invariance --preset breakout_preregistered --workers 1 --max-minutes 60
    python -m benchmarks.learning.batch_size_invariance --preset gpu --max-minutes 8  # Procgen starpilot; repeat until done

Options of the preset table (:data:`benchmarks.harness.settings.PRESETS`) read here: ``n_envs`` (the numbers of
environments; the reference is the setting's), ``ppg_variants`` (default: all of :data:`VARIANTS`) and ``ppo``
(whether the PPO-EWMA variants run too).
"""

import copy
import warnings
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
from benchmarks.harness.settings import Setting, preset_runs, run_spec
from sb3_ewma import center_of_mass_from_ewma_decay, ewma_span_from_decay, scale_hyperparams

NAME = "batch_size_invariance"
VARIANTS = {
    "ppg_ewma": "PPG-EWMA, all adjustments",
    "no_lr": "no Adam step size adjustment",
    "no_ewma": "no EWMA adjustment",
    "no_adv": "no advantage normalization adjustment",
    "ppg": "PPG (no EWMA), other adjustments",
}
PPO_VARIANTS = {
    "ppo_ewma": "PPO-EWMA (1 epoch), all adjustments",
    "ppo_no_lr": "PPO-EWMA, no Adam step size adjustment",
    "ppo": "PPO (no EWMA), other adjustments",
}
"""The PPO variants, at the presets whose table entry says ``ppo``."""
UNDONE = {"no_lr": "learning_rate", "no_ewma": "ewma_decay", "no_adv": "advantage_ewma_decay", "ppo_no_lr": "learning_rate"}
"""The hyperparameter each ablation keeps at its reference value."""


def reference_hyperparams(setting: Setting, algo: str = "ppg_ewma") -> dict[str, Any]:
    """
    PPG-EWMA (or PPO-EWMA, with one epoch as the rules require) at the setting's number of environments, advantages
    normalized by EWMA moments over 1 iteration.
    """
    hyperparams = setting.hyperparams(algo)
    hyperparams.update(advantage_normalization="ewma", advantage_ewma_decay=0.0, n_envs=setting.n_envs)
    if algo == "ppo_ewma":
        hyperparams.update(n_epochs=1)
    return hyperparams


def variant_hyperparams(reference: dict[str, Any], variant: str, n_envs: int) -> tuple[str, dict[str, Any]]:
    """
    The algorithm and constructor arguments of ``variant`` at ``n_envs``: ``scale_hyperparams`` of the reference,
    then the ablated hyperparameter put back to its reference value (absent: the class default).
    """
    algo = "ppg" if variant == "ppg" else "ppo_ewma" if variant in PPO_VARIANTS else "ppg_ewma"
    # PPG and PPO have no EWMA (no ewma_decay): the reference's other settings
    without_ewma = variant in ("ppg", "ppo")
    base = {key: value for key, value in reference.items() if key != "ewma_decay"} if without_ewma else reference
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the ablations are not invariant, and say so
        scaled = scale_hyperparams(base, n_envs, algo=algo)
    if variant == "ppo":
        scaled["ewma_decay"] = None  # PPO-EWMA without its EWMA: PPO with the other adjustments
    key = UNDONE.get(variant)
    if key is not None:
        if key in base:
            scaled[key] = copy.deepcopy(base[key])
        else:
            scaled.pop(key, None)
    scaled.pop("n_envs")
    return algo, scaled


def build_specs(preset: str, overrides: dict[str, Any]) -> list[RunSpec]:
    """
    Every variant at every number of environments; at the reference the PPG-EWMA variants are one run (and the
    PPO-EWMA ones another).
    """
    setting, scale, runs = preset_runs(preset, NAME, overrides)
    families = [(reference_hyperparams(setting), runs.options.get("ppg_variants", tuple(VARIANTS)), "ppg_ewma")]
    if runs.options.get("ppo"):
        families.append((reference_hyperparams(setting, "ppo_ewma"), tuple(PPO_VARIANTS), "ppo_ewma"))
    specs = []
    for env in setting.envs:
        for seed in scale.seed_range:
            for n_envs in runs.options["n_envs"]:
                for reference, variants, full in families:
                    for variant in variants:
                        if n_envs == setting.n_envs and variant in UNDONE:
                            continue  # identical to the reference run
                        algo, hyperparams = variant_hyperparams(reference, variant, n_envs)
                        undone = tuple(other for other in variants if other in UNDONE)
                        aliases = undone if n_envs == setting.n_envs and variant == full else ()
                        specs.append(
                            run_spec(
                                NAME,
                                setting,
                                scale,
                                env,
                                algo,
                                seed,
                                variant=variant,
                                n_envs=n_envs,
                                hyperparams=hyperparams,
                                aliases=aliases,
                                eval_episodes=overrides.get("eval_episodes"),
                            )
                        )
    return specs


def _envs_label(n_envs: int) -> str:
    return f"{n_envs} env" if n_envs == 1 else f"{n_envs} envs"


def _scaled_table(specs: Sequence[RunSpec], evaluations: pd.DataFrame) -> str:
    """
    The rescaled hyperparameters of each variant and number of environments (first environment and seed), with the
    number of auxiliary phases planned and done (the fewest over the finished runs).
    """
    done = pd.Series(dtype=float)
    if "aux_phases" in evaluations:
        last = evaluations.sort_values("timesteps").groupby(["variant", "n_envs", "run_id"])["aux_phases"].last()
        done = last.groupby(["variant", "n_envs"]).min()
    rows = []
    first = [spec for spec in specs if spec.env == specs[0].env and spec.seed == specs[0].seed]
    order = [*VARIANTS, *PPO_VARIANTS]
    for spec in sorted(first, key=lambda spec: (order.index(spec.variant), -spec.n_envs)):
        hp = spec.hyperparams
        # PPG and PPO have no EWMA (no ewma_decay argument); the EWMA algorithms default to "auto"
        decay = hp.get("ewma_decay", None if spec.algo in ("ppg", "ppo") else "auto")
        if decay is None:
            center = "off"
        elif decay == "auto":
            center = "auto (minibatches per epoch)"
        else:
            center = f"{center_of_mass_from_ewma_decay(decay):.4g}"
        span = ewma_span_from_decay(hp["advantage_ewma_decay"])
        n_pi = hp.get("n_policy_iterations")  # PPO has no auxiliary phase
        measured = done.get((spec.variant, spec.n_envs), float("nan"))
        planned = "-" if n_pi is None else spec.total_timesteps // (n_pi * spec.iteration_size)
        phases = f"{planned} / {'-' if pd.isna(measured) else int(measured)}"
        lr = f"{hp['learning_rate']:.4g}"
        rows.append([spec.variant, spec.n_envs, lr, hp["batch_size"], center, f"{span:.4g}", n_pi or "-", phases])
    header = ["variant", "n_envs", "learning_rate", "batch_size", "EWMA center of mass", "adv. span (iterations)", "N_pi"]
    return markdown_table([*header, "aux phases (planned / done)"], rows)


ABLATION_PAIRS = (("no_lr", "ppg_ewma"), ("ppg", "ppg_ewma"), ("ppo_no_lr", "ppo_ewma"), ("ppo", "ppo_ewma"))
"""(ablation, full rescaling) of appendix F's test."""


def seed_finals(frame: pd.DataFrame) -> dict[tuple[str, int], dict[int, float]]:
    """The final return of every run, by (variant, number of environments) and seed."""
    finals = final_values(frame, ["variant", "n_envs"])
    table: dict[tuple[str, int], dict[int, float]] = {}
    for row in finals.itertuples():
        table.setdefault((str(row.variant), int(row.n_envs)), {})[int(row.seed)] = float(row.value)
    return table


def spread_table(frame: pd.DataFrame, n_envs: Sequence[int]) -> str:
    """
    Each variant's spread (max - min over the numbers of environments) of its mean final returns over the seeds that
    every batch size has, with its 95% paired percentile bootstrap interval (the batch sizes share their seeds: a
    resample draws seeds), and the 95th percentile of the spread that the seed noise alone gives (the same bootstrap
    with every batch size's seeds centered on the variant's grand mean).
    """
    finals = seed_finals(frame)
    rows = []
    for variant in [*VARIANTS, *PPO_VARIANTS]:
        cells = [finals[(variant, n)] for n in n_envs if (variant, n) in finals]
        seeds = sorted(set.intersection(*(set(cell) for cell in cells))) if cells else []
        if len(cells) < 2 or not seeds:
            continue
        groups = [[cell[seed] for seed in seeds] for cell in cells]
        estimate, low, high = statistics.paired_spread(groups)
        grand = float(np.mean(groups))
        centered = [[value - float(np.mean(group)) + grand for value in group] for group in groups]
        noise = statistics.paired_spread(centered, level=0.90)[2]
        rows.append([variant, f"{len(seeds)} x {len(groups)}", f"{estimate:.3g}", f"[{low:.3g}, {high:.3g}]", f"{noise:.3g}"])
    header = ["variant", "seeds x batch sizes", "spread", "95% paired bootstrap interval", "noise alone (95th percentile)"]
    return markdown_table(header, rows)


def appendix_f_table(frame: pd.DataFrame, n_envs: Sequence[int], reference: int) -> str:
    """
    Appendix F's test with one environment: at each smaller batch size, whether the ablation's final return departs
    from its reference's (same seed) more than the full rescaling's does: the mean of ``|d|`` of each, their difference
    (the effect size) and the one-sided exact Mann-Whitney test (``scipy.stats.mannwhitneyu``) of the ablation's
    ``|d|`` against the full's, with the Z-score of its normal approximation.
    """
    finals = seed_finals(frame)
    rows = []
    for ablation, full in ABLATION_PAIRS:
        for n in (n for n in n_envs if n != reference):
            departures = []
            for variant in (ablation, full):
                runs, base = finals.get((variant, n), {}), finals.get((variant, reference), {})
                departures.append([abs(runs[seed] - base[seed]) for seed in sorted(runs) if seed in base])
            if not all(departures):
                continue
            u, p_value, z = statistics.mann_whitney_greater(departures[0], departures[1])
            effect = float(np.mean(departures[0]) - np.mean(departures[1]))
            seeds = f"{len(departures[0])} / {len(departures[1])}"
            means = f"{np.mean(departures[0]):.3g} / {np.mean(departures[1]):.3g}"
            rows.append([f"{ablation} vs {full}", n, seeds, means, f"{effect:+.3g}", f"{u:g}", f"{p_value:.3g}", f"{z:.2f}"])
    header = ["ablation vs full", "envs", "seeds", "mean abs(d): ablation / full", "effect", "U", "p (one-sided)", "z"]
    return markdown_table(header, rows)


def movement(specs: Sequence[RunSpec], out_dir: Path) -> pd.DataFrame:
    """
    Per finished run with diagnostics: the median over its policy-phase iterations (PPG's iterations that end with an
    auxiliary phase left out) of the KL moved per environment step, and the median ``B_simple``.
    """
    manifest = Manifest(out_dir / results_store.RUNS_FILE)
    rows = []
    for spec in specs:
        record = manifest.records.get(spec.run_id)
        if record is None or record.get("spec_hash") != spec.spec_hash or not record.get("diagnostics"):
            continue
        data = record["diagnostics"]
        frame = pd.DataFrame(results_store.table_rows(data), columns=data["columns"])
        policy = frame[(frame["trained"] == 1) & (frame["aux_phase"] == 0)]
        for variant in (spec.variant, *spec.aliases):
            rows.append(
                {
                    "env": spec.env,
                    "variant": variant,
                    "n_envs": spec.n_envs,
                    "seed": spec.seed,
                    "kl_per_step": float(policy["kl_per_step"].median()),
                    "gradient_noise_scale": float(policy["gradient_noise_scale"].median()),
                }
            )
    return pd.DataFrame(rows)


def movement_section(specs: Sequence[RunSpec], out_dir: Path) -> str:
    """The KL moved per environment step against the batch size, per variant (figure and table); empty without
    diagnostics."""
    moves = movement(specs, out_dir)
    if moves.empty:
        return ""
    n_envs = sorted(moves["n_envs"].unique(), reverse=True)
    figure, axes = new_figure(1, 1, width=5.5, height=3.8)
    ax = axes[0, 0]
    rows = []
    for position, (variant, frame) in enumerate(moves.groupby("variant", sort=False)):
        means = frame.groupby("n_envs")["kl_per_step"].mean().reindex(n_envs)
        ax.plot(means.index, means.to_numpy(), marker="o", color=f"C{position % 10}", label=variant)
        rows.append([variant, *(f"{value:.3g}" for value in means.to_numpy())])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("parallel environments (the batch sizes scale with them)")
    ax.set_ylabel("KL moved per environment step")
    ax.set_title("paper: with all adjustments, the same at every batch size", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    image = save_figure(figure, out_dir / f"{NAME}_kl_per_step.png")
    header = ["variant", *(_envs_label(int(n)) for n in n_envs)]
    note = "Mean over seeds of each run's median over its policy-phase iterations."
    return "\n\n".join(["## KL moved per environment step", note, image, markdown_table(header, rows)])


def report(evaluations: pd.DataFrame, specs: Sequence[RunSpec], out_dir: Path) -> str:
    """Curves per variant (one per batch size), the spread of final returns across batch sizes (figure and tables)."""
    n_envs = sorted({spec.n_envs for spec in specs}, reverse=True)
    present = {spec.variant for spec in specs} | {alias for spec in specs for alias in spec.aliases}
    variants = {key: label for key, label in {**VARIANTS, **PPO_VARIANTS}.items() if key in present}
    all_panels = panels(evaluations, ["variant", "n_envs"])
    # rows of three panels per environment: the variants' curves, then the spreads
    rows_per_panel = -(-(len(variants) + 1) // 3)
    figure, axes = new_figure(rows_per_panel * len(all_panels), 3)
    tables = []
    for index, (title, frame) in enumerate(all_panels):
        panel_axes = axes[rows_per_panel * index : rows_per_panel * (index + 1)].ravel()
        summary = summarize(frame, ["variant", "n_envs"]).set_index(["variant", "n_envs"])
        spreads = {}
        rows = []
        for column, (variant, label) in enumerate(variants.items()):
            band = "ci" if any(spec.diagnostics for spec in specs) else "std"
            curves = frame[frame["variant"] == variant]
            plot_curves(panel_axes[column], curves, "n_envs", n_envs, _envs_label, f"{title}: {label}", band)
            means = [summary["mean"].get((variant, n), float("nan")) for n in n_envs]
            cells = [mean_std(summary["mean"].get((variant, n)), summary["std"].get((variant, n))) for n in n_envs]
            finite = [mean for mean in means if not np.isnan(mean)]
            spreads[variant] = max(finite) - min(finite) if len(finite) > 1 else float("nan")
            rows.append([label, *cells, "-" if np.isnan(spreads[variant]) else f"{spreads[variant]:.3g}"])
        panel_axes[-1].bar(range(len(spreads)), list(spreads.values()), color=[f"C{i}" for i in range(len(spreads))])
        panel_axes[-1].set_xticks(range(len(spreads)), list(spreads), fontsize=8)
        panel_axes[-1].set_title(f"{title}: spread (max - min) of final return", fontsize=9)
        panel_axes[-1].grid(alpha=0.3, axis="y")
        header = ["variant", *(_envs_label(n) for n in n_envs), "spread (max - min)"]
        tables.append(f"### {title}: final return\n\n{markdown_table(header, rows)}")
        if any(spec.diagnostics for spec in specs):  # the pre-registered statistics (runs with diagnostics)
            reference = max(n_envs)
            tables.append(f"### {title}: spread across batch sizes\n\n{spread_table(frame, n_envs)}")
            tables.append(f"### {title}: appendix F's test\n\n{appendix_f_table(frame, n_envs, reference)}")
    image = save_figure(figure, out_dir / f"{NAME}.png")
    parts = ["## Results", image, *tables]
    if any(spec.diagnostics for spec in specs):
        parts.append(movement_section(specs, out_dir))
    return "\n\n".join([*parts, "## Rescaled hyperparameters", _scaled_table(specs, evaluations)])


EXPERIMENT = Experiment(
    NAME,
    "Batch size-invariance of PPG-EWMA, with ablations (paper figures 2 and 3)",
    __doc__ or "",
    build_specs,
    report,
)


def main(argv: Sequence[str] | None = None) -> Path:
    """Run the experiment from the command line (see ``--help``); returns its results directory."""
    return cli.main(EXPERIMENT, argv)


if __name__ == "__main__":
    main()
