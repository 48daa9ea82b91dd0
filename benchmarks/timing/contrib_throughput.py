"""
Wall-clock cost of the EWMA in sb3-contrib's PPO family: RecurrentPPO_EWMA against RecurrentPPO and MaskablePPO_EWMA
against MaskablePPO, next to PPO_EWMA against SB3's PPO with the same network (the target: each ratio no
larger than PPO_EWMA's); and the three with their compiled steps (``compile_step=True``, compiled in the untimed
first iteration) against the same parents.

Every pair is measured in one process, the nine algorithms alternating (A B C D E F, B C D E F A, ...) so that a
shared, noisy machine slows them alike; the report gives each algorithm's median time of ``learn`` (rollouts and
training) and of training alone, and each EWMA version's time relative to its parent (the median over the repeats of
the ratio of the two times measured in the same repeat). Each model first learns one iteration
(not timed), then ``iterations`` timed ones. Settings: 8 environments x 128 steps, 4 minibatches of 256, 4 epochs,
MLP [64, 64] (the recurrent policies: an LSTM of 64 units for the actor and one for the critic, then [64] heads), on
CartPole-v1 (CartPoleNoVel-v1 for the recurrent ones) and sb3-contrib's InvalidActionEnvDiscrete (masked ones)::

    python -m benchmarks.timing.contrib_throughput                   # cpu: 3 timed iterations, 5 repeats
    python -m benchmarks.timing.contrib_throughput --preset smoke    # seconds
"""

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch as th
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from benchmarks.harness.common import RESULTS_DIR, append_csv
from benchmarks.timing.throughput import TrainTimer

NAME = "contrib_throughput"
PRESETS: dict[str, dict[str, Any]] = {
    "smoke": dict(n_envs=2, n_steps=32, n_minibatches=2, n_epochs=1, iterations=1, repeats=1),
    "cpu": dict(n_envs=8, n_steps=128, n_minibatches=4, n_epochs=4, iterations=3, repeats=5),
}
PAIRS = {
    "ppo_ewma": "ppo",
    "ppo_ewma_compiled": "ppo",
    "ppo_lstm_ewma": "ppo_lstm",
    "ppo_lstm_ewma_compiled": "ppo_lstm",
    "ppo_mask_ewma": "ppo_mask",
    "ppo_mask_ewma_compiled": "ppo_mask",
}
"""Each EWMA algorithm and its parent."""
COMPILED = ("ppo_ewma_compiled", "ppo_lstm_ewma_compiled", "ppo_mask_ewma_compiled")
"""The algorithms measured with ``compile_step=True`` (the others: SB3's and sb3-contrib's eager step)."""


def _masked_env(n_envs: int, seed: int) -> VecEnv:
    from sb3_contrib.common.envs import InvalidActionEnvDiscrete

    def make(index: int) -> InvalidActionEnvDiscrete:
        env = InvalidActionEnvDiscrete(dim=20, ep_length=100, n_invalid_actions=10)
        env.action_space.seed(seed + index)
        return env

    return DummyVecEnv([lambda index=index: make(index) for index in range(n_envs)])  # type: ignore[misc]


def _novel_env(n_envs: int, seed: int) -> VecEnv:
    import rl_zoo3.import_envs  # noqa: F401  (registers CartPoleNoVel-v1)

    return make_vec_env("CartPoleNoVel-v1", n_envs=n_envs, seed=seed)


def algorithm(name: str) -> tuple[type, str, Callable[[int, int], VecEnv], dict[str, Any]]:
    """The class, policy, environment maker and policy_kwargs of ``name``."""
    from sb3_contrib import MaskablePPO, RecurrentPPO
    from stable_baselines3 import PPO

    from sb3_ewma import PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA

    mlp = dict(net_arch=[64, 64])
    lstm = dict(lstm_hidden_size=64, enable_critic_lstm=True, net_arch=[64])

    def cartpole(n_envs: int, seed: int) -> VecEnv:
        return make_vec_env("CartPole-v1", n_envs=n_envs, seed=seed)

    table: dict[str, tuple[type, str, Callable[[int, int], VecEnv], dict[str, Any]]] = {
        "ppo": (PPO, "MlpPolicy", cartpole, mlp),
        "ppo_ewma": (PPO_EWMA, "MlpPolicy", cartpole, mlp),
        "ppo_ewma_compiled": (PPO_EWMA, "MlpPolicy", cartpole, mlp),
        "ppo_lstm": (RecurrentPPO, "MlpLstmPolicy", _novel_env, lstm),
        "ppo_lstm_ewma": (RecurrentPPO_EWMA, "MlpLstmPolicy", _novel_env, lstm),
        "ppo_lstm_ewma_compiled": (RecurrentPPO_EWMA, "MlpLstmPolicy", _novel_env, lstm),
        "ppo_mask": (MaskablePPO, "MlpPolicy", _masked_env, mlp),
        "ppo_mask_ewma": (MaskablePPO_EWMA, "MlpPolicy", _masked_env, mlp),
        "ppo_mask_ewma_compiled": (MaskablePPO_EWMA, "MlpPolicy", _masked_env, mlp),
    }
    return table[name]


