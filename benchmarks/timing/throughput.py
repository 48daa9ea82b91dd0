"""
Throughput of SB3's PPO, PPO_EWMA, PPG and PPG_EWMA on identical settings.

The algorithms run one after the other in one process, alternating (A B C D, B C D A, ...), so that a shared, noisy
machine slows them alike; the report gives the median environment steps per second of each and its time relative to
SB3's PPO, for the whole ``learn`` (rollouts + training) and for training alone. Each algorithm first learns one
iteration (not timed: allocations, cuDNN autotuning), then ``iterations`` timed ones; PPG's phase is ``iterations``
long, so the timed window holds one auxiliary phase (its cost per step does not depend on N_pi). The paper's
estimate: PPO-EWMA +30% compute (+19% wall clock), PPG-EWMA +2.3% compute (+3% wall clock).

Measurements are appended to ``measurements.csv`` as they are made; rerunning the command skips those already made
with the same settings (resume). Default shapes are the paper's Procgen ones (IMPALA CNN, 8 minibatches, 3 PPO
epochs, 1 policy epoch for PPG), scaled to the machine::

    python -m benchmarks.timing.throughput --preset smoke        # seconds: 4 envs x 32 steps, NatureCNN
    python -m benchmarks.timing.throughput                       # cpu: Procgen starpilot (easy), 8 envs x 32 steps, IMPALA
    python -m benchmarks.timing.throughput --preset gpu          # 64 envs x 256 steps, the paper's iteration, on CUDA
    python -m benchmarks.timing.throughput --env fake-image      # random 64x64x3 frames (no procgen needed)
    python -m benchmarks.timing.throughput --preset cartpole     # CartPole-v1, rl-zoo3's tuned PPO shapes, MLP
    python -m benchmarks.timing.throughput --preset minatar      # MinAtar Breakout, the learning benchmarks' cpu shapes, MLP

An algorithm name ending in ``_async`` (``ppo_ewma_async``, ``ppg_async``, ``ppg_ewma_async``) runs with
``async_rollouts=True`` (a collector thread), one ending in ``_process`` with ``async_rollouts="process"`` (a collector
process); a name ending in ``_fast`` (``ppo_ewma_fast``, ``ppo_ewma_async_fast``, ``ppg_ewma_fast``) trains with
``channels_last`` weights and the forward passes under bfloat16 autocast (``sb3_ewma.common.precision``, a GPU's
means: measured here end to end, and one by one by ``benchmarks.timing.train_step``); ``--algos all`` runs every one
but those. ``ppo_foreach`` is SB3's PPO with Adam's foreach step
(``optimizer_kwargs=dict(eps=1e-5, foreach=True)``), an option of SB3's (the sb3_ewma algorithms build their optimizer
as SB3's policies do: their EWMA's own cost reads as ``ppo_ewma`` against ``ppo``).
Besides steps per second, each measurement splits the timed ``learn``
into exposed collection (``learn`` minus ``train``: what the main thread spends outside training, i.e. rollouts,
or with overlapped rollouts the wait for the collector), training, and within training the proximal pass and the
EWMA update.
"""

import argparse
import hashlib
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch as th

from benchmarks.harness.common import (
    ALGORITHMS,
    add_malloc_argument,
    algorithm_class,
    append_csv,
    apply_malloc,
    base_parser,
    read_csv,
)
from benchmarks.harness.envs import NETWORKS, default_env_id, make_env, policy_for

