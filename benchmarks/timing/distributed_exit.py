"""
Clean exits of two-rank jobs: how often a torchrun job of 2 ranks (gloo, CPU) fails at exit when one rank leaves while
the other is still busy (rank 0 sleeps 0.5 s after ``learn``, as when it saves), with the process group that the
library creates and destroys at exit, and with a plain ``init_process_group`` that leaves the group alive at exit
(``--plain-init``, the library before it destroyed its group)::

    python -m benchmarks.timing.distributed_exit --runs 60
    python -m benchmarks.timing.distributed_exit --runs 60 --plain-init

A failed exit shows as "terminate called without an active exception" and a non-zero exit status of the job.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def worker(plain_init: bool) -> None:
    import torch as th
    import torch.distributed as dist

    from sb3_ewma import PPO_EWMA
    from sb3_ewma.common import distributed

    th.set_num_threads(1)
    if plain_init:

        def init_process_group(device: th.device) -> None:
            if not dist.is_initialized():
                dist.init_process_group("gloo")

        distributed.init_process_group = init_process_group
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, n_epochs=2, seed=0, device="cpu")
    model.learn(512)
    if model.rank == 0:
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> dict[str, int]:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--plain-init", action="store_true", help="leave the process group alive at exit")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.plain_init)
        return {}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    command += ["-m", "benchmarks.timing.distributed_exit", "--worker", *(["--plain-init"] if args.plain_init else [])]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    counts = {"runs": 0, "failed": 0, "aborted": 0}
    for _ in range(args.runs):
        result = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
        counts["runs"] += 1
        counts["failed"] += result.returncode != 0
        counts["aborted"] += "terminate called without an active exception" in result.stdout + result.stderr
    label = "plain init_process_group" if args.plain_init else "the library's process group"
    print(f"{label}: {counts['failed']} of {counts['runs']} jobs failed, {counts['aborted']} with the abort at exit")
    return counts


if __name__ == "__main__":
    main()
