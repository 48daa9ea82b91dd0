"""
Where a training iteration's time goes on rl-zoo3's CartPole shapes (8 envs x 32 steps, minibatches of 256 rows,
20 epochs, SB3's MLP [64, 64] with tanh, one thread): ``train()`` per minibatch of SB3's PPO, PPO_EWMA eager,
PPO_EWMA compiled in pieces (the loss with its backward pass, then clipping, torch's fused Adam and the EWMA update
eagerly: what a ``target_kl`` or another optimizer gets) and PPO_EWMA compiled as one function (loss, gradient,
clipping, Adam and the EWMA in one graph), in steady state (compiled before the timing); for each compiled step, the
time inside its compiled regions and graphs against the rest (Python, the eager operations around them: sampling,
advantage normalization), read from torch's profiler, with the rollouts' acting step left eager (only ``train()``'s
graphs).
Also the compiled loss with and without the proximal policy's forward pass (what the EWMA adds to a PPO step), a
rollout step's forward pass, eager and compiled, and a Breakout-sized matrix product by torch's default CPU kernel
(MKL) and by oneDNN.

    python -m benchmarks.timing.step_profile                      # 3 rounds, about 3 minutes
    python -m benchmarks.timing.step_profile --rounds 1 --iterations 5 --out /tmp/profile.md   # a dry run

Writes ``benchmarks/results/speed/cpu/step_profile.md`` (the machine, the date, the command, the table). Needs a
quiet machine: pause other runs while it times.
"""

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch as th

from benchmarks.timing.speed import machine

N_ENVS, N_STEPS, BATCH_SIZE, N_EPOCHS = 8, 32, 256, 20
"""rl-zoo3's tuned PPO entry for CartPole-v1 (its schedules left out: constant rates time the same)."""

REGION = "compiled regions (the loss with its forward pass; as one function: the whole step)"
GRAPH = "of which the graphs themselves"
BACKWARD = "compiled backward pass"
OPTIMIZER = "optimizer step (torch's fused Adam)"
KINDS = ("sb3_ppo", "ppo_ewma_eager", "ppo_ewma_compiled_pieces", "ppo_ewma_compiled")

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "results" / "speed" / "cpu" / "step_profile.md"


def build(kind: str, seed: int) -> Any:
    """A model of the kind (:data:`KINDS`) on 8 CartPole environments."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    from sb3_ewma import PPO_EWMA

    env = make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=seed)
    settings = dict(n_steps=N_STEPS, batch_size=BATCH_SIZE, n_epochs=N_EPOCHS, gae_lambda=0.8, gamma=0.98, ent_coef=0.0,
                    learning_rate=1e-3, clip_range=0.2, seed=seed, device="cpu")  # fmt: skip
    if kind == "sb3_ppo":
        return PPO("MlpPolicy", env, **settings)
    model = PPO_EWMA("MlpPolicy", env, compile_step=kind.startswith("ppo_ewma_compiled"), **settings)
    if kind == "ppo_ewma_compiled_pieces":
        model._step_in_pieces = lambda: "in pieces for the profile"  # type: ignore[method-assign]
    return model


def timed_train(model: Any) -> list[float]:
    """Wrap ``model.train`` so that each call's wall time is appended to the returned list."""
    durations: list[float] = []
    train = model.train

    def timed() -> None:
        start = time.perf_counter()
        train()
        durations.append(time.perf_counter() - start)

    model.train = timed
    return durations


def train_ms_per_minibatch(kind: str, seed: int, iterations: int) -> float:
    """Median ``train()`` time per minibatch after two untimed iterations (compilation included in those)."""
    model = build(kind, seed)
    rollout = N_ENVS * N_STEPS
    model.learn(2 * rollout)
    durations = timed_train(model)
    model.learn(iterations * rollout, reset_num_timesteps=False)
    return 1000 * statistics.median(durations) / N_EPOCHS


