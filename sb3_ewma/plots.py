"""
Plot the training curves of ``python -m sb3_ewma.train`` runs:
``python -m sb3_ewma.plots -a ppo_ewma -e CartPole-v1 -f logs/ -o curves.png`` takes the flags of rl-zoo3's
``python -m rl_zoo3.plots.plot_train`` and reads the same ``Monitor`` files. Unlike rl-zoo3's, it also draws runs
shorter than the episode window (the mean of their episodes so far). See :ref:`rl_zoo`.
"""

import argparse
import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sb3_ewma._command import run_command
from sb3_ewma._display import has_display
from sb3_ewma._install import install_hint

X_AXES = {
    "steps": ("timesteps", "Timesteps"),
    "episodes": ("episodes", "Episodes"),
    "time": ("walltime_hrs", "Walltime (in hours)"),
}
Y_AXES = {
    "success": ("is_success", "Training Success Rate"),
    "reward": ("r", "Training Episodic Reward"),
    "length": ("l", "Training Episode Length"),
}


@dataclass
class Curve:
    """One run's training curve: the run folder's name, x, the rolling mean of y, and the window used."""

    label: str
    x: np.ndarray
    y: np.ndarray
    window: int


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sb3_ewma.plots",
        description="Plot the training reward (success rate, episode length) of rl-zoo3 runs, as rl-zoo3's plot_train, "
        "also for runs shorter than the episode window.",
    )
    parser.add_argument("-a", "--algo", help="Algorithm to include", type=str, required=True)
    parser.add_argument("-e", "--env", help="Environment(s) to include", nargs="+", type=str, required=True)
    parser.add_argument("-f", "--exp-folder", help="Log folder (-f of train)", type=str, required=True)
    parser.add_argument("--figsize", help="Figure size, width, height in inches.", nargs=2, type=float, default=[6.4, 4.8])
    parser.add_argument("--fontsize", help="Font size", type=int, default=14)
    parser.add_argument("-max", "--max-timesteps", help="Max number of timesteps to display", type=int)
    parser.add_argument("-x", "--x-axis", help="X-axis", choices=list(X_AXES), type=str, default="steps")
    parser.add_argument("-y", "--y-axis", help="Y-axis", choices=list(Y_AXES), type=str, default="reward")
    parser.add_argument(
        "-w", "--episode-window", help="Rolling window size (episodes; at most a run's episodes)", type=int, default=100
    )
    parser.add_argument(
        "-o", "--output", help="write the figure to this file (.png, .pdf, .svg) instead of showing it", default=None
    )
    return parser


def run_folders(exp_folder: str, algo: str, envs: Sequence[str]) -> list[str]:
    """The run folders of ``algo`` whose name contains one of ``envs`` (as rl-zoo3's plot_train), oldest first."""
    log_path = os.path.join(exp_folder, algo)
    if not os.path.isdir(log_path):
        raise FileNotFoundError(f"no folder {log_path}: -f is the log folder of train (-f), -a its algorithm (--algo)")
    entries = sorted(os.scandir(log_path), key=lambda entry: entry.stat().st_mtime)
    return [entry.path for entry in entries if entry.is_dir() and any(env in entry.name for env in envs)]


def training_curves(
    folders: Sequence[str], x_axis: str = "steps", y_axis: str = "reward", window: int = 100, max_timesteps: int | None = None
) -> tuple[list[Curve], list[str]]:
    """
    The curves of the run folders: the rolling mean over ``window`` episodes, or for a run of fewer episodes the mean of
    its episodes so far.

    :return: the curves, and one line for each folder left out (no ``Monitor`` file, no episode, no such column)
    """
    from stable_baselines3.common.monitor import LoadMonitorResultsError, load_results
    from stable_baselines3.common.results_plotter import ts2xy, window_func

    if window < 1:
        raise ValueError(f"argument -w/--episode-window: must be a number of episodes >= 1, got {window}")
    curves, skipped = [], []
    column = Y_AXES[y_axis][0]
    for folder in folders:
        name = os.path.basename(os.path.normpath(folder))
        try:
            data_frame = load_results(folder)
        except LoadMonitorResultsError:
            skipped.append(f"{folder}: no monitor file")
            continue
        if max_timesteps is not None:
            data_frame = data_frame.loc[data_frame.l.cumsum() <= max_timesteps]
        if column not in data_frame:
            skipped.append(f"{folder}: its monitor files have no {column!r} column")
            continue
        if len(data_frame) == 0:
            skipped.append(f"{folder}: no episode yet")
            continue
        x, _ = ts2xy(data_frame, X_AXES[x_axis][0])
        y = np.asarray(data_frame[column], dtype=float)
        if len(y) >= window:
            x, y_mean = window_func(x, y, window, np.mean)  # rl-zoo3's curve
            curves.append(Curve(name, x, y_mean, window))
        else:
            # the mean of the episodes so far: a point per episode
            y_mean = np.cumsum(y) / np.arange(1, len(y) + 1)
            label = f"{name} ({len(y)} episodes < window {window}: mean so far)"
            curves.append(Curve(label, np.asarray(x, dtype=float), y_mean, len(y)))
    return curves, skipped


def main(argv: Sequence[str] | None = None) -> None:
    """
    Command line entry point: ``python -m sb3_ewma.plots -a ALGO -e ENV [ENV ...] -f LOG_FOLDER [-o FILE]``.

    :param argv: the arguments (default: ``sys.argv[1:]``)
    """
    args = _parser().parse_args(argv)
    for module in ("matplotlib", "pandas"):
        if importlib.util.find_spec(module) is None:
            raise ImportError(f"python -m sb3_ewma.plots needs {module}, of the plots extra: {install_hint('plots')}")
    output = args.output
    if output is not None and os.path.exists(output):
        raise FileExistsError(f"-o {output}: the file exists; choose another name (nothing is overwritten)")
    if output is None and not has_display():
        raise ValueError("no display to show the figure on (DISPLAY is not set): write it to a file with -o FILE.png")
    folders = run_folders(args.exp_folder, args.algo, args.env)
    curves, skipped = training_curves(folders, args.x_axis, args.y_axis, args.episode_window, args.max_timesteps)
    for line in skipped:
        print(f"Left out {line}")
    if not curves:
        log_path = os.path.join(args.exp_folder, args.algo)
        raise ValueError(f"nothing to plot: no run of {' '.join(args.env)} in {log_path} has an episode in its monitor files")
    import matplotlib

    if output is not None:
        matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    y_label, x_label = Y_AXES[args.y_axis][1], X_AXES[args.x_axis][1]
    figure = plt.figure(y_label, figsize=args.figsize)
    plt.title(y_label, fontsize=args.fontsize)
    plt.xlabel(x_label, fontsize=args.fontsize)
    plt.ylabel(y_label, fontsize=args.fontsize)
    for curve in curves:
        # a run of a few episodes: its points marked (one point draws no line)
        plt.plot(curve.x, curve.y, linewidth=2, label=curve.label, marker="o" if len(curve.x) < 20 else None)
    plt.legend()
    plt.tight_layout()
    if output is None:
        plt.show()
    else:
        figure.savefig(output)
        print(f"Saved {output} ({len(curves)} run(s))")
    plt.close(figure)


if __name__ == "__main__":
    run_command(main, prog="python -m sb3_ewma.plots")
