"""
PPO_EWMA's ``train()`` against its floor: SB3's PPO and PPO_EWMA (``ewma_decay="auto"``) on the same data shape,
their rollout buffers filled once, ``train()`` timed alternately (PPO, PPO_EWMA, PPO, ...), medians. The floor is
what the method adds to PPO: one no-grad forward pass of the proximal policy per minibatch, timed in the same run as
``model.proximal.log_prob`` (the pass ``train()`` makes) over the minibatches of one ``train()`` (all epochs)::

    floor = 1 + (proximal passes of one train()) / (PPO's train())
    gap = PPO_EWMA / PPO - floor

Each call is timed in CPU time (user + system, from ``getrusage``; one torch thread, so the work of the process) and
in wall-clock time: on a machine shared with other jobs the CPU time is the steadier of the two. The minor page faults
of each call are counted too: with glibc's default thresholds (``--malloc default``) freed activations go back to the
system and fault in again (see :mod:`sb3_ewma.allocator`).

Observations are 64x64x3 uint8 frames of SB3's ``FakeImageEnv`` (6 discrete actions); networks: ``nature`` is SB3's
``CnnPolicy`` (NatureCNN), ``impala`` the IMPALA CNN of :mod:`sb3_ewma.common.torch_layers`. No environment steps
are timed.

    python -m benchmarks.timing.train_cost --repeats 9                   # NatureCNN, 8 envs x 128 steps, minibatch 256
    python -m benchmarks.timing.train_cost --repeats 9 --malloc default  # glibc's allocator as it comes
    python -m benchmarks.timing.train_cost --network impala --repeats 5
"""

import argparse
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch as th
from gymnasium import spaces

from benchmarks.harness.common import RESULTS_DIR, add_malloc_argument, apply_malloc
from benchmarks.harness.envs import policy_for

NAME = "train_cost"
VARIANTS = ("ppo", "ppo_ewma", "proximal_passes")


