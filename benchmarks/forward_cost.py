"""
What a forward pass costs next to a training step, for the EWMA's extra work: PPO_EWMA evaluates the proximal
policy (one forward pass, no gradient) on every minibatch, on top of the forward-backward pass of the loss::

    python -m benchmarks.forward_cost                 # IMPALA CNN, 64x64x3 frames, minibatch 64, CPU
    python -m benchmarks.forward_cost --device cuda --batch-size 2048
"""

import argparse
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3.common.policies import ActorCriticCnnPolicy

from benchmarks.common import add_malloc_argument, apply_malloc
from sb3_ewma.common.torch_layers import ImpalaCNN


def seconds_per_call(function: Callable[[], object], repeats: int, device: th.device) -> float:
    function()  # warm-up
    if device.type == "cuda":
        th.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        function()
    if device.type == "cuda":
        th.cuda.synchronize()
    return (time.perf_counter() - start) / repeats


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    add_malloc_argument(parser)
    args = parser.parse_args(argv)
    th.set_num_threads(args.threads)
    apply_malloc(args.malloc)
    device = th.device(args.device)
    policy = ActorCriticCnnPolicy(
        gym.spaces.Box(0, 255, (3, 64, 64), np.uint8),
        gym.spaces.Discrete(15),
        lambda _: 5e-4,
        features_extractor_class=ImpalaCNN,
        net_arch=[],
        ortho_init=False,
    ).to(device)
    obs = th.randint(0, 256, (args.batch_size, 3, 64, 64), dtype=th.uint8, device=device)
    actions = th.randint(0, 15, (args.batch_size,), device=device)

    def forward_backward() -> None:
        values, log_prob, entropy = policy.evaluate_actions(obs, actions)
        policy.optimizer.zero_grad()
        (values.mean() + log_prob.mean() + entropy.mean()).backward()

    def proximal_forward() -> None:
        with th.no_grad():
            policy.get_distribution(obs).log_prob(actions)

    train_step = seconds_per_call(forward_backward, args.repeats, device)
    forward = seconds_per_call(proximal_forward, args.repeats, device)
    print(f"device={device} batch_size={args.batch_size} threads={args.threads} malloc={args.malloc}")
    print(f"forward-backward (the loss): {train_step * 1e3:.1f} ms")
    print(f"forward, no gradient (the proximal policy): {forward * 1e3:.1f} ms = {forward / train_step:.0%} of it")
    return {"forward_backward_s": train_step, "forward_s": forward}


if __name__ == "__main__":
    main()
