"""
The proximal pass, lean against full: time of ``train()`` for SB3's PPO, PPO_EWMA with its lean proximal pass (the
log-probabilities of the taken actions from the action head) and PPO_EWMA with the pass through a distribution object
(``get_distribution(obs).log_prob(actions)``, as before), on one filled rollout buffer, alternating the three
(medians). No environment steps are timed. Networks: the MLP on CartPole-v1 with rl-zoo3's tuned PPO shapes (8 envs x
32 steps, batch 256, 20 epochs) and the IMPALA CNN on Procgen starpilot with the cpu preset's (8 envs x 32 steps,
8 minibatches, 3 epochs).

    python -m benchmarks.timing.proximal_pass                 # both networks, 5 repeats
    python -m benchmarks.timing.proximal_pass --malloc default  # glibc's allocator as it comes

The minor page faults of each ``train()`` (``getrusage``) are reported too: with glibc's default thresholds the
activations freed by the proximal pass go back to the system and fault in again at the next minibatch (see
:mod:`sb3_ewma.allocator`).
"""

import argparse
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch as th

from benchmarks.harness.common import RESULTS_DIR, add_malloc_argument, apply_malloc
from benchmarks.harness.envs import default_env_id, make_env, policy_for
from sb3_ewma.common.decoupled.proximal import ProximalPolicy

NAME = "proximal_pass"
NETWORKS: dict[str, dict[str, Any]] = {
    "mlp": dict(env="CartPole-v1", features="mlp", n_envs=8, n_steps=32, batch_size=256, n_epochs=20),
    "impala": dict(env=None, features="impala", n_envs=8, n_steps=32, batch_size=32, n_epochs=3),
}
VARIANTS = ("ppo", "ppo_ewma_lean", "ppo_ewma_distribution")


class DistributionProximalPolicy(ProximalPolicy):
    """The proximal policy whose log-probabilities always go through a distribution object (no lean pass)."""

    def log_prob(
        self, minibatch: Any, actions: th.Tensor, behavior_log_prob: th.Tensor, with_distribution: bool = False
    ) -> tuple[th.Tensor, Any]:
        distribution = self.distribution(minibatch)
        return distribution.log_prob(actions), distribution if with_distribution else None


def distribution_pass(model: Any) -> None:
    """Give the model a proximal policy whose pass goes through a distribution object (the same network)."""
    proximal = model.proximal
    model.proximal = DistributionProximalPolicy(proximal.ewma, proximal.decay, type(model)._proximal_distribution_of)


def _minor_page_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def measure(network: str, repeats: int) -> dict[str, float]:
    """Median seconds (``<variant>``) and minor page faults (``<variant>_faults``) of one ``train()`` per variant."""
    from stable_baselines3 import PPO

    from sb3_ewma import PPO_EWMA

    shape = NETWORKS[network]
    policy, policy_kwargs = policy_for(shape["features"])
    env_id = shape["env"] or default_env_id(None, "easy")
    settings = {key: shape[key] for key in ("n_steps", "batch_size", "n_epochs")}
    models = {}
    for variant in VARIANTS:
        env = make_env(env_id, shape["n_envs"], seed=0)
        algorithm = PPO if variant == "ppo" else PPO_EWMA
        model = algorithm(policy, env, policy_kwargs=policy_kwargs, seed=0, device="cpu", **settings)
        model.learn(shape["n_envs"] * shape["n_steps"])  # a filled buffer (and one warm-up update)
        if variant == "ppo_ewma_distribution":
            distribution_pass(model)
        models[variant] = model
    seconds: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    faults: dict[str, list[int]] = {variant: [] for variant in VARIANTS}
    for repeat in range(repeats):
        for variant in VARIANTS[repeat % 3 :] + VARIANTS[: repeat % 3]:
            faults_before = _minor_page_faults()
            start = time.perf_counter()
            models[variant].train()
            seconds[variant].append(time.perf_counter() - start)
            faults[variant].append(_minor_page_faults() - faults_before)
    medians = {variant: statistics.median(values) for variant, values in seconds.items()}
    return {**medians, **{f"{variant}_faults": statistics.median(values) for variant, values in faults.items()}}


def report(results: dict[str, dict[str, float]]) -> str:
    lines = [
        "| network | SB3 PPO train (s) | PPO_EWMA lean (s) | PPO_EWMA distribution (s) | lean / PPO | distribution / PPO "
        "| page faults per train (PPO / lean) |",
        "|---|---|---|---|---|---|---|",
    ]
    for network, seconds in results.items():
        ppo, lean, full = (seconds[variant] for variant in VARIANTS)
        faults = f"{seconds['ppo_faults']:.0f} / {seconds['ppo_ewma_lean_faults']:.0f}"
        lines.append(f"| {network} | {ppo:.4f} | {lean:.4f} | {full:.4f} | {lean / ppo:.3f} | {full / ppo:.3f} | {faults} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--networks", default=",".join(NETWORKS), help="comma-separated among mlp, impala")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    add_malloc_argument(parser)
    args = parser.parse_args(argv)
    th.set_num_threads(1)
    apply_malloc(args.malloc)
    results = {network: measure(network, args.repeats) for network in args.networks.split(",")}
    table = report(results)
    print(table)
    out_dir = args.out / NAME / args.malloc
    out_dir.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python -m benchmarks.timing.proximal_pass", *(sys.argv[1:] if argv is None else argv)])
    text = f"# Proximal pass: lean vs through a distribution\n\n{(__doc__ or '').strip()}\n\n- command: `{command}`\n"
    text += f"- written {time.strftime('%Y-%m-%d %H:%M')}; medians of {args.repeats} train() calls, one torch thread, "
    text += f"malloc {args.malloc}\n\n"
    (out_dir / "results.md").write_text(text + table + "\n")
    return results


if __name__ == "__main__":
    main()
