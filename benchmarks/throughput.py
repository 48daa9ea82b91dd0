"""
Throughput of SB3's PPO against PPO_EWMA (and PPG, PPG_EWMA when available) on identical settings.

The algorithms run side by side in one process, alternating (A B C, B C A, ...), so that a shared, noisy machine
slows them alike; the report gives the median environment steps per second of each and its ratio to SB3's PPO,
for the whole ``learn`` (rollouts + training) and for training alone.

Default shapes are the paper's Procgen ones scaled to a CPU: 64x64x3 uint8 observations, the IMPALA CNN,
8 minibatches per epoch, 3 PPO epochs (1 policy epoch for PPG)::

    python -m benchmarks.throughput                       # Procgen starpilot (easy), 16 envs x 64 steps, CPU
    python -m benchmarks.throughput --preset gpu          # 64 envs x 256 steps, the paper's iteration, on CUDA
    python -m benchmarks.throughput --env fake-image      # random 64x64x3 frames (no procgen needed)
"""

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from sb3_ewma import PPO_EWMA
from sb3_ewma.common.torch_layers import ImpalaCNN

PRESETS: dict[str, dict[str, Any]] = {
    "smoke": dict(n_envs=4, n_steps=32, n_minibatches=4, iterations=1, repeats=1, features="nature"),
    "cpu": dict(n_envs=16, n_steps=64, n_minibatches=8, iterations=3, repeats=3, features="impala"),
    "gpu": dict(n_envs=64, n_steps=256, n_minibatches=8, iterations=3, repeats=3, features="impala"),
}


