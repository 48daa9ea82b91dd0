"""
The training step's numeric format, each means on its own: the time of PPO_EWMA's ``train()`` (and PPG_EWMA's, whose
auxiliary phase runs with the same format) on one filled rollout buffer with float32 contiguous weights, with
``channels_last`` convolution weights, with the forward passes under bfloat16 ``torch.autocast``, and with both
(:class:`sb3_ewma.common.precision.TrainingPrecision`), alternating the variants (medians); and how far a
minibatch's losses move from float32's (same parameters, same data). No environment steps are timed. Networks: the
IMPALA CNN on Procgen starpilot at the cpu preset's shapes (8 envs x 32 steps) or the gpu preset's (64 x 256),
8 minibatches, 3 epochs.

    python -m benchmarks.timing.train_step --preset gpu --device cuda     # the paper's setting, on a GPU
    python -m benchmarks.timing.train_step --preset cpu --repeats 3       # the same shapes as the cpu preset

On CPUs without bfloat16 arithmetic (AVX2) autocast emulates it and is slower than float32: the means are for GPUs.
"""

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch as th
from gymnasium import spaces

from benchmarks.harness.common import RESULTS_DIR
from benchmarks.harness.envs import default_env_id, make_env, policy_for

NAME = "train_step"
PRESETS: dict[str, dict[str, Any]] = {
    "smoke": dict(n_envs=2, n_steps=16, n_minibatches=2, n_epochs=1),
    "cpu": dict(n_envs=8, n_steps=32, n_minibatches=8, n_epochs=3),
    "gpu": dict(n_envs=64, n_steps=256, n_minibatches=8, n_epochs=3),
}
VARIANTS = ("float32", "channels_last", "bfloat16", "channels_last_bfloat16")


def precision_of(variant: str) -> Any:
    from sb3_ewma.common.precision import TrainingPrecision

    autocast = th.bfloat16 if variant.endswith("bfloat16") else None
    return TrainingPrecision(autocast, channels_last=variant.startswith("channels_last"))


def build(algo: str, variant: str, preset: str, device: str) -> Any:
    """A model with the variant's format, one iteration learned (a filled buffer; allocations and autotuning done)."""
    from sb3_ewma import PPG_EWMA, PPO_EWMA

    shape = PRESETS[preset]
    policy, policy_kwargs = policy_for("impala")
    env = make_env(default_env_id(None, "easy"), shape["n_envs"], seed=0)
    batch_size = shape["n_envs"] * shape["n_steps"] // shape["n_minibatches"]
    settings = dict(n_steps=shape["n_steps"], batch_size=batch_size, n_epochs=shape["n_epochs"], seed=0, device=device)
    if algo == "ppg_ewma":
        # every train() ends a phase: the auxiliary phase is timed with the policy phase
        settings.update(n_policy_iterations=1, n_aux_epochs=2)
    algorithm = PPG_EWMA if algo == "ppg_ewma" else PPO_EWMA
    model = algorithm(policy, env, policy_kwargs=policy_kwargs, **settings)
    model.set_training_precision(precision_of(variant))
    model.learn(shape["n_envs"] * shape["n_steps"])
    return model


def synchronize(device: th.device) -> None:
    if device.type == "cuda":
        th.cuda.synchronize(device)


def minibatch_losses(model: Any, rollout_data: Any) -> th.Tensor:
    """The policy loss, entropy loss and mean value of a minibatch, in the model's format."""
    from sb3_ewma.common.decoupled.objective import DecoupledPolicyObjective

    actions = rollout_data.actions
    if isinstance(model.action_space, spaces.Discrete):
        actions = rollout_data.actions.long().flatten()
    with th.no_grad(), model.training_precision.forward(model.device):
        values, log_prob, entropy, _ = model._evaluate_policy(rollout_data, actions)
        proximal_log_prob, _ = model.proximal.log_prob(rollout_data, actions, rollout_data.old_log_prob)
        policy_loss = DecoupledPolicyObjective(0.2)(
            rollout_data.advantages, log_prob, proximal_log_prob, rollout_data.old_log_prob, None, None
        )
        entropy_loss = -th.mean(-log_prob) if entropy is None else -th.mean(entropy)
    return th.stack([policy_loss.float(), entropy_loss.float(), values.float().mean()]).cpu()


def measure(algo: str, preset: str, device: str, repeats: int) -> dict[str, dict[str, float]]:
    """Per variant: median seconds of ``train()`` and the largest relative change of the first minibatch's losses."""
    models = {variant: build(algo, variant, preset, device) for variant in VARIANTS}
    reference = models["float32"]
    for model in models.values():
        # the same parameters and data for the loss comparison (the first iteration differed by its format only)
        model.policy.load_state_dict(reference.policy.state_dict())
        model.proximal.restart()
        model.rollout_buffer = reference.rollout_buffer
    rollout_data = next(reference.rollout_buffer.get(reference.batch_size))
    exact = minibatch_losses(reference, rollout_data)
    results: dict[str, dict[str, float]] = {}
    for variant, model in models.items():
        change = ((minibatch_losses(model, rollout_data) - exact).abs() / exact.abs().clamp_min(1e-8)).max()
        results[variant] = {"loss_change": float(change)}
    seconds: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for repeat in range(repeats):
        for variant in VARIANTS[repeat % len(VARIANTS) :] + VARIANTS[: repeat % len(VARIANTS)]:
            model = models[variant]
            synchronize(model.device)
            start = time.perf_counter()
            model.train()
            synchronize(model.device)
            seconds[variant].append(time.perf_counter() - start)
    for variant in VARIANTS:
        results[variant]["seconds"] = statistics.median(seconds[variant])
    return results


def report(results: dict[str, dict[str, dict[str, float]]]) -> str:
    lines = [
        "| algorithm | format | train() (s) | time vs float32 | largest relative change of a minibatch's losses |",
        "|---|---|---|---|---|",
    ]
    for algo, variants in results.items():
        base = variants["float32"]["seconds"]
        for variant, values in variants.items():
            ratio = values["seconds"] / base
            lines.append(f"| {algo} | {variant} | {values['seconds']:.4f} | {ratio:.3f} | {values['loss_change']:.2e} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, dict[str, float]]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--algos", default="ppo_ewma,ppg_ewma", help="comma-separated among ppo_ewma, ppg_ewma")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    th.set_num_threads(args.threads)
    results = {algo: measure(algo, args.preset, args.device, args.repeats) for algo in args.algos.split(",")}
    table = report(results)
    print(table)
    out_dir = args.out / NAME / args.preset
    out_dir.mkdir(parents=True, exist_ok=True)
    device = th.cuda.get_device_name(args.device) if args.device.startswith("cuda") else f"CPU, {args.threads} thread(s)"
    command = " ".join(["python -m benchmarks.timing.train_step", *(sys.argv[1:] if argv is None else argv)])
    text = f"# The training step's numeric format\n\n{(__doc__ or '').strip()}\n\n- command: `{command}`\n"
    text += f"- device: {device}; written {time.strftime('%Y-%m-%d %H:%M')}; medians of {args.repeats} train() calls\n\n"
    (out_dir / "results.md").write_text(text + table + "\n")
    return results


if __name__ == "__main__":
    main()
