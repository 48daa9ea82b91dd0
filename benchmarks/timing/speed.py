"""
Side by side, in one run: the wall clock of one whole ``learn(total_timesteps)`` of SB3's
PPO, PPO_EWMA eager, compiled (``compile_step=True``: each minibatch's loss and the optimizer step through
``torch.compile``) and compiled with the collector process (``async_rollouts="process"``), SBX's PPO (JAX, in its own
virtualenv), and PPG_EWMA compiled and eager and PPG eager, on rl-zoo3's tuned PPO entries for CartPole-v1,
Pendulum-v1 and LunarLander-v3 and on MinAtar Breakout with an MLP; and whether each learns.

The full measurement, unattended (it resumes where it stopped when run again, and rewrites its report after every
measurement; SBX's virtualenv first, see the end of this docstring; a quiet machine, since the collector process
needs a core of its own)::

    python -m benchmarks.timing.speed

4 tasks x 8 implementations x 3 rounds, 12 cold-cache runs and 12 short untimed runs that fill inductor's cache: about
an hour on a quiet 2-core machine (estimated from dry runs on a loaded one: CartPole ~10 min, Pendulum ~13,
LunarLander at 2e5 steps ~17, Breakout ~20; ``--timesteps lunarlander=1e6`` adds about an hour).

    python -m benchmarks.timing.speed --timesteps 2048 --rounds 1 --out /tmp/speed   # a dry run, every implementation
    python -m benchmarks.timing.speed --tasks cartpole --algos sb3_ppo,ppo_ewma_compiled,sbx_ppo
    python -m benchmarks.timing.speed --timesteps lunarlander=1e6,breakout=5e5         # budgets per task
    python -m benchmarks.timing.speed --report-only                                  # results.md from the CSV

Results: ``benchmarks/results/speed/<preset>/measurements.csv`` (one row per measurement, appended as it finishes;
rerunning skips the measurements already made with the same settings) and ``results.md`` (the machine, the date, the
command, the tables).

Implementations (``--algos``, default all): ``sb3_ppo`` (``stable_baselines3.PPO``), ``ppo_ewma_eager``
(``compile_step=False``), ``ppo_ewma_compiled`` (``compile_step=True``), ``ppo_ewma_compiled_process``
(``compile_step=True, async_rollouts="process"``), ``sbx_ppo`` (``sbx.PPO``, by ``benchmarks/timing/sbx_run.py`` in
SBX's virtualenv), ``ppg_ewma_compiled``, ``ppg_ewma_eager`` and ``ppg_eager`` (``PPG``, no EWMA).

Tasks (``--tasks``, default all), each with the hyperparameters of every implementation of a family alike:

- ``cartpole``: CartPole-v1, rl-zoo3's tuned PPO entry (8 envs x 32 steps, batch 256, 20 epochs, linear learning
  rate and clip range), its budget 1e5;
- ``pendulum``: Pendulum-v1, rl-zoo3's entry (4 x 1024 steps, batch 64, 10 epochs), 1e5. The entry uses gSDE, which
  the compiled step does not cover: PPO_EWMA and PPG_EWMA then train eagerly and say so (the ``training step``
  column); the entry is kept as it is. SBX takes ``use_sde`` but implements gSDE its own way (the same noise for
  ``sde_sample_freq`` steps);
- ``lunarlander``: LunarLander-v3, rl-zoo3's entry (16 x 1024 steps, batch 64, 4 epochs); rl-zoo3 trains 1e6 steps,
  this benchmark 2e5 by default (labelled *reduced*; ``--timesteps lunarlander=1e6`` for the zoo's);
- ``breakout``: MinAtar/Breakout-v1 with an MLP [64, 64] at the learning benchmarks' ``cpu`` preset
  (``benchmarks/harness/settings.py``: 64 envs x 128 steps, 8 minibatches, 3 epochs, Adam 5e-4, gamma 0.99, GAE 0.95,
  entropy 0.01, no gradient clipping), 1e6 steps.

The PPO family (SB3 PPO, PPO_EWMA, SBX) takes rl-zoo3's ``hyperparams/ppo.yml`` entry, converting ``lin_<value>`` to a
schedule linear in the progress remaining as rl-zoo3 does; the PPG family takes this package's tuned entries
(``sb3_ewma/hyperparams/ppg.yml`` and ``ppg_ewma.yml``, with their ``VecNormalize`` of the rewards on Pendulum and
LunarLander) and on Breakout the ``cpu`` preset's PPG settings. Returns are the environments' raw returns (Monitor)
either way.

Protocol. Each measurement is a subprocess (each starts clean, memory does not accumulate) that builds a fresh model
(not timed) and times one ``learn(total_timesteps)``: compilation included, nothing warmed up in the process. One
thread per process: ``torch.set_num_threads(1)``, ``OMP_NUM_THREADS=MKL_NUM_THREADS=OPENBLAS_NUM_THREADS=1``,
``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false`` for JAX (``--taskset CPUS`` pins them too); the collector process
is a second process by design. The implementations alternate in rounds (A B C D E, B C D E A, ...); round ``r``
trains with seed ``r`` (``--rounds``, default 3: seeds 0, 1, 2). torch's inductor keeps compiled kernels on disk:
the rounds run with its default cache, which the benchmark fills first with a short untimed run of each compiled
implementation (*warm*: what a user sees from the second run on; ``cache_new_files`` records what a measurement
still added to the cache, 0 when it was warm), and once per task each compiled implementation is also measured in a
fresh, empty ``TORCHINDUCTOR_CACHE_DIR`` with seed 0 (*cold*: a first run on a machine). JAX's compilation cache is
off by default, so every SBX run compiles from scratch (cold). Inductor compiles with its own worker processes.

Report, per task and implementation: the median wall clock of ``learn`` over the rounds, its min-max spread, the
median over rounds of the per-round ratio to SB3 PPO's time (same round, same seed), the cold-cache time, the share
of ``learn`` spent in ``train()`` and the main process's CPU time over the wall clock (about 1: one thread; more: a
second thread or process at work); the final return, the mean return of the last 100 training episodes
(``ep_info_buffer``), as mean +- sample standard deviation over the seeds; and **learns**: *yes* when the mean is not
below SB3 PPO's by more than twice the pooled sample standard deviation (``mean >= mean_SB3 - 2 sqrt((s^2 +
s_SB3^2) / 2)``), or when it reaches the task's threshold (CartPole 475, Pendulum -400; none for the others); *n/a*
with fewer than 2 seeds and no threshold reached. The goal, checked per task: PPO_EWMA compiled at most
0.5x SB3 PPO's wall clock synchronously, at most 0.35x with the collector process, and ahead of SBX (each of the two
against SBX, median of per-round ratios below 1; met when the faster of the two is ahead); PPG_EWMA compiled at most
0.5x PPG eager (its time against SB3 PPO beside it, on PPG's own entries). All ratios are medians of per-round ratios.

SBX's virtualenv (SBX is no dependency of this package; ``--sbx-python`` names another Python). The ``.gitignore``
inside keeps git away from it; torch's CPU wheel first, since stable-baselines3 (which sbx-rl needs) otherwise brings
torch with its CUDA libraries::

    python -m venv .venv-sbx && echo '*' > .venv-sbx/.gitignore
    .venv-sbx/bin/pip install "torch==2.13.0+cpu"    # or torch's CPU build from PyTorch's own CPU index
    .venv-sbx/bin/pip install "sbx-rl==0.28.0" "jax[cpu]==0.10.2" "stable-baselines3==2.9.2" "gymnasium[box2d]==1.4.0" \\
        "minatar==1.0.15"

(versions that installed and ran together on 2026-11-29: sbx-rl 0.28.0, jax/jaxlib 0.10.2, flax 0.12.8, optax 0.2.8,
stable-baselines3 2.9.2, gymnasium 1.4.0, box2d 2.3.10, minatar 1.0.15, Python 3.11.)
"""

