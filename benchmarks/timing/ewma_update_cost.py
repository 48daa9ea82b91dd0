"""
Cost of one proximal-policy EWMA update (after every optimizer step): this package's ``ParameterEWMA`` next to
``torch.optim.swa_utils.AveragedModel`` with ``get_ema_multi_avg_fn``, on the paper's IMPALA CNN policy (64x64x3 frames,
15 actions). The two alternate in one process; the medians of ``--rounds`` rounds are compared and printed as JSON
(the CPU record: ``benchmarks/results/ewma_update_cost/cpu/results.json``)::

    python -m benchmarks.timing.ewma_update_cost                  # CPU, one thread
    python -m benchmarks.timing.ewma_update_cost --device cuda

What each averages: ``ParameterEWMA`` the parameters the action distribution depends on (here all but the value head),
with the paper's bias correction; ``AveragedModel`` every parameter and, with ``use_buffers``, the buffers, without bias
correction (``get_ema_multi_avg_fn`` is a plain EMA).
"""

import argparse
import json
import statistics
import time

import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3.common.policies import ActorCriticCnnPolicy
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from sb3_ewma.common.decoupled.proximal import make_proximal_ewma
from sb3_ewma.common.torch_layers import ImpalaCNN


def build_policy(device: th.device) -> ActorCriticCnnPolicy:
    observation_space = gym.spaces.Box(0, 255, (3, 64, 64), np.uint8)
    policy = ActorCriticCnnPolicy(
        observation_space,
        gym.spaces.Discrete(15),
        lambda _: 5e-4,
        features_extractor_class=ImpalaCNN,
        net_arch=[],
        ortho_init=False,
    )
    return policy.to(device)


def seconds_per_update(update, repeats: int, device: th.device) -> float:  # type: ignore[no-untyped-def]
    if device.type == "cuda":
        th.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        update()
    if device.type == "cuda":
        th.cuda.synchronize()
    return (time.perf_counter() - start) / repeats


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args(argv)
    th.set_num_threads(args.threads)
    device = th.device(args.device)
    decay = 8 / 9  # the paper's center of mass 8

    policy = build_policy(device)
    ewma = make_proximal_ewma(policy, decay)
    averaged = AveragedModel(policy, multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True)
    variants = {"ParameterEWMA": ewma.update, "AveragedModel": lambda: averaged.update_parameters(policy)}
    for update in variants.values():  # warm-up
        update()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, update in variants.items():
            times[name].append(seconds_per_update(update, args.repeats, device))
    medians = {name: statistics.median(values) for name, values in times.items()}
    result = {
        "device": str(device),
        "parameters_averaged_ParameterEWMA": sum(p.numel() for p in ewma._average_params),
        "parameters_averaged_AveragedModel": sum(p.numel() for p in averaged.module.parameters()),
        **{f"microseconds_{name}": 1e6 * value for name, value in medians.items()},
        "ratio_AveragedModel_over_ParameterEWMA": medians["AveragedModel"] / medians["ParameterEWMA"],
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
