"""
rl-zoo3's PPO tasks with this package's algorithms, read like rl-zoo3's ``benchmark.md``::

    python -m benchmarks.learning.zoo_table --groups classic,box2d --seeds 3 --workers 1
    python -m benchmarks.learning.zoo_table --experiment ewma_age --seeds 3 --workers 1

Each run is the command a user types: SB3's PPO through ``python -m rl_zoo3.train --algo ppo`` itself (the reference),
``python -m sb3_ewma.train --algo ppo_ewma | ppg_ewma | ppg`` for the others (their entries: the package's own, else
derived from rl-zoo3's PPO entry, :mod:`sb3_ewma.zoo.derivation`), with the same ``--seed`` and budget ``-n`` (the
tuned ``n_timesteps``, capped per task on these CPUs: :mod:`benchmarks.learning.zoo_tasks`), one torch thread
(``--num-threads 1``, ``OMP_NUM_THREADS=1``), an evaluation of 5 episodes every tenth of the budget (rl-zoo3's
``EvalCallback``: the learning curves) and, after training, a final evaluation of the saved model as rl-zoo3's
``enjoy`` would load it (``config.yml``, ``vecnormalize.pkl``; deterministic actions except on Atari and MiniGrid, as
rl-zoo3) over ``--final-episodes`` episodes.

Experiments: ``table`` (SB3 PPO, PPO_EWMA, PPG_EWMA, PPG on every task) and ``ewma_age`` (SB3 PPO and PPO_EWMA with each
named center-of-mass rule of :mod:`sb3_ewma.common.ewma_age` on classic-control entries with many epochs).

Results, ``benchmarks/results/zoo_table/<experiment>/``:

- ``runs.jsonl``: one record per finished run, keyed by its run id ``<env>__<variant>__seed=<s>`` (command, budget,
  wall clock, final evaluation, learning curve, the ``config.yml`` it trained with;
  :mod:`benchmarks.harness.results_store`), appended when the run finishes; a run is skipped when the file holds it,
  so an interrupted benchmark resumes where it stopped (an unfinished run restarts);
- ``logs/<run>.log``: the run's output (kept out of version control, with the rl-zoo3 log folders under ``zoo_logs/``,
  by the ``.gitignore`` written there);
- ``benchmark.md``: the table (algo, env, mean, std, timesteps, eval timesteps, eval episodes) with rl-zoo3's published
  PPO figure and our SB3 PPO figure beside each row, then wall clock per run; ``curves/<env>.png``: learning curves.
"""

import argparse
import math
import multiprocessing
import os
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from benchmarks.harness import results_store
from benchmarks.harness.report import markdown_table, new_figure, save_figure
from benchmarks.learning.zoo_tasks import (
    EXPERIMENTS,
    GROUPS,
    TASKS,
    Task,
    Variant,
    published_mean,
    published_row,
    task_budget,
    task_by_env,
    tuned_budget,
)

RESULTS_ROOT = Path(__file__).resolve().parents[1] / "results" / "zoo_table"
REPO_ROOT = Path(__file__).resolve().parents[2]
CURVE_POINTS = 10
"""Evaluations during training (every ``budget / CURVE_POINTS`` steps), of :data:`CURVE_EPISODES` episodes each."""
CURVE_EPISODES = 5
VARIANT_TITLES = {"ppo": "SB3 PPO", "ppo_ewma": "PPO_EWMA", "ppg_ewma": "PPG_EWMA", "ppg": "PPG"}
"""Column titles of the summary table."""
SUMMARY_START, SUMMARY_END = "<!-- summary table -->", "<!-- end of the summary table -->"
"""Markers around the summary table (the documentation includes what lies between them, the README holds a copy)."""
README = REPO_ROOT / "README.md"
GITIGNORE = "zoo_logs/\nlogs/\n"
"""The ``.gitignore`` of an experiment's results: rl-zoo3's folders and the runs' logs."""