import argparse
import contextlib
import hashlib
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness.common import append_csv, base_parser, read_csv

NAME = "speed"
ROOT = Path(__file__).resolve().parents[2]
SBX_SCRIPT = Path(__file__).resolve().with_name("sbx_run.py")
DEFAULT_SBX_PYTHON = ROOT / ".venv-sbx" / "bin" / "python"
PROTOCOL = 1
"""Part of every measurement's settings hash: a change of protocol redoes the measurements."""
PRESETS: dict[str, dict[str, Any]] = {
    "cpu": dict(rounds=3, timesteps=None),
    "smoke": dict(rounds=1, timesteps=2048),
}
"""``cpu``: the tasks' budgets, three rounds; ``smoke``: 2048 steps, one round (seconds a measurement)."""
SCHEDULE_KEYS = ("learning_rate", "clip_range", "clip_range_vf")
"""The keys rl-zoo3 reads as schedules (``"lin_<value>"``)."""
ZOO_KEYS_NOT_FOR_THE_MODEL = ("n_envs", "n_timesteps", "policy", "normalize")
XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
RESULT_FIELDS = (
    "task",
    "impl",
    "round",
    "seed",
    "cache",
    "settings_hash",
    "env",
    "timesteps",
    "steps",
    "wall_seconds",
    "train_seconds",
    "learn_cpu_seconds",
    "child_cpu_seconds",
    "final_return",
    "episodes",
    "step_mode",
    "cache_new_files",
    "load_1min",
    "versions",
    "finished_at",
)


@dataclass(frozen=True)
class Task:
    """
    A task of the benchmark.

    :param name: its short name (``--tasks``)
    :param env: environment id
    :param source: ``"zoo"`` (rl-zoo3's PPO entry; the package's entries for PPG) or ``"cpu_preset"`` (the learning
        benchmarks' ``cpu`` preset)
    :param budget: default environment steps
    :param zoo_budget: rl-zoo3's ``n_timesteps`` when ``budget`` is a reduction of it (None: not reduced)
    :param threshold: a final return at which an implementation learns whatever SB3 PPO's (None: none)
    """

    name: str
    env: str
    source: str
    budget: int
    zoo_budget: int | None = None
    threshold: float | None = None


TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        Task("cartpole", "CartPole-v1", "zoo", 100_000, threshold=475.0),
        Task("pendulum", "Pendulum-v1", "zoo", 100_000, threshold=-400.0),
        Task("lunarlander", "LunarLander-v3", "zoo", 200_000, zoo_budget=1_000_000),
        Task("breakout", "MinAtar/Breakout-v1", "cpu_preset", 1_000_000),
    )
}


@dataclass(frozen=True)
class Implementation:
    """
    One implementation: an algorithm with its options.

    :param name: ``--algos`` name
    :param algo: ``"ppo"`` (SB3), ``"ppo_ewma"``, ``"ppg"``, ``"ppg_ewma"`` or ``"sbx"``
    :param kwargs: constructor options beyond the task's hyperparameters
    """

    name: str
    algo: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def family(self) -> str:
        """``"ppg"`` for PPG and PPG_EWMA (their own entries), ``"ppo"`` for the others (rl-zoo3's PPO entry)."""
        return "ppg" if self.algo.startswith("ppg") else "ppo"

    @property
    def compiled(self) -> bool:
        """Whether it asks for the compiled training step (then measured cold once per task, and primed)."""
        return self.kwargs.get("compile_step") is True