def compiled_graph_share(kind: str, seed: int, iterations: int) -> dict[str, float]:
    """
    For PPO_EWMA compiled (``kind``, in pieces or as one function): per minibatch, the milliseconds inside the
    compiled regions and their graphs (with the kernels they call), the compiled backward pass, the optimizer step
    (torch's fused Adam) and ``train()``'s total, from torch's profiler over ``iterations`` iterations.
    """
    from torch.profiler import ProfilerActivity, profile

    model = build(kind, seed)
    model.compiled_step.acting = lambda policy: contextlib.nullcontext()  # the rollouts eager: only train()'s graphs
    rollout = N_ENVS * N_STEPS
    model.learn(2 * rollout)
    durations = timed_train(model)
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        model.learn(iterations * rollout, reset_num_timesteps=False)
    minibatches = len(durations) * N_EPOCHS
    graphs = {REGION: 0.0, GRAPH: 0.0, BACKWARD: 0.0, OPTIMIZER: 0.0}
    graph_calls = 0.0  # a graph without a backward pass (the whole step) is called without a CompiledFunction around it
    for event in profiler.key_averages():
        if event.key.startswith("Torch-Compiled Region"):
            graphs[REGION] += event.cpu_time_total
        elif event.key == "CompiledFunction":
            graphs[GRAPH] += event.cpu_time_total
        elif event.key.startswith("## Call CompiledFxGraph"):
            graph_calls += event.cpu_time_total
        elif event.key == "CompiledFunctionBackward":
            graphs[BACKWARD] += event.cpu_time_total
        elif event.key.startswith("Optimizer.step#"):
            graphs[OPTIMIZER] += event.cpu_time_total
    if graphs[GRAPH] == 0.0:
        graphs[GRAPH] = graph_calls
    share = {name: value / 1000 / minibatches for name, value in graphs.items()}
    share["train() under the profiler"] = 1000 * sum(durations) / minibatches
    return share


def loss_ms(with_proximal: bool, seed: int, repeats: int = 300) -> float:
    """The compiled loss's forward pass on one minibatch, with or without the proximal policy's forward."""
    from sb3_ewma.common.decoupled.step import LossSettings, LossTargets, minibatch_loss
    from sb3_ewma.common.losses import log_clip_bounds

    model = build("ppo_ewma_eager", seed)
    model.learn(N_ENVS * N_STEPS)
    data = next(iter(model.rollout_buffer.get(BATCH_SIZE)))
    low, high = log_clip_bounds(0.2)
    compiled: Callable[..., Any] = th.compile(minibatch_loss, dynamic=False)
    targets = LossTargets(data.advantages, data.old_log_prob, data.old_values, data.returns)
    settings = LossSettings(th.tensor(low), th.tensor(high), None, 0.0, 0.5, 0.0, 0.0)
    arguments = (model.policy, model.proximal.network if with_proximal else None, data.observations,
                 data.actions.long().flatten(), targets, settings)  # fmt: skip
    with th.no_grad():
        for _ in range(20):
            compiled(*arguments)
        start = time.perf_counter()
        for _ in range(repeats):
            compiled(*arguments)
    return 1000 * (time.perf_counter() - start) / repeats


def acting_ms(compiled: bool, seed: int, repeats: int = 2000) -> float:
    """
    One rollout step's forward pass (:func:`~sb3_ewma.common.distributions.lean_forward`, sampled actions) on 8
    observations, eager or compiled (``fallback_random``: torch's own random draws, so the same actions).
    """
    from sb3_ewma.common.distributions import lean_forward

    model = build("ppo_ewma_eager", seed)
    observations = th.as_tensor(model.env.reset(), dtype=th.float32)
    forward: Callable[..., Any] = (
        th.compile(lean_forward, dynamic=False, options={"fallback_random": True}) if compiled else lean_forward
    )
    with th.no_grad():
        for _ in range(50):
            forward(model.policy, observations)
        start = time.perf_counter()
        for _ in range(repeats):
            forward(model.policy, observations)
    return 1000 * (time.perf_counter() - start) / repeats


