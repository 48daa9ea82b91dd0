"""
The proximal policy's noise (figure 4's mechanism): how much of the clipping anchor's movement comes from
the minibatch sampling, with the recent policy as the anchor (PPO) and with the EWMA (PPO-EWMA).

The paper attributes the EWMA's gain to a less noisy proximal policy (section 5.3, appendix H: the variance of
``theta - theta_prox``). This measures it directly. A model is trained to a point of its run; the rollout it is about
to train on and its state (policy, optimizer, EWMA: the package's own ``save``) are kept; then ``replicas`` copies of
it (``load``) each train that one iteration with a different minibatch order, and nothing else differs. The anchor
each copy ends the iteration with (PPO: the policy, which is the next iteration's proximal policy; PPO-EWMA: the EWMA)
is compared, as action distributions on the rollout's states:

- **noise**: the mean over pairs of copies of ``KL[anchor_a, anchor_b]``, halved (for independent copies the expected
  KL of one to the other is twice the KL of one to their common mean, to second order);
- **movement**: the mean over copies of ``KL[anchor_start, anchor_a]``, the anchor's move in the iteration;
- **noise share**: noise / movement, the part of the anchor's move that the minibatch order decides.

Regimes: MinAtar Breakout, MLP [64, 64], 64 environments x 128 steps, 3 epochs (the ``cpu`` setting, as the
``ewma_comparison`` runs of ``--preset breakout_preregistered``), with 8, 32 and 128 minibatches per epoch
(minibatches of 1,024, 256 and 64; the EWMA's default center of mass is the number of minibatches). Each regime:
one seed per algorithm, measured at 4 points of a 1M-step run, 4 copies each (the preset table's entry: its scale,
and the options ``minibatches``, ``points``, ``replicas``). Writes ``results.md`` and ``runs.json`` in
``benchmarks/results/proximal_noise/<preset>``.

    python -m benchmarks.learning.proximal_noise --preset cpu
"""

import argparse
import copy
import io
import itertools
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import configure

from benchmarks.harness.common import RESULTS_DIR
from benchmarks.harness.diagnostics import action_distributions, flat_observations, kl_between
from benchmarks.harness.envs import make_env
from benchmarks.harness.report import markdown_table
from benchmarks.harness.settings import preset_runs, presets_of
from sb3_ewma import PPO_EWMA

NAME = "proximal_noise"
ALGOS = {"ppo": None, "ppo_ewma": "auto"}
"""The algorithms compared and their ``ewma_decay``: PPO (the recent policy as the anchor) and PPO-EWMA."""


class _KeepRollout(BaseCallback):
    """At the end of each rollout (before the iteration's training): the model's saved state and the rollout."""

    def __init__(self) -> None:
        super().__init__()
        self.state: bytes = b""
        self.buffer: Any = None

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        stream = io.BytesIO()
        self.model.save(stream)
        self.state = stream.getvalue()
        self.buffer = copy.deepcopy(self.model.rollout_buffer)


def anchor_of(model: PPO_EWMA) -> Any:
    """The network whose distribution is the proximal policy of the model's next iteration: the EWMA, or the policy."""
    return model.proximal.network if model.proximal_decay is not None else model.policy


def measure_point(state: bytes, buffer: Any, env: Any, replicas: int, seed: int) -> dict[str, float]:
    """The noise, movement and noise share of the anchor over one iteration from a kept state (module docstring)."""
    observations = flat_observations(copy.deepcopy(buffer))
    start = PPO_EWMA.load(io.BytesIO(state), env=env, device="cpu")
    before = action_distributions(anchor_of(start), observations)
    after = []
    for replica in range(replicas):
        model = PPO_EWMA.load(io.BytesIO(state), env=env, device="cpu")
        model.set_logger(configure(None, []))
        model.rollout_buffer = copy.deepcopy(buffer)
        np.random.seed(seed * 1000 + replica)  # the minibatch order (SB3's RolloutBuffer.get)
        th.manual_seed(seed * 1000 + replica)
        model.train()
        after.append(action_distributions(anchor_of(model), observations))
    noise = float(np.mean([kl_between(a, b) for a, b in itertools.permutations(after, 2)])) / 2
    movement = float(np.mean([kl_between(before, a) for a in after]))
    return {"noise": noise, "movement": movement, "noise_share": noise / movement if movement > 0 else float("nan")}