NAME = "throughput"
PRESETS: dict[str, dict[str, Any]] = {
    "smoke": dict(n_envs=4, n_steps=32, n_minibatches=4, iterations=1, repeats=1, features="nature", mode="easy", threads=1),
    "cpu": dict(n_envs=8, n_steps=32, n_minibatches=8, iterations=2, repeats=3, features="impala", mode="easy", threads=1),
    "gpu": dict(n_envs=64, n_steps=256, n_minibatches=8, iterations=3, repeats=3, features="impala", mode="easy", threads=4),
    "paper": dict(
        n_envs=256, n_steps=256, n_minibatches=8, iterations=2, repeats=3, features="impala", mode="hard", threads=4
    ),
    # rl-zoo3's tuned PPO entry for CartPole-v1 (8 envs, n_steps 32, batch 256, 20 epochs; constant schedules)
    "cartpole": dict(
        env="CartPole-v1",
        n_envs=8,
        n_steps=32,
        n_minibatches=1,
        n_epochs=20,
        iterations=32,
        repeats=5,
        features="mlp",
        threads=1,
        hyperparams=dict(gamma=0.98, gae_lambda=0.8, ent_coef=0.0, learning_rate=1e-3, clip_range=0.2),
    ),
    # the learning benchmarks' cpu task and settings (MinAtar Breakout, 64 envs x 128 steps, 8 minibatches, 3 epochs)
    "minatar": dict(
        env="MinAtar/Breakout-v1",
        n_envs=64,
        n_steps=128,
        n_minibatches=8,
        n_epochs=3,
        iterations=16,
        repeats=5,
        features="mlp",
        threads=1,
        hyperparams=dict(gamma=0.99, gae_lambda=0.95, ent_coef=0.01, learning_rate=5e-4, clip_range=0.2),
    ),
}
"""One torch thread on the CPU presets: several threads on a busy 2-core machine slow torch down by 10x or more."""
CONFIG_KEYS = (
    "env",
    "n_envs",
    "n_steps",
    "n_minibatches",
    "n_epochs",
    "iterations",
    "features",
    "device",
    "threads",
    "malloc",
)
ASYNC_SUFFIX = "_async"
PROCESS_SUFFIX = "_process"
FAST_SUFFIX = "_fast"
COMPILED_SUFFIX = "_compiled"
"""The training step compiled (``compile_step=True``; the others train eagerly, ``compile_step=False``), last in a
name: ``ppo_ewma_compiled``, ``ppo_ewma_process_compiled``, ``ppo_ewma_fast_compiled``. On CUDA with Adam's fused
step, with which the compiled step runs as one function there."""
"""channels_last weights and bfloat16 autocast in train() (a GPU's means; see training_precision_for)."""
CUDA_GRAPHS_SUFFIX = "_cudagraphs"
"""After ``_compiled``: the acting step compiled with ``mode="reduce-overhead"`` (CUDA graphs on CUDA; the CPU ignores
it), ``ppo_ewma_compiled_cudagraphs``: measured on a GPU before it becomes the default there."""
SB3_FOREACH = "ppo_foreach"
"""SB3's PPO with Adam's foreach step (``optimizer_kwargs``; SB3's numbers bit for bit)."""
ALL_ALGORITHMS = (
    *ALGORITHMS,
    SB3_FOREACH,
    *(f"{name}{suffix}" for suffix in (ASYNC_SUFFIX, PROCESS_SUFFIX) for name in ALGORITHMS if name != "ppo"),
)
"""SB3's PPO has no overlapped rollouts; the others run three ways: synchronous, with a collector thread (``_async``)
and with a collector process (``_process``)."""
SPLIT = ("collection", "train", "proximal", "ewma")
"""The split of the timed ``learn`` (seconds): exposed collection, training, and within training the proximal pass and
the EWMA update."""


def base_algorithm(name: str) -> tuple[str, bool | str]:
    """
    The algorithm and its ``async_rollouts``: ``("ppo_ewma", True)`` for ``"ppo_ewma_async"`` (a collector thread),
    ``("ppo_ewma", "process")`` for ``"ppo_ewma_process"``, ``("ppo_ewma", False)`` for ``"ppo_ewma"``.
    """
    if name == SB3_FOREACH:
        return "ppo", False
    name = name.removesuffix(CUDA_GRAPHS_SUFFIX).removesuffix(COMPILED_SUFFIX)
    if name.endswith(FAST_SUFFIX):
        name = name[: -len(FAST_SUFFIX)]
    for suffix, mode in ((ASYNC_SUFFIX, True), (PROCESS_SUFFIX, "process")):
        if name.endswith(suffix) and name != "ppo" + suffix:
            return name[: -len(suffix)], mode
    return name, False


