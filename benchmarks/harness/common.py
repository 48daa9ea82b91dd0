"""
Shared machinery of the learning benchmarks: run specifications, the CSV files and the finished runs, the parallel scheduler
and the command line. One run is trained by :mod:`benchmarks.harness.runner`, plots and tables are made by
:mod:`benchmarks.harness.report`.

Layout of an experiment's results, ``<out>/<experiment>/<preset>/``:

- ``runs.jsonl``: one record per finished run (:mod:`benchmarks.harness.results_store`), appended when it finishes:
  the fields of :data:`MANIFEST_FIELDS` (with a hash of its settings) and its evaluations, one row each (``timesteps``,
  ``mean_return``, ``episodes``, ``wall_time`` and the run's settings); finished runs are skipped when the command is
  run again, so an interrupted benchmark resumes where it stopped; committed results keep their records gzipped
  (``runs.jsonl.gz``, read before ``runs.jsonl``), so that the repository stays within what a GPU runner carries;
- ``checkpoints/<run_id>/`` (not in version control): a run in progress, its evaluations so far (``evaluations.csv``,
  appended as training goes) and, once paused at a deadline (``--max-minutes``), the checkpoint the next invocation
  resumes from;
- ``evaluations.csv.gz`` (all finished runs, gzipped), ``<experiment>.png`` and ``results.md``, written by the report.

An evaluation is, by default, the mean return of the training episodes that ended since the previous evaluation
(as in the paper's Procgen curves: unlimited levels, so training episodes are new levels); with ``eval_episodes > 0``
it is the mean return of that many episodes of the stochastic policy on a separate environment.
"""

import argparse
import csv
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks.harness import results_store

ALGORITHMS = ("ppo", "ppo_ewma", "ppg", "ppg_ewma")
RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"
FINAL_FRACTION = 0.25
"""The final return of a run is the mean of its evaluations in the last quarter of training."""
MANIFEST_FIELDS = (
    "run_id",
    "spec_hash",
    "variant",
    "algo",
    "env",
    "n_envs",
    "seed",
    "timesteps",
    "wall_time",
    "steps_per_second",
    "final_return",
    "finished_at",
)
# relative cost of one environment step, for scheduling the longest runs first and for progress estimates:
# about (1 + 5.5 / n_envs) (per-step overhead of SB3 at few environments), PPG about twice PPO (measured on MinAtar)
_ALGO_COST = {"ppo": 1.0, "ppo_ewma": 1.1, "ppg": 1.9, "ppg_ewma": 1.9}


def algorithm_class(algo: str) -> type:
    """The class of ``algo``: SB3's ``PPO``, ``PPO_EWMA``, ``PPG`` (PPG-EWMA without the EWMA) or ``PPG_EWMA``."""
    if algo == "ppo":
        from stable_baselines3 import PPO

        return PPO
    if algo == "ppo_ewma":
        from sb3_ewma import PPO_EWMA

        return PPO_EWMA
    if algo in ("ppg", "ppg_ewma"):
        from sb3_ewma.ppg_ewma import PPG, PPG_EWMA

        return PPG if algo == "ppg" else PPG_EWMA
    raise ValueError(f"unknown algorithm {algo!r}: choose among {ALGORITHMS}")


def clock() -> float:
    """The wall clock of deadlines (``time.time()``; a function so that tests can replace it)."""
    return time.time()