def build(algo: str, network: str, n_envs: int, n_steps: int, batch_size: int, n_epochs: int) -> Any:
    """A model on 64x64x3 fake frames with one iteration learned: its buffer filled, one warm-up ``train()`` done."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.envs import FakeImageEnv

    from sb3_ewma import PPO_EWMA

    env = make_vec_env(FakeImageEnv, n_envs=n_envs, seed=0, env_kwargs=dict(screen_height=64, screen_width=64, n_channels=3))
    policy, policy_kwargs = policy_for(network)
    settings: dict[str, Any] = dict(n_steps=n_steps, batch_size=batch_size, n_epochs=n_epochs, seed=0, device="cpu")
    model = (PPO if algo == "ppo" else PPO_EWMA)(policy, env, policy_kwargs=policy_kwargs, **settings)
    model.learn(n_envs * n_steps)
    return model


def proximal_passes(model: Any) -> Any:
    """The proximal passes of one ``train()`` of ``model`` (PPO_EWMA): a function that runs them, minibatches ready."""
    minibatches = []
    for _ in range(model.n_epochs):
        for rollout_data in model.rollout_buffer.get(model.batch_size):
            actions = rollout_data.actions
            if isinstance(model.action_space, spaces.Discrete):
                actions = rollout_data.actions.long().flatten()
            minibatches.append((rollout_data, actions))

    def run() -> None:
        for rollout_data, actions in minibatches:
            model.proximal.log_prob(rollout_data, actions, rollout_data.old_log_prob)

    return run


def measure(network: str, n_envs: int, n_steps: int, batch_size: int, n_epochs: int, repeats: int) -> dict[str, Any]:
    """Median seconds of each variant, the ratio PPO_EWMA / PPO, the floor and the gap (and the per-repeat ratios)."""
    ppo = build("ppo", network, n_envs, n_steps, batch_size, n_epochs)
    ppo_ewma = build("ppo_ewma", network, n_envs, n_steps, batch_size, n_epochs)
    timed = {"ppo": ppo.train, "ppo_ewma": ppo_ewma.train, "proximal_passes": proximal_passes(ppo_ewma)}
    seconds: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    wall: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    faults: dict[str, list[int]] = {variant: [] for variant in VARIANTS}
    for repeat in range(repeats):
        for variant in VARIANTS[repeat % 3 :] + VARIANTS[: repeat % 3]:
            before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            timed[variant]()
            after = resource.getrusage(resource.RUSAGE_SELF)
            wall[variant].append(time.perf_counter() - start)
            seconds[variant].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            faults[variant].append(after.ru_minflt - before.ru_minflt)
    results: dict[str, Any] = {"seconds": {variant: statistics.median(values) for variant, values in seconds.items()}}
    results.update(ratios_of(results["seconds"]))
    results["ratios"] = [ewma / base for ewma, base in zip(seconds["ppo_ewma"], seconds["ppo"])]
    results["wall_seconds"] = {variant: statistics.median(values) for variant, values in wall.items()}
    results["wall"] = ratios_of(results["wall_seconds"])
    results["faults"] = {variant: statistics.median(values) for variant, values in faults.items()}
    return results


def ratios_of(medians: dict[str, float]) -> dict[str, float]:
    """PPO_EWMA / PPO, the floor ``1 + proximal passes / PPO`` and the gap ``ratio - floor``."""
    ratio = medians["ppo_ewma"] / medians["ppo"]
    floor = 1.0 + medians["proximal_passes"] / medians["ppo"]
    return {"ratio": ratio, "floor": floor, "gap": ratio - floor}


def report(results: dict[str, Any]) -> str:
    lines = [
        "| clock | SB3 PPO train (s) | PPO_EWMA train (s) | proximal passes (s) | PPO_EWMA / PPO | floor | gap |",
        "|---|---|---|---|---|---|---|",
    ]
    for clock, seconds, ratios in (
        ("CPU time", results["seconds"], results),
        ("wall clock", results["wall_seconds"], results["wall"]),
    ):
        lines.append(
            f"| {clock} | {seconds['ppo']:.4f} | {seconds['ppo_ewma']:.4f} | {seconds['proximal_passes']:.4f} "
            f"| {ratios['ratio']:.3f} | {ratios['floor']:.3f} | {ratios['gap']:+.3f} |"
        )
    faults = " / ".join(f"{results['faults'][variant]:.0f}" for variant in VARIANTS)
    lines += [
        "",
        f"Per-repeat PPO_EWMA / PPO (CPU time): {', '.join(f'{ratio:.2f}' for ratio in results['ratios'])}; minor page "
        f"faults per call (PPO train / PPO_EWMA train / proximal passes), medians: {faults}.",
    ]
    return "\n".join(lines)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--network", choices=("nature", "impala"), default="nature")
    parser.add_argument("--n-envs", type=int, default=8)
    parser.add_argument("--n-steps", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--n-epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=7, help="alternations of the three timings")
    parser.add_argument("--label", default="cpu", help="results go under <out>/train_cost/<network>-<malloc>-<label>/")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    add_malloc_argument(parser)
    args = parser.parse_args(argv)
    th.set_num_threads(1)
    apply_malloc(args.malloc)
    results = measure(args.network, args.n_envs, args.n_steps, args.batch_size, args.n_epochs, args.repeats)
    table = report(results)
    print(table)
    out_dir = args.out / NAME / f"{args.network}-{args.malloc}-{args.label}"
    out_dir.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python -m benchmarks.timing.train_cost", *(sys.argv[1:] if argv is None else argv)])
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    text = f"# PPO_EWMA's train() against its floor\n\n{(__doc__ or '').strip()}\n\n- command: `{command}`\n"
    text += f"- machine: {_cpu_model()}, {os.cpu_count()} cores, one torch thread; load average when written {load}\n"
    text += f"- written {time.strftime('%Y-%m-%d %H:%M')}; medians of {args.repeats} alternations; network {args.network}, "
    text += f"{args.n_envs} envs x {args.n_steps} steps, minibatch {args.batch_size}, {args.n_epochs} epochs; "
    text += f"malloc {args.malloc}\n\n"
    (out_dir / "results.md").write_text(text + table + "\n")
    return results


if __name__ == "__main__":
    main()
