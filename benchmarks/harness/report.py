"""
Reports of the learning experiments: the evaluations of the finished runs as a table, learning curves and final
returns (mean and sample standard deviation over seeds), written as PNG figures (matplotlib, Agg backend) and markdown.

The *final return* of a run is the mean of its evaluations in the last quarter of training
(:data:`benchmarks.harness.common.FINAL_FRACTION`); tables give its mean and sample standard deviation (n - 1) over
seeds.
With several Procgen games, an extra panel averages the paper's normalized return over the games.
"""

import os
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from benchmarks.harness.common import FINAL_FRACTION, Experiment, Manifest, RunSpec
from benchmarks.harness.envs import is_procgen, score, short_name
from benchmarks.harness.results_store import RUNS_FILE

ALGORITHM_LABELS = {
    "ppo": "PPO (SB3)",
    "ppo_foreach": "PPO (SB3), foreach Adam",
    "ppo_ewma": "PPO-EWMA",
    "ppg": "PPG",
    "ppg_ewma": "PPG-EWMA",
}
ALL_GAMES = "all games (normalized)"
"""Title of the panel that averages Procgen's normalized return over the games."""


EVALUATIONS_FILE = "evaluations.csv.gz"
"""The evaluation rows of an experiment's finished runs, one gzipped CSV beside ``results.md``."""


