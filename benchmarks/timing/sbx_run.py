"""
One training run of SBX's PPO (``sbx-rl``, Stable-Baselines in JAX), for :mod:`benchmarks.timing.speed`: run with the
Python of SBX's own virtualenv (SBX is no dependency of this package), it imports nothing from ``sb3_ewma`` or
``benchmarks``. It builds the environment as the benchmark does for the torch implementations (SB3's
``make_vec_env``; MinAtar registered through ``minatar.gym`` with the benchmark's episode cap and float
channels-first observations; ``VecNormalize`` where the entry asks for it), converts rl-zoo3's ``lin_<value>``
schedules as rl-zoo3 does, times one ``learn`` from a fresh model and prints one JSON line::

    .venv-sbx/bin/python benchmarks/timing/sbx_run.py --spec '{"env": "CartPole-v1", "n_envs": 8, "seed": 0,
        "timesteps": 2048, "policy": "MlpPolicy", "normalize": null,
        "hyperparams": {"n_steps": 32, "batch_size": 256, "learning_rate": "lin_0.001", "clip_range": "lin_0.2"}}'

    {"wall_seconds": ..., "train_seconds": ..., "learn_cpu_seconds": ..., "final_return": ..., "episodes": ...,
     "steps": ..., "step_mode": "jax.jit", "versions": {...}}

``final_return`` is the mean return of the training episodes in ``ep_info_buffer`` (the last 100), as for the torch
implementations. JAX runs on one CPU thread (``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false``, set here unless the
caller set it) and torch, which SB3's rollout buffer uses, on one thread.
"""

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
"""One thread for XLA's CPU kernels (the second word is the usual recipe's; XLA ignores it, the first does the work)."""
MINATAR_MAX_EPISODE_STEPS = 1000
"""The episode cap of benchmarks/harness/envs.py (MinAtar has none)."""
SCHEDULE_KEYS = ("learning_rate", "clip_range", "clip_range_vf")


class LinearSchedule:
    """rl-zoo3's ``SimpleLinearSchedule``: ``progress_remaining * initial_value`` (from the value down to 0)."""

    def __init__(self, initial_value: float) -> None:
        self.initial_value = float(initial_value)

    def __call__(self, progress_remaining: float) -> float:
        return progress_remaining * self.initial_value

    def __repr__(self) -> str:
        return f"LinearSchedule({self.initial_value})"


def zoo_value(value: Any) -> Any:
    """A schedule for an rl-zoo3 ``"lin_<value>"`` string, anything else as it is."""
    if isinstance(value, str):
        _, initial_value = value.split("_")
        return LinearSchedule(float(initial_value))
    return value


def make_minatar(env_id: str) -> Any:
    """MinAtar's game as benchmarks/harness/envs.py makes it: capped episodes, float32 ``(C, H, W)`` observations."""
    import gymnasium as gym
    import numpy as np

    class MinAtarObservation(gym.ObservationWrapper):
        def __init__(self, env: gym.Env) -> None:
            super().__init__(env)
            height, width, channels = env.observation_space.shape  # type: ignore[misc]
            self.observation_space = gym.spaces.Box(0.0, 1.0, (channels, height, width), np.float32)

        def observation(self, observation: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(np.transpose(observation, (2, 0, 1)), dtype=np.float32)

    return MinAtarObservation(gym.wrappers.TimeLimit(gym.make(env_id), MINATAR_MAX_EPISODE_STEPS))


def make_env(spec: dict[str, Any]) -> Any:
    """The vectorized environment of ``spec`` (``env``, ``n_envs``, ``seed``, ``normalize``)."""
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    env_id, n_envs, seed = spec["env"], int(spec["n_envs"]), int(spec["seed"])
    if env_id.startswith("MinAtar/"):
        import minatar.gym

        if env_id not in gym.registry:
            minatar.gym.register_envs()
        env = make_vec_env(partial(make_minatar, env_id), n_envs=n_envs, seed=seed)
    else:
        env = make_vec_env(env_id, n_envs=n_envs, seed=seed)
    if spec.get("normalize") is not None:
        env = VecNormalize(env, **spec["normalize"])
    return env


def versions() -> dict[str, str]:
    """The versions of what this run used."""
    from importlib.metadata import version

    return {name: version(name) for name in ("sbx-rl", "jax", "jaxlib", "flax", "optax", "stable_baselines3", "gymnasium")}


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Train SBX's PPO once on ``spec``; returns the measurement."""
    import numpy as np
    import torch as th
    from sbx import PPO

    th.set_num_threads(1)
    env = make_env(spec)
    hyperparams = {key: zoo_value(value) if key in SCHEDULE_KEYS else value for key, value in spec["hyperparams"].items()}
    model = PPO(spec["policy"], env, seed=int(spec["seed"]), verbose=0, **hyperparams)
    train_seconds = [0.0]
    train: Callable[[], None] = model.train

    def timed_train() -> None:
        start = time.perf_counter()
        train()
        train_seconds[0] += time.perf_counter() - start

    model.train = timed_train  # type: ignore[method-assign]
    cpu_start, start = time.process_time(), time.perf_counter()
    model.learn(int(spec["timesteps"]))
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    returns = [float(info["r"]) for info in model.ep_info_buffer]
    env.close()
    return {
        "wall_seconds": round(wall, 4),
        "train_seconds": round(train_seconds[0], 4),
        "learn_cpu_seconds": round(cpu, 4),
        "final_return": float(np.mean(returns)) if returns else float("nan"),
        "episodes": len(returns),
        "steps": int(model.num_timesteps),
        "step_mode": "jax.jit",
        "versions": versions(),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", required=True, help="the run, as JSON (see the docstring)")
    args = parser.parse_args(argv)
    os.environ.setdefault("XLA_FLAGS", XLA_FLAGS)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    result = run(json.loads(args.spec))
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
