"""
The tasks, variants and published reference figures of :mod:`benchmarks.learning.zoo_table`.

A task is an environment id that rl-zoo3 tunes PPO for (its ``hyperparams/ppo.yml``), or MinAtar (which rl-zoo3 does
not tune: :data:`MINATAR_PPO_ENTRY` is this benchmark's PPO entry, given with ``-conf``). Its budget is the tuned
entry's ``n_timesteps``, capped on these CPUs at the task's ``cap`` (a row trained for less says "reduced").
"""

import csv
import functools
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PUBLISHED_FILE = Path(__file__).resolve().parent / "rl_zoo3_ppo_published.csv"
"""rl-zoo3's published PPO scores (its ``benchmark.md``, see the file's ``source`` column)."""


@dataclass(frozen=True)
class Task:
    """
    One environment of the table.

    :param env: the gymnasium id (rl-zoo3's ``--env``)
    :param group: ``classic``, ``box2d``, ``mujoco``, ``minigrid`` or ``minatar``
    :param cap: most environment steps per run on these CPUs (None: the tuned budget)
    :param requires: a module the environment needs (the task is skipped when it is not installed)
    :param gym_packages: modules rl-zoo3 imports to register the id (``--gym-packages``)
    :param conf: a PPO entry for tasks rl-zoo3 has none for (written to a file and passed with ``-conf``)
    """

    env: str
    group: str
    cap: int | None = None
    requires: str | None = None
    gym_packages: tuple[str, ...] = ()
    conf: dict[str, Any] | None = field(default=None, hash=False, compare=False)

    def available(self) -> bool:
        """Whether the environment's package is installed."""
        return self.requires is None or importlib.util.find_spec(self.requires) is not None


@dataclass(frozen=True)
class Variant:
    """
    One column of the comparison.

    :param name: the name in tables and file names
    :param algo: the rl-zoo3 algorithm (``ppo`` runs through ``python -m rl_zoo3.train`` itself, the others through
        ``python -m sb3_ewma.train``)
    :param params: ``-params`` overrides (``key: value`` as Python literals)
    """

    name: str
    algo: str
    params: tuple[tuple[str, str], ...] = ()

    @property
    def is_reference(self) -> bool:
        """SB3's PPO through rl-zoo3 itself."""
        return self.algo == "ppo"


MINATAR_PPO_ENTRY: dict[str, Any] = {
    "env_wrapper": "benchmarks.harness.envs.MinAtarObservation",
    "n_envs": 64,
    "n_timesteps": 1_000_000,
    "policy": "MlpPolicy",
    "n_steps": 128,
    "batch_size": 1024,
    "n_epochs": 3,
    "gae_lambda": 0.95,
    "gamma": 0.99,
    "ent_coef": 0.01,
    "learning_rate": 5e-4,
    "clip_range": 0.2,
    "policy_kwargs": "dict(net_arch=[64, 64])",
}
"""
MinAtar has no rl-zoo3 entry: the learning benchmarks' ``cpu`` settings (``benchmarks/harness/settings.py``: the paper's
shape, 8 minibatches per epoch and 3 epochs, at 64 environments x 128 steps, MLP [64, 64]) as a PPO entry, with
MinAtar's frames as float channels-first arrays.
"""

MUJOCO_CAP = 100_000
"""
The budget of Hopper, HalfCheetah and Walker2d on these 2-core CPUs (rl-zoo3 tunes 1M steps). Swimmer (about a minute
per 100k steps here) and Ant (about 22 minutes per 1M) train their tuned 1M: at 100k SB3 PPO's Swimmer seeds had just
left the task's local optimum (a return of about 30, then about 200) while PPO_EWMA's were still leaving it (22 to
199), and on Ant both algorithms were still in the early dip below the standing policy's return, so that budget
measured how early a seed escapes, not what it learns. On a machine with more cores, raise the cap here: runs with
another budget run again.
"""

TASKS: tuple[Task, ...] = (
    Task("CartPole-v1", "classic"),
    Task("Pendulum-v1", "classic"),
    Task("MountainCarContinuous-v0", "classic"),
    Task("Acrobot-v1", "classic", cap=300_000),
    Task("MountainCar-v0", "classic", cap=300_000),
    Task("LunarLander-v3", "box2d", requires="Box2D"),
    Task("LunarLanderContinuous-v3", "box2d", requires="Box2D"),
    Task("BipedalWalker-v3", "box2d", cap=500_000, requires="Box2D"),
    Task("Swimmer-v4", "mujoco", requires="mujoco"),
    Task("Hopper-v4", "mujoco", cap=MUJOCO_CAP, requires="mujoco"),
    Task("HalfCheetah-v4", "mujoco", cap=MUJOCO_CAP, requires="mujoco"),
    Task("Walker2d-v4", "mujoco", cap=MUJOCO_CAP, requires="mujoco"),
    Task("Ant-v4", "mujoco", requires="mujoco"),
    Task("MiniGrid-Empty-Random-5x5-v0", "minigrid", requires="minigrid", gym_packages=("minigrid",)),
    Task("MiniGrid-DoorKey-5x5-v0", "minigrid", requires="minigrid", gym_packages=("minigrid",)),
    Task("MiniGrid-Unlock-v0", "minigrid", requires="minigrid", gym_packages=("minigrid",)),
    Task(
        "MinAtar/Breakout-v1",
        "minatar",
        requires="minatar",
        gym_packages=("benchmarks.learning.minatar_envs",),
        conf=MINATAR_PPO_ENTRY,
    ),
)
"""Every task of the table, cheapest groups first."""