def load_evaluations(specs: Sequence[RunSpec], out_dir: Path) -> pd.DataFrame:
    """
    The evaluation rows of the finished runs (in ``runs.jsonl`` with their current settings), one copy per variant the
    run stands for (its own and its ``aliases``, column ``shared`` True for the copies), with a ``score`` column
    (:func:`benchmarks.harness.envs.score`) and the run's ``total_timesteps``. ``mean_return`` is NaN for an evaluation window
    in which no episode ended.
    """
    manifest = Manifest(out_dir / RUNS_FILE)
    frames = []
    for spec in specs:
        if not manifest.is_done(spec):
            continue
        frame = pd.DataFrame(manifest.evaluations(spec.run_id))
        if frame.empty:
            continue
        frame["score"] = score(spec.env, frame["mean_return"].to_numpy())
        frame["total_timesteps"] = spec.total_timesteps
        frames += [frame.assign(variant=variant, shared=variant != spec.variant) for variant in (spec.variant, *spec.aliases)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def panels(evaluations: pd.DataFrame, keys: Sequence[str]) -> list[tuple[str, pd.DataFrame]]:
    """
    The panels of a figure: one per environment (value column ``value`` = raw mean return) and, with several Procgen
    games, one more with the normalized return averaged over the games (per ``keys`` + seed + timesteps). Evaluations
    without a finished episode take the run's previous value.
    """
    evaluations = evaluations.assign(
        mean_return=evaluations.groupby(["run_id", "variant"])["mean_return"].ffill(),
        score=evaluations.groupby(["run_id", "variant"])["score"].ffill(),
    )
    result = []
    for env, frame in evaluations.groupby("env", sort=False):
        result.append((short_name(str(env)), frame.assign(value=frame["mean_return"])))
    envs = evaluations["env"].unique()
    if len(envs) > 1 and all(is_procgen(str(env)) for env in envs):
        group = [*keys, "seed", "timesteps"]
        mean = evaluations.groupby(group, as_index=False).agg(
            score=("score", "mean"), total_timesteps=("total_timesteps", "max")
        )
        result.append((ALL_GAMES, mean.assign(value=mean["score"], env=ALL_GAMES)))
    return result


def final_values(frame: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """The final return (column ``value``) of each run: one row per ``keys`` + seed."""
    last = frame[frame["timesteps"] > (1 - FINAL_FRACTION) * frame["total_timesteps"]]
    return last.groupby([*keys, "seed"], as_index=False)["value"].mean()


def summarize(frame: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Mean, sample standard deviation (n - 1; NaN for one seed) and number of seeds of the final returns, per
    ``keys``."""
    finals = final_values(frame, keys)
    return finals.groupby(list(keys), as_index=False).agg(
        mean=("value", "mean"), std=("value", "std"), seeds=("value", "size")  # pandas' std: ddof=1
    )


def plot_curves(
    ax: Any,
    frame: pd.DataFrame,
    hue: str,
    order: Sequence[Any],
    label: Callable[[Any], str] = str,
    title: str = "",
    band: str = "std",
) -> None:
    """
    Learning curves of ``frame`` (``value`` against ``timesteps``), one per value of ``hue`` in ``order``: the mean over
    seeds, and a band of one sample standard deviation (``band="std"``) or the 95% percentile bootstrap interval of the mean
    (``band="ci"``). The y label says whether ``value`` is a raw or a normalized return.
    """
    from benchmarks.harness.statistics import mean_interval

    for position, key in enumerate(order):
        runs = frame[frame[hue] == key]
        if runs.empty:
            continue
        grouped = runs.groupby("timesteps")["value"]
        mean = grouped.mean()
        if band == "ci":
            intervals = grouped.apply(
                lambda values: mean_interval(values.dropna()) if values.notna().any() else (np.nan, np.nan)
            )
            low, high = np.array([interval[0] for interval in intervals]), np.array([interval[1] for interval in intervals])
        else:
            std = grouped.std()  # ddof=1
            low, high = (mean - std).to_numpy(), (mean + std).to_numpy()
        color = f"C{position}"
        ax.plot(mean.index, mean, color=color, label=label(key))
        ax.fill_between(mean.index, low, high, color=color, alpha=0.2)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("mean normalized return" if ALL_GAMES in title else "mean episode return")
    ax.grid(alpha=0.3)
    if ax.get_lines():
        ax.legend(fontsize=7)


def new_figure(rows: int, columns: int, width: float = 4.2, height: float = 3.2) -> tuple[Any, np.ndarray]:
    """A figure of ``rows x columns`` panels (a 2-d array of axes)."""
    figure, axes = plt.subplots(rows, columns, figsize=(width * columns, height * rows), squeeze=False)
    return figure, axes


def save_figure(figure: Any, path: Path) -> str:
    """Save a figure as a PNG and close it; returns the markdown that shows it.

    The PNG is stored with a palette of 256 colors (:func:`palette_png`): a third of the size, for figures that are
    committed and carried to the GPU machines.
    """
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    palette_png(path)
    return f"![{path.stem}]({path.name})"


def palette_png(path: Path) -> None:
    """Rewrite a PNG in place with a palette of at most 256 colors, without dithering (line plots need no more)."""
    from PIL import Image

    with Image.open(path) as image:
        image.load()
        if image.mode == "P":
            return
        paletted = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    paletted.save(path, format="PNG", optimize=True)


def mean_std(mean: float, std: float) -> str:
    """``"12.3 +- 4.5"`` (``"-"`` when missing; the mean alone without a standard deviation, e.g. of one seed)."""
    if mean is None or np.isnan(mean):
        return "-"
    if std is None or np.isnan(std):
        return f"{mean:.3g}"
    return f"{mean:.3g} +- {std:.2g}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(str(cell) for cell in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _settings_table(specs: Sequence[RunSpec]) -> str:
    """
    The hyperparameters of each algorithm on each environment in its runs with the most environments; those that
    differ between these runs are listed as varied. Environments with the same settings share a row.
    """
    rows: dict[tuple[str, int, str, str], list[str]] = {}
    for algo, env in dict.fromkeys((spec.algo, spec.env) for spec in specs):
        runs = [spec for spec in specs if (spec.algo, spec.env) == (algo, env)]
        runs = [spec for spec in runs if spec.n_envs == max(run.n_envs for run in runs)]
        first = runs[0].hyperparams
        keys = dict.fromkeys(key for run in runs for key in run.hyperparams)
        varied = [key for key in keys if any(repr(run.hyperparams.get(key)) != repr(first.get(key)) for run in runs)]
        settings = ", ".join(f"{key}={value}" for key, value in first.items() if key not in varied)
        if varied:
            settings += f"; varied: {', '.join(varied)}"
        rows.setdefault((ALGORITHM_LABELS.get(algo, algo), runs[0].n_envs, runs[0].network, settings), []).append(env)
    table = markdown_table(
        ["algorithm", "environments", "n_envs", "network", "hyperparameters"],
        [[label, ", ".join(envs), n_envs, network, settings] for (label, n_envs, network, settings), envs in rows.items()],
    )
    note = (
        "Arguments not listed take the classes' defaults; PPO-EWMA and PPG-EWMA: `ewma_decay='auto'` (EWMA center of "
        "mass = minibatches per epoch), PPG: no EWMA. `max_grad_norm=inf`: no gradient clipping, as in the paper."
    )
    return f"{table}\n\n{note}"


def write_report(experiment: Experiment, specs: Sequence[RunSpec], out_dir: Path, command: str) -> Path:
    """
    Write ``evaluations.csv.gz``, the experiment's figures and ``results.md`` from the finished runs (``runs.jsonl``).

    :return: the path of ``results.md``
    """
    evaluations = load_evaluations(specs, out_dir)
    manifest = Manifest(out_dir / RUNS_FILE)
    finished = [spec for spec in specs if manifest.is_done(spec)]
    run_seconds = sum(float(manifest.records[spec.run_id]["wall_time"]) for spec in finished)
    cpu_times = [manifest.records[spec.run_id].get("cpu_time") for spec in finished]
    cpu_note = f", of CPU time {sum(cpu_times) / 60:.1f} min" if cpu_times and None not in cpu_times else ""
    envs = ", ".join(dict.fromkeys(spec.env for spec in specs))
    steps = sorted({spec.total_timesteps for spec in specs})
    seeds = len({spec.seed for spec in specs})
    lines = [
        f"# {experiment.title}",
        "",
        experiment.description.strip().split("\n\n")[0],
        "",
        f"- preset: `{out_dir.name}`; environments: {envs}; {', '.join(map(str, steps))} environment steps per run; "
        f"{seeds} seed(s)",
        f"- command: `{command}`",
        f"- runs finished: {len(finished)} of {len(specs)}; sum of their wall-clock times: {run_seconds / 60:.1f} min"
        f"{cpu_note} "
        f"(machine: {platform.machine()}, {os.cpu_count()} cores; report written {time.strftime('%Y-%m-%d %H:%M')})",
        f"- final return: mean of the evaluations in the last {FINAL_FRACTION:.0%} of training; +- is the sample "
        "standard deviation over seeds (n - 1)",
        "",
    ]
    if len(finished) < len(specs):
        lines += [
            f"**Partial results: {len(finished)} of {len(specs)} runs finished.** The tables and figures hold the finished "
            "runs only; the others run when the same command is run again.",
            "",
        ]
    if evaluations.empty:
        lines.append("No run has finished yet.")
    else:
        # gzipped (a tenth of the size; pandas and `zcat` read it), with no time stamp: a rewrite of the same rows is
        # the same file
        evaluations[~evaluations["shared"]].drop(columns=["shared", "score", "total_timesteps"]).to_csv(
            out_dir / EVALUATIONS_FILE, index=False, compression={"method": "gzip", "mtime": 0}
        )
        (out_dir / "evaluations.csv").unlink(missing_ok=True)  # written uncompressed before
        lines.append(experiment.report(evaluations, list(specs), out_dir))
    lines += ["", "## Settings", "", _settings_table(specs), ""]
    path = out_dir / "results.md"
    path.write_text("\n".join(lines))
    print(f"report: {path}")
    return path
