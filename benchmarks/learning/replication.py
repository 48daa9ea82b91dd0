"""
The confirmatory replication on MinAtar's five games (``results/replication/minatar5/preregistration.md``): the
``minatar5`` presets of the EWMA comparison, the staleness experiment and the batch size-invariance experiment, run in
the pre-registered order under one deadline (each experiment's runs resume where they stopped), each experiment's own
report written as it goes.

    OMP_NUM_THREADS=1 python -m benchmarks.learning.replication --max-minutes 60   # repeat until "all finished"
"""

import argparse
import time
from collections.abc import Sequence

from benchmarks.harness import cli
from benchmarks.harness.common import RESULTS_DIR, Experiment, Manifest
from benchmarks.harness.results_store import RUNS_FILE
from benchmarks.learning import batch_size_invariance, ewma_comparison, staleness

PRESET = "minatar5"
ORDER: tuple[Experiment, ...] = (ewma_comparison.EXPERIMENT, staleness.EXPERIMENT, batch_size_invariance.EXPERIMENT)
"""The pre-registered order: the EWMA comparison, then staleness, then batch size-invariance."""


def unfinished(experiment: Experiment) -> int:
    """The number of the experiment's ``minatar5`` runs that have not finished."""
    specs = experiment.build_specs(PRESET, {})
    manifest = Manifest(RESULTS_DIR / experiment.name / PRESET / RUNS_FILE)
    return sum(not manifest.is_done(spec) for spec in specs)


def main(argv: Sequence[str] | None = None) -> None:
    """Run (or resume) the replication's runs in order, within ``--max-minutes``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-minutes", type=float, default=None, help="stop (checkpointing runs) within this time")
    parser.add_argument("--workers", type=int, default=1, help="parallel runs")
    args = parser.parse_args(argv)
    deadline = time.time() + 60 * args.max_minutes if args.max_minutes else None
    for experiment in ORDER:
        if not unfinished(experiment):
            print(f"{experiment.name}: all finished")
            continue
        left = None if deadline is None else (deadline - time.time()) / 60
        if left is not None and left < 1:
            break
        arguments = ["--preset", PRESET, "--workers", str(args.workers)]
        cli.main(experiment, [*arguments, *([] if left is None else ["--max-minutes", f"{left:.2f}"])])
    pending = {experiment.name: unfinished(experiment) for experiment in ORDER}
    if any(pending.values()):
        print(f"runs left: {pending}; run the same command again to continue")
    else:
        print("all finished")


if __name__ == "__main__":
    main()