def run_regime(preset: str, algo: str, minibatches: int, seed: int) -> dict[str, Any]:
    """One run of ``algo`` with ``minibatches`` per epoch, measured at the preset's ``points`` evenly spaced points."""
    setting, scale, runs = preset_runs(preset, NAME, {})
    n_envs = setting.n_envs
    hyperparams = setting.hyperparams("ppo_ewma", n_envs)
    n_steps = int(hyperparams["n_steps"])
    hyperparams.update(batch_size=n_steps * n_envs // minibatches, ewma_decay=ALGOS[algo])
    policy, policy_kwargs = "MlpPolicy", hyperparams.pop("policy_kwargs", {})
    env = make_env(setting.envs[0], n_envs, seed)
    model = PPO_EWMA(policy, env, policy_kwargs=policy_kwargs, seed=seed, device="cpu", **hyperparams)
    iteration = n_steps * n_envs
    stretch = max(iteration, scale.timesteps // int(runs.options["points"]) // iteration * iteration)
    keep = _KeepRollout()
    points = []
    started = time.perf_counter()
    for _ in range(int(runs.options["points"])):
        model.learn(stretch, callback=keep, reset_num_timesteps=False)
        measured = measure_point(keep.state, keep.buffer, env, int(runs.options["replicas"]), seed)
        points.append({"timesteps": model.num_timesteps, **measured})
    env.close()
    return {
        "algo": algo,
        "minibatches": minibatches,
        "minibatch_size": iteration // minibatches,
        "seed": seed,
        "points": points,
        "wall_time": round(time.perf_counter() - started, 1),
    }


def report(records: Sequence[dict[str, Any]]) -> str:
    """Per regime and algorithm: the median over the measured points of the noise, the movement and the share."""
    rows = []
    by_regime: dict[int, dict[str, dict[str, float]]] = {}
    for record in sorted(records, key=lambda r: (r["minibatches"], r["algo"], r["seed"])):
        medians = {key: float(np.median([point[key] for point in record["points"]])) for key in ("noise", "movement")}
        medians["noise_share"] = float(np.median([point["noise_share"] for point in record["points"]]))
        by_regime.setdefault(record["minibatches"], {})[record["algo"]] = medians
        rows.append(
            [
                f"{record['minibatches']} x {record['minibatch_size']}",
                record["algo"],
                record["seed"],
                f"{medians['noise']:.3g}",
                f"{medians['movement']:.3g}",
                f"{medians['noise_share']:.3g}",
                ", ".join(f"{point['noise_share']:.2g}" for point in record["points"]),
            ]
        )
    header = ["minibatches x size", "algorithm", "seed", "noise", "movement", "noise share", "noise share per point"]
    ratios = [
        [f"{count}", f"{pair['ppo_ewma']['noise'] / pair['ppo']['noise']:.3g}"]
        for count, pair in sorted(by_regime.items())
        if {"ppo", "ppo_ewma"} <= set(pair) and pair["ppo"]["noise"] > 0
    ]
    return "\n\n".join(
        [
            "## Results",
            "Medians over the measured points of each run (module docstring for the definitions).",
            markdown_table(header, rows),
            "### The EWMA's anchor noise against the recent policy's (PPO-EWMA noise / PPO noise)",
            markdown_table(["minibatches per epoch", "noise ratio"], ratios),
        ]
    )


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=presets_of(NAME), default="cpu")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    _, scale, runs = preset_runs(args.preset, NAME, {})
    th.set_num_threads(1)
    out_dir = args.out / NAME / args.preset
    out_dir.mkdir(parents=True, exist_ok=True)
    records = []
    for minibatches in runs.options["minibatches"]:
        for seed in scale.seed_range:
            for algo in ALGOS:
                records.append(run_regime(args.preset, algo, minibatches, seed))
                print(f"{algo} {minibatches} minibatches seed {seed}: {records[-1]['wall_time']} s", flush=True)
                (out_dir / "runs.json").write_text(json.dumps(records, indent=1) + "\n")
    text = f"# The proximal policy's noise\n\n{(__doc__ or '').strip()}\n\n{report(records)}\n"
    (out_dir / "results.md").write_text(text)
    print(f"report: {out_dir / 'results.md'}")
    return out_dir


if __name__ == "__main__":
    main()
