"""
What a forward pass costs next to a training step, for the EWMA's extra work: PPO_EWMA evaluates the proximal
policy (one forward pass, no gradient) on every minibatch, on top of the forward-backward pass of the loss::

    python -m benchmarks.timing.forward_cost                 # IMPALA CNN, 64x64x3 frames, minibatch 64, CPU
    python -m benchmarks.timing.forward_cost --device cuda --batch-size 2048
    python -m benchmarks.timing.forward_cost --network mlp --batch-size 256   # CartPole's MlpPolicy (rl-zoo3's minibatch)

The forward pass is the one PPO_EWMA makes
(:func:`~sb3_ewma.common.decoupled.proximal.proximal_action_log_prob`: the action head and the log-probabilities
of the taken actions, no value head), on a proximal copy of the policy; the
forward-backward pass is the loss's (values, log-probabilities, entropy), timed twice: through SB3's
``evaluate_actions`` (which builds and validates a torch distribution) and as ``train()`` computes it
(:func:`~sb3_ewma.common.distributions.lean_evaluate_actions`, the same tensors). ``f`` = forward / forward-backward is
the floor of the EWMA's extra cost in training time.
"""

import argparse
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3.common.policies import ActorCriticCnnPolicy, ActorCriticPolicy

from benchmarks.harness.common import add_malloc_argument, apply_malloc
from sb3_ewma.common.decoupled.proximal import make_proximal_ewma, proximal_action_log_prob
from sb3_ewma.common.distributions import lean_evaluate_actions
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


def _policy_and_batch(network: str, batch_size: int, device: th.device) -> tuple[ActorCriticPolicy, th.Tensor, th.Tensor]:
    """The policy (IMPALA CNN on 64x64x3 frames, 15 actions; or SB3's MlpPolicy on CartPole) and a random minibatch."""
    if network == "mlp":
        observation_space: gym.spaces.Box = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        n_actions = 2
        policy = ActorCriticPolicy(observation_space, gym.spaces.Discrete(n_actions), lambda _: 1e-3)
        obs = th.randn(batch_size, 4, device=device)
    else:
        n_actions = 15
        policy = ActorCriticCnnPolicy(
            gym.spaces.Box(0, 255, (3, 64, 64), np.uint8),
            gym.spaces.Discrete(n_actions),
            lambda _: 5e-4,
            features_extractor_class=ImpalaCNN,
            net_arch=[],
            ortho_init=False,
        )
        obs = th.randint(0, 256, (batch_size, 3, 64, 64), dtype=th.uint8, device=device)
    return policy.to(device), obs, th.randint(0, n_actions, (batch_size,), device=device)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--network", choices=("impala", "mlp"), default="impala")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    add_malloc_argument(parser)
    args = parser.parse_args(argv)
    th.set_num_threads(args.threads)
    apply_malloc(args.malloc)
    device = th.device(args.device)
    policy, obs, actions = _policy_and_batch(args.network, args.batch_size, device)
    proximal = make_proximal_ewma(policy, decay=0.9)

    def forward_backward() -> None:
        values, log_prob, entropy = policy.evaluate_actions(obs, actions)
        policy.optimizer.zero_grad()
        (values.mean() + log_prob.mean() + entropy.mean()).backward()

    def lean_forward_backward() -> None:
        values, log_prob, entropy = lean_evaluate_actions(policy, obs, actions)
        policy.optimizer.zero_grad()
        (values.mean() + log_prob.mean() + entropy.mean()).backward()

    def proximal_forward() -> None:
        proximal_action_log_prob(proximal, obs, actions)

    sb3_step = seconds_per_call(forward_backward, args.repeats, device)
    train_step = seconds_per_call(lean_forward_backward, args.repeats, device)
    forward = seconds_per_call(proximal_forward, args.repeats, device)
    print(f"network={args.network} device={device} batch_size={args.batch_size} threads={args.threads} malloc={args.malloc}")
    print(f"forward-backward, SB3's evaluate_actions: {sb3_step * 1e3:.3f} ms")
    print(f"forward-backward, as train() evaluates: {train_step * 1e3:.3f} ms = {train_step / sb3_step:.0%} of it")
    print(f"forward, no gradient (the proximal policy): {forward * 1e3:.3f} ms = {forward / train_step:.0%} of the loss's")
    return {"sb3_forward_backward_s": sb3_step, "forward_backward_s": train_step, "forward_s": forward}


if __name__ == "__main__":
    main()
