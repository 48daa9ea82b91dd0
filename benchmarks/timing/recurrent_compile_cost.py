"""
What RecurrentPPO_EWMA's compiled step costs and saves on rl-zoo3's tuned ``ppo_lstm`` entries (CartPoleNoVel-v1 and
PendulumNoVel-v1, their settings without the schedules and normalization: constant rates time the same), the basis of
its ``compile_step="auto"`` threshold: each entry trains one iteration (compiled: with the compilation, from an empty
compilation cache) and then three more, compiled and eager, one torch thread. The saving per optimizer step is the
difference of the later iterations' times; the compilation's cost is the first iteration's extra time; their ratio is
the number of optimizer steps from which compiling pays.

    python -m benchmarks.timing.recurrent_compile_cost                     # both entries, about 2 minutes
    python -m benchmarks.timing.recurrent_compile_cost --iterations 1 --entries CartPoleNoVel-v1 --out /tmp/cost.md

Writes ``benchmarks/results/recurrent_compile_cost/cpu/results.md`` (the machine, the date, the command, the table).
Needs a quiet machine.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.timing.speed import machine

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "results" / "recurrent_compile_cost" / "cpu" / "results.md"


def entries() -> dict[str, tuple[int, dict[str, Any]]]:
    """rl-zoo3's ``ppo_lstm`` entries: the number of environments and the constructor's settings."""
    import torch as th

    policy_kwargs = dict(ortho_init=False, activation_fn=th.nn.ReLU, lstm_hidden_size=64, enable_critic_lstm=True,
                         net_arch=dict(pi=[64], vf=[64]))  # fmt: skip
    cartpole = dict(n_steps=32, batch_size=256, n_epochs=20, gae_lambda=0.8, gamma=0.98, learning_rate=1e-3)
    pendulum = dict(n_steps=1024, n_epochs=10, gamma=0.9, learning_rate=1e-3, use_sde=True, sde_sample_freq=4)
    return {
        "CartPoleNoVel-v1": (8, {**cartpole, "policy_kwargs": policy_kwargs}),
        "PendulumNoVel-v1": (4, {**pendulum, "policy_kwargs": policy_kwargs}),
    }


def measure(env_id: str, iterations: int) -> dict[str, float]:
    """One entry's first and later iteration times, compiled and eager, and what follows from them."""
    import rl_zoo3.import_envs  # noqa: F401  (registers the NoVel ids)
    from stable_baselines3.common.env_util import make_vec_env

    from sb3_ewma import RecurrentPPO_EWMA

    n_envs, settings = entries()[env_id]
    iteration = settings["n_steps"] * n_envs
    times: dict[bool, tuple[float, float]] = {}
    steps = 0
    for compiled in (True, False):
        model = RecurrentPPO_EWMA("MlpLstmPolicy", make_vec_env(env_id, n_envs=n_envs, seed=0), seed=0, device="cpu",
                                  compile_step=compiled, **settings)  # fmt: skip
        start = time.perf_counter()
        model.learn(iteration)
        first = time.perf_counter() - start
        if compiled and not model.compiled_step.verified:
            raise RuntimeError(f"RecurrentPPO_EWMA did not compile: {model.compiled_step.reason}")
        start = time.perf_counter()
        model.learn(iteration * iterations, reset_num_timesteps=False)
        times[compiled] = (first, (time.perf_counter() - start) / iterations)
        steps = model.n_epochs * model.minibatches_per_epoch
    saving = (times[False][1] - times[True][1]) / steps
    compilation = (times[True][0] - times[True][1]) - (times[False][0] - times[False][1])
    return {
        "optimizer steps per iteration": steps,
        "eager iteration (s)": times[False][1],
        "compiled iteration (s)": times[True][1],
        "compiled / eager": times[True][1] / times[False][1],
        "saving per optimizer step (ms)": 1000 * saving,
        "compilation (s)": compilation,
        "break-even (optimizer steps)": compilation / saving if saving > 0 else float("inf"),
    }


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", default=",".join(entries()), help="comma-separated environment ids")
    parser.add_argument("--iterations", type=int, default=3, help="timed iterations after the first")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    import torch as th

    th.set_num_threads(1)
    # an empty compilation cache: the first compilation on a machine, what a new user pays (the caller's put back)
    previous = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="recurrent_compile_cost_") as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        try:
            results = {env_id: measure(env_id, args.iterations) for env_id in args.entries.split(",")}
        finally:
            if previous is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = previous
    info = machine()
    columns = list(next(iter(results.values())))
    lines = [
        "# RecurrentPPO_EWMA: what the compiled step costs and saves",
        "",
        f"`{' '.join(['python -m benchmarks.timing.recurrent_compile_cost', *(argv if argv is not None else sys.argv[1:])])}`"
        f" on {info['cpu']} ({info['cores']} cores), {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, one torch thread.",
        "",
        "| entry | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for env_id, row in results.items():
        lines.append(f"| {env_id} | " + " | ".join(f"{value:.3g}" for value in row.values()) + " |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return results


if __name__ == "__main__":
    main()