def linear_us(onednn: bool, repeats: int = 300) -> float:
    """
    MinAtar Breakout's first layer on a minibatch of the speed benchmark's (1,024 x 400 -> 64, float32), microseconds:
    torch's default CPU matrix product (MKL in torch's x86 wheels), or oneDNN's (``torch.utils.mkldnn``; XLA, SBX's
    compiler, computes it its own way).
    """
    import torch.utils.mkldnn as mkldnn

    generator = th.Generator().manual_seed(0)
    layer, inputs = th.nn.Linear(400, 64), th.randn(1024, 400, generator=generator)
    if onednn:
        layer, inputs = mkldnn.to_mkldnn(layer), inputs.to_mkldnn()
    with th.no_grad():
        for _ in range(20):
            layer(inputs)
        start = time.perf_counter()
        for _ in range(repeats):
            layer(inputs)
    return 1e6 * (time.perf_counter() - start) / repeats


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=20, help="timed iterations per measurement")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    th.set_num_threads(1)
    kinds = list(KINDS)
    per_kind: dict[str, list[float]] = {kind: [] for kind in kinds}
    profiled = ("ppo_ewma_compiled_pieces", "ppo_ewma_compiled")
    shares: dict[str, list[dict[str, float]]] = {kind: [] for kind in profiled}
    losses: dict[bool, list[float]] = {True: [], False: []}
    acting: dict[bool, list[float]] = {True: [], False: []}
    linear: dict[bool, list[float]] = {True: [], False: []}
    for round_index in range(args.rounds):
        for offset in range(len(kinds)):  # alternating order
            kind = kinds[(round_index + offset) % len(kinds)]
            per_kind[kind].append(train_ms_per_minibatch(kind, round_index, args.iterations))
        for kind in profiled:
            shares[kind].append(compiled_graph_share(kind, round_index, max(args.iterations // 2, 2)))
        for with_proximal in (True, False):
            losses[with_proximal].append(loss_ms(with_proximal, round_index))
        for compiled in (False, True):
            acting[compiled].append(acting_ms(compiled, round_index))
        for onednn in (False, True):
            linear[onednn].append(linear_us(onednn))
        print(f"round {round_index + 1}/{args.rounds} done", flush=True)

    sb3 = statistics.median(per_kind["sb3_ppo"])
    lines = [
        "# Where a CartPole training step's time goes",
        "",
        f"Machine: {machine()['cpu']} ({machine()['cores']}), {th.get_num_threads()} torch thread; torch "
        f"{th.__version__}; {time.strftime('%Y-%m-%d')}. Command: `python -m benchmarks.timing.step_profile "
        f"{' '.join(sys.argv[1:] if argv is None else argv)}".rstrip() + "`.",
        "",
        f"rl-zoo3's CartPole-v1 shapes: {N_ENVS} envs x {N_STEPS} steps, minibatches of {BATCH_SIZE}, {N_EPOCHS} epochs; "
        f"medians over {args.rounds} rounds of {args.iterations} timed iterations (compilation before the timing).",
        "",
        "| train() per minibatch | ms | vs SB3 PPO |",
        "|---|---|---|",
    ]
    for kind in kinds:
        value = statistics.median(per_kind[kind])
        lines.append(f"| {kind} | {value:.3f} | {value / sb3:.2f} |")
    lines += [
        "",
        "PPO_EWMA compiled, per minibatch, under torch's profiler (which slows the Python around the graphs more than the "
        "graphs), ms and share of train():",
        "",
        "| part | in pieces | as one function |",
        "|---|---|---|",
    ]
    columns = {}
    for kind in profiled:
        share = {key: statistics.median(item[key] for item in shares[kind]) for key in shares[kind][0]}
        total = share.pop("train() under the profiler")
        share["everything else (Python and eager operations: sampling, advantage normalization, ...)"] = total - (
            share[REGION] + share[BACKWARD] + share[OPTIMIZER]
        )
        columns[kind] = {key: f"{value:.3f} ({value / total:.0%})" for key, value in share.items()}
        columns[kind]["train()"] = f"{total:.3f} (100%)"
    for key in columns[profiled[0]]:
        lines.append(f"| {key} | {columns[profiled[0]][key]} | {columns[profiled[1]][key]} |")
    with_proximal, without = statistics.median(losses[True]), statistics.median(losses[False])
    lines += [
        "",
        f"The compiled loss's forward pass: {with_proximal:.3f} ms with the proximal policy's forward, {without:.3f} ms "
        f"without it ({with_proximal / without - 1:+.0%}).",
        "",
        f"A rollout step's forward pass on {N_ENVS} observations (sampled actions): {statistics.median(acting[False]):.3f} "
        f"ms eager, {statistics.median(acting[True]):.3f} ms compiled.",
        "",
        f"MinAtar Breakout's first layer on a minibatch of 1,024 (400 -> 64, float32): {statistics.median(linear[False]):.0f}"
        f" us by torch's default matrix product, {statistics.median(linear[True]):.0f} us by oneDNN's.",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