IMPLEMENTATIONS: dict[str, Implementation] = {
    impl.name: impl
    for impl in (
        Implementation("sb3_ppo", "ppo"),
        Implementation("ppo_ewma_eager", "ppo_ewma", {"compile_step": False}),
        Implementation("ppo_ewma_compiled", "ppo_ewma", {"compile_step": True}),
        Implementation("ppo_ewma_compiled_process", "ppo_ewma", {"compile_step": True, "async_rollouts": "process"}),
        Implementation("sbx_ppo", "sbx"),
        Implementation("ppg_ewma_compiled", "ppg_ewma", {"compile_step": True}),
        Implementation("ppg_ewma_eager", "ppg_ewma", {"compile_step": False}),
        Implementation("ppg_eager", "ppg", {"compile_step": False}),
    )
}
BASELINE = "sb3_ppo"
GOALS = (
    # (label, implementation, reference, at most)
    ("PPO_EWMA compiled / SB3 PPO (goal <= 0.5)", "ppo_ewma_compiled", "sb3_ppo", 0.5),
    ("PPO_EWMA compiled + collector process / SB3 PPO (goal <= 0.35)", "ppo_ewma_compiled_process", "sb3_ppo", 0.35),
    ("PPO_EWMA compiled / SBX", "ppo_ewma_compiled", "sbx_ppo", None),
    ("PPO_EWMA compiled + collector process / SBX", "ppo_ewma_compiled_process", "sbx_ppo", None),
    ("PPG_EWMA compiled / PPG eager (goal <= 0.5)", "ppg_ewma_compiled", "ppg_eager", 0.5),
    ("PPG_EWMA compiled / SB3 PPO", "ppg_ewma_compiled", "sb3_ppo", None),
)


# ----------------------------------------------------------------------------------------------------------------------
# hyperparameters


class LinearSchedule:
    """rl-zoo3's ``SimpleLinearSchedule``: ``progress_remaining * initial_value``, from the value down to 0."""

    def __init__(self, initial_value: float) -> None:
        self.initial_value = float(initial_value)

    def __call__(self, progress_remaining: float) -> float:
        return progress_remaining * self.initial_value

    def __repr__(self) -> str:
        return f"LinearSchedule({self.initial_value})"


def zoo_value(key: str, value: Any) -> Any:
    """
    A hyperparameter as rl-zoo3 hands it to the model: for the schedule keys (:data:`SCHEDULE_KEYS`) a
    ``"lin_<value>"`` string becomes a :class:`LinearSchedule` (rl-zoo3's ``_preprocess_schedules``; a number stays
    a number, which SB3 makes the same constant schedule as rl-zoo3's ``ConstantSchedule``), anything else as it is.
    """
    if key in SCHEDULE_KEYS and isinstance(value, str):
        _, initial_value = value.split("_")
        return LinearSchedule(float(initial_value))
    return value


def model_kwargs(hyperparams: dict[str, Any]) -> dict[str, Any]:
    """The constructor keyword arguments of an entry's hyperparameters (schedules converted)."""
    return {key: zoo_value(key, value) for key, value in hyperparams.items()}


def normalize_kwargs(normalize: Any, gamma: float | None) -> dict[str, Any] | None:
    """
    ``VecNormalize``'s arguments for an entry's ``normalize`` as rl-zoo3 reads it (``true``, or a string
    ``"dict(norm_obs=False, norm_reward=True)"``), with the entry's ``gamma``; None without normalization.
    """
    if normalize is None or normalize is False:
        return None
    if normalize is True:
        kwargs: dict[str, Any] = {}
    elif isinstance(normalize, str):
        kwargs = dict(eval(normalize, {"__builtins__": {}, "dict": dict, "True": True, "False": False}))
    else:
        kwargs = dict(normalize)
    if gamma is not None:
        kwargs["gamma"] = gamma
    return kwargs


def _entries(algo: str) -> dict[str, Any]:
    """rl-zoo3's PPO entries, or the package's for ``ppg`` and ``ppg_ewma``."""
    if algo in ("ppg", "ppg_ewma"):
        import yaml

        from sb3_ewma.algorithms import packaged_hyperparams_file

        with open(packaged_hyperparams_file(algo)) as file:
            return yaml.safe_load(file)
    from sb3_ewma.zoo.derivation import zoo_entries

    return zoo_entries("ppo")


def task_settings(task: Task, impl: Implementation) -> dict[str, Any]:
    """
    The settings ``impl`` trains with on ``task``, as JSON-able values: ``n_envs``, ``policy``, ``hyperparams`` (the
    constructor's, rl-zoo3's ``"lin_<value>"`` strings kept) and ``normalize`` (``VecNormalize``'s arguments or None).
    """
    if task.source == "cpu_preset":
        from benchmarks.harness.envs import policy_for
        from benchmarks.harness.settings import PRESETS

        setting = PRESETS["cpu"].setting
        hyperparams = setting.hyperparams(impl.family)
        policy, policy_kwargs = policy_for(setting.network)
        hyperparams["policy_kwargs"] = {**policy_kwargs, **hyperparams.get("policy_kwargs", {})}
        return {"n_envs": setting.n_envs, "policy": policy, "hyperparams": hyperparams, "normalize": None}
    algo = impl.algo if impl.family == "ppg" else "ppo"
    entry = dict(_entries(algo)[task.env])
    hyperparams = {key: value for key, value in entry.items() if key not in ZOO_KEYS_NOT_FOR_THE_MODEL}
    unsupported = [key for key, value in hyperparams.items() if key == "policy_kwargs" and isinstance(value, str)]
    unsupported += [key for key in hyperparams if key in ("env_wrapper", "frame_stack", "callback", "vec_env_wrapper")]
    if unsupported:
        raise ValueError(f"{task.env}: the benchmark does not read {unsupported} of the entry")
    return {
        "n_envs": int(entry.get("n_envs", 1)),
        "policy": entry.get("policy", "MlpPolicy"),
        "hyperparams": hyperparams,
        "normalize": normalize_kwargs(entry.get("normalize"), entry.get("gamma")),
    }


def measurement_spec(task: Task, impl: Implementation, timesteps: int, seed: int) -> dict[str, Any]:
    """What a measurement's subprocess needs, as JSON-able values."""
    return {
        "task": task.name,
        "impl": impl.name,
        "env": task.env,
        "timesteps": int(timesteps),
        "seed": int(seed),
        **task_settings(task, impl),
    }


def settings_hash(spec: dict[str, Any]) -> str:
    """A hash of what a measurement depends on (everything but the seed, which the round gives)."""
    content = {key: value for key, value in spec.items() if key != "seed"}
    content["kwargs"] = IMPLEMENTATIONS[spec["impl"]].kwargs
    content["protocol"] = PROTOCOL
    return hashlib.sha1(json.dumps(content, sort_keys=True, default=repr).encode()).hexdigest()[:12]


