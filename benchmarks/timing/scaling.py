"""
Data-parallel scaling (torch.distributed, torchrun): steps per second and learning curves of 1 and 2 ranks.

Three configurations, each a ``torchrun --standalone --nproc-per-node W`` job run from here, alternating (A B C, B C
A, ...) so that a shared machine slows them alike, with one torch thread per rank:

- ``1x{N}``: one rank of N environments (the reference);
- ``2x{N/2}``: two ranks of N/2 environments (the same total, c = 1: the same global batch as the reference);
- ``2x{N}``: two ranks of N environments (the same per-rank settings: twice the data per iteration);
- ``2x{N} independent``: the control, two single-process runs of N environments started together, with no process
  group and no communication: what this machine gives two processes at all, the ceiling of ``2x{N}``'s efficiency.

Scaling efficiency = SPS(W) / (W x SPS(1)), SPS(1) that of ``1x{N}``; the time spent in collectives (gradient
all-reduce, advantage moments, per-iteration synchronization) per iteration is reported separately. Environment
steps are global (all ranks). Results: ``benchmarks/results/scaling/<preset>/runs.jsonl`` and ``summary.md``::

    python -m benchmarks.timing.scaling --preset smoke    # seconds
    python -m benchmarks.timing.scaling --preset cpu   # CartPole, PPO_EWMA, 8 envs, 3 repeats: about 3 minutes on 2 idle cores
    python -m benchmarks.timing.scaling --preset cnn      # Procgen starpilot + IMPALA CNN: compute-bound, about 5 minutes
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO / "benchmarks" / "results" / "scaling"
PRESETS: dict[str, dict[str, Any]] = {
    "smoke": dict(env="CartPole-v1", n_envs=4, n_steps=16, n_minibatches=2, n_epochs=2, timesteps=512, repeats=1),
    "cpu": dict(env="CartPole-v1", n_envs=8, n_steps=128, n_minibatches=4, n_epochs=4, timesteps=40_960, repeats=3),
    # compute-bound: Procgen starpilot (easy) with the IMPALA CNN, the paper's network
    "cnn": dict(
        env="procgen-starpilot-easy",
        network="impala",
        n_envs=8,
        n_steps=32,
        n_minibatches=4,
        n_epochs=1,
        timesteps=2_048,
        repeats=2,
        curves=False,  # 2,048 steps: throughput only
    ),
}


INDEPENDENT = " independent"
"""Suffix of the control configuration: W single-process runs at once instead of one job of W ranks."""


def configurations(n_envs: int) -> list[tuple[str, int, int]]:
    """(name, world size, environments per rank)."""
    return [
        (f"1x{n_envs}", 1, n_envs),
        (f"2x{n_envs // 2}", 2, n_envs // 2),
        (f"2x{n_envs}", 2, n_envs),
        (f"2x{n_envs}{INDEPENDENT}", 2, n_envs),
    ]


# ----------------------------------------------------------------------------------------------------------------------
# one rank of one job (run by torchrun)


def worker(settings: dict[str, Any], out_file: Path) -> None:
    import torch as th
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    from sb3_ewma import PPO_EWMA

    th.set_num_threads(1)

    class Curve(BaseCallback):
        """At the start of each rollout (the previous iteration's episodes gathered): global steps, mean return."""

        def __init__(self) -> None:
            super().__init__()
            self.points: list[tuple[int, float]] = []

        def _on_rollout_start(self) -> None:
            returns = [info["r"] for info in list(self.model.ep_info_buffer)[-20:]]
            if returns:
                self.points.append((self.num_timesteps, sum(returns) / len(returns)))

        def _on_step(self) -> bool:
            return True

    n_envs = settings["n_envs"]
    batch_size = settings["n_steps"] * n_envs // settings["n_minibatches"]
    network = settings.get("network", "mlp")
    if network == "mlp":
        policy, policy_kwargs, env = "MlpPolicy", {}, make_vec_env(settings["env"], n_envs=n_envs)
    else:
        from benchmarks.harness.envs import make_env, policy_for

        policy, policy_kwargs = policy_for(network)
        env = make_env(settings["env"], n_envs, seed=settings["seed"] * 1000 + int(os.environ.get("RANK", "0")) * n_envs)
    model = PPO_EWMA(
        policy,
        env,
        policy_kwargs=policy_kwargs,
        n_steps=settings["n_steps"],
        batch_size=batch_size,
        n_epochs=settings["n_epochs"],
        learning_rate=1e-3,
        seed=settings["seed"],
    )
    curve = Curve()
    start = time.perf_counter()
    model.learn(settings["timesteps"], callback=curve)
    elapsed = time.perf_counter() - start
    iterations = model.num_timesteps // (settings["n_steps"] * n_envs * model.world_size)
    context = getattr(model.data_parallel, "context", None)  # None on one process (SingleProcessTraining)
    communication = 0.0 if context is None else context.total_communication_time
    all_reduce_seconds = 0.0 if context is None else all_reduce_latency(sum(p.numel() for p in model.policy.parameters()))
    if model.rank == 0:
        record = dict(
            settings,
            world_size=model.world_size,
            timesteps_done=model.num_timesteps,
            seconds=elapsed,
            sps=model.num_timesteps / elapsed,
            iterations=iterations,
            communication_s_per_iteration=communication / max(iterations, 1),
            all_reduce_s=all_reduce_seconds,
            seconds_per_iteration=elapsed / max(iterations, 1),
            curve=curve.points,
        )
        out_file.write_text(json.dumps(record))


def all_reduce_latency(numel: int, calls: int = 100) -> float:
    """
    Median seconds of one all-reduce of ``numel`` float32 values (a gradient of the policy's size) on the default
    process group, the two ranks doing nothing else: the floor of a collective on this machine and backend.
    """
    import torch as th
    import torch.distributed as dist

    values = th.zeros(numel)
    dist.barrier()
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        dist.all_reduce(values)
        seconds.append(time.perf_counter() - start)
    dist.barrier()  # no rank leaves (and tears down its connections) while the other still finishes its last call
    return statistics.median(seconds)


# ----------------------------------------------------------------------------------------------------------------------
# the launcher


def run_job(name: str, world_size: int, settings: dict[str, Any], tmp_file: Path) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    if name.endswith(INDEPENDENT):
        return run_independent(name, world_size, settings, tmp_file, env)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(world_size)]
    command += ["-m", "benchmarks.timing.scaling", "--worker", json.dumps(settings), str(tmp_file)]
    subprocess.run(command, env=env, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    record = json.loads(tmp_file.read_text())
    record["config"] = name
    return record


def run_independent(name: str, count: int, settings: dict[str, Any], tmp_file: Path, env: dict[str, str]) -> dict[str, Any]:
    """
    The control: ``count`` single-process runs (no torchrun, no process group) started at once, each with its own
    seed. Its SPS is the sum of theirs, so its efficiency is what the machine gives ``count`` processes.
    """
    files = [tmp_file.with_suffix(f".{index}.json") for index in range(count)]
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.timing.scaling",
                "--worker",
                json.dumps({**settings, "seed": settings["seed"] * count + index}),
                str(file),
            ],
            env=env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
        )
        for index, file in enumerate(files)
    ]
    for process in processes:
        if process.wait() != 0:
            raise subprocess.CalledProcessError(process.returncode, process.args)
    records = [json.loads(file.read_text()) for file in files]
    for file in files:
        file.unlink()
    record = dict(records[0], config=name, world_size=count, communication_s_per_iteration=0.0)
    record["sps"] = sum(r["sps"] for r in records)
    record["timesteps_done"] = sum(r["timesteps_done"] for r in records)
    record["seconds"] = max(r["seconds"] for r in records)
    record["seconds_per_iteration"] = statistics.median(r["seconds_per_iteration"] for r in records)
    return record


