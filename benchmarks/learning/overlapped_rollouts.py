"""
Overlapped rollouts, learning: PPO_EWMA with ``async_rollouts=True`` (each iteration trains on the rollout collected by
the previous iteration's parameters) against the synchronous PPO_EWMA, on identical settings, over several seeds.
CartPole-v1 with rl-zoo3's tuned PPO entry (8 environments x 32 steps, batch 256, 20 epochs, GAE 0.8, gamma 0.98,
learning rate and clip range annealed linearly from 1e-3 and 0.2 to 0). Learning curves (mean and standard
deviation over seeds) of the training episodes' returns, final returns and the runs' wall-clock steps per second.

Variants: synchronous, a collector thread (``async``), a collector process (``async_process``: the same computation,
so the same learning is expected), and both synchronous and with a thread at an EWMA center of mass of 10 optimizer
steps (``*_age_10``) instead of ``"auto"`` (the minibatches per epoch: 1 here, an EWMA one step behind the policy);
10 steps is the mean age of PPO's behavior policy over an iteration of 20 steps.

MinAtar Breakout (the learning benchmarks' ``cpu`` task: 64 environments x 128 steps, 8 minibatches, 3 epochs, MLP
[64, 64], 2^20 steps per run) runs the synchronous PPO_EWMA and both collectors at the default EWMA age (8 steps,
the paper's rule, a third of an iteration of 24 steps).

    python -m benchmarks.learning.overlapped_rollouts --preset cpu     # CartPole-v1 (2^16 steps) and MinAtar Breakout, 3 seeds
    python -m benchmarks.learning.overlapped_rollouts --preset cpu --envs CartPole-v1   # CartPole-v1 only
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from stable_baselines3.common.utils import LinearSchedule

from benchmarks.harness import cli
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
from benchmarks.harness.results_store import RUNS_FILE
from benchmarks.harness.settings import Scale, preset_runs

NAME = "async_rollouts"
AGE_10 = 10 / 11
"""The EWMA decay of center of mass 10 optimizer steps."""
VARIANTS: dict[str, dict[str, Any]] = {
    "sync": dict(async_rollouts=False),
    "async": dict(async_rollouts=True),
    "async_process": dict(async_rollouts="process"),
    "sync_age_10": dict(async_rollouts=False, ewma_decay=AGE_10),
    "async_age_10": dict(async_rollouts=True, ewma_decay=AGE_10),
}
ZOO_CARTPOLE = dict(
    n_steps=32,
    batch_size=256,
    n_epochs=20,
    gamma=0.98,
    gae_lambda=0.8,
    ent_coef=0.0,
    learning_rate=LinearSchedule(1e-3, 0.0, 1.0),
    clip_range=LinearSchedule(0.2, 0.0, 1.0),
)
"""rl-zoo3's ``CartPole-v1`` PPO entry (``lin_0.001``, ``lin_0.2``: linear from the value at the start to 0)."""


@dataclass(frozen=True)
class Task:
    """An environment of a preset: its PPO_EWMA settings, the variants run on it and the steps per run."""

    n_envs: int
    hyperparams: dict[str, Any]
    variants: tuple[str, ...]
    scale: Scale
    network: str = "mlp"


def tasks_of(preset: str) -> dict[str, Task]:
    """
    The tasks of ``preset`` (the environments of its entry in the preset table): CartPole-v1 with rl-zoo3's entry
    (option ``cartpole``: changes to it and ``n_envs``, default 8; option ``cartpole_scale``: its length, default the
    entry's), every variant; MinAtar Breakout at the preset's setting, the synchronous run and both collectors.
    """
    setting, scale, runs = preset_runs(preset, NAME, {})
    cartpole = dict(runs.options.get("cartpole", {}))
    tasks = {
        "CartPole-v1": Task(
            cartpole.pop("n_envs", 8),
            dict(ZOO_CARTPOLE, **cartpole),
            tuple(VARIANTS),
            runs.options.get("cartpole_scale", scale),
        ),
        "MinAtar/Breakout-v1": Task(
            setting.n_envs,
            setting.hyperparams("ppo_ewma"),
            ("sync", "async", "async_process"),
            scale,
            network=setting.network,
        ),
    }
    return {env: tasks[env] for env in setting.envs}


def build_specs(preset: str, overrides: dict[str, Any]) -> list[RunSpec]:
    """PPO_EWMA synchronous and with overlapped rollouts, for every task of the preset (or ``--envs``) and seed."""
    tasks = tasks_of(preset)
    envs = overrides.get("envs") or tuple(tasks)
    unknown = [env for env in envs if env not in tasks]
    if unknown:
        raise ValueError(f"{NAME} --preset {preset} has the environments {tuple(tasks)}, got {unknown}")
    specs = []
    for env in envs:
        task = tasks[env]
        scale = task.scale.with_overrides(overrides, int(task.hyperparams["n_steps"]) * task.n_envs)
        specs += [
            RunSpec(
                experiment=NAME,
                variant=variant,
                algo="ppo_ewma",
                env=env,
                n_envs=task.n_envs,
                seed=seed,
                total_timesteps=scale.timesteps,
                eval_every=scale.eval_every,
                hyperparams=dict(task.hyperparams, **VARIANTS[variant]),
                network=task.network,
                device=overrides.get("device") or "cpu",
            )
            for seed in range(scale.seeds)
            for variant in task.variants
        ]
    return specs


def report(evaluations: pd.DataFrame, specs: Sequence[RunSpec], out_dir: Path) -> str:
    """Learning curves and final returns of both variants (figure), final returns and speeds per variant (table)."""
    manifest = pd.DataFrame(Manifest(out_dir / RUNS_FILE).rows.values())
    all_panels = panels(evaluations, ["variant"])
    figure, axes = new_figure(len(all_panels), 1, width=5.0)
    tables = []
    for row, (title, frame) in enumerate(all_panels):
        plot_curves(axes[row, 0], frame, "variant", list(VARIANTS), lambda name: f"PPO_EWMA {name}", f"{title}: sync vs async")
        summary = summarize(frame, ["variant"]).set_index("variant")
        finals = final_values(frame, ["variant"])
        rows = []
        for variant in VARIANTS:
            if variant not in summary.index:
                continue
            seeds = ", ".join(f"{value:.4g}" for value in finals[finals["variant"] == variant]["value"])
            runs = manifest[(manifest["variant"] == variant) & (manifest["env"] == frame["env"].iloc[0])]
            speeds = runs["steps_per_second"].astype(float)
            rows.append(
                [variant, mean_std(summary.loc[variant, "mean"], summary.loc[variant, "std"]), seeds, f"{speeds.median():.0f}"]
            )
        header = ["PPO_EWMA", "final return", "per seed", "median steps/s of the runs"]
        tables.append(f"### {title}\n\n{markdown_table(header, rows)}")
    image = save_figure(figure, out_dir / f"{NAME}.png")
    note = "Steps per second are those of whole runs on a shared machine (runs in parallel): indicative only."
    return "\n\n".join(["## Results", image, *tables, note])


EXPERIMENT = Experiment(
    NAME,
    "Overlapped rollouts: PPO_EWMA async vs sync (learning)",
    __doc__ or "",
    build_specs,
    report,
    module="benchmarks.learning.overlapped_rollouts",
)


def main(argv: Sequence[str] | None = None) -> Path:
    """Run the experiment from the command line (see ``--help``); returns its results directory."""
    return cli.main(EXPERIMENT, argv)


if __name__ == "__main__":
    main()