class RandomImageEnv(gym.Env):
    """64x64x3 uint8 random frames, 15 actions, episodes of 500 steps: an environment that costs nothing."""

    observation_space = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
    action_space = gym.spaces.Discrete(15)

    def __init__(self) -> None:
        self._rng = np.random.default_rng(0)
        self._t = 0
        self._frame = self._rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        self._t = 0
        return self._frame, {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._t += 1
        return self._frame, float(action == 0), False, self._t >= 500, {}


def make_env(env_name: str, n_envs: int, seed: int) -> VecEnv:
    if env_name == "fake-image":
        return DummyVecEnv([RandomImageEnv for _ in range(n_envs)])
    from sb3_ewma.envs import make_procgen_env

    game, _, mode = env_name.partition("-")
    return make_procgen_env(game, n_envs=n_envs, distribution_mode=mode or "easy", seed=seed)


def algorithm_builders(names: list[str]) -> dict[str, Callable[..., BaseAlgorithm]]:
    builders: dict[str, Callable[..., BaseAlgorithm]] = {}
    for name in names:
        if name == "ppo":
            builders[name] = PPO
        elif name == "ppo_ewma":
            builders[name] = PPO_EWMA
        elif name in ("ppg", "ppg_ewma"):
            from sb3_ewma.ppg_ewma import PPG, PPG_EWMA

            builders[name] = PPG if name == "ppg" else PPG_EWMA
        else:
            raise ValueError(f"unknown algorithm {name!r}: choose among ppo, ppo_ewma, ppg, ppg_ewma")
    return builders


def settings_for(name: str, config: dict[str, Any]) -> dict[str, Any]:
    """Identical settings for every algorithm; PPG gets its policy-phase equivalents."""
    batch_size = config["n_envs"] * config["n_steps"] // config["n_minibatches"]
    policy_kwargs: dict[str, Any] = {}
    if config["features"] == "impala":
        policy_kwargs = dict(features_extractor_class=ImpalaCNN, net_arch=[], ortho_init=False)
    settings: dict[str, Any] = dict(
        n_steps=config["n_steps"],
        batch_size=batch_size,
        n_epochs=config["n_epochs"],
        learning_rate=5e-4,
        ent_coef=0.01,
        gamma=0.999,
        policy_kwargs=policy_kwargs,
        device=config["device"],
        seed=0,
    )
    if name.startswith("ppg"):
        # one auxiliary phase within the timed iterations, with the paper's 6 epochs
        settings.update(n_policy_iterations=config["iterations"], n_aux_epochs=6)
    return settings


class TrainTimer:
    """Wraps ``model.train`` to add up the time spent optimizing (synchronizing CUDA when it is used)."""

    def __init__(self, model: BaseAlgorithm) -> None:
        self.seconds = 0.0
        train = model.train

        def timed_train() -> None:
            start = time.perf_counter()
            train()
            if th.cuda.is_available():
                th.cuda.synchronize()
            self.seconds += time.perf_counter() - start

        model.train = timed_train  # type: ignore[method-assign]


def run(config: dict[str, Any]) -> dict[str, dict[str, float]]:
    builders = algorithm_builders(config["algos"])
    names = list(builders)
    steps = config["n_envs"] * config["n_steps"] * config["iterations"]
    results: dict[str, dict[str, list[float]]] = {name: {"total": [], "train": []} for name in names}
    for repeat in range(config["repeats"]):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        for name in order:
            env = make_env(config["env"], config["n_envs"], seed=repeat)
            model = builders[name]("CnnPolicy", env, **settings_for(name, config))
            # warm-up iteration (allocations, cuDNN autotuning), not timed
            model.learn(config["n_envs"] * config["n_steps"])
            timer = TrainTimer(model)
            start = time.perf_counter()
            model.learn(steps, reset_num_timesteps=False)
            total = time.perf_counter() - start
            results[name]["total"].append(steps / total)
            results[name]["train"].append(steps / timer.seconds)
            env.close()
            print(f"repeat {repeat} {name:9s} {steps / total:8.1f} steps/s (train only {steps / timer.seconds:8.1f})")
    return {name: {kind: statistics.median(values) for kind, values in runs.items()} for name, runs in results.items()}


def report(medians: dict[str, dict[str, float]], baseline: str = "ppo") -> str:
    lines = [
        "| algorithm | steps/s (learn) | time vs PPO (learn) | steps/s (train only) | time vs PPO (train only) |",
        "|---|---|---|---|---|",
    ]
    for name, value in medians.items():
        if baseline in medians:
            ratio_total = medians[baseline]["total"] / value["total"]
            ratio_train = medians[baseline]["train"] / value["train"]
            ratios = f"{ratio_total:.3f} ({(ratio_total - 1) * 100:+.1f}%) | {value['train']:.1f} | {ratio_train:.3f}"
            ratios += f" ({(ratio_train - 1) * 100:+.1f}%)"
        else:
            ratios = f"- | {value['train']:.1f} | -"
        lines.append(f"| {name} | {value['total']:.1f} | {ratios} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--algos", default="ppo,ppo_ewma", help="comma-separated: ppo, ppo_ewma, ppg, ppg_ewma")
    parser.add_argument("--env", default=None, help="'fake-image' or a Procgen '<game>-<easy|hard>' (default: starpilot-easy)")
    parser.add_argument("--n-envs", type=int)
    parser.add_argument("--n-steps", type=int)
    parser.add_argument("--n-minibatches", type=int)
    parser.add_argument("--n-epochs", type=int, default=3)
    parser.add_argument("--iterations", type=int)
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--features", choices=["impala", "nature"])
    parser.add_argument("--device", default=None, help="default: cuda for the gpu preset, else cpu")
    parser.add_argument("--json", help="also write the medians to this file")
    args = parser.parse_args(argv)
    config = dict(PRESETS[args.preset])
    for key in ("n_envs", "n_steps", "n_minibatches", "iterations", "repeats", "features"):
        if getattr(args, key) is not None:
            config[key] = getattr(args, key)
    config["n_epochs"] = args.n_epochs
    config["algos"] = [name.strip() for name in args.algos.split(",") if name.strip()]
    config["device"] = args.device or ("cuda" if args.preset == "gpu" else "cpu")
    config["env"] = args.env or _default_env()
    config["json"] = args.json
    return config


def _default_env() -> str:
    try:
        import procgen  # noqa: F401

        return "starpilot-easy"
    except ImportError:
        return "fake-image"


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    config = parse_args(argv)
    print("settings:", {key: value for key, value in config.items() if key != "json"})
    medians = run(config)
    print(report(medians))
    if config["json"]:
        with open(config["json"], "w") as file:
            json.dump({"config": config, "medians": medians}, file, indent=2)
    return medians


if __name__ == "__main__":
    main()
