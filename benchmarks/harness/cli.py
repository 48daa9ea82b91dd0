"""
The command line of the learning experiments: run (or resume) an experiment's runs in worker processes, then write its
report. Each experiment module (``benchmarks.learning.ewma_comparison``, ...) calls :func:`main` with its :class:`Experiment`.

Dependencies go one way: this module uses :mod:`benchmarks.harness.common` (run specifications, finished runs, CSV files),
:mod:`benchmarks.harness.runner` (one run) and :mod:`benchmarks.harness.report` (plots and tables); none of them imports it.
"""

import argparse
import multiprocessing
import os
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import runner
from benchmarks.harness.common import Experiment, Manifest, RunSpec, base_parser, clock, select_chunk
from benchmarks.harness.report import write_report
from benchmarks.harness.results_store import RUNS_FILE
from benchmarks.harness.settings import presets_of


def run_specs(
    specs: Sequence[RunSpec],
    out_dir: Path,
    workers: int = 1,
    deadline: float | None = None,
    verbose: bool = False,
) -> dict[str, int]:
    """
    Run the unfinished ``specs`` (longest first), ``workers`` at a time in separate processes (in this process when
    ``workers == 1``), appending each finished run's record to ``runs.jsonl`` and printing progress.

    :return: counts of runs by status (``"done before"``, ``"finished"``, ``"paused"``, ``"skipped"``, ``"failed"``)
    """
    manifest = Manifest(out_dir / RUNS_FILE)
    pending = sorted(
        (spec for spec in specs if not manifest.is_done(spec)),
        key=lambda spec: spec.relative_cost,
        reverse=True,
    )
    counts = {"done before": len(specs) - len(pending), "finished": 0, "paused": 0, "skipped": 0, "failed": 0}
    print(f"{len(specs)} runs: {counts['done before']} already finished, {len(pending)} to run with {workers} worker(s)")
    total_cost = sum(spec.relative_cost for spec in pending) or 1.0
    done_cost = 0.0
    start = time.time()
    jobs = [(spec, out_dir, deadline, verbose) for spec in pending]
    for outcome in _outcomes(jobs, workers):
        spec = outcome["spec"]
        counts[outcome["status"]] += 1
        done_cost += spec.relative_cost
        if outcome["status"] == "finished":
            manifest.add(outcome["record"])
            row = outcome["record"]
            speed = f"{row['wall_time']:.0f} s ({row['steps_per_second']:.0f} steps/s)"
            detail = f"{row['timesteps']} steps in {speed}, final return {row['final_return']}"
        elif outcome["status"] == "failed":
            detail = outcome["error"]
        else:
            detail = f"at {outcome.get('timesteps', 0)} steps"
        elapsed = time.time() - start
        eta = elapsed * (total_cost - done_cost) / done_cost
        position = f"[{sum(counts.values()) - counts['done before']}/{len(pending)}]"
        times = f"elapsed {elapsed / 60:.1f} min, about {eta / 60:.1f} min left"
        print(f"{position} {outcome['status']} {spec.run_id}: {detail}; {times}", flush=True)
    return counts


def _outcomes(jobs: list[tuple[RunSpec, Path, float | None, bool]], workers: int) -> Iterable[dict[str, Any]]:
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            yield runner.execute_safely(*job)
        return
    # spawn: no inherited torch thread pools; each worker then runs its runs one after the other
    with multiprocessing.get_context("spawn").Pool(min(workers, len(jobs))) as pool:
        yield from pool.imap_unordered(runner.execute_star, jobs)


# ----------------------------------------------------------------------------------------------------------------------
# command line