@dataclass(frozen=True)
class Job:
    """One run: a task, a variant and a seed, trained for ``budget`` steps."""

    experiment: str
    task: Task
    variant: Variant
    seed: int
    budget: int
    tuned: int
    final_episodes: int

    @property
    def run_id(self) -> str:
        return f"{self.task.env.replace('/', '_')}__{self.variant.name}__seed={self.seed}"

    @property
    def reduced(self) -> bool:
        """Whether the budget is below the tuned ``n_timesteps``."""
        return self.budget < self.tuned


# ----------------------------------------------------------------------------------------------------------------------
# one run


def conf_file(job: Job, out_dir: Path) -> Path | None:
    """For tasks rl-zoo3 has no PPO entry for: the task's entry, written as ``-conf`` file (derived for PPG)."""
    if job.task.conf is None:
        return None
    from sb3_ewma.zoo.derivation import derive

    entry = dict(job.task.conf)
    if not job.variant.is_reference:
        entry = derive(job.variant.algo, entry).entry
    path = out_dir / "zoo_logs" / "conf" / f"{job.variant.algo}__{job.task.env.replace('/', '_')}.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({job.task.env: entry}))
    return path


def command(job: Job, log_folder: Path, conf: Path | None) -> list[str]:
    """The training command line of ``job``."""
    module = "rl_zoo3.train" if job.variant.is_reference else "sb3_ewma.train"
    argv = [sys.executable, "-m", module, "--algo", job.variant.algo, "--env", job.task.env]
    argv += ["--seed", str(job.seed), "-n", str(job.budget), "-f", str(log_folder), "--num-threads", "1"]
    argv += ["--eval-freq", str(max(job.budget // CURVE_POINTS, 1)), "--eval-episodes", str(CURVE_EPISODES)]
    argv += ["--n-eval-envs", "1", "--verbose", "0", "--device", "cpu"]
    if job.task.gym_packages:
        argv += ["--gym-packages", *job.task.gym_packages]
    if conf is not None:
        argv += ["-conf", str(conf)]
    if job.variant.params:
        argv += ["-params", *(f"{key}:{value}" for key, value in job.variant.params)]
    return argv


def _deterministic(env: str) -> bool:
    from rl_zoo3.exp_manager import ExperimentManager

    return not (ExperimentManager.is_atari(env) or ExperimentManager.is_minigrid(env))


def final_evaluation(job: Job, run_folder: Path) -> dict[str, Any]:
    """
    Evaluate the saved model of ``run_folder`` (``<algo>/<env>_1``) as rl-zoo3's ``enjoy`` loads it: its
    ``config.yml`` and ``vecnormalize.pkl`` (rewards not normalized), one environment.
    """
    import importlib

    import torch as th
    from rl_zoo3.utils import ALGOS, get_saved_hyperparams
    from stable_baselines3.common.evaluation import evaluate_policy

    from sb3_ewma import zoo

    th.set_num_threads(1)
    zoo.register_zoo()
    for package in job.task.gym_packages:
        importlib.import_module(package)
    env_name = job.task.env.replace("/", "-")
    stats_path = run_folder / env_name
    hyperparams, maybe_stats_path = get_saved_hyperparams(str(stats_path), norm_reward=False, test_mode=True)
    env = zoo.create_test_env(
        job.task.env,
        n_envs=1,
        stats_path=maybe_stats_path,
        seed=10_000 + job.seed,
        log_dir=None,
        should_render=False,
        hyperparams=hyperparams,
    )
    model = ALGOS[job.variant.algo].load(run_folder / f"{env_name}.zip", env=env, device="cpu")
    returns, lengths = evaluate_policy(
        model,
        env,
        n_eval_episodes=job.final_episodes,
        deterministic=_deterministic(job.task.env),
        return_episode_rewards=True,
        warn=False,
    )
    env.close()
    return {
        "mean_reward": float(np.mean(returns)),
        "std_reward": float(np.std(returns)),
        "eval_episodes": len(returns),
        "eval_timesteps": int(np.sum(lengths)),
        "deterministic": _deterministic(job.task.env),
    }


def learning_curve(run_folder: Path) -> list[list[float]]:
    """``[timesteps, mean return]`` of each evaluation during training (rl-zoo3's ``evaluations.npz``)."""
    path = run_folder / "evaluations.npz"
    if not path.exists():
        return []
    data = np.load(path)
    return [[int(step), float(np.mean(results))] for step, results in zip(data["timesteps"], data["results"])]


def child_python_path() -> str:
    """
    The ``PYTHONPATH`` of a training process: the repository (for ``sb3_ewma`` and ``benchmarks``), then the entries
    of this process's own ``PYTHONPATH`` (where packages may be installed), kept in their order.
    """
    entries = [str(REPO_ROOT), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    return os.pathsep.join(entry for entry in entries if entry)


def execute(job: Job, out_dir: Path) -> dict[str, Any]:
    """Train ``job`` (from scratch) and evaluate it; return the result (the record :func:`run_jobs` appends to
    ``runs.jsonl``)."""
    log_folder = out_dir / "zoo_logs" / job.run_id
    shutil.rmtree(log_folder, ignore_errors=True)
    log_path = out_dir / "logs" / f"{job.run_id}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    argv = command(job, log_folder, conf_file(job, out_dir))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": child_python_path()}
    start, children_before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(log_path, "w") as log:
        log.write(" ".join(argv) + "\n")
        log.flush()
        process = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)
    wall_clock = time.perf_counter() - start
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_time = sum(getattr(children_after, f) - getattr(children_before, f) for f in ("ru_utime", "ru_stime"))
    if process.returncode != 0:
        tail = log_path.read_text().strip().splitlines()[-1:] or [""]
        return {"status": "failed", "run_id": job.run_id, "error": f"exit {process.returncode}: {tail[0]}"}
    run_folder = log_folder / job.variant.algo / f"{job.task.env.replace('/', '-')}_1"
    config = yaml.load((run_folder / job.task.env.replace("/", "-") / "config.yml").read_text(), Loader=yaml.UnsafeLoader)
    result = {
        "status": "finished",
        "run_id": job.run_id,
        "experiment": job.experiment,
        "env": job.task.env,
        "group": job.task.group,
        "variant": job.variant.name,
        "algo": job.variant.algo,
        "seed": job.seed,
        "n_timesteps": job.budget,
        "tuned_n_timesteps": job.tuned,
        "reduced": job.reduced,
        "wall_clock_s": round(wall_clock, 1),
        "cpu_s": round(cpu_time, 1),
        "command": " ".join(["python", *argv[1:]]).replace(str(out_dir), "<results>"),
        "final": final_evaluation(job, run_folder),
        "curve": learning_curve(run_folder),
        "config": {key: repr(value) for key, value in dict(config).items()},
        "finished_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    shutil.rmtree(log_folder, ignore_errors=True)
    return result


def execute_safely(args: tuple[Job, Path]) -> dict[str, Any]:
    """:func:`execute`, an exception reported as a failed run (for the worker pool)."""
    job, out_dir = args
    try:
        return execute(job, out_dir)
    except Exception as error:  # reported; the others go on
        return {"status": "failed", "run_id": job.run_id, "error": f"{type(error).__name__}: {error}"}


# ----------------------------------------------------------------------------------------------------------------------
# jobs and scheduling


def build_jobs(
    experiment: str,
    seeds: int,
    envs: Sequence[str] | None = None,
    groups: Sequence[str] | None = None,
    max_steps: int | None = None,
    final_episodes: int = 20,
    variant_names: Sequence[str] | None = None,
) -> list[Job]:
    """
    The runs of ``experiment``, seed by seed (every task and variant of seed 0 first, so partial results compare the
    variants on the same seeds), tasks of installed packages only.
    """
    variants, experiment_envs = EXPERIMENTS[experiment]
    if variant_names:
        unknown = sorted(set(variant_names) - {variant.name for variant in variants})
        if unknown:
            raise ValueError(f"unknown variants {unknown} for {experiment!r}: choose among {[v.name for v in variants]}")
        variants = tuple(variant for variant in variants if variant.name in variant_names)
    tasks = (
        [task_by_env(env) for env in envs] if envs else [task for task in TASKS if task.env in (experiment_envs or [task.env])]
    )
    if groups:
        tasks = [task for task in tasks if task.group in groups]
    jobs = []
    for seed in range(seeds):
        for task in tasks:
            if not task.available():
                continue
            tuned = tuned_budget(task)
            budget = min(task_budget(task), max_steps or tuned)
            jobs.extend(Job(experiment, task, variant, seed, budget, tuned, final_episodes) for variant in variants)
    return jobs


def finished_runs(out_dir: Path) -> dict[str, dict[str, Any]]:
    """The finished runs of the experiment (the last record of each run id in ``runs.jsonl``), by run id."""
    records = results_store.latest(out_dir / results_store.RUNS_FILE)
    return {run_id: record for run_id, record in records.items() if record.get("status") == "finished"}


def is_done(job: Job, finished: dict[str, dict[str, Any]]) -> bool:
    """
    Whether ``job`` has a finished run with its budget (a run with another budget is run again, replacing it).

    :param finished: the experiment's finished runs, :func:`finished_runs`
    """
    record = finished.get(job.run_id)
    return record is not None and record.get("n_timesteps") == job.budget


def _outcomes(jobs: list[Job], out_dir: Path, workers: int) -> Iterable[dict[str, Any]]:
    if workers <= 1:
        for job in jobs:
            yield execute_safely((job, out_dir))
        return
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        yield from pool.imap(execute_safely, [(job, out_dir) for job in jobs])


def run_jobs(jobs: Sequence[Job], out_dir: Path, workers: int = 1) -> dict[str, int]:
    """
    Run the unfinished ``jobs``, ``workers`` at a time, appending each finished run's record to ``runs.jsonl`` (in this
    process), printing progress and rewriting the report after each.
    """
    finished = finished_runs(out_dir)
    pending = [job for job in jobs if not is_done(job, finished)]
    counts = {"done before": len(jobs) - len(pending), "finished": 0, "failed": 0}
    print(f"{len(jobs)} runs: {counts['done before']} already finished, {len(pending)} to run with {workers} worker(s)")
    total_steps = sum(job.budget for job in pending) or 1
    done_steps = 0
    start = time.time()
    for index, outcome in enumerate(_outcomes(list(pending), out_dir, workers), start=1):
        counts[outcome["status"]] += 1
        job = pending[index - 1] if workers <= 1 else next(job for job in pending if job.run_id == outcome["run_id"])
        done_steps += job.budget
        elapsed = time.time() - start
        eta = elapsed * (total_steps - done_steps) / done_steps
        if outcome["status"] == "finished":
            results_store.append(out_dir / results_store.RUNS_FILE, outcome)
            final = outcome["final"]
            detail = f"{final['mean_reward']:.2f} +- {final['std_reward']:.2f} in {outcome['wall_clock_s']:.0f} s"
        else:
            detail = outcome["error"]
        print(
            f"[{index}/{len(pending)}] {outcome['status']} {outcome['run_id']}: {detail}; "
            f"elapsed {elapsed / 60:.1f} min, about {eta / 60:.1f} min left",
            flush=True,
        )
        write_report(out_dir, jobs)
    return counts


# ----------------------------------------------------------------------------------------------------------------------
# report


def load_results(finished: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of :func:`finished_runs` in the order of their run ids."""
    return [finished[run_id] for run_id in sorted(finished)]


def _steps(value: float) -> str:
    """``1M``, ``100k``, ``20k``, as rl-zoo3 writes budgets."""
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    return f"{value / 1e3:g}k"


def _by_env_and_variant(results: Sequence[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for result in results:
        groups.setdefault((result["env"], result["variant"]), []).append(result)
    return groups


def split_stale(results: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """
    Per (env, variant), keep the runs trained for the task's budget (:func:`~benchmarks.learning.zoo_tasks.task_budget`)
    or, where none was (runs with ``--max-steps``), for the budget most of its runs have (the largest on a tie). The
    others are stale (left by a change of budget, until the runner trains them again) and are returned apart, so that
    no row mixes budgets.

    :return: ``(current, stale)``, each in the order of ``results``
    """
    tasks = {task.env: task for task in TASKS}
    task_budgets = {env: task_budget(tasks[env]) for env in {result["env"] for result in results} if env in tasks}
    kept_budget = {}
    for key, runs in _by_env_and_variant(results).items():
        counts = Counter(run["n_timesteps"] for run in runs)
        budget = task_budgets.get(key[0])
        kept_budget[key] = budget if budget in counts else max(counts, key=lambda steps: (counts[steps], steps))
    current: list[dict[str, Any]] = []
    stale: list[dict[str, Any]] = []
    for result in results:
        (current if result["n_timesteps"] == kept_budget[(result["env"], result["variant"])] else stale).append(result)
    return current, stale


def summarize(results: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """
    Per (env, variant): the mean over seeds of each seed's final mean return, the std over seeds, the seeds, the eval
    timesteps and episodes (summed over seeds), the budget and the mean wall clock.

    :param results: finished runs, one budget per (env, variant) (:func:`split_stale` sets the others apart)
    :raises ValueError: where an (env, variant) has runs of several budgets
    """
    summary = {}
    for key, runs in _by_env_and_variant(results).items():
        budgets = sorted({run["n_timesteps"] for run in runs})
        if len(budgets) > 1:
            raise ValueError(f"{key[0]} {key[1]}: runs of several budgets {budgets}; set the stale ones apart (split_stale)")
        means = [run["final"]["mean_reward"] for run in runs]
        summary[key] = {
            "mean": float(np.mean(means)),
            "std": float(np.std(means)),
            "seeds": len(runs),
            "n_timesteps": runs[0]["n_timesteps"],
            "reduced": runs[0]["reduced"],
            "eval_timesteps": sum(run["final"]["eval_timesteps"] for run in runs),
            "eval_episodes": sum(run["final"]["eval_episodes"] for run in runs),
            "wall_clock_s": float(np.mean([run["wall_clock_s"] for run in runs])),
            "cpu_s": float(np.mean([run["cpu_s"] for run in runs if "cpu_s" in run] or [math.nan])),
            "algo": runs[0]["algo"],
        }
    return summary


def _figure(value: float | None, std: float | None = None) -> str:
    if value is None or math.isnan(value):
        return ""
    return f"{value:.3f}" if std is None else f"{value:.3f} +- {std:.3f}"


def _table_envs(summary: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """The environments of ``summary`` in :data:`TASKS` order."""
    return [task.env for task in TASKS if any(key[0] == task.env for key in summary)]


def _time_cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return ""
    cpu = "" if math.isnan(row["cpu_s"]) else f"{row['cpu_s']:.0f}"
    return f"{row['wall_clock_s']:.0f} / {cpu or '-'}"


def table_rows(summary: dict[tuple[str, str], dict[str, Any]], variants: Sequence[Variant]) -> list[list[str]]:
    """One row per (env, variant) in rl-zoo3's columns, with the published and our SB3 PPO figures beside it."""
    rows = []
    for env in _table_envs(summary):
        published = published_row(env)
        ours = summary.get((env, "ppo"))
        for variant in variants:
            row = summary.get((env, variant.name))
            if row is None:
                continue
            rows.append(
                [
                    variant.name,
                    env,
                    f"{row['mean']:.3f}",
                    f"{row['std']:.3f}",
                    _steps(row["n_timesteps"]) + (" (reduced)" if row["reduced"] else ""),
                    str(row["eval_timesteps"]),
                    str(row["eval_episodes"]),
                    str(row["seeds"]),
                    (
                        ""
                        if published is None
                        else f"{float(published['mean_reward']):.3f} +- {float(published['std_reward']):.3f}"
                        f" ({published['n_timesteps']}, {published['env_id']})"
                    ),
                    "" if ours is None else _figure(ours["mean"], ours["std"]),
                ]
            )
    return rows


def _seeds(count: int) -> str:
    return f"{count} seed" + ("s" if count != 1 else "")


def summary_rows(summary: dict[tuple[str, str], dict[str, Any]], variants: Sequence[Variant]) -> list[list[str]]:
    """
    One row per task for a front page: ``task (budget)``, rl-zoo3's published PPO mean, then each variant's mean +- std
    over seeds (with its budget where it differs from the row's, the first variant's, and its number of seeds where it
    differs from the most any variant has on that task).
    """
    rows = []
    for env in _table_envs(summary):
        rows_of_env = {variant.name: summary.get((env, variant.name)) for variant in variants}
        finished = [row for row in rows_of_env.values() if row is not None]
        most_seeds = max(row["seeds"] for row in finished)
        steps = finished[0]["n_timesteps"]
        budget = _steps(steps) + (", reduced" if finished[0]["reduced"] else "")
        published = published_mean(env)
        magnitudes = [abs(row["mean"]) for row in finished] + ([] if published is None else [abs(published)])
        decimals = 2 if max(magnitudes) < 10 else 1  # MiniGrid's and MinAtar's returns are of order 1
        cells = []
        for row in rows_of_env.values():
            if row is None:
                cells.append("")
                continue
            notes = [_steps(row["n_timesteps"])] if row["n_timesteps"] != steps else []
            notes += [_seeds(row["seeds"])] if row["seeds"] != most_seeds else []
            note = f" ({', '.join(notes)})" if notes else ""
            cells.append(f"{row['mean']:.{decimals}f} ± {row['std']:.{decimals}f}{note}")
        rows.append(
            [
                f"{env} ({budget}, {_seeds(most_seeds)})",
                "" if published is None else f"{published:.{decimals}f}",
                *cells,
            ]
        )
    return rows


def plot_curves(results: Sequence[dict[str, Any]], out_dir: Path, variants: Sequence[Variant]) -> list[str]:
    """
    One figure per task, ``curves/<env>.png``: mean (over seeds) evaluation return against steps, shaded +- std, per
    variant. :return: the markdown that shows each
    """
    written = []
    for env in sorted({result["env"] for result in results}):
        figure, axes = new_figure(1, 1, width=5.5, height=3.6)
        axis = axes[0, 0]
        for variant in variants:
            curves = [result["curve"] for result in results if result["env"] == env and result["variant"] == variant.name]
            curves = [curve for curve in curves if curve]
            if not curves:
                continue
            length = min(len(curve) for curve in curves)
            steps = np.array([point[0] for point in curves[0][:length]])
            values = np.array([[point[1] for point in curve[:length]] for curve in curves])
            mean, std = values.mean(axis=0), values.std(axis=0)
            axis.plot(steps, mean, label=f"{variant.name} ({len(curves)} seeds)")
            axis.fill_between(steps, mean - std, mean + std, alpha=0.2)
        axis.set_title(env)
        axis.set_xlabel("environment steps")
        axis.set_ylabel(f"evaluation return ({CURVE_EPISODES} episodes)")
        axis.legend(fontsize=7)
        path = out_dir / "curves" / f"{env.replace('/', '_')}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        save_figure(figure, path)
        written.append(f"![{env}](curves/{path.name})")
    return written


def difference_scale(env: str, reference_mean: float) -> float:
    """
    What a difference of means on ``env`` is relative to: the larger of ``|reference_mean|`` (SB3 PPO's mean here) and
    ``|rl-zoo3's published PPO score|``, so that a task where SB3 PPO did not learn here (a mean near 0, as on MiniGrid)
    does not swamp the average over tasks.
    """
    return max(abs(reference_mean), abs(published_mean(env) or 0.0), 1e-8)


def goal_lines(summary: dict[tuple[str, str], dict[str, Any]], variants: Sequence[Variant]) -> list[str]:
    """
    Per non-reference variant: the tasks where its mean is below SB3 PPO's mean minus one std over seeds (tasks where
    the two were trained for different budgets are not compared, and are named).
    """
    lines = []
    envs = sorted({env for env, _ in summary})
    for variant in variants:
        if variant.is_reference:
            continue
        compared, short, differences, other_budget = 0, [], [], []
        for env in envs:
            ours, reference = summary.get((env, variant.name)), summary.get((env, "ppo"))
            if ours is None or reference is None:
                continue
            if ours["n_timesteps"] != reference["n_timesteps"]:
                other_budget.append(env)
                continue
            compared += 1
            differences.append((ours["mean"] - reference["mean"]) / difference_scale(env, reference["mean"]))
            if ours["mean"] < reference["mean"] - reference["std"]:
                short.append(f"{env} ({ours['mean']:.1f} vs {reference['mean']:.1f} +- {reference['std']:.1f})")
        not_compared = f"not compared (another budget than SB3 PPO's): {', '.join(other_budget)}" if other_budget else ""
        if compared:
            average = 100 * float(np.mean(differences))
            lines.append(
                f"- {variant.name}: {compared - len(short)}/{compared} tasks at or above SB3 PPO's mean minus one std"
                f"{'; below on ' + ', '.join(short) if short else ''}; mean difference relative to the larger of "
                f"|SB3 PPO's mean| and |rl-zoo3's published PPO score|: {average:+.1f}%"
                + (f"; {not_compared}" if not_compared else "")
            )
        elif not_compared:
            lines.append(f"- {variant.name}: {not_compared}")
    return lines


def write_report(out_dir: Path, jobs: Sequence[Job], command_line: str | None = None) -> Path:
    """Write ``benchmark.md`` and the curves from the finished runs (``runs.jsonl``)."""
    finished = finished_runs(out_dir)
    results, stale = split_stale(load_results(finished))
    experiment = jobs[0].experiment if jobs else out_dir.name
    variants = EXPERIMENTS[experiment][0]
    summary = summarize(results)
    stale_note = (
        f" Left out: {len(stale)} run(s) of an older budget, until they are trained again "
        f"({', '.join(run['run_id'] for run in stale)})."
        if stale
        else ""
    )
    header = [
        "algo",
        "env_id",
        "mean_reward",
        "std_reward",
        "n_timesteps",
        "eval_timesteps",
        "eval_episodes",
        "seeds",
        "rl-zoo3 PPO (published)",
        "SB3 PPO (ours)",
    ]
    lines = [
        f"# rl-zoo3 tasks: {experiment}",
        "",
        "Written by `benchmarks.learning.zoo_table`"
        + (f" (`{command_line}`)" if command_line else "")
        + f". {sum(is_done(job, finished) for job in jobs)} of its {len(jobs)} runs finished; the tables hold every "
        f"finished run of `{out_dir.name}` ({len(results)}).{stale_note}",
        "",
        "mean_reward: mean over seeds of each seed's final evaluation (the saved model loaded as rl-zoo3's `enjoy` does; "
        "deterministic actions except on Atari and MiniGrid); std_reward: standard deviation over seeds (rl-zoo3's "
        "column is over episodes of one run); eval_timesteps and eval_episodes: summed over seeds. "
        "n_timesteps marked (reduced): trained for less than the tuned budget "
        "(the CPU cap of `benchmarks/learning/zoo_tasks.py`). "
        "rl-zoo3 PPO (published): its benchmark.md (one run, older environment versions, mean +- std over episodes).",
        "",
        "## Summary",
        "",
        "Mean ± std over seeds of the final evaluations (the front page's table).",
        "",
        SUMMARY_START,
        markdown_table(
            ["task (budget, seeds)", "rl-zoo3 PPO (published)", *(VARIANT_TITLES.get(v.name, v.name) for v in variants)],
            summary_rows(summary, variants),
        ),
        SUMMARY_END,
        "",
        "## All rows",
        "",
        markdown_table(header, table_rows(summary, variants)),
        "",
        "## Against SB3 PPO",
        "",
        *goal_lines(summary, variants),
        "",
        "## Time per run",
        "",
        "Seconds, mean over seeds, each run with one torch thread on this 2-core machine, two runs at a time: wall clock "
        "(which includes any time the benchmark was paused) / CPU time of the training process "
        "(recorded for runs made since the column was added).",
        "",
        markdown_table(
            ["env_id", *(variant.name for variant in variants)],
            [[env, *(_time_cell(summary.get((env, v.name))) for v in variants)] for env in _table_envs(summary)],
        ),
        "",
        "## Learning curves",
        "",
        *plot_curves(results, out_dir, variants),
        "",
    ]
    path = out_dir / "benchmark.md"
    path.write_text("\n".join(lines))
    return path


def _summary_span(text: str) -> tuple[int, int]:
    """Where the summary table lies in ``text``, between its markers (a ``ValueError`` when they are missing)."""
    start, end = text.find(SUMMARY_START), text.find(SUMMARY_END)
    if start < 0 or end < start:
        raise ValueError(f"no {SUMMARY_START} ... {SUMMARY_END} markers")
    return start + len(SUMMARY_START), end


def summary_table(text: str) -> str:
    """What lies between the summary table's markers in ``text``."""
    start, end = _summary_span(text)
    return text[start:end]


def copy_summary_table(report: Path, target: Path) -> None:
    """Replace the summary table between the markers of ``target`` (the README) with the one of ``report``."""
    text = target.read_text()
    start, end = _summary_span(text)
    target.write_text(text[:start] + summary_table(report.read_text()) + text[end:])


# ----------------------------------------------------------------------------------------------------------------------
# command line


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(prog="python -m benchmarks.learning.zoo_table", description=__doc__.split("\n\n")[0])
    result.add_argument("--experiment", choices=tuple(EXPERIMENTS), default="table")
    result.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1 (default 3)")
    result.add_argument("--groups", default=None, help=f"comma-separated task groups among {GROUPS}")
    result.add_argument("--envs", default=None, help="comma-separated environment ids (default: the experiment's)")
    result.add_argument("--variants", default=None, help="comma-separated variants to run (default: all the experiment's)")
    result.add_argument("--max-steps", type=int, default=None, help="cap every budget at N steps (marked reduced)")
    result.add_argument("--final-episodes", type=int, default=20, help="episodes of the final evaluation (default 20)")
    result.add_argument("--workers", type=int, default=1, help="runs in parallel, one torch thread each (default 1)")
    result.add_argument("--out", type=Path, default=RESULTS_ROOT, help="results root (default benchmarks/results/zoo_table)")
    result.add_argument("--list", action="store_true", help="list the runs and their status, run nothing")
    result.add_argument("--report-only", action="store_true", help="only rewrite benchmark.md and the curves")
    result.add_argument(
        "--update-readme", action="store_true", help="copy the summary table into README.md (between the same markers)"
    )
    return result


def main(argv: Sequence[str] | None = None) -> Path:
    args = parser().parse_args(argv)
    if args.update_readme and args.experiment != "table":
        parser().error(f"--update-readme: the README holds the table experiment's summary, not {args.experiment}'s")
    split = lambda text: [item.strip() for item in text.split(",") if item.strip()] if text else None  # noqa: E731
    jobs = build_jobs(
        args.experiment,
        args.seeds,
        split(args.envs),
        split(args.groups),
        args.max_steps,
        args.final_episodes,
        split(args.variants),
    )
    out_dir = args.out / args.experiment
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / ".gitignore").write_text(GITIGNORE)
    if args.list:
        finished = finished_runs(out_dir)
        for job in jobs:
            status = "done" if is_done(job, finished) else "todo"
            print(f"{status}  {job.run_id}  {job.budget} steps{' (reduced)' if job.reduced else ''}")
        print(f"{len(jobs)} runs, {sum(job.budget for job in jobs)} environment steps in all")
        return out_dir
    command_line = " ".join(["python -m benchmarks.learning.zoo_table", *(sys.argv[1:] if argv is None else argv)])
    if not args.report_only:
        counts = run_jobs(jobs, out_dir, args.workers)
        if counts["failed"]:
            print(f"{counts['failed']} run(s) failed (see logs/); the others are reported")
    path = write_report(out_dir, jobs, command_line)
    print(f"report: {path}")
    if args.update_readme:
        copy_summary_table(path, README)
        print(f"summary table copied into {README}")
    return out_dir


if __name__ == "__main__":
    main()
