"""
What logging the gradient noise scale (``log_gradient_noise_scale``) costs, for an MLP [64, 64] and the paper's IMPALA
CNN on 64x64x3 frames: the time of ``train()`` of two models, with it on and off (same seed, same rollout),
alternating in one process, and
(less noisy on a shared machine) the time of its bookkeeping for one minibatch gradient next to the forward-backward
pass that produced it, alternating; medians over repeats::

    python -m benchmarks.timing.gradient_noise_overhead     # CPU, results under benchmarks/results/gradient_noise_overhead/cpu
    python -m benchmarks.timing.gradient_noise_overhead --device cuda
"""

import argparse
import json
import statistics
import time
from functools import partial
from pathlib import Path

import torch as th
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.envs import FakeImageEnv

from benchmarks.harness.common import RESULTS_DIR
from sb3_ewma import PPO_EWMA
from sb3_ewma.common.gradient_noise import GradientNoiseScale
from sb3_ewma.common.torch_layers import ImpalaCNN

CASES = {
    # name: (environment id or factory, policy, policy_kwargs, n_envs, n_steps, batch_size)
    "mlp_64x64": ("CartPole-v1", "MlpPolicy", dict(net_arch=[64, 64]), 16, 128, 256),
    "impala_cnn": (
        partial(FakeImageEnv, screen_height=64, screen_width=64, n_channels=3, discrete=True),
        "CnnPolicy",
        dict(features_extractor_class=ImpalaCNN, net_arch=[], ortho_init=False),
        4,
        32,
        16,
    ),
}


def time_train(model: PPO_EWMA, device: th.device) -> float:
    if device.type == "cuda":
        th.cuda.synchronize()
    start = time.perf_counter()
    model.train()
    if device.type == "cuda":
        th.cuda.synchronize()
    return time.perf_counter() - start


def step_costs(model: PPO_EWMA, batch_size: int, repeats: int, device: th.device) -> tuple[float, float]:
    """Medians of the time of one minibatch's forward-backward pass and of the tracker's work on its gradient."""
    data = next(model.rollout_buffer.get(batch_size))
    parameters = list(model.policy.parameters())
    tracker = GradientNoiseScale(batch_size, steps_per_epoch=8)

    def forward_backward() -> None:
        values, log_prob, entropy = model.policy.evaluate_actions(data.observations, data.actions.long().flatten())
        model.policy.optimizer.zero_grad()
        (values.mean() + log_prob.mean() + entropy.mean()).backward()

    def observe() -> None:
        tracker.observe([p.grad if p.grad is not None else th.zeros_like(p) for p in parameters])

    timings: dict[str, list[float]] = {"step": [], "observe": []}
    for _ in range(repeats):
        for key, function in (("step", forward_backward), ("observe", observe)):
            if device.type == "cuda":
                th.cuda.synchronize()
            start = time.perf_counter()
            function()
            if device.type == "cuda":
                th.cuda.synchronize()
            timings[key].append(time.perf_counter() - start)
    return statistics.median(timings["step"]), statistics.median(timings["observe"])


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "gradient_noise_overhead")
    args = parser.parse_args(argv)
    th.set_num_threads(args.threads)
    device = th.device(args.device)
    results = {}
    for name, (make_env, policy, policy_kwargs, n_envs, n_steps, batch_size) in CASES.items():
        models = {}
        for flag in (False, True):
            env = make_vec_env(make_env, n_envs=n_envs, seed=0)
            models[flag] = PPO_EWMA(
                policy,
                env,
                n_steps=n_steps,
                batch_size=batch_size,
                n_epochs=3,
                policy_kwargs=policy_kwargs,
                seed=0,
                device=device,
                log_gradient_noise_scale=flag,
            )
            models[flag].learn(n_steps * n_envs)  # fills the rollout buffer; train() below reuses it
            time_train(models[flag], device)  # warm-up
        model = models[True]
        timings: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.repeats):
            for flag in (False, True):
                timings[flag].append(time_train(models[flag], device))
        off, on = statistics.median(timings[False]), statistics.median(timings[True])
        step, observe = step_costs(model, batch_size, 5 * args.repeats, device)
        results[name] = {
            "train_s_off": off,
            "train_s_on": on,
            "ratio_on_off": on / off,
            "forward_backward_s": step,
            "observe_s": observe,
            "observe_per_forward_backward": observe / step,
        }
        print(
            f"{name}: train() {off * 1e3:.1f} ms off, {on * 1e3:.1f} ms on, ratio {on / off:.3f}; per minibatch: "
            f"forward-backward {step * 1e3:.2f} ms, noise-scale bookkeeping {observe * 1e3:.3f} ms ({observe / step:.1%})"
        )
    out = Path(args.out) / device.type
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"device": str(device), "repeats": args.repeats, **results}, indent=2))
    return results


if __name__ == "__main__":
    main()
