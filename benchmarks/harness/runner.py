"""
One run of a learning benchmark, in the current process: build (or resume) the model, learn in segments between
evaluations, append a CSV row per evaluation, pause at a deadline with a checkpoint, and return the finished run's record
(see :mod:`benchmarks.harness.common` for the files and the scheduling).
"""

import csv
import inspect
import json
import math
import pickle
import shutil
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from benchmarks.harness import common, results_store
from benchmarks.harness.common import FINAL_FRACTION, RunSpec, algorithm_class, append_csv, read_csv, round_up


def gradient_noise_scale(model: Any) -> float:
    """The latest smoothed B_simple of the policy(-phase) optimizer, NaN before the first full epoch."""
    tracker = getattr(model, "gradient_noise", None)
    estimate = None if tracker is None or tracker.latest is None else tracker.latest.noise_scale
    return math.nan if estimate is None else round(float(estimate), 4)


class EpisodeReturns(BaseCallback):
    """Collects the (raw) returns of the training episodes that end, from ``info["episode"]``."""

    def __init__(self) -> None:
        super().__init__()
        self.returns: list[float] = []

    def _on_step(self) -> bool:
        for info in self.locals.get("infos", ()):
            episode = info.get("episode")
            if episode is not None:
                self.returns.append(float(episode["r"]))
        return True


def _safe_interval(model: Any, spec: RunSpec) -> int:
    """Environment steps between points where the run can be checkpointed: PPG only between its phases."""
    n_policy_iterations = getattr(model, "n_policy_iterations", None)
    if n_policy_iterations is None or getattr(model, "n_aux_epochs", 0) == 0:
        return spec.eval_every
    return math.lcm(spec.eval_every, int(n_policy_iterations) * spec.iteration_size)


def _is_safe(model: Any) -> bool:
    """Whether the model's state is all saved by a checkpoint (PPG's auxiliary buffer is not: wait for the phase end)."""
    return getattr(model, "n_aux_epochs", 0) == 0 or getattr(model, "phase_iteration", 0) == 0


class Checkpoint:
    """
    The state of a run in progress: its evaluations so far (``evaluations.csv``) and, once paused, the SB3 model (with
    its EWMA), the reward normalization statistics, the stale rollouts of artificial staleness and the run's own
    progress (``meta.json``). Scratch files: ``checkpoints/`` is kept out of version control.

    :param directory: ``checkpoints/<run_id>``
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.meta_path = directory / "meta.json"
        self.evaluations_path = directory / "evaluations.csv"
        self.diagnostics_path = directory / "diagnostics.csv"

    def create(self) -> None:
        """Make the directory, and keep ``checkpoints/`` out of version control."""
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory.parent / ".gitignore").write_text("*\n")

    def meta(self, spec_hash: str) -> dict[str, Any] | None:
        """The saved progress, or None without a checkpoint of these settings."""
        if not self.meta_path.exists():
            return None
        meta = json.loads(self.meta_path.read_text())
        return meta if meta.get("spec_hash") == spec_hash else None

    def save(self, model: Any, env: Any, meta: dict[str, Any]) -> None:
        """Save the model, ``env``'s normalization statistics, the stale rollouts and ``meta``."""
        from stable_baselines3.common.vec_env import VecNormalize

        self.create()
        model.save(self.directory / "model.zip")
        if isinstance(env, VecNormalize):
            env.save(str(self.directory / "vecnormalize.pkl"))
        stale = getattr(model, "stale_rollouts", None)
        with open(self.directory / "stale_buffers.pkl", "wb") as file:
            pickle.dump(list(stale) if stale else [], file)
        self.meta_path.write_text(json.dumps(meta))

    def load(self, spec: RunSpec, env: Any) -> tuple[Any, Any]:
        """The saved model bound to ``env`` (whose normalization statistics are restored), and that env."""
        from stable_baselines3.common.vec_env import VecNormalize

        if isinstance(env, VecNormalize) and (self.directory / "vecnormalize.pkl").exists():
            env = VecNormalize.load(str(self.directory / "vecnormalize.pkl"), env.venv)
        model = model_class(spec).load(self.directory / "model.zip", env=env, device=spec.device)
        with open(self.directory / "stale_buffers.pkl", "rb") as file:
            stale = pickle.load(file)
        if stale:
            model.stale_rollouts.extend(stale)
        return model, env

    def remove(self) -> None:
        """Delete the checkpoint and the evaluations so far (the run finished and is recorded)."""
        shutil.rmtree(self.directory, ignore_errors=True)