# ----------------------------------------------------------------------------------------------------------------------
# one measurement (in its own process)


def make_env(spec: dict[str, Any]) -> Any:
    """The vectorized environment of a measurement (the learning benchmarks' ``make_env``, VecNormalize if asked)."""
    from stable_baselines3.common.vec_env import VecNormalize

    from benchmarks.harness.envs import make_env as harness_env

    env = harness_env(spec["env"], int(spec["n_envs"]), seed=int(spec["seed"]))
    if spec.get("normalize") is not None:
        env = VecNormalize(env, **spec["normalize"])
    return env


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """
    One measurement of a torch implementation in this process: a fresh model (not timed), then one timed
    ``learn(timesteps)``. Sets torch to one thread.
    """
    import numpy as np
    import stable_baselines3
    import torch as th

    import sb3_ewma
    from benchmarks.harness.common import algorithm_class

    impl = IMPLEMENTATIONS[spec["impl"]]
    th.set_num_threads(1)
    env = make_env(spec)
    kwargs = {**model_kwargs(spec["hyperparams"]), **impl.kwargs}
    model = algorithm_class(impl.algo)(spec["policy"], env, seed=int(spec["seed"]), device="cpu", verbose=0, **kwargs)
    train_seconds = [0.0]
    train = model.train

    def timed_train() -> None:
        start = time.perf_counter()
        train()
        train_seconds[0] += time.perf_counter() - start

    model.train = timed_train  # type: ignore[method-assign]
    cpu_start, start = time.process_time(), time.perf_counter()
    model.learn(int(spec["timesteps"]))
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    returns = [float(info["r"]) for info in model.ep_info_buffer]
    step = getattr(model, "compiled_step", None)
    step_mode = "eager (SB3)" if step is None else ("compiled" if step.active else f"eager ({step.reason})")
    env.close()
    return {
        "wall_seconds": round(wall, 4),
        "train_seconds": round(train_seconds[0], 4),
        "learn_cpu_seconds": round(cpu, 4),
        "final_return": float(np.mean(returns)) if returns else float("nan"),
        "episodes": len(returns),
        "steps": int(model.num_timesteps),
        "step_mode": step_mode,
        "versions": {
            "torch": th.__version__,
            "stable_baselines3": stable_baselines3.__version__,
            "sb3_ewma": sb3_ewma.__version__,
        },
    }


# ----------------------------------------------------------------------------------------------------------------------
# the schedule of measurements


def round_order(names: Sequence[str], round_index: int) -> list[str]:
    """The implementations of round ``round_index``, rotated by it: A B C, then B C A, then C A B, ..."""
    shift = round_index % len(names) if names else 0
    return [*names[shift:], *names[:shift]]


def seed_of(round_label: int | str) -> int:
    """Round ``r`` trains with seed ``r``; the cold-cache measurement with seed 0."""
    return 0 if round_label == "cold" else int(round_label)


def plan(tasks: Sequence[str], names: Sequence[str], rounds: int, cold: bool = True) -> list[tuple[str, str, int | str]]:
    """
    Every measurement, in the order they run: per task, the cold-cache measurement of each compiled implementation
    (when ``cold``), then the rounds, each in :func:`round_order`. Items are ``(task, impl, round)``, round an int
    or ``"cold"``.
    """
    items: list[tuple[str, str, int | str]] = []
    for task in tasks:
        if cold:
            items += [(task, name, "cold") for name in names if IMPLEMENTATIONS[name].compiled]
        for round_index in range(rounds):
            items += [(task, name, round_index) for name in round_order(names, round_index)]
    return items


def measurement_key(task: str, impl: str, round_label: int | str, digest: str) -> tuple[str, str, str, str]:
    """What identifies a measurement in the CSV: task, implementation, round (``"cold"`` or its number) and settings."""
    return task, impl, str(round_label), digest


