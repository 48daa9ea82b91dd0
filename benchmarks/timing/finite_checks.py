"""
What the checks for non-finite numbers (``sb3_ewma.common.finite``: each rollout's observations and rewards, the
schedules, every minibatch's gradient norm) cost on an MLP run: ``learn`` of PPO_EWMA on CartPole-v1 with
rl-zoo3's tuned PPO shapes (8 environments x 32 steps, minibatch 256, MLP [64, 64]), with the checks and with them
replaced by no-ops, alternating in one process, one torch thread; CPU time, medians over repeats::

    python -m benchmarks.timing.finite_checks            # results under benchmarks/results/finite_checks/cpu
"""

import argparse
import contextlib
import json
import platform
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch as th

import sb3_ewma.common.decoupled.algorithm as algorithm_module
from benchmarks.harness.common import RESULTS_DIR
from sb3_ewma import PPO_EWMA

SETTINGS: dict[str, Any] = dict(
    n_steps=32, batch_size=256, n_epochs=20, gae_lambda=0.8, gamma=0.98, learning_rate=1e-3, ent_coef=0.0, device="cpu"
)
N_ENVS = 8


@contextlib.contextmanager
def checks_off() -> Iterator[None]:
    """The model's module with the rollout's and the gradient's checks replaced by no-ops."""

    names = ("check_finite_rollout", "check_finite_gradient_norm")
    saved = {name: getattr(algorithm_module, name) for name in names}
    for name in names:
        setattr(algorithm_module, name, lambda *args, **kwargs: None)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(algorithm_module, name, value)


def cpu_seconds_of_learn(timesteps: int, checked: bool, seed: int) -> float:
    from stable_baselines3.common.env_util import make_vec_env

    model = PPO_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=seed), seed=seed, **SETTINGS)
    context = contextlib.nullcontext() if checked else checks_off()
    with context:
        start = time.process_time()
        model.learn(timesteps)
        return time.process_time() - start


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "finite_checks" / "cpu")
    args = parser.parse_args(argv)
    th.set_num_threads(1)
    cpu_seconds_of_learn(2_000, True, 0)  # warm-up: imports, first allocations
    seconds: dict[str, list[float]] = {"checked": [], "unchecked": []}
    for repeat in range(args.repeats):
        order = ("checked", "unchecked") if repeat % 2 == 0 else ("unchecked", "checked")
        for name in order:
            seconds[name].append(cpu_seconds_of_learn(args.timesteps, name == "checked", repeat))
    ratios = [checked / unchecked for checked, unchecked in zip(seconds["checked"], seconds["unchecked"])]
    result = {
        "command": f"python -m benchmarks.timing.finite_checks --timesteps {args.timesteps} --repeats {args.repeats}",
        "machine": f"{platform.machine()}, {platform.processor() or 'unknown CPU'}, torch {th.__version__}, one thread",
        "settings": {**SETTINGS, "n_envs": N_ENVS, "env": "CartPole-v1", "timesteps": args.timesteps},
        "cpu_seconds": seconds,
        "median_checked_s": statistics.median(seconds["checked"]),
        "median_unchecked_s": statistics.median(seconds["unchecked"]),
        "median_ratio_checked_over_unchecked": statistics.median(ratios),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({key: value for key, value in result.items() if key != "cpu_seconds"}, indent=2))
    return result


if __name__ == "__main__":
    main()