def model_class(spec: RunSpec) -> type:
    """
    The class of ``spec``'s model: ``spec.algo``'s, or its ablation class with artificial staleness; with
    ``spec.diagnostics``, that class with the training diagnostics before it
    (:func:`benchmarks.harness.diagnostics.diagnosed`).
    """
    if "staleness" not in spec.hyperparams and "staleness_mode" not in spec.hyperparams:
        algorithm = algorithm_class(spec.algo)
    elif spec.algo != "ppo_ewma":
        raise ValueError(f"artificial staleness runs with ppo_ewma, got algo={spec.algo!r}")
    else:
        from sb3_ewma.ablations import StalePPO_EWMA

        algorithm = StalePPO_EWMA
    if spec.diagnostics:
        from benchmarks.harness.diagnostics import diagnosed

        return diagnosed(algorithm)
    return algorithm


def build_model(spec: RunSpec, env: Any) -> Any:
    """A new model of ``spec`` on ``env``."""
    from benchmarks.harness.envs import policy_for

    policy, network_kwargs = policy_for(spec.network)
    hyperparams = dict(spec.hyperparams)
    policy_kwargs = {**network_kwargs, **hyperparams.pop("policy_kwargs", {})}
    algorithm = model_class(spec)
    if "log_gradient_noise_scale" in inspect.signature(algorithm).parameters:
        # the evaluation rows hold it (the batch size-invariance experiments read it)
        hyperparams.setdefault("log_gradient_noise_scale", True)
    # artificial staleness is set on the model (StalePPO_EWMA.set_staleness), not by a constructor argument
    staleness = {key: hyperparams.pop(key) for key in ("staleness", "staleness_mode") if key in hyperparams}
    model = algorithm(policy, env, policy_kwargs=policy_kwargs, seed=spec.seed, device=spec.device, verbose=0, **hyperparams)
    if staleness:
        model.set_staleness(staleness.get("staleness", 0), staleness.get("staleness_mode", "decoupled"))
    return model


def final_return(rows: Sequence[dict[str, Any]], total_timesteps: int, fraction: float = FINAL_FRACTION) -> float:
    """Mean of the evaluations in the last ``fraction`` of training (NaN evaluations ignored)."""
    values = [float(row["mean_return"]) for row in rows if float(row["timesteps"]) > (1 - fraction) * total_timesteps]
    values = [value for value in values if not math.isnan(value)]
    return float(np.mean(values)) if values else math.nan