def done_keys(rows: Sequence[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    """The measurements the CSV already holds."""
    return {measurement_key(row["task"], row["impl"], row["round"], row["settings_hash"]) for row in rows}


def pending(
    items: Sequence[tuple[str, str, int | str]], digests: dict[tuple[str, str], str], done: set[tuple[str, str, str, str]]
) -> list[tuple[str, str, int | str]]:
    """The items of :func:`plan` not yet measured with their current settings (``digests[task, impl]``)."""
    return [item for item in items if measurement_key(*item, digests[item[0], item[1]]) not in done]


# ----------------------------------------------------------------------------------------------------------------------
# subprocesses


def inductor_cache_dir() -> Path:
    """The directory torch's inductor keeps its compiled kernels in, by default (``TORCHINDUCTOR_CACHE_DIR``)."""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        return Path(cache_dir())
    except ImportError:  # an older torch: its default
        import getpass

        return Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}"


def count_files(directory: Path) -> int:
    """How many files are under ``directory`` (0 when it does not exist)."""
    if not directory.exists():
        return 0
    return sum(len(files) for _, _, files in os.walk(directory))


def child_env(cache_dir: Path | None = None) -> dict[str, str]:
    """The environment of a measurement's process: one thread everywhere; ``cache_dir``: inductor's cache there."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", XLA_FLAGS=XLA_FLAGS, JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    if cache_dir is not None:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir)
    return env


def child_command(spec: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """The command line of a measurement's process (SBX's with its virtualenv's Python)."""
    if IMPLEMENTATIONS[spec["impl"]].algo == "sbx":
        command = [str(config["sbx_python"]), str(SBX_SCRIPT), "--spec", json.dumps(spec)]
    else:
        command = [sys.executable, "-m", "benchmarks.timing.speed", "--measure", json.dumps(spec)]
    if config.get("taskset"):
        command = ["taskset", "-c", str(config["taskset"]), *command]
    return command


def parse_result(stdout: str) -> dict[str, Any]:
    """The measurement a process printed: its last line that is a JSON object."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON line in the output")


def run_child(spec: dict[str, Any], config: dict[str, Any], cache_dir: Path | None = None) -> dict[str, Any]:
    """
    Run one measurement in its own process; returns its result with ``child_cpu_seconds`` (the CPU time of the whole
    process and the children it waited for, construction included) and ``cache_new_files``. Raises
    ``RuntimeError`` with the end of its output when it fails.
    """
    watched = cache_dir if cache_dir is not None else inductor_cache_dir()
    files_before = count_files(watched)
    usage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        completed = subprocess.run(
            child_command(spec, config),
            cwd=ROOT,
            env=child_env(cache_dir),
            capture_output=True,
            text=True,
            timeout=config.get("child_timeout"),
        )
    except subprocess.TimeoutExpired as error:
        raise RuntimeError(f"timed out after {error.timeout} s") from None
    usage_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode != 0:
        tail = "\n".join((completed.stdout + completed.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"exit status {completed.returncode}:\n{tail}")
    result = parse_result(completed.stdout)
    cpu = (usage_after.ru_utime - usage_before.ru_utime) + (usage_after.ru_stime - usage_before.ru_stime)
    result["child_cpu_seconds"] = round(cpu, 3)
    result["cache_new_files"] = count_files(watched) - files_before
    return result


def priming_timesteps(spec: dict[str, Any]) -> int:
    """
    The steps of the untimed run that fills inductor's cache with an implementation's graphs: two iterations for
    PPO_EWMA (the second has the scheduled values a run changes), a policy phase and the auxiliary phase's iteration
    for PPG; at most the measurement's own steps.
    """
    iteration = int(spec["hyperparams"]["n_steps"]) * int(spec["n_envs"])
    iterations = int(spec["hyperparams"].get("n_policy_iterations", 1)) + 1
    return min(iteration * max(iterations, 2), int(spec["timesteps"]))


# ----------------------------------------------------------------------------------------------------------------------
# statistics


def paired_ratios(walls: dict[str, float], reference: dict[str, float]) -> list[float]:
    """The per-round ratios ``walls[r] / reference[r]`` over the rounds both have (rounds as CSV strings)."""
    return [walls[key] / reference[key] for key in sorted(walls, key=str) if key in reference and reference[key] > 0]


def median_ratio(walls: dict[str, float], reference: dict[str, float]) -> float | None:
    """The median of :func:`paired_ratios` (None without a common round)."""
    ratios = paired_ratios(walls, reference)
    return statistics.median(ratios) if ratios else None


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (n - 1; None for fewer than 2 values)."""
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) if len(values) > 1 else None)


def learns(returns: Sequence[float], reference: Sequence[float], threshold: float | None = None) -> str:
    """
    Whether final returns show learning next to SB3 PPO's (``reference``): ``"yes"`` when the mean is not below the
    reference mean by more than twice the pooled sample standard deviation, or (``"yes (threshold)"``) when it
    reaches ``threshold``; ``"no"`` otherwise; ``"n/a"`` when fewer than 2 values on either side and no threshold
    reached.
    """
    values = [value for value in returns if not math.isnan(value)]
    if not values:
        return "n/a"
    mean = statistics.fmean(values)
    reference = [value for value in reference if not math.isnan(value)]
    if len(values) > 1 and len(reference) > 1:
        pooled = math.sqrt((statistics.variance(values) + statistics.variance(reference)) / 2)
        if mean >= statistics.fmean(reference) - 2 * pooled:
            return "yes"
    if threshold is not None and mean >= threshold:
        return "yes (threshold)"
    if len(values) < 2 or len(reference) < 2:
        return "n/a"
    return "no"


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """
    Per task and implementation: ``walls`` and ``returns`` by round (warm cache), ``cold`` (the cold-cache wall
    clock or None), and the lists ``train_share``, ``cpu_share``, ``cache_new_files``, ``step_modes``.
    """
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        entry = summary.setdefault(row["task"], {}).setdefault(
            row["impl"],
            {
                "walls": {},
                "returns": {},
                "cold": None,
                "train_share": [],
                "cpu_share": [],
                "cache_new_files": [],
                "step_modes": [],
            },
        )
        wall = float(row["wall_seconds"])
        if row["round"] == "cold":
            entry["cold"] = wall
            continue
        entry["walls"][str(row["round"])] = wall
        entry["returns"][str(row["round"])] = float(row["final_return"])
        if row.get("train_seconds") not in (None, ""):
            entry["train_share"].append(float(row["train_seconds"]) / wall)
        if row.get("learn_cpu_seconds") not in (None, ""):
            entry["cpu_share"].append(float(row["learn_cpu_seconds"]) / wall)
        if row.get("cache_new_files") not in (None, ""):
            entry["cache_new_files"].append(int(row["cache_new_files"]))
        if row.get("step_mode") and row["step_mode"] not in entry["step_modes"]:
            entry["step_modes"].append(row["step_mode"])
    return summary


# ----------------------------------------------------------------------------------------------------------------------
# report


def machine() -> dict[str, str]:
    """The CPU model, cores, memory, OS, Python and the versions of the libraries measured."""
    info = {"cpu": platform.processor() or platform.machine(), "cores": str(os.cpu_count())}
    with contextlib.suppress(OSError):
        blocks = [
            dict((part.strip() for part in line.split(":", 1)) for line in block.splitlines() if ":" in line)
            for block in Path("/proc/cpuinfo").read_text().split("\n\n")
        ]
        models = [block["model name"] for block in blocks if "model name" in block]
        if models:
            info["cpu"] = models[0]
        cores = {(block.get("physical id"), block["core id"]) for block in blocks if "core id" in block}
        if cores:
            info["cores"] = f"{os.cpu_count()} logical, {len(cores)} physical"
    with contextlib.suppress(OSError, ValueError, IndexError):
        kib = int(
            next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")).split()[1]
        )
        info["memory"] = f"{kib / 2**20:.1f} GiB"
    info["os"] = f"{platform.system()} {platform.release()}"
    info["python"] = platform.python_version()
    with contextlib.suppress(ImportError):
        import stable_baselines3
        import torch

        import sb3_ewma

        info["torch"] = torch.__version__
        info["stable_baselines3"] = stable_baselines3.__version__
        info["sb3_ewma"] = sb3_ewma.__version__
    return info