def measure(name: str, repeat: int, config: dict[str, Any]) -> dict[str, Any]:
    """Time one algorithm once: a warm-up iteration, then ``iterations`` timed ones. Returns the CSV row."""
    algorithm_class, policy, make_env, policy_kwargs = algorithm(name)
    env = make_env(config["n_envs"], repeat)
    iteration = config["n_envs"] * config["n_steps"]
    model = algorithm_class(
        policy,
        env,
        n_steps=config["n_steps"],
        batch_size=iteration // config["n_minibatches"],
        n_epochs=config["n_epochs"],
        policy_kwargs=policy_kwargs,
        seed=repeat,
        device="cpu",
        **({"compile_step": name in COMPILED} if name.endswith(("_ewma", "_compiled")) else {}),
    )
    model.learn(iteration)
    if name in COMPILED and not model.compiled_step.verified:
        raise RuntimeError(f"{name} did not compile: {model.compiled_step.reason}")
    timer = TrainTimer(model)
    start = time.perf_counter()
    model.learn(iteration * config["iterations"], reset_num_timesteps=False)
    total = time.perf_counter() - start
    env.close()
    settings = {key: config[key] for key in ("n_envs", "n_steps", "n_minibatches", "n_epochs", "iterations")}
    seconds = {"learn_seconds": round(total, 4), "train_seconds": round(timer.seconds["train"], 4)}
    return {"repeat": repeat, "algo": name, **settings, **seconds}


def run(config: dict[str, Any], csv_path: Path | None = None) -> list[dict[str, Any]]:
    """All the measurements (CSV rows), alternating the algorithms."""
    th.set_num_threads(1)
    names = list(dict.fromkeys(name for pair in PAIRS.items() for name in reversed(pair)))
    rows = []
    for repeat in range(config["repeats"]):
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
            row = measure(name, repeat, config)
            rows.append(row)
            if csv_path:
                append_csv(csv_path, row)
            print(f"repeat {repeat} {name:14s} learn {row['learn_seconds']:7.3f} s, train {row['train_seconds']:7.3f} s")
    return rows


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """
    For each algorithm, the median times (``learn``, ``train``, in seconds) and, for the EWMA ones, the median over
    the repeats of the ratio to the parent's time in the same repeat (``learn_ratio``, ``train_ratio``): paired ratios,
    robust to the load of a shared machine changing between repeats.
    """
    times = {(row["algo"], int(row["repeat"])): row for row in rows}
    summary: dict[str, dict[str, float]] = {}
    for name in {row["algo"] for row in rows}:
        mine = [row for row in rows if row["algo"] == name]
        summary[name] = {kind: statistics.median(float(row[f"{kind}_seconds"]) for row in mine) for kind in ("learn", "train")}
        parent = PAIRS.get(name)
        if parent is None:
            continue
        for kind in ("learn", "train"):
            ratios = [
                float(row[f"{kind}_seconds"]) / float(times[parent, int(row["repeat"])][f"{kind}_seconds"])
                for row in mine
                if (parent, int(row["repeat"])) in times
            ]
            summary[name][f"{kind}_ratio"] = statistics.median(ratios)
    return summary


def report(summary: dict[str, dict[str, float]]) -> str:
    """The markdown table: median times and each EWMA algorithm's time relative to its parent (median of ratios)."""
    lines = [
        "| algorithm | parent | learn (s) | time vs parent (learn) | train only (s) | time vs parent (train only) |",
        "|---|---|---|---|---|---|",
    ]
    for name, parent in PAIRS.items():
        learn, train = summary[name]["learn_ratio"], summary[name]["train_ratio"]
        lines.append(
            f"| {name} | {parent} | {summary[name]['learn']:.3f} | {learn:.3f} ({(learn - 1) * 100:+.1f}%) "
            f"| {summary[name]['train']:.3f} | {train:.3f} ({(train - 1) * 100:+.1f}%) |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    """Command line entry point; returns the summary (see :func:`summarize`)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=PRESETS, default="cpu")
    parser.add_argument("--repeats", type=int, help="default: the preset's")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="results root (default: benchmarks/results)")
    args = parser.parse_args(argv)
    config = dict(PRESETS[args.preset])
    if args.repeats is not None:
        config["repeats"] = args.repeats
    out_dir = args.out / NAME / args.preset
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / "measurements.csv"
    csv_path.unlink(missing_ok=True)
    summary = summarize(run(config, csv_path))
    table = report(summary)
    print(table)
    command = " ".join(["python -m benchmarks.timing.contrib_throughput", *(sys.argv[1:] if argv is None else argv)])
    settings = ", ".join(f"{key}={value}" for key, value in config.items())
    text = [
        "# Throughput: the EWMA versions of RecurrentPPO and MaskablePPO against their parents",
        "",
        (__doc__ or "").strip().split("\n\n")[1],
        "",
        f"- command: `{command}`",
        f"- settings: {settings}; medians over {config['repeats']} repeat(s)",
        f"- written {time.strftime('%Y-%m-%d %H:%M')}",
        "",
        table,
        "",
    ]
    (out_dir / "results.md").write_text("\n".join(text))
    print(f"report: {out_dir / 'results.md'}")
    return summary


if __name__ == "__main__":
    main()