GROUPS: tuple[str, ...] = ("classic", "box2d", "mujoco", "minigrid", "minatar")

TABLE_VARIANTS: tuple[Variant, ...] = (
    Variant("ppo", "ppo"),
    Variant("ppo_ewma", "ppo_ewma"),
    Variant("ppg_ewma", "ppg_ewma"),
    Variant("ppg", "ppg"),
)
"""The table: SB3 PPO (the reference), PPO-EWMA, PPG-EWMA and PPG, each with its default ``ewma_decay``."""

EWMA_AGE_VARIANTS: tuple[Variant, ...] = (
    Variant("ppo", "ppo"),
    Variant("ppo_ewma-paper", "ppo_ewma", (("ewma_decay", "'paper'"),)),
    Variant("ppo_ewma-max_age", "ppo_ewma", (("ewma_decay", "'max_age'"),)),
    Variant("ppo_ewma-mean_age", "ppo_ewma", (("ewma_decay", "'mean_age'"),)),
)
"""The EWMA-age measurement: PPO-EWMA with each named center-of-mass rule, against SB3 PPO."""

EWMA_AGE_TASKS: tuple[str, ...] = (
    "CartPole-v1",
    "Pendulum-v1",
    "MountainCarContinuous-v0",
    "Acrobot-v1",
    "LunarLander-v3",
    "LunarLanderContinuous-v3",
)
"""Entries with several epochs (20 x 1, 10 x 64, 10 x 1, 4 x 64, 4 x 256 and 4 x 256 minibatches)."""

PPG_EWMA_AGE_VARIANTS: tuple[Variant, ...] = (
    Variant("ppo", "ppo"),
    Variant("ppg", "ppg"),
    Variant("ppg_ewma-paper", "ppg_ewma", (("ewma_decay", "'paper'"),)),
    Variant("ppg_ewma-max_age", "ppg_ewma", (("ewma_decay", "'max_age'"),)),
    Variant("ppg_ewma-mean_age", "ppg_ewma", (("ewma_decay", "'mean_age'"),)),
)
"""The EWMA-age measurement for PPG-EWMA (policy phases of several epochs), against PPG and SB3 PPO."""

PPG_EWMA_AGE_TASKS: tuple[str, ...] = ("Pendulum-v1", "Acrobot-v1")
"""
The tasks where PPG_EWMA trailed PPG in the table: Pendulum (4 policy epochs of 64 minibatches) and Acrobot (2 of 16,
where ``"paper"`` and ``"mean_age"`` give the same center of mass).
"""

EXPERIMENTS: dict[str, tuple[tuple[Variant, ...], tuple[str, ...] | None]] = {
    "table": (TABLE_VARIANTS, None),
    "ewma_age": (EWMA_AGE_VARIANTS, EWMA_AGE_TASKS),
    "ppg_ewma_age": (PPG_EWMA_AGE_VARIANTS, PPG_EWMA_AGE_TASKS),
}
"""Experiment name -> (variants, task ids or None for every task)."""


def task_by_env(env: str) -> Task:
    """:return: the task of ``env`` (a :data:`TASKS` id)"""
    for task in TASKS:
        if task.env == env:
            return task
    raise ValueError(f"unknown task {env!r}: choose among {[task.env for task in TASKS]}")


@functools.cache
def _zoo_ppo_entries() -> dict[str, Any]:
    """rl-zoo3's ``ppo.yml``, read once from the installed package (imported here: the tasks list needs no rl-zoo3)."""
    from sb3_ewma.zoo.derivation import zoo_entries

    return zoo_entries("ppo")


def zoo_ppo_entry(env: str) -> dict[str, Any] | None:
    """rl-zoo3's tuned PPO entry for ``env`` (read from the installed package), or None."""
    entry = _zoo_ppo_entries().get(env)
    return dict(entry) if entry is not None else None


def tuned_budget(task: Task) -> int:
    """The ``n_timesteps`` of the task's PPO entry (rl-zoo3's, or the task's own)."""
    entry = task.conf if task.conf is not None else zoo_ppo_entry(task.env)
    if entry is None:
        raise ValueError(f"rl-zoo3 has no PPO entry for {task.env}")
    return int(float(entry["n_timesteps"]))


def task_budget(task: Task) -> int:
    """The steps the table trains ``task`` for: its tuned budget, at most its CPU cap."""
    tuned = tuned_budget(task)
    return min(tuned, task.cap or tuned)


def _name_without_version(env: str) -> str:
    return env.rsplit("-v", 1)[0]


def published_ppo() -> dict[str, dict[str, str]]:
    """rl-zoo3's published PPO rows by environment name without its version (``LunarLander``: the ``-v2`` row)."""
    with open(PUBLISHED_FILE, newline="") as file:
        rows = list(csv.DictReader(file))
    return {_name_without_version(row["env_id"]): row for row in rows}


def published_row(env: str) -> dict[str, str] | None:
    """The published rl-zoo3 PPO row of ``env`` (matched without the version: the published runs used older ones)."""
    return published_ppo().get(_name_without_version(env))


def published_mean(env: str) -> float | None:
    """The published rl-zoo3 PPO mean return of ``env``, or None where rl-zoo3 publishes none."""
    row = published_row(env)
    return None if row is None else float(row["mean_reward"])