def _cell(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _returns_cell(returns: Sequence[float]) -> str:
    values = [value for value in returns if not math.isnan(value)]
    if not values:
        return "-"
    mean, std = mean_std(values)
    return f"{mean:.1f} +- {std:.1f} ({len(values)})" if std is not None else f"{mean:.1f} (1)"


def task_heading(task: Task, timesteps: int, names: Sequence[str]) -> list[str]:
    """The heading of a task's section and its hyperparameters, per family."""
    budget = f"{timesteps:,} steps"
    if task.zoo_budget is not None and timesteps < task.zoo_budget:
        budget += f" (**reduced**: rl-zoo3 trains {task.zoo_budget:,})"
    source = "rl-zoo3's tuned PPO entry" if task.source == "zoo" else "the learning benchmarks' cpu preset, MLP"
    lines = [f"### {task.env}: {source}, {budget}", ""]
    families = {IMPLEMENTATIONS[name].family: IMPLEMENTATIONS[name] for name in names}
    for family, impl in families.items():
        settings = task_settings(task, impl)
        values = ", ".join(f"{key}={value}" for key, value in settings["hyperparams"].items())
        normalize = f", VecNormalize({settings['normalize']})" if settings["normalize"] else ""
        label = "PPO, PPO_EWMA, SBX" if family == "ppo" else "PPG, PPG_EWMA"
        lines.append(f"- {label}: {settings['n_envs']} envs, {settings['policy']}{normalize}, {values}")
    return [*lines, ""]


def task_table(task: Task, entries: dict[str, dict[str, Any]], names: Sequence[str]) -> list[str]:
    """The table of one task's implementations."""
    lines = [
        "| implementation | training step | learn, median (s) | min-max (s) | time vs SB3 PPO | cold cache (s) "
        "| final return (seeds) | learns | train() share | CPU / wall |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    reference = entries.get(BASELINE)
    for name in names:
        entry = entries.get(name)
        if entry is None or not (entry["walls"] or entry["cold"] is not None):
            continue
        walls = list(entry["walls"].values())
        median = statistics.median(walls) if walls else None
        spread = f"{min(walls):.1f}-{max(walls):.1f}" if walls else "-"
        ratio = median_ratio(entry["walls"], reference["walls"]) if reference else None
        returns = list(entry["returns"].values())
        if name == BASELINE:
            verdict = "reference"
            if task.threshold is not None and returns:
                verdict += f" ({'reaches' if statistics.fmean(returns) >= task.threshold else 'below'} {task.threshold:g})"
        else:
            verdict = learns(returns, list(reference["returns"].values()) if reference else [], task.threshold)
        mode = "; ".join(entry["step_modes"]) or "-"
        train_share = f"{100 * statistics.median(entry['train_share']):.0f}%" if entry["train_share"] else "-"
        cpu_share = _cell(statistics.median(entry["cpu_share"]), 2) if entry["cpu_share"] else "-"
        lines.append(
            f"| {name} | {mode} | {_cell(median, 2)} | {spread} | {_cell(ratio)} | {_cell(entry['cold'], 1)} "
            f"| {_returns_cell(returns)} | {verdict} | {train_share} | {cpu_share} |"
        )
    return lines


LEARNING_CHECKED = ("ppo_ewma_compiled", "ppo_ewma_compiled_process", "sbx_ppo", "ppg_ewma_compiled")
"""The implementations whose learning the goal table repeats (the per-task tables have every one)."""


def goal_verdict(flags: Sequence[bool | None]) -> str:
    """``met on every task (n of n)``, ``not met: met on k of n task(s)``, or ``not measured``."""
    known = [flag for flag in flags if flag is not None]
    if not known:
        return "not measured"
    missing = f"; {len(flags) - len(known)} task(s) not measured" if len(known) < len(flags) else ""
    if all(known):
        return f"met on every task measured ({len(known)} of {len(known)}){missing}"
    return f"not met: met on {sum(known)} of {len(known)} task(s){missing}"


def goal_table(summary: dict[str, dict[str, dict[str, Any]]], tasks: Sequence[str]) -> tuple[list[str], list[str]]:
    """The goal's ratios per task (medians of per-round ratios), whether they learn, and the verdict lines."""
    learning_label = "learns: " + " / ".join(LEARNING_CHECKED)
    lines = [
        "| task | " + " | ".join(label for label, *_ in GOALS) + f" | {learning_label} |",
        "|---|" + "---|" * (len(GOALS) + 1),
    ]
    met: dict[str, list[bool | None]] = {"sync": [], "process": [], "sbx": [], "ppg": []}
    for task in tasks:
        entries = summary.get(task, {})
        cells, ratios = [], []
        for _, name, reference, bound in GOALS:
            ratio = None
            if name in entries and reference in entries:
                ratio = median_ratio(entries[name]["walls"], entries[reference]["walls"])
            ratios.append(ratio)
            if ratio is None:
                cells.append("-")
            elif bound is not None:
                cells.append(f"{ratio:.3f} ({'met' if ratio <= bound else 'not met'})")
            elif reference == "sbx_ppo":
                cells.append(f"{ratio:.3f} ({'ahead' if ratio < 1 else 'behind'})")
            else:
                cells.append(f"{ratio:.3f}")
        reference_returns = list(entries[BASELINE]["returns"].values()) if BASELINE in entries else []
        verdicts = [
            (
                learns(list(entries[name]["returns"].values()), reference_returns, TASKS[task].threshold)
                if name in entries and reference_returns
                else "-"
            )
            for name in LEARNING_CHECKED
        ]
        lines.append(f"| {TASKS[task].env} | " + " | ".join(cells) + f" | {' / '.join(verdicts)} |")
        met["sync"].append(None if ratios[0] is None else ratios[0] <= 0.5)
        met["process"].append(None if ratios[1] is None else ratios[1] <= 0.35)
        against_sbx = [ratio for ratio in ratios[2:4] if ratio is not None]
        met["sbx"].append(min(against_sbx) < 1 if against_sbx else None)
        met["ppg"].append(None if ratios[4] is None else ratios[4] <= 0.5)
    verdicts = [
        f"- PPO_EWMA compiled, synchronous, at most 0.5x SB3 PPO: {goal_verdict(met['sync'])}",
        f"- PPO_EWMA compiled with the collector process at most 0.35x SB3 PPO: {goal_verdict(met['process'])}",
        f"- PPO_EWMA (the faster of the two) ahead of SBX: {goal_verdict(met['sbx'])}",
        f"- PPG_EWMA compiled at most 0.5x PPG eager: {goal_verdict(met['ppg'])}",
    ]
    return lines, verdicts


def write_report(rows: Sequence[dict[str, Any]], config: dict[str, Any], out_dir: Path, command: str) -> Path:
    """``results.md``: the machine, the date, the command, the goal and each task's table."""
    names = config["algos"]
    summary = summarize(rows)
    info = machine()
    library_versions: dict[str, str] = {}
    for row in rows:
        with contextlib.suppress(ValueError, TypeError):
            library_versions.update(json.loads(row.get("versions") or "{}"))
    loads = [float(row["load_1min"]) for row in rows if row.get("load_1min") not in (None, "")]
    finished = sorted(row["finished_at"] for row in rows if row.get("finished_at"))
    lines = [
        "# Speed side by side: SB3 PPO, PPO_EWMA eager / compiled / with the collector process, SBX PPO, PPG",
        "",
        f"- command: `{command}`",
        (
            f"- written {time.strftime('%Y-%m-%d %H:%M')}; measurements made {finished[0]} to {finished[-1]}"
            if finished
            else f"- written {time.strftime('%Y-%m-%d %H:%M')}; no measurement yet"
        ),
        f"- machine: {info['cpu']}; {info['cores']} cores; {info.get('memory', '?')} memory; {info['os']}",
        f"- software: Python {info['python']}, torch {info.get('torch', '?')}, stable-baselines3 "
        f"{info.get('stable_baselines3', '?')}, sb3_ewma {info.get('sb3_ewma', '?')}; measured with "
        + (", ".join(f"{key} {value}" for key, value in sorted(library_versions.items())) or "-"),
        (
            f"- load average (1 min) when the measurements finished: {min(loads):.2f} to {max(loads):.2f}"
            if loads
            else "- load average: -"
        ),
        f"- {config['rounds']} round(s), seeds 0 to {config['rounds'] - 1}; one thread per process; "
        f"inductor's default cache: `{inductor_cache_dir()}`",
        "",
        "Definitions (see `benchmarks/timing/speed.py`): times are one whole `learn` from a fresh model in a fresh "
        "process, compilation included; *time vs SB3 PPO* is the median over rounds of the per-round ratio; the rounds "
        "ran with inductor's cache warm (filled by a short untimed run), *cold cache* is one run per task with an "
        "empty cache (seed 0); the final return is the mean of the last 100 training episodes, mean +- sample std over "
        "seeds; *learns*: not below SB3 PPO's mean by more than 2 pooled sample std, or at the task's threshold; "
        "*CPU / wall*: the main process's CPU time over the wall clock of `learn`.",
        "",
        "## Goal",
        "",
    ]
    tasks = [task for task in config["tasks"] if task in summary]
    goal_lines, verdicts = goal_table(summary, tasks)
    lines += [*goal_lines, "", *verdicts, ""]
    for task_name in tasks:
        task = TASKS[task_name]
        lines += task_heading(task, config["timesteps"][task_name], names)
        lines += task_table(task, summary[task_name], names)
        warm_writes = [
            name
            for name, entry in summary[task_name].items()
            if entry["cache_new_files"] and max(entry["cache_new_files"]) > 0
        ]
        if any(IMPLEMENTATIONS[name].compiled for name in warm_writes):
            compiled = [name for name in warm_writes if IMPLEMENTATIONS[name].compiled]
            lines += ["", f"Warm-cache measurements that still wrote to inductor's cache: {', '.join(compiled)}."]
        lines.append("")
    missing = config.get("missing") or []
    if missing:
        lines += ["## Not measured", "", *(f"- {item}" for item in missing), ""]
    path = out_dir / "results.md"
    path.write_text("\n".join(lines))
    return path


# ----------------------------------------------------------------------------------------------------------------------
# the run


def parse_timesteps(text: str | None, tasks: Sequence[str], preset_value: int | None) -> dict[str, int]:
    """
    The budget of each task: ``--timesteps N`` (every task), ``--timesteps task=N,task=N`` (those tasks), the
    preset's or the tasks' defaults otherwise. Numbers may be written ``1e6``.
    """
    budgets = {task: int(preset_value) if preset_value else TASKS[task].budget for task in tasks}
    if not text:
        return budgets
    if "=" not in text:
        return {task: int(float(text)) for task in tasks}
    for part in text.split(","):
        task, _, value = part.partition("=")
        if task.strip() not in TASKS:
            raise ValueError(f"--timesteps: unknown task {task.strip()!r}: choose among {sorted(TASKS)}")
        if task.strip() in budgets:
            budgets[task.strip()] = int(float(value))
    return budgets


def _names(text: str, known: Sequence[str], option: str) -> list[str]:
    if text == "all":
        return list(known)
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"{option}: unknown {unknown}: choose among {', '.join(known)} or 'all'")
    return list(dict.fromkeys(names))


def _parser() -> argparse.ArgumentParser:
    parser = base_parser((__doc__ or "").split("\n\n")[0], presets=tuple(PRESETS))
    parser.epilog = __doc__
    parser.add_argument("--algos", default="all", help=f"comma-separated among {', '.join(IMPLEMENTATIONS)}, or 'all'")
    parser.add_argument("--tasks", default="all", help=f"comma-separated among {', '.join(TASKS)}, or 'all'")
    parser.add_argument("--rounds", type=int, help="rounds, seed r in round r (default: the preset's, cpu 3)")
    parser.add_argument("--timesteps", help="steps of every task (N), or of some (task=N,task=N); default: the tasks'")
    parser.add_argument("--cold", action=argparse.BooleanOptionalAction, default=True, help="the cold-cache runs")
    parser.add_argument("--sbx-python", type=Path, default=DEFAULT_SBX_PYTHON, help="Python of SBX's virtualenv")
    parser.add_argument("--taskset", help="pin every measurement's process to these CPUs (taskset -c), e.g. 0-1")
    parser.add_argument("--child-timeout", type=float, default=4 * 3600, help="seconds a measurement may take")
    parser.add_argument("--report-only", action="store_true", help="write results.md from the CSV, measure nothing")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # one measurement, in a subprocess (JSON spec)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The configuration of a run from the command line."""
    args = _parser().parse_args(argv)
    preset = PRESETS[args.preset]
    tasks = _names(args.tasks, list(TASKS), "--tasks")
    return {
        "measure": args.measure,
        "preset": args.preset,
        "algos": _names(args.algos, list(IMPLEMENTATIONS), "--algos"),
        "tasks": tasks,
        "rounds": args.rounds if args.rounds is not None else preset["rounds"],
        "timesteps": parse_timesteps(args.timesteps, tasks, preset["timesteps"]),
        "cold": args.cold,
        "sbx_python": args.sbx_python,
        "taskset": args.taskset,
        "child_timeout": args.child_timeout,
        "report_only": args.report_only,
        "out_dir": Path(args.out) / NAME / args.preset,
    }


def _row(task: str, impl: str, round_label: int | str, cache: str, digest: str, result: dict[str, Any]) -> dict[str, Any]:
    """The CSV row of a measurement (:data:`RESULT_FIELDS`)."""
    measured = {key: result[key] for key in RESULT_FIELDS if key in result}
    return {
        **measured,
        "task": task,
        "impl": impl,
        "round": str(round_label),
        "seed": seed_of(round_label),
        "cache": cache,
        "settings_hash": digest,
        "env": TASKS[task].env,
        "load_1min": round(os.getloadavg()[0], 2),
        "versions": json.dumps(result.get("versions", {}), sort_keys=True),
        "finished_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def run(config: dict[str, Any], command: str) -> tuple[list[dict[str, Any]], list[str]]:
    """
    Every pending measurement, appended to the CSV as it finishes, the report rewritten after each; returns the
    current rows and the measurements that failed.
    """
    out_dir: Path = config["out_dir"]
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / "measurements.csv"
    names, tasks = config["algos"], config["tasks"]
    specs = {
        (task, name): measurement_spec(TASKS[task], IMPLEMENTATIONS[name], config["timesteps"][task], 0)
        for task in tasks
        for name in names
    }
    digests = {key: settings_hash(spec) for key, spec in specs.items()}
    current = set(digests.values())
    rows = [row for row in read_csv(csv_path) if row["settings_hash"] in current]
    items = plan(tasks, names, config["rounds"], config["cold"])
    todo = pending(items, digests, done_keys(rows))
    if len(todo) < len(items):
        print(f"{len(items) - len(todo)} measurement(s) already made with these settings: skipped")
    if config["report_only"]:
        config["missing"] = [f"{task} {impl} round {label}" for task, impl, label in todo]
        return rows, []
    if any(IMPLEMENTATIONS[impl].algo == "sbx" for _, impl, _ in todo) and not Path(config["sbx_python"]).exists():
        raise SystemExit(
            f"no Python at {config['sbx_python']} for sbx_ppo: create SBX's virtualenv (the module's docstring says how), "
            "name it with --sbx-python, or leave sbx_ppo out of --algos"
        )
    failures: list[str] = []
    started, made = time.time(), 0
    for task in tasks:
        task_todo = [item for item in todo if item[0] == task]
        primed: set[str] = set()
        for _, impl, round_label in task_todo:
            spec = dict(specs[task, impl], seed=seed_of(round_label))
            if IMPLEMENTATIONS[impl].compiled and round_label != "cold" and impl not in primed:
                primed.add(impl)
                prime = dict(spec, timesteps=priming_timesteps(spec))
                start = time.perf_counter()
                try:
                    run_child(prime, config)
                    print(f"{task} {impl}: inductor's cache filled ({time.perf_counter() - start:.1f} s, untimed)")
                except RuntimeError as error:
                    print(f"{task} {impl}: filling inductor's cache failed: {error}")
            label = f"{task} {impl} round {round_label} (seed {spec['seed']})"
            try:
                if round_label == "cold":
                    with tempfile.TemporaryDirectory(prefix="speed_inductor_") as cache_dir:
                        result = run_child(spec, config, Path(cache_dir))
                    cache = "cold"
                else:
                    result = run_child(spec, config)
                    cache = "warm" if IMPLEMENTATIONS[impl].compiled else "-"
            except RuntimeError as error:
                print(f"{label}: FAILED: {error}")
                failures.append(label)
                continue
            result["timesteps"] = spec["timesteps"]
            row = _row(task, impl, round_label, cache, digests[task, impl], result)
            append_csv(csv_path, row, RESULT_FIELDS)
            rows.append({key: str(value) for key, value in row.items()})
            made += 1
            elapsed = time.time() - started
            left = len(todo) - made - len(failures)
            print(
                f"[{made}/{len(todo)}] {label}: {float(result['wall_seconds']):.1f} s, return "
                f"{float(result['final_return']):.1f}, {result['step_mode']}; {elapsed / 60:.1f} min so far, "
                f"about {elapsed / made * left / 60:.0f} min left",
                flush=True,
            )
            write_report(rows, config, out_dir, command)
    config["missing"] = failures
    return rows, failures


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """Command line entry point; returns the summary (per task and implementation)."""
    config = parse_args(argv)
    if config["measure"]:
        print(json.dumps(measure(json.loads(config["measure"]))), flush=True)
        return {}
    command = " ".join(["python -m benchmarks.timing.speed", *(sys.argv[1:] if argv is None else argv)])
    rows, failures = run(config, command)
    path = write_report(rows, config, config["out_dir"], command)
    print(f"report: {path}")
    print(path.read_text().split("## Goal")[1].split("### ")[0].strip())
    if failures:
        raise SystemExit(f"{len(failures)} measurement(s) failed: {', '.join(failures)} (run the command again to retry)")
    return summarize(rows)


if __name__ == "__main__":
    main()