def experiment_parser(experiment: Experiment) -> argparse.ArgumentParser:
    """The command line of a learning experiment."""
    parser = base_parser(experiment.description, presets=presets_of(experiment.name))
    parser.add_argument("--workers", type=int, default=None, help="parallel runs (default: cores / threads per run)")
    parser.add_argument("--chunk", default=None, help="run only the K-th of N slices of the runs, e.g. 2/4")
    parser.add_argument("--max-minutes", type=float, default=None, help="pause (checkpoint) runs to stop within this time")
    parser.add_argument("--list", action="store_true", help="list the runs and their status, run nothing")
    parser.add_argument("--report-only", action="store_true", help="only rewrite the plots and tables")
    parser.add_argument("--verbose", action="store_true", help="print every evaluation")
    overrides = parser.add_argument_group("overrides of the preset")
    overrides.add_argument("--timesteps", type=int, default=None, help="environment steps per run")
    overrides.add_argument("--seeds", type=int, default=None, help="number of seeds")
    overrides.add_argument("--eval-every", type=int, default=None, help="environment steps between evaluations")
    overrides.add_argument("--envs", default=None, help="comma-separated environment ids")
    overrides.add_argument("--device", default=None, help="torch device")
    overrides.add_argument("--eval-episodes", type=int, default=None, help="evaluate on a separate env (0: training episodes)")
    overrides.add_argument("--algos", default=None, help="comma-separated: only these algorithms' runs (e.g. ppo,ppo_ewma)")
    return parser


def select_algorithms(specs: Sequence[RunSpec], algos: str) -> list[RunSpec]:
    """The runs of the comma-separated ``algos`` (each must have runs in ``specs``), in their order."""
    wanted = [name.strip() for name in algos.split(",") if name.strip()]
    known = sorted({spec.algo for spec in specs})
    unknown = [name for name in wanted if name not in known]
    if not wanted or unknown:
        raise SystemExit(f"--algos {algos!r}: the runs of this experiment are of {', '.join(known)}")
    return [spec for spec in specs if spec.algo in wanted]


def default_workers(specs: Sequence[RunSpec]) -> int:
    """Cores divided by the threads of one run."""
    threads = max((spec.threads for spec in specs), default=1)
    return max(1, (os.cpu_count() or 1) // threads)


def main(experiment: Experiment, argv: Sequence[str] | None = None) -> Path:
    """
    Command line entry point of a learning experiment: run (or resume) its runs, then write its report.

    :return: the results directory ``<out>/<experiment>/<preset>``
    """
    args = experiment_parser(experiment).parse_args(argv)
    overrides = {key: getattr(args, key) for key in ("timesteps", "seeds", "eval_every", "envs", "device", "eval_episodes")}
    if overrides["envs"] is not None:
        overrides["envs"] = tuple(env.strip() for env in overrides["envs"].split(",") if env.strip())
    specs = experiment.build_specs(args.preset, overrides)
    if args.algos is not None:
        specs = select_algorithms(specs, args.algos)
    out_dir = Path(args.out) / experiment.name / args.preset
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.list:
        manifest = Manifest(out_dir / RUNS_FILE)
        total = sum(spec.relative_cost for spec in specs)
        for spec in specs:
            status = "done" if manifest.is_done(spec) else "todo"
            print(f"{status}  {spec.run_id}  {spec.algo}  {spec.total_timesteps} steps  cost {spec.relative_cost / total:.1%}")
        print(f"{len(specs)} runs, {sum(spec.total_timesteps for spec in specs)} environment steps in all")
        return out_dir
    if not args.report_only:
        workers = args.workers or default_workers(specs)
        deadline = clock() + 60 * args.max_minutes if args.max_minutes else None
        counts = run_specs(select_chunk(specs, args.chunk), out_dir, workers, deadline, args.verbose)
        if counts["paused"] or counts["skipped"]:
            print("deadline reached: run the same command again to continue")
        if counts["failed"]:
            print(f"{counts['failed']} run(s) failed (see above); the others are reported")
    arguments = list(sys.argv[1:] if argv is None else argv)
    write_report(experiment, specs, out_dir, command=" ".join(["python -m", experiment_module(experiment), *arguments]))
    return out_dir


def experiment_module(experiment: Experiment) -> str:
    """The module that runs ``experiment``, e.g. ``benchmarks.learning.ewma_comparison``."""
    return experiment.module or f"benchmarks.learning.{experiment.name}"