def round_up(value: int, multiple: int) -> int:
    """The smallest multiple of ``multiple`` that is ``>= value``."""
    return -(-int(value) // multiple) * multiple


@dataclass
class RunSpec:
    """
    One training run: an algorithm with its constructor hyperparameters on an environment, for a number of steps.

    :param experiment: the experiment's name (first column of the CSVs)
    :param variant: the curve this run belongs to (e.g. ``"ppo_ewma"``, ``"no_lr"``, ``"decoupled"``)
    :param algo: one of :data:`ALGORITHMS`
    :param env: environment id (see :mod:`benchmarks.harness.envs`)
    :param n_envs: number of parallel environments
    :param seed: random seed
    :param total_timesteps: environment steps, a multiple of ``n_steps * n_envs``
    :param eval_every: environment steps between evaluations, a multiple of ``n_steps * n_envs``
    :param hyperparams: constructor keyword arguments (``n_steps`` required); ``policy_kwargs`` are merged over the
        network's
    :param network: network name (see :func:`benchmarks.harness.envs.policy_for`)
    :param labels: extra columns of the CSVs that identify the run (e.g. ``{"staleness": 4}``)
    :param aliases: other variants this run also stands for (e.g. the reference batch size of every ablation)
    :param device: torch device
    :param threads: torch threads of the run
    :param eval_episodes: 0: evaluate on the training episodes; otherwise episodes on a separate environment
    :param diagnostics: record the training diagnostics of every iteration (:mod:`benchmarks.harness.diagnostics`) in
        ``checkpoints/<run_id>/diagnostics.csv`` and the run's record; they change nothing in the training
    """

    experiment: str
    variant: str
    algo: str
    env: str
    n_envs: int
    seed: int
    total_timesteps: int
    eval_every: int
    hyperparams: dict[str, Any]
    network: str = "mlp"
    labels: dict[str, Any] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    device: str = "cpu"
    threads: int = 1
    eval_episodes: int = 0
    diagnostics: bool = False

    def __post_init__(self) -> None:
        if self.algo not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {self.algo!r}: choose among {ALGORITHMS}")
        if "n_steps" not in self.hyperparams:
            raise ValueError("hyperparams must give n_steps")
        for name in ("total_timesteps", "eval_every"):
            value = getattr(self, name)
            if value <= 0 or value % self.iteration_size:
                raise ValueError(f"{name}={value} must be a positive multiple of n_steps * n_envs = {self.iteration_size}")

    @property
    def iteration_size(self) -> int:
        """Environment steps per iteration, ``n_steps * n_envs``."""
        return int(self.hyperparams["n_steps"]) * self.n_envs

    @property
    def run_id(self) -> str:
        """A readable, file-name safe identifier, unique within an experiment."""
        from benchmarks.harness.envs import short_name

        parts = [short_name(self.env), self.variant, *(f"{key}={value}" for key, value in self.labels.items())]
        parts += [f"n_envs={self.n_envs}", f"seed={self.seed}"]
        text = "__".join(str(part) for part in parts)
        return "".join(char if char.isalnum() or char in "_=.-" else "-" for char in text)

    @property
    def spec_hash(self) -> str:
        """A hash of everything that changes the run's results: a finished run is redone when its settings change."""
        content = asdict(self)
        content.pop("aliases")
        if not content["diagnostics"]:
            content.pop("diagnostics")  # the hash of the runs made before the diagnostics existed
        return hashlib.sha1(json.dumps(content, sort_keys=True, default=repr).encode()).hexdigest()[:12]

    @property
    def recorded_hashes(self) -> tuple[str, ...]:
        """
        The ``spec_hash`` values that a finished run of these settings may carry: this one, and for PPG the one of its
        runs made while PPG took ``ewma_decay`` (they recorded ``ewma_decay=None``: no EWMA, as PPG has now).
        """
        if self.algo == "ppg" and "ewma_decay" not in self.hyperparams:
            return self.spec_hash, replace(self, hyperparams={**self.hyperparams, "ewma_decay": None}).spec_hash
        return (self.spec_hash,)

    @property
    def relative_cost(self) -> float:
        """An estimate of the run's compute, in arbitrary units (see ``_ALGO_COST``)."""
        return self.total_timesteps * (1.0 + 5.5 / self.n_envs) * _ALGO_COST[self.algo]

    def columns(self) -> dict[str, Any]:
        """The settings written in every CSV row of the run."""
        return {
            "experiment": self.experiment,
            "run_id": self.run_id,
            "env": self.env,
            "algo": self.algo,
            "variant": self.variant,
            "n_envs": self.n_envs,
            "seed": self.seed,
            **self.labels,
        }


# ----------------------------------------------------------------------------------------------------------------------
# CSV files


def append_csv(path: Path, row: dict[str, Any], fieldnames: Sequence[str] | None = None) -> None:
    """
    Append ``row`` to the CSV file ``path``, flushed at once. A new file gets the header ``fieldnames`` (default: the
    row's keys); an existing file keeps its header (keys it lacks are dropped, missing ones left empty).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    if not new:
        with open(path, newline="") as file:
            fieldnames = next(csv.reader(file))
    with open(path, "a", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(fieldnames or row), extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow(row)


def read_csv(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV file (empty when it does not exist)."""
    if not path.exists():
        return []
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


class Manifest:
    """
    The finished runs of an experiment at a preset, the records of its ``runs.jsonl``
    (:mod:`benchmarks.harness.results_store`). A run is finished when its last record has the ``spec_hash`` of its
    current settings.

    :param path: the ``runs.jsonl`` file
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records: dict[str, dict[str, Any]] = {
            run_id: record
            for run_id, record in results_store.latest(path).items()
            if record.get("status", "finished") == "finished"
        }

    @property
    def rows(self) -> dict[str, dict[str, Any]]:
        """The finished runs' fields (:data:`MANIFEST_FIELDS`, without the evaluations), by run id."""
        return {
            run_id: {key: value for key, value in record.items() if key != "evaluations"}
            for run_id, record in self.records.items()
        }

    def is_done(self, spec: RunSpec) -> bool:
        """Whether the run of ``spec`` finished with its settings (:attr:`RunSpec.recorded_hashes`)."""
        record = self.records.get(spec.run_id)
        return record is not None and record.get("spec_hash") in spec.recorded_hashes

    def add(self, record: dict[str, Any]) -> None:
        """Record a finished run: the fields of :data:`MANIFEST_FIELDS` and its ``evaluations``
        (:func:`benchmarks.harness.results_store.table`)."""
        record = {"status": "finished", **record}
        results_store.append(self.path, record)
        self.records[str(record["run_id"])] = record

    def evaluations(self, run_id: str) -> list[dict[str, Any]]:
        """The evaluation rows of a finished run, NaN where the file has ``null``."""
        data = self.records[run_id].get("evaluations") or {"columns": [], "rows": []}
        return [dict(zip(data["columns"], row)) for row in results_store.table_rows(data)]


# ----------------------------------------------------------------------------------------------------------------------
# scheduling


def select_chunk(specs: Sequence[RunSpec], chunk: str | None) -> list[RunSpec]:
    """
    The ``K``-th of ``N`` slices of ``specs`` for ``chunk="K/N"`` (every ``N``-th run, starting at the ``K``-th, in
    the order of the experiment's list), all of them for ``None``.
    """
    if chunk is None:
        return list(specs)
    try:
        index, count = (int(part) for part in chunk.split("/"))
    except ValueError:
        raise ValueError(f"--chunk must be K/N with 1 <= K <= N, got {chunk!r}") from None
    if not 1 <= index <= count:
        raise ValueError(f"--chunk must be K/N with 1 <= K <= N, got {chunk!r}")
    return [spec for position, spec in enumerate(specs) if position % count == index - 1]


# ----------------------------------------------------------------------------------------------------------------------
# command line


@dataclass
class Experiment:
    """
    A learning experiment: its runs at each preset, and its report. Its command line is
    :func:`benchmarks.harness.cli.main`.

    :param name: directory name under the results, e.g. ``"ewma_comparison"``
    :param title: heading of ``results.md``
    :param description: what it measures (``--help`` and ``results.md``)
    :param build_specs: ``(preset, overrides) -> runs``; the overrides are ``timesteps``, ``seeds``, ``envs``,
        ``device`` and ``eval_episodes`` (None: the preset's); the presets are those of the preset table
        (:data:`benchmarks.harness.settings.PRESETS`) that name the experiment
    :param report: ``(evaluations, specs, out_dir) -> markdown``: writes the figures, returns the tables
    :param module: the module whose command runs it (default: ``benchmarks.learning.<name>``)
    """

    name: str
    title: str
    description: str
    build_specs: Callable[[str, dict[str, Any]], list[RunSpec]]
    report: Callable[[Any, list[RunSpec], Path], str]
    module: str | None = None


def base_parser(description: str, presets: Sequence[str]) -> argparse.ArgumentParser:
    """The options every benchmark takes: ``--preset`` (one of ``presets``; default ``cpu``, else the first) and ``--out``."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = "cpu" if "cpu" in presets else presets[0]
    parser.add_argument("--preset", choices=presets, default=default, help=f"scale of the experiment (default: {default})")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="results root (default: benchmarks/results)")
    return parser


MALLOC_CHOICES = ("keep-freed", "default")


def add_malloc_argument(parser: argparse.ArgumentParser) -> None:
    """``--malloc``: glibc's allocator as ``python -m sb3_ewma.train`` sets it (keep-freed) or as it comes (default)."""
    parser.add_argument(
        "--malloc",
        choices=MALLOC_CHOICES,
        default="keep-freed",
        help="keep-freed (default, as python -m sb3_ewma.train): sb3_ewma.allocator.keep_freed_memory() for the "
        "whole process; default: glibc's own thresholds (freed activations go back to the system and fault in again)",
    )


def apply_malloc(choice: str) -> None:
    """
    Set the process's allocator for ``--malloc`` (once, before anything is measured). Results record the choice, so a
    ``keep-freed`` that cannot be applied (the C library is not glibc) is an error rather than a mislabeled row.
    """
    if choice not in MALLOC_CHOICES:
        raise ValueError(f"malloc must be one of {MALLOC_CHOICES}, got {choice!r}")
    from sb3_ewma.allocator import keep_freed_memory

    if choice == "keep-freed" and not keep_freed_memory():
        raise SystemExit("--malloc keep-freed needs glibc's malloc (Linux); run with --malloc default on this system")
