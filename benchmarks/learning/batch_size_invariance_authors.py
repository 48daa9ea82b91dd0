"""
Batch size-invariance of PPG-EWMA with the authors' remaining choices: minibatches of whole rollouts in both phases,
the normed head initialization with scale 0.1, and Adam's epsilon at the authors' 1e-8 (``"authors"``) or at SB3's
1e-5 (``"authors_eps_1e-5"``, the hypothesis that a high epsilon is behind the slower 64-environment reference of
:mod:`benchmarks.learning.batch_size_invariance`). Both rescaled from the 64-environment reference by
``scale_hyperparams`` as there (all adjustments). Reported next to the final returns: the gradient noise scale
``B_simple`` (McCandlish et al. 2018) of the policy phase at the end of training, per batch size, against the
policy-phase minibatch size. The preset table's option ``n_envs`` gives the numbers of environments, largest first.

    python -m benchmarks.learning.batch_size_invariance_authors --preset cpu --timesteps 131072 --seeds 2 --max-minutes 20
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.harness import cli
from benchmarks.harness.common import Experiment, RunSpec
from benchmarks.harness.report import markdown_table, mean_std, new_figure, panels, plot_curves, save_figure, summarize
from benchmarks.harness.settings import preset_runs, run_spec
from benchmarks.learning import batch_size_invariance

NAME = "batch_size_invariance_authors"
VARIANTS = {
    "authors": "PPG-EWMA, authors' choices (Adam eps 1e-8)",
    "authors_eps_1e-5": "PPG-EWMA, authors' choices but Adam eps 1e-5 (SB3's)",
    "authors_small_minibatch": "PPG-EWMA at the largest batch with the optimizer of the second largest",
}
OPTIMIZER_KEYS = ("batch_size", "learning_rate", "ewma_decay")
"""What ``"authors_small_minibatch"`` takes from the run at the second largest number of environments (c = 4 on the
cpu preset): the minibatch, Adam's step size and the EWMA's age, i.e. the same optimizer on the same data per step,
with the largest run's iterations (rollouts, advantage normalization, auxiliary phases). If the largest batch lags
because its minibatch is above the critical batch size, this control learns like the second largest."""
EPSILON = {"authors": 1e-8, "authors_eps_1e-5": 1e-5}
CONTROL_BATCH_SIZES = 2
"""The epsilon control (``"authors_eps_1e-5"``) runs at the largest two batch sizes only, where the reference learns
slower: the smaller ones run the authors' variant alone."""


def authors_hyperparams(reference: dict[str, Any], epsilon: float) -> dict[str, Any]:
    """The reference with minibatches of whole rollouts, head_init_scale 0.1 and Adam's epsilon in both optimizers."""
    policy_kwargs = dict(reference.get("policy_kwargs") or {})
    policy_kwargs.update(head_init_scale=0.1, optimizer_kwargs=dict(eps=epsilon))
    return dict(
        reference,
        policy_kwargs=policy_kwargs,
        aux_optimizer_kwargs=dict(eps=epsilon),
        minibatch_sampling="rollouts",
        aux_minibatch_sampling="rollouts",
    )


def build_specs(preset: str, overrides: dict[str, Any]) -> list[RunSpec]:
    """The authors' variant at every number of environments, the epsilon control at the largest two and the optimizer
    control at the largest."""
    setting, scale, runs = preset_runs(preset, NAME, overrides)
    reference = batch_size_invariance.reference_hyperparams(setting)
    specs = []
    for env in setting.envs:
        for seed in scale.seed_range:
            all_n_envs = runs.options["n_envs"]
            for index, n_envs in enumerate(all_n_envs):
                for variant in VARIANTS:
                    if variant == "authors_eps_1e-5" and index >= CONTROL_BATCH_SIZES:
                        continue
                    if variant == "authors_small_minibatch" and (index > 0 or len(all_n_envs) < 2):
                        continue
                    authors = authors_hyperparams(reference, EPSILON.get(variant, EPSILON["authors"]))
                    algo, hyperparams = batch_size_invariance.variant_hyperparams(authors, "ppg_ewma", n_envs)
                    if variant == "authors_small_minibatch":
                        _, smaller = batch_size_invariance.variant_hyperparams(authors, "ppg_ewma", all_n_envs[1])
                        hyperparams.update({key: smaller[key] for key in OPTIMIZER_KEYS if key in smaller})
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
                            eval_episodes=overrides.get("eval_episodes"),
                        )
                    )
    return specs


