"""
What a low-precision proximal pass would cost in accuracy. On GPUs the proximal pass (a no-grad forward per
minibatch) could run under ``torch.autocast`` in bfloat16; this measures, on real training data, how far its
log-probabilities and everything the decoupled objective computes from them move from the float32 ones: the log-ratio
``log pi - log pi_prox``, the samples whose clipping status changes, the loss, and the direction of the gradient
(cosine similarity with the float32 gradient). The network's trunk and action head run under autocast, the
log-softmax in float32 (the head's output is cast back first). Rounding, not speed, is measured here: speed needs a
GPU (bf16 on this project's AVX2 CPU is emulated and slower than float32).

Each network is trained a few iterations with PPO_EWMA first (so that the EWMA differs from the policy), then the
last rollout is evaluated as one batch::

    python -m benchmarks.timing.proximal_precision                   # MLP (CartPole) and IMPALA CNN (Procgen starpilot), CPU
    python -m benchmarks.timing.proximal_precision --device cuda --dtype float16
"""

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch as th

from benchmarks.harness.common import RESULTS_DIR
from benchmarks.harness.envs import default_env_id, make_env, policy_for

NAME = "proximal_precision"
NETWORKS: dict[str, dict[str, Any]] = {
    # rl-zoo3's tuned CartPole shapes; the cpu preset's Procgen shapes
    "mlp": dict(env="CartPole-v1", features="mlp", n_envs=8, n_steps=32, batch_size=256, n_epochs=20, iterations=8),
    "impala": dict(env=None, features="impala", n_envs=8, n_steps=32, batch_size=32, n_epochs=3, iterations=3),
}
CLIP_RANGE = 0.2
IMP_SAMP_MAX = 100.0


def _low_precision_log_prob(model: Any, obs: th.Tensor, actions: th.Tensor, dtype: th.dtype) -> th.Tensor:
    """The lean proximal pass under autocast, the action head's output cast back to float32 before the log-softmax."""
    from sb3_ewma.common.decoupled.proximal import proximal_action_log_prob

    head = model.proximal_ewma.average.action_net
    handle = head.register_forward_hook(lambda module, inputs, output: output.float())
    try:
        with th.autocast(device_type=model.device.type, dtype=dtype):
            return proximal_action_log_prob(model.proximal_ewma, obs, actions).float()
    finally:
        handle.remove()


def _loss_and_gradient(model: Any, data: Any, actions: th.Tensor, proximal_log_prob: th.Tensor) -> tuple[float, th.Tensor]:
    from sb3_ewma.common.losses import decoupled_policy_loss

    model.policy.optimizer.zero_grad()
    _, log_prob, _ = model.policy.evaluate_actions(data.observations, actions)
    loss = decoupled_policy_loss(data.advantages, log_prob, proximal_log_prob, data.old_log_prob, CLIP_RANGE, IMP_SAMP_MAX)
    loss.backward()
    gradient = th.cat([p.grad.flatten() for p in model.policy.parameters() if p.grad is not None])
    return loss.item(), gradient.clone()


def measure(network: str, device: str, dtype: th.dtype) -> dict[str, float]:
    """The errors of the low-precision pass against float32 on the last rollout of a short PPO_EWMA run."""
    from sb3_ewma import PPO_EWMA
    from sb3_ewma.common.decoupled.proximal import proximal_action_log_prob
    from sb3_ewma.common.losses import sampled_kl

    shape = NETWORKS[network]
    policy, policy_kwargs = policy_for(shape["features"])
    env = make_env(shape["env"] or default_env_id(None, "easy"), shape["n_envs"], seed=0)
    settings = {key: shape[key] for key in ("n_steps", "batch_size", "n_epochs")}
    model = PPO_EWMA(policy, env, policy_kwargs=policy_kwargs, seed=0, device=device, clip_range=CLIP_RANGE, **settings)
    model.learn(shape["iterations"] * shape["n_envs"] * shape["n_steps"])
    env.close()
    data = next(model.rollout_buffer.get())  # the whole rollout as one batch
    actions = data.actions.long().flatten()
    exact = proximal_action_log_prob(model.proximal_ewma, data.observations, actions)
    approx = _low_precision_log_prob(model, data.observations, actions, dtype)
    with th.no_grad():
        _, log_prob, _ = model.policy.evaluate_actions(data.observations, actions)
    bounds = (math.log(1 - CLIP_RANGE), math.log(1 + CLIP_RANGE))

    def outside(log_ratio: th.Tensor) -> th.Tensor:
        return (log_ratio < bounds[0]) | (log_ratio > bounds[1])

    error = (approx - exact).abs()
    exact_loss, exact_gradient = _loss_and_gradient(model, data, actions, exact)
    approx_loss, approx_gradient = _loss_and_gradient(model, data, actions, approx)
    return {
        "samples": float(len(actions)),
        "max_abs_error": error.max().item(),
        "mean_abs_error": error.mean().item(),
        "mean_abs_log_ratio": (log_prob - exact).abs().mean().item(),
        "clip_fraction": outside(log_prob - exact).float().mean().item(),
        "clip_status_changed": (outside(log_prob - exact) != outside(log_prob - approx)).float().mean().item(),
        "loss_relative_error": abs(approx_loss - exact_loss) / max(abs(exact_loss), 1e-12),
        "kl_relative_error": abs(sampled_kl(log_prob, approx).item() / sampled_kl(log_prob, exact).item() - 1),
        # in float64: float32 rounding alone moves a cosine near 1 by more than the differences measured
        "gradient_cosine": th.nn.functional.cosine_similarity(exact_gradient.double(), approx_gradient.double(), dim=0).item(),
    }


def report(results: dict[str, dict[str, float]], dtype: str) -> str:
    lines = [
        f"| network | samples | max abs error of log pi_prox ({dtype}) | mean abs error | mean abs log-ratio (float32) "
        "| clip fraction | samples whose clipping changes | loss, relative error | sampled KL, relative error "
        "| 1 - gradient cosine similarity |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for network, values in results.items():
        lines.append(
            f"| {network} | {values['samples']:.0f} | {values['max_abs_error']:.2e} | {values['mean_abs_error']:.2e} "
            f"| {values['mean_abs_log_ratio']:.2e} | {values['clip_fraction']:.3f} | {values['clip_status_changed']:.4f} "
            f"| {values['loss_relative_error']:.2e} | {values['kl_relative_error']:.2e} "
            f"| {1 - values['gradient_cosine']:.2e} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--networks", default=",".join(NETWORKS), help="comma-separated among mlp, impala")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    th.set_num_threads(1)
    dtype = getattr(th, args.dtype)
    results = {network: measure(network, args.device, dtype) for network in args.networks.split(",")}
    table = report(results, args.dtype)
    print(table)
    out_dir = args.out / NAME / args.device
    out_dir.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python -m benchmarks.timing.proximal_precision", *(sys.argv[1:] if argv is None else argv)])
    text = f"# Proximal pass in low precision: accuracy\n\n{(__doc__ or '').strip()}\n\n- command: `{command}`\n"
    text += f"- written {time.strftime('%Y-%m-%d %H:%M')}; device {args.device}, {args.dtype}\n\n"
    (out_dir / f"results_{args.dtype}.md").write_text(text + table + "\n")
    return results


if __name__ == "__main__":
    main()
