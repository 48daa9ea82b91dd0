"""
Faults, measured: a process killed with SIGKILL in the middle of training (one rank of a 2-rank torchrun job, or the
collector process of ``async_rollouts="process"``) must end the job with a clear error within 60 s, with no hang and
no orphan process, and a checkpoint written before the crash must load and continue.

The tests (test_faults.py) run each fault once; this module's command line runs them several times and prints the
time to exit and the processes left behind::

    python tests/faults.py --runs 5
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DISTRIBUTED_SCENARIOS = Path(__file__).with_name("distributed_scenarios.py")


def environment() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }


def is_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not reaped, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def children(pid: int) -> list[int]:
    """The live child processes of ``pid``."""
    result = subprocess.run(["ps", "--ppid", str(pid), "-o", "pid="], capture_output=True, text=True, check=False)
    return [int(line) for line in result.stdout.split() if is_alive(int(line))]


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, process: subprocess.Popen) -> None:
    """Wait until ``predicate()``; a ``RuntimeError`` with the output if ``process`` ends first."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if process.poll() is not None:
            raise RuntimeError(f"the job ended before {what}:\n{process.communicate()[0][-3000:]}")
        if time.monotonic() > deadline:
            process.kill()
            raise TimeoutError(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(0.2)


def checkpoints(out_dir: Path) -> list[Path]:
    return sorted((out_dir / "checkpoints").glob("*.zip"), key=lambda path: path.stat().st_mtime)


@dataclass
class FaultOutcome:
    returncode: int
    output: str
    seconds_to_exit: float
    orphans: list[int]
    checkpoint: Path


def _kill_and_wait(process: subprocess.Popen, victim: int, watched: list[int], out_dir: Path) -> FaultOutcome:
    os.kill(victim, signal.SIGKILL)
    start = time.monotonic()
    try:
        output, _ = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
    seconds = time.monotonic() - start
    time.sleep(0.5)
    orphans = [pid for pid in watched if is_alive(pid)]
    for pid in orphans:  # leave nothing behind, whatever the outcome
        os.kill(pid, signal.SIGKILL)
    return FaultOutcome(process.returncode, output, seconds, orphans, checkpoints(out_dir)[-1])


def kill_one_rank(out_dir: Path) -> FaultOutcome:
    """A 2-rank torchrun job training with checkpoints; rank 1 is killed once a checkpoint exists."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    command += [str(DISTRIBUTED_SCENARIOS), "long_learn", str(out_dir)]
    process = subprocess.Popen(command, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pid_files = [out_dir / "pid_0", out_dir / "pid_1"]
    wait_for(lambda: all(path.exists() for path in pid_files) and len(checkpoints(out_dir)) >= 2, 180, "a checkpoint", process)
    ranks = [int(path.read_text()) for path in pid_files]
    return _kill_and_wait(process, ranks[1], ranks, out_dir)


COLLECTOR_SCRIPT = """
import sys
from sb3_ewma import PPO_EWMA  # first: no legacy Gym banner (see the docs' performance page)
from stable_baselines3.common.callbacks import CheckpointCallback

model = PPO_EWMA(
    "MlpPolicy", "CartPole-v1", n_steps=64, batch_size=64, n_epochs=1, async_rollouts="process",
    policy_kwargs={"net_arch": [16]}, device="cpu",
)
model.learn(10_000_000, callback=CheckpointCallback(64, sys.argv[1] + "/checkpoints"))
"""


def kill_the_collector(out_dir: Path) -> FaultOutcome:
    """Training with the collector process and checkpoints; the collector is killed once a checkpoint exists."""
    command = [sys.executable, "-c", COLLECTOR_SCRIPT, str(out_dir)]
    process = subprocess.Popen(command, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_for(lambda: len(checkpoints(out_dir)) >= 2 and bool(children(process.pid)), 180, "a checkpoint", process)
    (collector,) = children(process.pid)
    return _kill_and_wait(process, collector, [process.pid, collector], out_dir)


def main(argv: list[str] | None = None) -> None:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--faults", nargs="+", choices=("rank", "collector"), default=["rank", "collector"])
    args = parser.parse_args(argv)
    faults = {
        "rank": ("kill -9 rank 1 of 2 (torchrun, gloo)", kill_one_rank),
        "collector": ("kill -9 the collector", kill_the_collector),
    }
    for name, fault in (faults[key] for key in args.faults):
        seconds, orphans, clean = [], 0, 0
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as folder:
                outcome = fault(Path(folder))
            seconds.append(outcome.seconds_to_exit)
            orphans += len(outcome.orphans)
            clean += int(outcome.returncode != 0)
        print(
            f"{name}: {args.runs} runs, non-zero exit {clean}/{args.runs}, time to exit "
            f"min {min(seconds):.1f} s / max {max(seconds):.1f} s, orphan processes {orphans}",
            flush=True,
        )


if __name__ == "__main__":
    main()