"""The settings a measurement depends on (hashed: measurements made with other settings are not reused)."""


def training_precision_for(name: str) -> Any:
    """The numeric format of ``train()`` for an algorithm name: the ``_fast`` one, or None (the algorithm's own)."""
    from sb3_ewma.common.precision import TrainingPrecision

    fast = name.removesuffix(CUDA_GRAPHS_SUFFIX).removesuffix(COMPILED_SUFFIX).endswith(FAST_SUFFIX)
    return TrainingPrecision(th.bfloat16, channels_last=True) if fast else None


def settings_for(name: str, config: dict[str, Any]) -> dict[str, Any]:
    """Identical settings for every algorithm; PPG gets its policy-phase equivalents."""
    foreach = name == SB3_FOREACH
    compiled = name.removesuffix(CUDA_GRAPHS_SUFFIX).endswith(COMPILED_SUFFIX)
    if name.endswith(CUDA_GRAPHS_SUFFIX) and not compiled:
        raise ValueError(f"{name}: {CUDA_GRAPHS_SUFFIX} follows {COMPILED_SUFFIX} (the acting step is compiled then)")
    name, async_rollouts = base_algorithm(name)
    batch_size = config["n_envs"] * config["n_steps"] // config["n_minibatches"]
    settings: dict[str, Any] = dict(
        n_steps=config["n_steps"],
        batch_size=batch_size,
        n_epochs=config["n_epochs"],
        learning_rate=5e-4,
        ent_coef=0.01,
        gamma=0.999,
        policy_kwargs=policy_for(config["features"])[1],
        device=config["device"],
        seed=0,
    )
    settings.update(config.get("hyperparams") or {})
    if name.startswith("ppg"):
        # PPG's E_pi = 1; one auxiliary phase within the timed iterations, with the paper's 6 epochs
        settings.update(n_epochs=1, n_policy_iterations=config["iterations"], n_aux_epochs=6)
    if async_rollouts:
        settings["async_rollouts"] = async_rollouts
    if name != "ppo":
        settings["compile_step"] = compiled
    if foreach or (compiled and str(config["device"]).startswith("cuda")):
        # SB3's own Adam settings (eps=1e-5 when optimizer_kwargs is not given), with the foreach step, or compiled on
        # CUDA the fused one (torch's other Adam steps keep a CUDA parameter's step count on the CPU, and the compiled
        # step then runs in pieces: the performance guide)
        policy_kwargs = settings["policy_kwargs"] or {}
        step = {"foreach": True} if foreach else {"fused": True}
        optimizer_kwargs = {"eps": 1e-5, **policy_kwargs.get("optimizer_kwargs", {}), **step}
        settings["policy_kwargs"] = {**policy_kwargs, "optimizer_kwargs": optimizer_kwargs}
    return settings


def synchronize(device: th.device | str) -> None:
    """
    Wait until the kernels queued on ``device`` have run, when it is a CUDA device; nothing on any other device (CUDA
    is not touched then).

    :param device: the device of the timed work
    """
    device = th.device(device)
    if device.type == "cuda":
        th.cuda.synchronize(device)


