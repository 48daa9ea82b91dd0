"""
Artificial staleness (paper section 5.1, figure 1): PPO whose data is trained on a fixed number of iterations after it
was collected (``StalePPO_EWMA(...).set_staleness(k, mode)``), with three choices of the old policy in the clipped objective:
``decoupled`` (the behavior policy for importance sampling, the recent policy, i.e. the policy at the start of the
iteration, for clipping), ``behavior`` (the behavior policy for both) and ``proximal`` (the recent policy for both).
As in the paper's figure 1 the proximal policy is the recent policy (no EWMA) and ``pi / pi_behav`` is capped at 100.
At staleness 0 the three are the same algorithm (PPO) and share one run. Reported: final return against staleness.

    python -m benchmarks.learning.staleness --preset cpu                    # MinAtar Breakout, 16 envs, staleness 0-8, 3 seeds
    python -m benchmarks.learning.staleness --preset gpu --max-minutes 8     # Procgen starpilot; repeat until all finished
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.harness import cli
from benchmarks.harness.common import Experiment, RunSpec
from benchmarks.harness.report import markdown_table, mean_std, new_figure, panels, plot_curves, save_figure, summarize
from benchmarks.harness.settings import Scale, preset_setting, run_spec

NAME = "staleness"
MODES = {
    "decoupled": "decoupled (behavior for IS, recent for clipping)",
    "behavior": "old policy = behavior",
    "proximal": "old policy = recent",
}
STALENESS = {"smoke": (0, 1, 2), "cpu": (0, 1, 2, 4, 8), "gpu": (0, 1, 2, 4, 8), "paper": (0, 1, 2, 4, 8, 16, 32)}
N_ENVS = {"cpu": 16}
"""Fewer environments than the shared setting at the cpu preset, for more (smaller) iterations in a short run."""
ENVS = {"gpu": ("procgen-starpilot-easy",)}
"""One game at the gpu preset (its runs are long); ``--envs`` adds others."""
SCALES = {
    "smoke": Scale(timesteps=256, eval_every=128, seeds=1),
    "cpu": Scale(timesteps=2**19, eval_every=2**14, seeds=3),
    "gpu": Scale(timesteps=16 * 2**20, eval_every=2**18, seeds=2),
    "paper": Scale(timesteps=100 * 2**20, eval_every=2**20, seeds=4),
}


def build_specs(preset: str, overrides: dict[str, Any]) -> list[RunSpec]:
    """Every mode at every staleness (one shared run at staleness 0), for every seed."""
    setting = preset_setting(preset, overrides, ENVS, N_ENVS)
    scale = SCALES[preset].with_overrides(overrides, setting.iteration_size)
    specs = []
    for env in setting.envs:
        for seed in range(scale.seeds):
            for staleness in STALENESS[preset]:
                for mode in MODES if staleness else ["decoupled"]:
                    hyperparams = setting.hyperparams("ppo_ewma")
                    hyperparams.update(ewma_decay=None, imp_samp_max=100.0, staleness=staleness, staleness_mode=mode)
                    aliases = tuple(other for other in MODES if other != mode) if staleness == 0 else ()
                    spec = run_spec(
                        NAME,
                        setting,
                        scale,
                        env,
                        "ppo_ewma",
                        seed,
                        variant=mode,
                        hyperparams=hyperparams,
                        labels={"staleness": staleness},
                        aliases=aliases,
                        eval_episodes=overrides.get("eval_episodes"),
                    )
                    specs.append(spec)
    return specs


def report(evaluations: pd.DataFrame, specs: Sequence[RunSpec], out_dir: Path) -> str:
    """Final return against staleness per mode, and the learning curves of each mode (figure and table)."""
    levels = sorted({int(spec.labels["staleness"]) for spec in specs})
    all_panels = panels(evaluations, ["variant", "staleness"])
    figure, axes = new_figure(len(all_panels), len(MODES) + 1, width=3.8)
    tables = []
    for row, (title, frame) in enumerate(all_panels):
        summary = summarize(frame, ["variant", "staleness"]).set_index(["variant", "staleness"])
        rows = []
        ax = axes[row, 0]
        for position, (mode, label) in enumerate(MODES.items()):
            means = np.array([summary["mean"].get((mode, level), np.nan) for level in levels])
            stds = np.array([summary["std"].get((mode, level), np.nan) for level in levels])
            ax.errorbar(range(len(levels)), means, yerr=stds, color=f"C{position}", marker="o", capsize=3, label=mode)
            cells = [mean_std(mean, std) for mean, std in zip(means, stds)]
            rows.append([label, *cells])
            curves = frame[frame["variant"] == mode]
            plot_curves(axes[row, position + 1], curves, "staleness", levels, lambda k: f"staleness {k}", f"{title}: {mode}")
        ax.set_xticks(range(len(levels)), [str(level) for level in levels])
        ax.set_xlabel("staleness (iterations)")
        ax.set_title(f"{title}: final return", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        header = ["old policy", *(f"staleness {level}" for level in levels)]
        tables.append(f"### {title}: final return\n\n{markdown_table(header, rows)}")
    iteration = specs[0].iteration_size
    note = f"One iteration is {iteration} environment steps ({specs[0].n_envs} environments x {iteration // specs[0].n_envs})."
    image = save_figure(figure, out_dir / f"{NAME}.png")
    return "\n\n".join(["## Results", note, image, *tables])


EXPERIMENT = Experiment(
    NAME, "PPO with artificial staleness: decoupled vs coupled objectives (paper figure 1)", __doc__ or "", build_specs, report
)


def main(argv: Sequence[str] | None = None) -> Path:
    """Run the experiment from the command line (see ``--help``); returns its results directory."""
    return cli.main(EXPERIMENT, argv)


if __name__ == "__main__":
    main()