def _envs_label(n_envs: int) -> str:
    return f"{n_envs} env" if n_envs == 1 else f"{n_envs} envs"


def report(evaluations: pd.DataFrame, specs: Sequence[RunSpec], out_dir: Path) -> str:
    n_envs = sorted({spec.n_envs for spec in specs}, reverse=True)
    batch_sizes = {(spec.variant, spec.n_envs): spec.hyperparams["batch_size"] for spec in specs}
    figure, axes = new_figure(1, len(VARIANTS))
    tables = []
    for title, frame in panels(evaluations, ["variant", "n_envs"]):
        summary = summarize(frame, ["variant", "n_envs"]).set_index(["variant", "n_envs"])
        rows = []
        for column, (variant, label) in enumerate(VARIANTS.items()):
            plot_curves(
                axes.ravel()[column], frame[frame["variant"] == variant], "n_envs", n_envs, _envs_label, f"{title}: {label}"
            )
            means = [summary["mean"].get((variant, n), float("nan")) for n in n_envs]
            stds = [summary["std"].get((variant, n), float("nan")) for n in n_envs]
            finite = [mean for mean in means if not np.isnan(mean)]
            spread = max(finite) - min(finite) if len(finite) > 1 else float("nan")
            rows.append([label, *(mean_std(m, s) for m, s in zip(means, stds)), f"{spread:.3g}", f"{np.nanmean(stds):.3g}"])
        header = ["variant", *(_envs_label(n) for n in n_envs), "spread (max - min)", "mean seed std"]
        tables.append(f"### {title}: final return\n\n{markdown_table(header, rows)}")
    noise = markdown_table(
        ["variant", "n_envs", "policy minibatch (steps)", "B_simple, first quarter (mean +- std)", "B_simple at the end"],
        gradient_noise_rows(evaluations, batch_sizes),
    )
    image = save_figure(figure, out_dir / f"{NAME}.png")
    return "\n\n".join(["## Results", image, *tables, "## Gradient noise scale (policy phase)", noise])


def gradient_noise_rows(evaluations: pd.DataFrame, batch_sizes: dict[tuple[str, int], int]) -> list[list[Any]]:
    """
    Per variant and batch size: the policy minibatch and ``B_simple`` early (each run's mean over the evaluations in
    the first quarter of training) and at the end (each run's last evaluation), mean +- std over the runs.
    """
    if "gradient_noise_scale" not in evaluations:
        return []
    frame = evaluations.dropna(subset=["gradient_noise_scale"]).sort_values("timesteps")
    quarter = frame["timesteps"] <= frame.groupby("run_id")["timesteps"].transform("max") / 4
    keys = ["variant", "n_envs", "run_id"]
    early = frame[quarter].groupby(keys)["gradient_noise_scale"].mean().groupby(["variant", "n_envs"]).agg(["mean", "std"])
    last = frame.groupby(keys)["gradient_noise_scale"].last().groupby(["variant", "n_envs"]).agg(["mean", "std"])
    rows = []
    for (variant, n), values in last.iterrows():
        start = early.loc[(variant, n)] if (variant, n) in early.index else {"mean": float("nan"), "std": float("nan")}
        rows.append(
            [
                variant,
                n,
                batch_sizes.get((variant, n), "-"),
                mean_std(start["mean"], start["std"]),
                mean_std(values["mean"], values["std"]),
            ]
        )
    return rows


EXPERIMENT = Experiment(
    NAME,
    "Batch size-invariance of PPG-EWMA with the authors' minibatches, initialization and Adam epsilon",
    __doc__ or "",
    build_specs,
    report,
)


def main(argv: Sequence[str] | None = None) -> Path:
    """Run the experiment from the command line (see ``--help``); returns its results directory."""
    return cli.main(EXPERIMENT, argv)


if __name__ == "__main__":
    main()