class _Run:
    """A run in progress in this process: its environment, model, evaluations and checkpoint."""

    def __init__(self, spec: RunSpec, out_dir: Path) -> None:
        import torch as th

        from benchmarks.harness.envs import make_env

        th.set_num_threads(spec.threads)
        self.spec = spec
        self.checkpoint = Checkpoint(out_dir / "checkpoints" / spec.run_id)
        self.checkpoint.create()
        self.csv_path = self.checkpoint.evaluations_path
        meta = self.checkpoint.meta(spec.spec_hash) or {"wall_time": 0.0, "chunk": 0}
        self.previous_wall_time = float(meta["wall_time"])
        self.previous_cpu_time = float(meta.get("cpu_time", 0.0))
        self.cpu_start = time.process_time()
        self.chunk = int(meta["chunk"])
        # a resumed run plays new episodes (levels): its environments get a new seed
        seed = spec.seed + 1_000_003 * self.chunk
        self.env = make_env(spec.env, spec.n_envs, seed=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if self.chunk:
                self.model, self.env = self.checkpoint.load(spec, self.env)
                self.model.set_random_seed(seed)
                self._truncate_csv(self.model.num_timesteps)
            else:
                self.csv_path.unlink(missing_ok=True)
                self.checkpoint.diagnostics_path.unlink(missing_ok=True)
                self.model = build_model(spec, self.env)
        self.eval_env = None
        if spec.eval_episodes:
            self.eval_env = make_env(spec.env, min(spec.eval_episodes, 8), seed=10_000 + spec.seed, training=False)
        self.tracker = EpisodeReturns()
        self.start = time.perf_counter()

    def _truncate_csv(self, timesteps: int) -> None:
        """Drop the evaluations and diagnostics after the checkpoint (made by an invocation killed after it resumed)."""
        for path in (self.csv_path, self.checkpoint.diagnostics_path):
            rows = [row for row in read_csv(path) if int(row["timesteps"]) <= timesteps]
            path.unlink(missing_ok=True)
            for row in rows:
                append_csv(path, row)

    def save_diagnostics(self) -> None:
        """Append the diagnostics of the iterations trained since the last call to ``diagnostics.csv``."""
        if not self.spec.diagnostics:
            return
        from benchmarks.harness.diagnostics import DIAGNOSTIC_COLUMNS

        for row in self.model.take_diagnostic_rows():
            cells = {key: (value if isinstance(value, int) else float(f"{value:.5g}")) for key, value in row.items()}
            append_csv(self.checkpoint.diagnostics_path, cells, DIAGNOSTIC_COLUMNS)

    def wall_time(self) -> float:
        """Seconds of this run so far, over all the invocations that ran it."""
        return self.previous_wall_time + time.perf_counter() - self.start

    def cpu_time(self) -> float:
        """CPU seconds of this run's process while it ran the run (every thread), over all the invocations that ran it."""
        return self.previous_cpu_time + time.process_time() - self.cpu_start

    def evaluate(self) -> dict[str, Any]:
        """Append the evaluation row of the current step to the run's CSV, and return it."""
        if self.eval_env is not None:
            from stable_baselines3.common.evaluation import evaluate_policy

            returns, _ = evaluate_policy(
                self.model,
                self.eval_env,
                n_eval_episodes=self.spec.eval_episodes,
                deterministic=False,
                return_episode_rewards=True,
                warn=False,
            )
        else:
            returns, self.tracker.returns = self.tracker.returns, []
        mean = float(np.mean(returns)) if len(returns) else math.nan
        row = {
            **self.spec.columns(),
            "timesteps": self.model.num_timesteps,
            "mean_return": round(mean, 4),
            "episodes": len(returns),
            "wall_time": round(self.wall_time(), 3),
        }
        if hasattr(self.model, "n_aux_phases"):
            row["aux_phases"] = self.model.n_aux_phases  # PPG: auxiliary phases done so far
        if getattr(self.model, "log_gradient_noise_scale", False):
            row["gradient_noise_scale"] = gradient_noise_scale(self.model)
        append_csv(self.csv_path, row)
        return row

    def pause(self) -> None:
        """Save a checkpoint that the next invocation resumes from."""
        meta = {"spec_hash": self.spec.spec_hash, "wall_time": self.wall_time(), "chunk": self.chunk + 1}
        meta["cpu_time"] = self.cpu_time()
        self.checkpoint.save(self.model, self.env, meta)
        self.close()

    def close(self) -> None:
        """Close the environments."""
        self.env.close()
        if self.eval_env is not None:
            self.eval_env.close()

    def record(self) -> dict[str, Any]:
        """
        The record of the finished run in ``runs.jsonl``: the fields of
        :data:`~benchmarks.harness.common.MANIFEST_FIELDS` and its evaluations
        (:func:`benchmarks.harness.results_store.table`).
        """
        spec, wall_time = self.spec, self.wall_time()
        with open(self.csv_path, newline="") as file:
            reader = csv.DictReader(file)
            rows = list(reader)
        evaluations = results_store.table(rows, reader.fieldnames)
        diagnostics = {}
        if self.spec.diagnostics and self.checkpoint.diagnostics_path.exists():
            with open(self.checkpoint.diagnostics_path, newline="") as file:
                reader = csv.DictReader(file)
                diagnostics = {"diagnostics": results_store.table(list(reader), reader.fieldnames)}
        return {
            "status": "finished",
            "run_id": spec.run_id,
            "spec_hash": spec.spec_hash,
            "variant": spec.variant,
            "algo": spec.algo,
            "env": spec.env,
            "n_envs": spec.n_envs,
            "seed": spec.seed,
            "timesteps": self.model.num_timesteps,
            "wall_time": round(wall_time, 2),
            "cpu_time": round(self.cpu_time(), 2),
            "steps_per_second": round(self.model.num_timesteps / max(wall_time, 1e-9), 1),
            "final_return": round(final_return(rows, spec.total_timesteps), 4),
            "finished_at": time.strftime("%Y-%m-%d %H:%M:%S"),
            "evaluations": evaluations,
            **diagnostics,
        }


def execute(spec: RunSpec, out_dir: Path, deadline: float | None = None, verbose: bool = False) -> dict[str, Any]:
    """
    Train (or resume) one run, appending a row to ``checkpoints/<run_id>/evaluations.csv`` at every evaluation.

    With a ``deadline`` (a ``time.time()`` value), the run pauses at the last checkpointable point expected to come
    before the deadline (always after some progress), saves a checkpoint and returns ``status="paused"``; a run not
    started before the deadline is ``"skipped"``.

    :return: ``{"status": "finished" | "paused" | "skipped", "spec": spec, "timesteps": ...}``, with the run's record
        for ``runs.jsonl`` (:meth:`_Run.record`) under ``"record"`` when finished (the caller appends it)
    """
    if deadline is not None and common.clock() >= deadline:
        return {"status": "skipped", "spec": spec, "timesteps": 0}
    run = _Run(spec, out_dir)
    model = run.model
    interval = _safe_interval(model, spec)
    last_safe = (time.perf_counter(), model.num_timesteps)
    while model.num_timesteps < spec.total_timesteps:
        target = min(round_up(model.num_timesteps + 1, spec.eval_every), spec.total_timesteps)
        model.learn(target - model.num_timesteps, callback=run.tracker, reset_num_timesteps=False)
        run.save_diagnostics()
        row = run.evaluate()
        if verbose:
            print(f"  {spec.run_id}: {row['timesteps']}/{spec.total_timesteps} steps, return {row['mean_return']}", flush=True)
        if deadline is None or model.num_timesteps >= spec.total_timesteps or not _is_safe(model):
            continue
        now = time.perf_counter()
        seconds_per_step = (now - last_safe[0]) / max(1, model.num_timesteps - last_safe[1])
        last_safe = (now, model.num_timesteps)
        if common.clock() + interval * seconds_per_step > deadline:
            run.pause()
            return {"status": "paused", "spec": spec, "timesteps": model.num_timesteps}
    run.close()
    record = run.record()
    run.checkpoint.remove()
    return {"status": "finished", "spec": spec, "timesteps": model.num_timesteps, "record": record}


def execute_safely(spec: RunSpec, out_dir: Path, deadline: float | None = None, verbose: bool = False) -> dict[str, Any]:
    """:func:`execute`, with an exception turned into ``status="failed"`` (and its message), so that the others go on."""
    try:
        return execute(spec, out_dir, deadline, verbose)
    except Exception as error:  # reported, and the run is not marked finished
        return {"status": "failed", "spec": spec, "timesteps": 0, "error": f"{type(error).__name__}: {error}"}


def execute_star(args: tuple[RunSpec, Path, float | None, bool]) -> dict[str, Any]:
    """:func:`execute_safely` of a tuple of arguments (for ``Pool.imap_unordered``)."""
    return execute_safely(*args)
