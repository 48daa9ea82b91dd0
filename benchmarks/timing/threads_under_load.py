"""
Torch threads on a busy CPU: the README's main job (``python -m sb3_ewma.train --algo ppo_ewma --env CartPole-v1``)
with torch's default thread pool (``--num-threads -1``) and with the entry point's default (one thread for an MLP
policy), each on an idle machine and with two competing trainings that use torch's default threads, as when several
seeds run at once. The four runs alternate in one invocation, ``--repeats`` times; the table gives the median::

    python -m benchmarks.timing.threads_under_load --timesteps 20000 --repeats 2

Steps per second are the training's own (SB3's ``time/fps`` of the last log line), so process start-up is left out.
Results: ``benchmarks/results/threads_under_load/cpu/results.json`` and ``results.md``.
"""

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results" / "threads_under_load" / "cpu"
CONFIGURATIONS = {"torch default threads (--num-threads -1)": ["--num-threads", "-1"], "entry point default": []}
FPS = re.compile(r"\|\s+fps\s+\|\s+(\d+)")


def _environment() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    return env


def _train_command(timesteps: int, log_folder: str, extra: list[str]) -> list[str]:
    return [
        *(sys.executable, "-m", "sb3_ewma.train", "--algo", "ppo_ewma", "--env", "CartPole-v1"),
        *("-n", str(timesteps), "--eval-freq", "-1", "-f", log_folder, "--seed", "0", "--verbose", "1"),
        *extra,
    ]


def _start_competitors(count: int, log_folder: str) -> list[subprocess.Popen]:
    # long trainings with torch's default threads, stopped when the measurement ends
    command = _train_command(10_000_000, log_folder, ["--num-threads", "-1"])
    return [
        subprocess.Popen(command, env=_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(count)
    ]


def measure(timesteps: int, extra: list[str], competitors: int) -> dict[str, float]:
    """One run of the main job: its steps per second (SB3's fps) and wall-clock seconds."""
    with tempfile.TemporaryDirectory() as log_folder:
        others = _start_competitors(competitors, log_folder)
        try:
            time.sleep(5.0 if others else 0.0)  # the competitors are training before the measurement starts
            start = time.perf_counter()
            result = subprocess.run(
                _train_command(timesteps, log_folder, extra), env=_environment(), capture_output=True, text=True, check=False
            )
            wall = time.perf_counter() - start
        finally:
            for process in others:
                process.kill()
                process.wait()
    if result.returncode != 0:
        raise RuntimeError(f"the main job failed:\n{result.stderr[-3000:]}")
    fps = FPS.findall(result.stdout)
    return {"steps_per_second": float(fps[-1]), "wall_seconds": wall}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--competitors", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    runs: dict[str, list[dict[str, float]]] = {}
    for repeat in range(args.repeats):
        for load in ("idle", f"{args.competitors} competitors"):
            for name, extra in CONFIGURATIONS.items():
                outcome = measure(args.timesteps, extra, 0 if load == "idle" else args.competitors)
                runs.setdefault(f"{name} | {load}", []).append(outcome)
                print(f"repeat {repeat}: {name}, {load}: {outcome['steps_per_second']:.0f} steps/s", flush=True)
    medians = {key: statistics.median(run["steps_per_second"] for run in values) for key, values in runs.items()}
    report = {
        "command": "python -m benchmarks.timing.threads_under_load " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "cpu_model": _cpu_model(),
        "timesteps": args.timesteps,
        "runs": runs,
        "median_steps_per_second": medians,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=1))
    lines = [
        f"`{report['command']}` on {report['cpu_model']} ({os.cpu_count()} cores); median of {args.repeats} runs.",
        "",
        "| configuration | idle (steps/s) | under load (steps/s) | slowdown under load |",
        "|---|---|---|---|",
    ]
    for name in CONFIGURATIONS:
        idle, loaded = medians[f"{name} | idle"], medians[f"{name} | {args.competitors} competitors"]
        lines.append(f"| {name} | {idle:.0f} | {loaded:.0f} | {idle / loaded:.1f}x |")
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return report


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    main()