class TrainTimer:
    """
    Wraps ``model.train`` to add up the time spent optimizing, and within it the proximal pass
    (``proximal.log_prob``) and the EWMA update (``proximal.step``), the methods of the model's proximal policy. On
    CUDA every timed part synchronizes the model's device when it starts and when it ends, so that kernels queued
    before a part (the backward pass and the optimizer step before the EWMA update) are not counted in it.

    :param model: the algorithm whose methods are wrapped (in place)
    """

    def __init__(self, model: Any) -> None:
        self.seconds = {"train": 0.0, "proximal": 0.0, "ewma": 0.0}
        self.device = th.device(model.device)
        self._wrap(model, "train", "train")
        proximal = getattr(model, "proximal", None)
        for owner, method, key in ((proximal, "log_prob", "proximal"), (proximal, "step", "ewma")):
            if owner is not None and hasattr(owner, method):
                self._wrap(owner, method, key)

    def _wrap(self, owner: Any, method: str, key: str) -> None:
        """Time ``owner.method`` (the model, or its proximal policy) under ``key``."""
        function = getattr(owner, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            synchronize(self.device)
            start = time.perf_counter()
            result = function(*args, **kwargs)
            synchronize(self.device)
            self.seconds[key] += time.perf_counter() - start
            return result

        setattr(owner, method, timed)


def config_hash(config: dict[str, Any]) -> str:
    """A hash of the settings of a measurement."""
    # measurements made before --malloc existed ran with glibc's defaults: "default" is left out of the hash
    content = json.dumps(
        {key: config[key] for key in CONFIG_KEYS if (key, config[key]) != ("malloc", "default")}, sort_keys=True
    )
    return hashlib.sha1(content.encode()).hexdigest()[:12]


def measure(name: str, repeat: int, config: dict[str, Any]) -> dict[str, Any]:
    """Time one algorithm once: a warm-up iteration, then ``iterations`` timed ones. Returns the CSV row."""
    env = make_env(config["env"], config["n_envs"], seed=repeat)
    policy = policy_for(config["features"])[0]
    model = algorithm_class(base_algorithm(name)[0])(policy, env, **settings_for(name, config))
    precision = training_precision_for(name)
    if precision is not None:
        model.set_training_precision(precision)
    if name.endswith(CUDA_GRAPHS_SUFFIX):
        model.compiled_step.acting_mode = "reduce-overhead"
    model.learn(config["n_envs"] * config["n_steps"])
    timer = TrainTimer(model)
    steps = config["n_envs"] * config["n_steps"] * config["iterations"]
    synchronize(timer.device)  # the warm-up's queued kernels are not part of the timed learn
    start = time.perf_counter()
    model.learn(steps, reset_num_timesteps=False)
    synchronize(timer.device)
    total = time.perf_counter() - start
    env.close()
    train = timer.seconds["train"]
    return {
        "repeat": repeat,
        "algo": name,
        **{key: config[key] for key in CONFIG_KEYS},
        "steps": steps,
        "learn_seconds": round(total, 4),
        "train_seconds": round(train, 4),
        "steps_per_second": round(steps / total, 2),
        "train_steps_per_second": round(steps / train, 2),
        "collection_seconds": round(total - train, 4),
        "proximal_seconds": round(timer.seconds["proximal"], 4),
        "ewma_seconds": round(timer.seconds["ewma"], 4),
        "config_hash": config_hash(config),
    }


def run(config: dict[str, Any], csv_path: Path | None = None) -> dict[str, dict[str, float]]:
    """
    All the measurements, alternating the algorithms; with ``csv_path``, those already in that CSV (same settings) are
    kept and the others appended as they are made.

    :return: ``{algo: {"total": median steps/s of learn, "train": median steps/s of training}}``
    """
    names = list(dict.fromkeys(config["algos"]))
    th.set_num_threads(config["threads"])
    apply_malloc(config["malloc"])
    for name in names:
        algorithm_class(base_algorithm(name)[0])  # fail early on an unknown name
        if base_algorithm(name)[0] == "ppo" and training_precision_for(name) is not None:
            raise ValueError(f"{name}: SB3's PPO has no training_precision (the _fast algorithms are this package's)")
        settings_for(name, config)  # a name it cannot read (_cudagraphs without _compiled)
    digest = config_hash(config)
    rows = [row for row in read_csv(csv_path) if row["config_hash"] == digest] if csv_path else []
    done = {(int(row["repeat"]), row["algo"]) for row in rows}
    if done:
        print(f"{len(done)} measurement(s) already made with these settings: skipped")
    for repeat in range(config["repeats"]):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        for name in order:
            if (repeat, name) in done:
                continue
            row = measure(name, repeat, config)
            rows.append(row)
            if csv_path:
                append_csv(csv_path, row)
            speeds = f"{row['steps_per_second']:8.1f} steps/s (train only {row['train_steps_per_second']:8.1f})"
            print(f"repeat {repeat} {name:9s} {speeds}")
    kinds = ("total", "train", *(f"{part}_share" for part in SPLIT))
    results: dict[str, dict[str, list[float]]] = {name: {kind: [] for kind in kinds} for name in names}
    for row in rows:
        if row["algo"] in results and int(row["repeat"]) < config["repeats"]:
            results[row["algo"]]["total"].append(float(row["steps_per_second"]))
            results[row["algo"]]["train"].append(float(row["train_steps_per_second"]))
            for part in SPLIT:
                # share of the timed learn (rows written before the split was measured have no such column)
                if row.get(f"{part}_seconds") not in (None, ""):
                    share = float(row[f"{part}_seconds"]) / float(row["learn_seconds"])
                    results[row["algo"]][f"{part}_share"].append(share)
    return {
        name: {kind: statistics.median(values) for kind, values in runs.items() if values}
        for name, runs in results.items()
        if runs["total"]
    }


def report(medians: dict[str, dict[str, float]], baseline: str = "ppo") -> str:
    """The markdown table of the medians and of the time of each algorithm relative to ``baseline``."""
    lines = [
        "| algorithm | steps/s (learn) | time vs PPO (learn) | steps/s (train only) | time vs PPO (train only) "
        "| collection / train / proximal / EWMA (% of learn) |",
        "|---|---|---|---|---|---|",
    ]
    for name, value in medians.items():
        if baseline in medians:
            ratio_total = medians[baseline]["total"] / value["total"]
            ratio_train = medians[baseline]["train"] / value["train"]
            ratios = f"{ratio_total:.3f} ({(ratio_total - 1) * 100:+.1f}%) | {value['train']:.1f} | {ratio_train:.3f}"
            ratios += f" ({(ratio_train - 1) * 100:+.1f}%)"
        else:
            ratios = f"- | {value['train']:.1f} | -"
        split = " / ".join(f"{100 * value[f'{part}_share']:.0f}" if f"{part}_share" in value else "-" for part in SPLIT)
        lines.append(f"| {name} | {value['total']:.1f} | {ratios} | {split} |")
    if {"ppo", "ppo_ewma"} <= medians.keys() and {"ppg", "ppg_ewma"} <= medians.keys():
        ppo = medians["ppo"]["total"] / medians["ppo_ewma"]["total"]
        ppg = medians["ppg"]["total"] / medians["ppg_ewma"]["total"]
        overheads = f"PPO-EWMA / PPO {ppo:.3f} ({(ppo - 1) * 100:+.1f}%), PPG-EWMA / PPG {ppg:.3f} ({(ppg - 1) * 100:+.1f}%)"
        lines += ["", f"EWMA overhead (time of learn): {overheads}"]
    overlapped = [
        f"{name}: {medians[baseline]['total'] / value['total']:.3f} vs PPO, "
        f"{medians[base_algorithm(name)[0]]['total'] / value['total']:.3f} vs {base_algorithm(name)[0]}"
        for name, value in medians.items()
        if base_algorithm(name)[1] and baseline in medians and base_algorithm(name)[0] in medians
    ]
    if overlapped:
        lines += ["", "Overlapped rollouts (time of learn): " + "; ".join(overlapped)]
    fast = [
        f"{name}: {medians[name[: -len(FAST_SUFFIX)]]['total'] / value['total']:.3f}"
        for name, value in medians.items()
        if name.endswith(FAST_SUFFIX) and name[: -len(FAST_SUFFIX)] in medians
    ]
    if fast:
        lines += ["", "channels_last + bf16 training step (speed-up of learn over the same algorithm): " + "; ".join(fast)]
    return "\n".join(lines)


def plot(medians: dict[str, dict[str, float]], path: Path) -> str:
    """Bars of the median steps per second (learn and train only); returns the markdown image."""
    from benchmarks.harness.report import ALGORITHM_LABELS, new_figure, save_figure

    figure, axes = new_figure(1, 2, width=4.8)
    names = list(medians)
    for ax, kind, title in zip(axes[0], ("total", "train"), ("learn (rollouts + training)", "training only")):
        ax.bar([ALGORITHM_LABELS.get(name, name) for name in names], [medians[name][kind] for name in names])
        ax.set_title(f"environment steps per second: {title}", fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(alpha=0.3, axis="y")
    return save_figure(figure, path)


def write_results(config: dict[str, Any], medians: dict[str, dict[str, float]], out_dir: Path, command: str) -> Path:
    """``results.md`` and ``throughput.png`` in ``out_dir`` (``results_malloc-default.md`` and
    ``throughput_malloc-default.png`` with ``--malloc default``)."""
    suffix = "" if config.get("malloc", "default") == "keep-freed" else "_malloc-default"
    settings = ", ".join(f"{key}={config[key]}" for key in (*CONFIG_KEYS, "repeats", "hyperparams") if key in config)
    lines = [
        "# Throughput: SB3 PPO, PPO-EWMA, PPG, PPG-EWMA",
        "",
        (__doc__ or "").strip().split("\n\n")[1],
        "",
        f"- command: `{command}`",
        f"- settings: {settings}",
        f"- written {time.strftime('%Y-%m-%d %H:%M')}; medians over {config['repeats']} repeat(s)",
        "",
        report(medians),
        "",
        plot(medians, out_dir / f"{NAME}{suffix}.png") if medians else "",
        "",
    ]
    path = out_dir / f"results{suffix}.md"
    path.write_text("\n".join(lines))
    print(f"report: {path}")
    return path


def _parser() -> argparse.ArgumentParser:
    parser = base_parser(__doc__ or "", presets=tuple(PRESETS))
    parser.add_argument(
        "--algos", default=",".join(ALGORITHMS), help=f"comma-separated among {', '.join(ALL_ALGORITHMS)}, or 'all'"
    )
    parser.add_argument("--env", default=None, help="an env id, 'fake-image' or a Procgen '<game>-<easy|hard>'")
    parser.add_argument("--n-envs", type=int)
    parser.add_argument("--n-steps", type=int)
    parser.add_argument("--n-minibatches", type=int)
    parser.add_argument("--n-epochs", type=int, help="PPO's epochs (default 3, the cartpole preset 20; PPG: 1 policy epoch)")
    parser.add_argument("--iterations", type=int)
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--features", choices=NETWORKS)
    parser.add_argument("--threads", type=int, help="torch threads (default: 1 on the cpu presets, 4 on the GPU ones)")
    parser.add_argument("--device", default=None, help="default: cuda for the gpu and paper presets, else cpu")
    parser.add_argument("--json", help="also write the medians to this file")
    add_malloc_argument(parser)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The configuration of a measurement: the preset's, with the options given."""
    args = _parser().parse_args(argv)
    config = dict(PRESETS[args.preset])
    for key in ("n_envs", "n_steps", "n_minibatches", "iterations", "repeats", "features", "threads"):
        if getattr(args, key) is not None:
            config[key] = getattr(args, key)
    config["n_epochs"] = args.n_epochs or config.get("n_epochs", 3)
    algos = ALL_ALGORITHMS if args.algos == "all" else args.algos.split(",")
    config["algos"] = [name.strip() for name in algos if name.strip()]
    config["device"] = args.device or ("cuda" if args.preset in ("gpu", "paper") else "cpu")
    config["env"] = default_env_id(args.env or config.get("env"), config.pop("mode", "easy"))
    config["json"] = args.json
    config["malloc"] = args.malloc
    config["out_dir"] = Path(args.out) / NAME / args.preset
    return config


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    """Command line entry point; returns the medians."""
    config = parse_args(argv)
    out_dir = config.pop("out_dir")
    out_dir.mkdir(parents=True, exist_ok=True)
    print("settings:", {key: value for key, value in config.items() if key != "json"})
    medians = run(config, out_dir / "measurements.csv")
    print(report(medians))
    arguments = list(sys.argv[1:] if argv is None else argv)
    write_results(config, medians, out_dir, " ".join(["python -m benchmarks.timing.throughput", *arguments]))
    if config["json"]:
        with open(config["json"], "w") as file:
            json.dump({"config": config, "medians": medians}, file, indent=2)
    return medians


if __name__ == "__main__":
    main()