def _all_reduce_ms(runs: list[dict[str, Any]]) -> str:
    """The median all-reduce latency of a configuration's runs ("-" without collectives or in older records)."""
    latencies = [r["all_reduce_s"] for r in runs if r.get("all_reduce_s")]
    return f"{1000 * statistics.median(latencies):.2f}" if latencies else "-"


def summarize(records: list[dict[str, Any]], preset: str, command: str) -> str:
    by_config: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_config.setdefault(record["config"], []).append(record)
    names = list(by_config)
    reference = statistics.median(r["sps"] for r in by_config[names[0]])
    lines = [
        f"# Data-parallel scaling ({preset} preset)",
        "",
        f"Command: `{command}`",
        "",
        "Medians over repeats; SPS = global environment steps per second of the whole `learn`; efficiency = "
        "SPS(W) / (W x SPS(1x)), with one torch thread per rank.",
        "",
        "| configuration | ranks | envs per rank | SPS | efficiency | s per iteration | communication s per iteration "
        "| one gradient all-reduce (ms) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        runs = by_config[name]
        sps = statistics.median(r["sps"] for r in runs)
        world = runs[0]["world_size"]
        lines.append(
            f"| {name} | {world} | {runs[0]['n_envs']} | {sps:.0f} | {sps / (world * reference):.2f} | "
            f"{statistics.median(r['seconds_per_iteration'] for r in runs):.3f} | "
            f"{statistics.median(r['communication_s_per_iteration'] for r in runs):.4f} | {_all_reduce_ms(runs)} |"
        )
    # the control's runs are single-process runs like the reference: no curves of their own
    names = [name for name in names if not name.endswith(INDEPENDENT)]
    curves = {name: by_config[name][0]["curve"] for name in names}
    if not PRESETS.get(preset, {}).get("curves", True) or not all(curves.values()):
        return "\n".join([*lines, "", "(runs too short for learning curves: throughput only)"]) + "\n"
    lines += ["", "Learning curves (mean return of the last 20 episodes, first repeat of each):", ""]
    lines += ["| global steps | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    end = max(point[0] for curve in curves.values() for point in curve)
    for step in range(end // 8, end + 1, end // 8):
        # each configuration's latest point at or before `step` (their iterations have different sizes)
        cells = []
        for name in names:
            before = [value for steps, value in curves[name] if steps <= step]
            cells.append(f"{before[-1]:.1f}" if before else "")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        worker(json.loads(argv[1]), Path(argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=PRESETS, default="cpu")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--report-only", action="store_true", help="rewrite summary.md from runs.jsonl, run nothing")
    args = parser.parse_args(argv)
    preset = PRESETS[args.preset]
    out_dir = args.out / args.preset
    out_dir.mkdir(parents=True, exist_ok=True)
    runs_file = out_dir / "runs.jsonl"
    if args.report_only:
        records = [json.loads(line) for line in runs_file.read_text().splitlines() if line.strip()]
        command = (out_dir / "summary.md").read_text().split("Command: `")[1].split("`")[0]
        (out_dir / "summary.md").write_text(summarize(records, args.preset, command))
        print((out_dir / "summary.md").read_text())
        return
    runs_file.write_text("")
    configs = configurations(preset["n_envs"])
    records = []
    for repeat in range(preset["repeats"]):
        # rotate the order of the configurations at each repeat
        for name, world_size, n_envs in configs[repeat % len(configs) :] + configs[: repeat % len(configs)]:
            settings = {key: preset[key] for key in ("env", "n_steps", "n_minibatches", "n_epochs", "timesteps")}
            settings["network"] = preset.get("network", "mlp")
            settings.update(n_envs=n_envs, seed=repeat)
            record = run_job(name, world_size, settings, out_dir / "last_run.json")
            record["repeat"] = repeat
            records.append(record)
            with open(runs_file, "a") as file:
                file.write(json.dumps(record) + "\n")
            print(f"{name} repeat {repeat}: {record['sps']:.0f} steps/s", flush=True)
    (out_dir / "last_run.json").unlink(missing_ok=True)
    command = "python -m benchmarks.timing.scaling " + " ".join(argv)
    (out_dir / "summary.md").write_text(summarize(records, args.preset, command.strip()))
    print((out_dir / "summary.md").read_text())


if __name__ == "__main__":
    main()
