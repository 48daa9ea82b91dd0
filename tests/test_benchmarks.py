"""The benchmarks: every experiment's smoke preset end to end, resuming, pausing at a deadline, the presets' runs."""

import csv
import gzip
import importlib
import itertools
import math
import pickle
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `benchmarks` is a directory of the repository, not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import common, results_store, runner  # noqa: E402
from benchmarks.harness.settings import PRESETS, Scale, presets_of, run_spec  # noqa: E402
from benchmarks.learning import batch_size_invariance, ewma_comparison, staleness  # noqa: E402
from benchmarks.timing import throughput  # noqa: E402

EXPERIMENTS = {module.NAME: module for module in (ewma_comparison, batch_size_invariance, staleness)}


def read(path: Path) -> list[dict[str, str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as file:
        return list(csv.DictReader(file))


def check_outputs(out_dir: Path, name: str) -> None:
    assert (out_dir / f"{name}.png").stat().st_size > 0
    text = (out_dir / "results.md").read_text()
    assert f"![{name}]({name}.png)" in text and "| " in text


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_smoke_preset_end_to_end_then_resume(name, tmp_path, capsys):
    module = EXPERIMENTS[name]
    # the staleness experiment goes through the process pool, the others run in this process
    workers = "2" if name == "staleness" else "1"
    out_dir = module.main(["--preset", "smoke", "--out", str(tmp_path), "--workers", workers])
    assert out_dir == tmp_path / name / "smoke"
    specs = module.build_specs("smoke", {})
    # the finished runs are gathered in runs.jsonl, with their evaluations; no file per run is left
    records = results_store.read(out_dir / results_store.RUNS_FILE)
    assert sorted(record["run_id"] for record in records) == sorted(spec.run_id for spec in specs)
    assert {record["status"] for record in records} == {"finished"}
    assert not (out_dir / "runs").exists() and not (out_dir / "manifest.csv").exists()
    assert [path.name for path in (out_dir / "checkpoints").iterdir()] == [".gitignore"]  # runs in progress: none
    assert not (out_dir / "evaluations.csv").exists()
    evaluations = read(out_dir / "evaluations.csv.gz")
    assert len(evaluations) == sum(spec.total_timesteps // spec.eval_every for spec in specs)
    assert len(evaluations) == sum(len(record["evaluations"]["rows"]) for record in records)
    for row in evaluations:
        assert {"algo", "variant", "seed", "n_envs", "timesteps", "mean_return", "wall_time"} <= row.keys()
    check_outputs(out_dir, name)

    # resume: everything finished is skipped (known from runs.jsonl), nothing is trained again
    runs_file = out_dir / results_store.RUNS_FILE
    before = (runs_file.read_bytes(), runs_file.stat().st_mtime_ns)
    capsys.readouterr()
    module.main(["--preset", "smoke", "--out", str(tmp_path), "--workers", "1"])
    assert f"{len(specs)} already finished, 0 to run" in capsys.readouterr().out
    assert (runs_file.read_bytes(), runs_file.stat().st_mtime_ns) == before

    # runs whose settings changed are not taken as finished
    module.main(["--preset", "smoke", "--out", str(tmp_path), "--timesteps", "128", "--list"])
    assert capsys.readouterr().out.count("todo  ") == len(specs)

    if name == "batch_size_invariance":
        text = (out_dir / "results.md").read_text()
        assert all(label in text for label in module.VARIANTS.values())
        assert "spread (max - min)" in text and "aux phases (planned / done)" in text
        # the reference run stands for the three ablations at the reference batch size
        assert "| ppg_ewma | 4 | 0.0005 | 16 | auto (minibatches per epoch) | 1 | 2 | 2 / 2 |" in text


def test_throughput_smoke_then_resume(tmp_path, capsys):
    medians = throughput.main(["--preset", "smoke", "--out", str(tmp_path), "--algos", "ppo,ppo_ewma,ppg,ppg_ewma"])
    assert set(medians) == {"ppo", "ppo_ewma", "ppg", "ppg_ewma"}
    out_dir = tmp_path / "throughput" / "smoke"
    assert len(read(out_dir / "measurements.csv")) == 4
    check_outputs(out_dir, "throughput")
    assert "EWMA overhead (time of learn)" in (out_dir / "results.md").read_text()
    assert {row["malloc"] for row in read(out_dir / "measurements.csv")} == {"keep-freed"}
    capsys.readouterr()
    assert throughput.main(["--preset", "smoke", "--out", str(tmp_path)]) == medians
    assert "4 measurement(s) already made" in capsys.readouterr().out
    assert len(read(out_dir / "measurements.csv")) == 4


def _tiny_spec(algo: str, env: str = "MinAtar/Breakout-v1", network: str = "mlp", **hyperparams) -> common.RunSpec:
    setting = PRESETS["smoke"].setting
    if env != "MinAtar/Breakout-v1":
        from dataclasses import replace

        setting = replace(setting, envs=(env,), network=network, n_envs=2, common=dict(setting.common, policy_kwargs={}))
    params = setting.hyperparams(algo)
    params.update(hyperparams)
    return run_spec(
        "pause_test",
        setting,
        Scale(timesteps=8 * setting.iteration_size, eval_every=setting.iteration_size, seeds=1),
        env,
        algo,
        0,
        hyperparams=params,
    )


@pytest.mark.parametrize(
    "spec",
    [
        _tiny_spec("ppg_ewma"),  # pauses only between phases (its auxiliary buffer is not saved)
        _tiny_spec("ppo_ewma", ewma_decay=None, staleness=2, staleness_mode="decoupled"),  # the stale rollouts are saved
        _tiny_spec("ppo", env="procgen-starpilot-easy", network="nature"),  # reward normalization statistics are saved
    ],
    ids=["ppg_ewma", "staleness", "procgen"],
)
def test_pause_at_deadline_and_resume(spec, tmp_path, monkeypatch):
    # the clock allows the run to start, then says the deadline has passed: the run pauses at its first safe point
    clock = itertools.chain([0.0], itertools.repeat(100.0))
    monkeypatch.setattr(common, "clock", lambda: next(clock))
    outcome = runner.execute(spec, tmp_path, deadline=1.0)
    assert outcome["status"] == "paused"
    checkpoint = tmp_path / "checkpoints" / spec.run_id
    assert (checkpoint / "model.zip").exists() and (tmp_path / "checkpoints" / ".gitignore").exists()
    paused_at = outcome["timesteps"]
    expected = 2 * spec.iteration_size if spec.algo == "ppg_ewma" else spec.iteration_size  # PPG: N_pi = 2
    assert paused_at == expected
    if spec.algo == "ppo_ewma":
        with open(checkpoint / "stale_buffers.pkl", "rb") as file:
            assert len(pickle.load(file)) == 1  # one collected rollout waiting (staleness 2, after 1 iteration)
    if spec.env.startswith("procgen"):
        assert (checkpoint / "vecnormalize.pkl").exists()

    # an invocation killed after it resumed left evaluations beyond the checkpoint: they are dropped
    run_csv = checkpoint / "evaluations.csv"
    common.append_csv(run_csv, {**read(run_csv)[-1], "timesteps": paused_at + spec.eval_every})

    monkeypatch.setattr(common, "clock", lambda: 0.0)
    outcome = runner.execute(spec, tmp_path, deadline=None)
    assert outcome["status"] == "finished"
    assert not checkpoint.exists()  # the evaluations so far went with it, into the record
    record = outcome["record"]
    rows = [dict(zip(record["evaluations"]["columns"], row)) for row in record["evaluations"]["rows"]]
    steps = [row["timesteps"] for row in rows]
    assert steps == list(range(spec.eval_every, spec.total_timesteps + 1, spec.eval_every))
    wall = [row["wall_time"] for row in rows]
    assert wall == sorted(wall)
    if spec.algo == "ppg_ewma":
        assert rows[-1]["aux_phases"] == 4
    assert record["timesteps"] == spec.total_timesteps and record["spec_hash"] == spec.spec_hash
    expected = round(runner.final_return(rows, spec.total_timesteps), 4)  # NaN when no episode ended (procgen)
    assert record["final_return"] == pytest.approx(expected, nan_ok=True)


def test_deadline_skips_runs_not_started(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "clock", lambda: 100.0)
    assert runner.execute(_tiny_spec("ppo"), tmp_path, deadline=1.0)["status"] == "skipped"


def test_a_checkpoint_waits_for_the_end_of_a_ppg_phase_only_with_an_auxiliary_phase() -> None:
    from types import SimpleNamespace

    assert runner._is_safe(SimpleNamespace(n_aux_epochs=6, phase_iteration=0))
    assert not runner._is_safe(SimpleNamespace(n_aux_epochs=6, phase_iteration=3))  # its buffer is not saved
    assert runner._is_safe(SimpleNamespace(n_aux_epochs=0, phase_iteration=3))  # no buffer: loads where it was
    assert runner._is_safe(SimpleNamespace())  # PPO


def test_chunks_partition_the_runs():
    specs = ewma_comparison.build_specs("cpu", {})
    chunks = [common.select_chunk(specs, f"{index}/3") for index in (1, 2, 3)]
    assert sorted(spec.run_id for chunk in chunks for spec in chunk) == sorted(spec.run_id for spec in specs)
    with pytest.raises(ValueError):
        common.select_chunk(specs, "4/3")


@pytest.mark.parametrize("preset", ("smoke", "cpu", "breakout_preregistered", "minatar5", "gpu", "paper"))
def test_presets_build_consistent_runs(preset):
    for module in (ewma_comparison, batch_size_invariance, staleness):
        assert preset in presets_of(module.NAME)
        specs = module.build_specs(preset, {})
        assert len({spec.run_id for spec in specs}) == len(specs)
        # one evaluation grid per experiment, so that curves of different batch sizes line up
        assert len({spec.eval_every for spec in specs}) == 1
        for spec in specs:
            assert spec.total_timesteps % spec.eval_every == 0 or spec.total_timesteps % spec.iteration_size == 0
            importlib.import_module("benchmarks.harness.envs").policy_for(spec.network)
    assert len(ewma_comparison.build_specs(preset, {})) >= 4 * (2 if preset == "smoke" else 3)


def test_batch_size_invariance_rescaling_and_ablations():
    specs = {(spec.variant, spec.n_envs, spec.seed): spec for spec in batch_size_invariance.build_specs("cpu", {})}
    reference = specs[("ppg_ewma", 64, 0)]
    assert reference.aliases == ("no_lr", "no_ewma", "no_adv")
    assert reference.hyperparams["advantage_normalization"] == "ewma" and reference.hyperparams["n_epochs"] == 1
    full = specs[("ppg_ewma", 1, 0)].hyperparams
    assert math.isclose(full["learning_rate"], reference.hyperparams["learning_rate"] / 8)
    assert full["batch_size"] == reference.hyperparams["batch_size"] // 64
    assert full["n_policy_iterations"] == 64 * reference.hyperparams["n_policy_iterations"]
    assert math.isclose(full["ewma_decay"], 512 / 513)  # center of mass 8 minibatches * 64
    assert full["aux_learning_rate"] == reference.hyperparams["learning_rate"]  # the auxiliary phase is unchanged
    assert specs[("no_lr", 1, 0)].hyperparams["learning_rate"] == reference.hyperparams["learning_rate"]
    assert "ewma_decay" not in specs[("no_ewma", 1, 0)].hyperparams  # "auto": 8 minibatches at every batch size
    assert specs[("no_adv", 1, 0)].hyperparams["advantage_ewma_decay"] == 0.0
    ppg = specs[("ppg", 1, 0)]
    assert ppg.algo == "ppg" and "ewma_decay" not in ppg.hyperparams  # PPG has no EWMA
    assert math.isclose(ppg.hyperparams["learning_rate"], full["learning_rate"])
    import pandas as pd

    # the report's EWMA column: off for PPG (which takes no ewma_decay), "auto" where the EWMA keeps its default
    rows = batch_size_invariance._scaled_table(list(specs.values()), pd.DataFrame()).splitlines()
    assert all("| off |" in row for row in rows if row.startswith("| ppg |"))
    assert all("| auto (minibatches per epoch) |" in row for row in rows if row.startswith("| no_ewma |"))
    for spec in specs.values():
        # several auxiliary phases in every run, whatever the batch size
        phase = spec.hyperparams["n_policy_iterations"] * spec.iteration_size
        assert spec.total_timesteps // phase >= 5
        assert phase % spec.hyperparams["aux_batch_size"] == 0


def test_staleness_runs():
    specs = staleness.build_specs("cpu", {})
    shared = [spec for spec in specs if spec.labels["staleness"] == 0]
    assert all(spec.aliases == ("behavior", "proximal") for spec in shared)
    for spec in specs:
        assert spec.algo == "ppo_ewma" and spec.hyperparams["ewma_decay"] is None
        assert spec.hyperparams["imp_samp_max"] == 100.0
        assert spec.hyperparams["staleness"] == spec.labels["staleness"]
        assert spec.hyperparams["staleness_mode"] == spec.variant
    assert {spec.labels["staleness"] for spec in specs} == {0, 1, 2, 4, 8}
    assert len(specs) == 3 * (1 + 3 * 4)


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_report_of_several_procgen_games(name, tmp_path):
    """The gpu preset's report (not run here): made-up finished runs on two games give a normalized-return panel."""
    from benchmarks.harness.report import ALL_GAMES, write_report

    module = EXPERIMENTS[name]
    overrides = {"timesteps": 2**19, "envs": ("procgen-starpilot-easy", "procgen-bigfish-easy")}
    specs = module.build_specs("gpu", overrides)
    manifest = common.Manifest(tmp_path / results_store.RUNS_FILE)
    for number, spec in enumerate(specs):
        rows = []
        for timesteps in range(spec.eval_every, spec.total_timesteps + 1, spec.eval_every):
            row = {**spec.columns(), "timesteps": timesteps, "mean_return": number % 7 + timesteps / 2**19, "episodes": 3}
            rows.append({key: str(value) for key, value in {**row, "wall_time": 1.0}.items()})
        evaluations = results_store.table(rows)
        manifest.add({"run_id": spec.run_id, "spec_hash": spec.spec_hash, "wall_time": 1.0, "evaluations": evaluations})
    text = write_report(module.EXPERIMENT, specs, tmp_path, command="test").read_text()
    assert f"### {ALL_GAMES}" in text and "### starpilot-easy" in text and "### bigfish-easy" in text
    assert f"runs finished: {len(specs)} of {len(specs)}" in text
    check_outputs(tmp_path, name)


def test_batch_size_invariance_authors_runs():
    from benchmarks.learning import batch_size_invariance_authors as authors

    specs = authors.build_specs("cpu", {})
    assert {spec.n_envs for spec in specs} == {64, 16, 4, 1} and {spec.variant for spec in specs} == set(authors.VARIANTS)
    # the epsilon control at the two largest batch sizes, the small-minibatch control at the largest only
    assert {spec.n_envs for spec in specs if spec.variant == "authors_eps_1e-5"} == {64, 16}
    assert {spec.n_envs for spec in specs if spec.variant == "authors_small_minibatch"} == {64}
    by_key = {(spec.variant, spec.n_envs, spec.seed): spec.hyperparams for spec in specs}
    for spec in specs:
        hp = spec.hyperparams
        epsilon = authors.EPSILON.get(spec.variant, 1e-8)
        assert hp["policy_kwargs"]["head_init_scale"] == 0.1 and hp["policy_kwargs"]["optimizer_kwargs"] == {"eps": epsilon}
        assert hp["aux_optimizer_kwargs"] == {"eps": epsilon}
        assert hp["minibatch_sampling"] == hp["aux_minibatch_sampling"] == "rollouts"
        # whole rollouts, or contiguous pieces of one, at every batch size
        assert hp["batch_size"] % hp["n_steps"] == 0 or hp["n_steps"] % hp["batch_size"] == 0
        if spec.variant == "authors_small_minibatch":
            # the 16-environment optimizer on the 64-environment iterations
            smaller, larger = by_key[("authors", 16, spec.seed)], by_key[("authors", 64, spec.seed)]
            assert {key: hp[key] for key in authors.OPTIMIZER_KEYS} == {key: smaller[key] for key in authors.OPTIMIZER_KEYS}
            assert hp["n_policy_iterations"] == larger["n_policy_iterations"] and hp["n_steps"] == larger["n_steps"]
        else:
            assert hp["batch_size"] == 1024 * spec.n_envs // 64


def test_evaluation_rows_hold_the_gradient_noise_scale():
    from sb3_ewma import PPO_EWMA

    model = PPO_EWMA(
        "MlpPolicy", "CartPole-v1", n_steps=32, batch_size=8, n_epochs=1, device="cpu", log_gradient_noise_scale=True
    )
    assert math.isnan(runner.gradient_noise_scale(model))
    model.learn(32)
    assert runner.gradient_noise_scale(model) == pytest.approx(model.gradient_noise.latest.noise_scale, abs=1e-4)


def test_scaling_summary_efficiency_and_curves():
    from benchmarks.timing import scaling

    def record(config, world_size, n_envs, sps, curve):
        return dict(
            config=config,
            world_size=world_size,
            n_envs=n_envs,
            sps=sps,
            seconds_per_iteration=1.0,
            communication_s_per_iteration=0.1,
            curve=curve,
        )

    curve = [[512, 10.0], [1024, 20.0]]
    records = [record("1x8", 1, 8, 1000.0, curve), record("2x4", 2, 4, 1500.0, curve), record("2x8", 2, 8, 1800.0, curve)]
    text = scaling.summarize(records, "cpu", "python -m benchmarks.timing.scaling")
    # efficiency = SPS(W) / (W x SPS(1))
    assert "| 2x4 | 2 | 4 | 1500 | 0.75 |" in text and "| 2x8 | 2 | 8 | 1800 | 0.90 |" in text
    assert "| 1024 | 20.0 | 20.0 | 20.0 |" in text
    # the all-reduce latency column: milliseconds where measured, "-" in records without it
    with_latency = [dict(r, all_reduce_s=0.0025 if r["world_size"] == 2 else 0.0) for r in records]
    assert "| 0.1000 | 2.50 |" in scaling.summarize(with_latency, "cpu", "c") and "| 0.1000 | - |" in text
    short = scaling.summarize([dict(r, curve=[]) for r in records], "cnn", "python -m benchmarks.timing.scaling --preset cnn")
    assert "throughput only" in short and "| 2x8 | 2 | 8 | 1800 | 0.90 |" in short
    assert [name for name, _, _ in scaling.configurations(8)] == ["1x8", "2x4", "2x8", "2x8 independent"]


def test_scaling_control_runs_independent_processes_together(tmp_path):
    from benchmarks.timing import scaling

    settings = dict(scaling.PRESETS["smoke"], n_envs=2, seed=1, network="mlp")
    del settings["repeats"]
    record = scaling.run_job("2x2 independent", 2, settings, tmp_path / "last_run.json")
    # two single-process runs (no process group): the control's SPS is the sum of theirs, with no communication
    assert record["config"] == "2x2 independent" and record["world_size"] == 2
    assert record["timesteps_done"] == 2 * settings["timesteps"] and record["communication_s_per_iteration"] == 0.0
    assert record["sps"] > 0 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("network", ["mlp", "impala"])
def test_forward_cost_runs_the_lean_proximal_pass(network, capsys):
    from benchmarks.timing import forward_cost

    seconds = forward_cost.main(["--network", network, "--batch-size", "4", "--repeats", "2", "--malloc", "default"])
    assert set(seconds) == {"sb3_forward_backward_s", "forward_backward_s", "forward_s"} and min(seconds.values()) > 0
    assert f"network={network}" in capsys.readouterr().out


def test_train_cost_reports_the_ratio_to_ppo_and_the_floor(tmp_path, capsys):
    from benchmarks.timing import train_cost

    argv = ["--n-envs", "2", "--n-steps", "16", "--batch-size", "16", "--n-epochs", "1", "--repeats", "1"]
    results = train_cost.main([*argv, "--malloc", "default", "--label", "smoke", "--out", str(tmp_path)])
    for ratios in (results, results["wall"]):
        assert all(math.isfinite(ratios[key]) for key in ("ratio", "floor", "gap"))
        assert ratios["floor"] > 1 and ratios["gap"] == pytest.approx(ratios["ratio"] - ratios["floor"])
    assert set(results["seconds"]) == set(train_cost.VARIANTS) and len(results["ratios"]) == 1
    text = (tmp_path / train_cost.NAME / "nature-default-smoke" / "results.md").read_text()
    assert "python -m benchmarks.timing.train_cost" in text and "| floor | gap |" in text
    assert "| floor | gap |" in capsys.readouterr().out


def test_proximal_precision_measures_bf16_against_float32(tmp_path):
    from benchmarks.timing import proximal_precision

    results = proximal_precision.main(["--networks", "mlp", "--out", str(tmp_path)])["mlp"]
    assert results["samples"] == 256
    # bfloat16 keeps 8 bits of mantissa: errors of log-probabilities near log(1/2) are of order 1e-3, never 0 or large
    assert 1e-6 < results["mean_abs_error"] <= results["max_abs_error"] < 0.05
    # a fraction of the 256 samples (a whole multiple of 1/256); errors of 1e-3 move only ratios near 1 +- clip_range
    assert results["clip_status_changed"] * 256 == pytest.approx(round(results["clip_status_changed"] * 256))
    assert results["clip_status_changed"] < 0.1
    assert 1 - results["gradient_cosine"] < 1e-2
    assert (tmp_path / "proximal_precision" / "cpu" / "results_bfloat16.md").exists()


def test_malloc_keep_freed_refuses_to_run_without_glibc(monkeypatch):
    from benchmarks.harness.common import apply_malloc
    from sb3_ewma import allocator

    made = []
    monkeypatch.setattr(allocator, "keep_freed_memory", lambda: made.append("keep") or False)
    apply_malloc("default")
    assert made == []
    with pytest.raises(SystemExit, match="--malloc default"):
        apply_malloc("keep-freed")
    assert made == ["keep"]


@pytest.mark.parametrize("features", ["mlp", "impala"])
def test_throughput_sb3_ppo_with_foreach_adam_differs_only_by_the_adam_step(features):
    config = throughput.parse_args(["--preset", "cartpole", "--features", features])
    plain, foreach = (throughput.settings_for(name, config) for name in ("ppo", "ppo_foreach"))
    assert throughput.base_algorithm("ppo_foreach") == ("ppo", False)
    assert foreach["policy_kwargs"]["optimizer_kwargs"] == {"eps": 1e-5, "foreach": True}
    # everything else is SB3 PPO's row
    assert {**foreach, "policy_kwargs": None} == {**plain, "policy_kwargs": None}
    assert {key: value for key, value in foreach["policy_kwargs"].items() if key != "optimizer_kwargs"} == (
        plain["policy_kwargs"] or {}
    )


def test_distributed_exit_counts_clean_two_rank_jobs():
    from benchmarks.timing import distributed_exit

    counts = distributed_exit.main(["--runs", "1"])
    assert counts == {"runs": 1, "failed": 0, "aborted": 0}


def _zoo_result(env: str, variant: str, seed: int, mean_reward: float, cpu_s: float | None = None) -> dict:
    result = {
        "env": env,
        "variant": variant,
        "algo": variant,
        "seed": seed,
        "n_timesteps": 1000,
        "reduced": False,
        "wall_clock_s": 10.0 * (seed + 1),
        "final": {"mean_reward": mean_reward, "eval_timesteps": 100, "eval_episodes": 2},
    }
    if cpu_s is not None:
        result["cpu_s"] = cpu_s
    return result


def test_zoo_table_summary_and_goal_by_hand():
    from benchmarks.learning import zoo_table
    from benchmarks.learning.zoo_tasks import TABLE_VARIANTS

    results = [
        _zoo_result("CartPole-v1", "ppo", 0, 100.0, cpu_s=5.0),
        _zoo_result("CartPole-v1", "ppo", 1, 200.0),
        _zoo_result("CartPole-v1", "ppo_ewma", 0, 140.0, cpu_s=6.0),
        _zoo_result("CartPole-v1", "ppo_ewma", 1, 160.0, cpu_s=8.0),
        _zoo_result("Pendulum-v1", "ppo", 0, -200.0),
        _zoo_result("Pendulum-v1", "ppo", 1, -100.0),
        _zoo_result("Pendulum-v1", "ppo_ewma", 0, -300.0),
        _zoo_result("Pendulum-v1", "ppo_ewma", 1, -250.0),
    ]
    summary = zoo_table.summarize(results)
    ppo, ewma = summary[("CartPole-v1", "ppo")], summary[("CartPole-v1", "ppo_ewma")]
    assert (ppo["mean"], ppo["std"], ppo["seeds"]) == (150.0, 50.0, 2)  # the std is over seeds, not episodes
    assert (ppo["eval_timesteps"], ppo["eval_episodes"], ppo["wall_clock_s"]) == (200, 4, 15.0)
    assert ppo["cpu_s"] == 5.0 and ewma["cpu_s"] == 7.0  # the mean over the runs that recorded it
    assert math.isnan(summary[("Pendulum-v1", "ppo")]["cpu_s"])
    assert zoo_table._time_cell(ewma) == "15 / 7" and zoo_table._time_cell(summary[("Pendulum-v1", "ppo")]) == "15 / -"
    (line,) = zoo_table.goal_lines(summary, TABLE_VARIANTS)
    # CartPole: 150 >= 150 - 50; Pendulum: -275 < -150 - 50. Relative differences: 0, and -125 over the larger of
    # |-150| and rl-zoo3's published |-172.225|.
    assert line.startswith("- ppo_ewma: 1/2 tasks at or above") and "Pendulum-v1 (-275.0 vs -150.0 +- 50.0)" in line
    assert line.endswith(f"{100 * (0 - 125 / 172.225) / 2:+.1f}%")
    rows = zoo_table.table_rows(summary, TABLE_VARIANTS)
    assert [row[:4] for row in rows] == [
        ["ppo", "CartPole-v1", "150.000", "50.000"],
        ["ppo_ewma", "CartPole-v1", "150.000", "10.000"],
        ["ppo", "Pendulum-v1", "-150.000", "50.000"],
        ["ppo_ewma", "Pendulum-v1", "-275.000", "25.000"],
    ]
    assert zoo_table.summary_rows(summary, TABLE_VARIANTS) == [
        ["CartPole-v1 (1k, 2 seeds)", "500.0", "150.0 ± 50.0", "150.0 ± 10.0", "", ""],
        ["Pendulum-v1 (1k, 2 seeds)", "-172.2", "-150.0 ± 50.0", "-275.0 ± 25.0", "", ""],
    ]
    one_seed = zoo_table.summarize(results[:3])
    assert zoo_table.summary_rows(one_seed, TABLE_VARIANTS)[0][2:4] == ["150.0 ± 50.0", "140.0 ± 0.0 (1 seed)"]
    assert all(row[-1] == zoo_table._figure(summary[(row[1], "ppo")]["mean"], summary[(row[1], "ppo")]["std"]) for row in rows)


def test_zoo_table_where_sb3_ppo_does_not_learn():
    """A task where SB3 PPO's mean is 0 (MiniGrid here): returns of order 1 get two decimals, and the relative
    difference is over rl-zoo3's published score (0.964), not over 0."""
    from benchmarks.learning import zoo_table
    from benchmarks.learning.zoo_tasks import TABLE_VARIANTS

    env = "MiniGrid-DoorKey-5x5-v0"
    results = [
        _zoo_result(env, "ppo", 0, 0.0),
        _zoo_result(env, "ppo", 1, 0.0),
        _zoo_result(env, "ppo_ewma", 0, 0.25),
        _zoo_result(env, "ppo_ewma", 1, 0.0),
    ]
    summary = zoo_table.summarize(results)
    assert zoo_table.difference_scale(env, 0.0) == 0.964
    assert zoo_table.difference_scale("CartPole-v1", -600.0) == 600.0  # the larger of the two
    (line,) = zoo_table.goal_lines(summary, TABLE_VARIANTS)
    assert line.startswith("- ppo_ewma: 1/1 tasks at or above") and line.endswith(f"{100 * 0.125 / 0.964:+.1f}%")
    row = [f"{env} (1k, 2 seeds)", "0.96", "0.00 ± 0.00", "0.12 ± 0.12", "", ""]
    assert zoo_table.summary_rows(summary, TABLE_VARIANTS) == [row]


def _at(result: dict, n_timesteps: int) -> dict:
    return {**result, "n_timesteps": n_timesteps, "run_id": f"{result['env']}__{result['variant']}__{n_timesteps}"}


def test_zoo_table_sets_runs_of_another_budget_apart():
    """A change of budget leaves runs of the old one until they are trained again: no row mixes budgets, a row keeps
    the task's budget (or, without it, the budget most runs have), and variants of different budgets are labelled and
    not compared."""
    from benchmarks.learning import zoo_table
    from benchmarks.learning.zoo_tasks import TABLE_VARIANTS, task_budget, task_by_env

    assert task_budget(task_by_env("Pendulum-v1")) == 100_000 and task_budget(task_by_env("Hopper-v4")) == 100_000  # capped
    pendulum = [
        _at(_zoo_result("Pendulum-v1", "ppo", 0, -150.0), 100_000),
        _at(_zoo_result("Pendulum-v1", "ppo", 1, -250.0), 5000),
        _at(_zoo_result("Pendulum-v1", "ppo", 2, -140.0), 5000),
    ]
    current, stale = zoo_table.split_stale(pendulum)
    # two of three runs have 5000 steps, but the task's budget wins where a run has it
    assert current == pendulum[:1] and stale == pendulum[1:]
    cartpole = [
        _at(_zoo_result("CartPole-v1", "ppo_ewma", seed, 100.0), steps) for seed, steps in enumerate((1024, 2048, 1024))
    ]
    assert zoo_table.split_stale(cartpole) == ([cartpole[0], cartpole[2]], [cartpole[1]])  # the most common
    assert zoo_table.split_stale(cartpole[:2]) == ([cartpole[1]], [cartpole[0]])  # a tie: the largest
    with pytest.raises(ValueError, match=r"CartPole-v1 ppo_ewma: runs of several budgets \[1024, 2048\]"):
        zoo_table.summarize(cartpole)
    summary = zoo_table.summarize(
        [
            _at(_zoo_result("Pendulum-v1", "ppo", 0, -150.0), 100_000),
            _at(_zoo_result("Pendulum-v1", "ppo", 1, -250.0), 100_000),
            _at(_zoo_result("Pendulum-v1", "ppo_ewma", 0, -300.0), 50_000),
        ]
    )
    assert zoo_table.summary_rows(summary, TABLE_VARIANTS) == [
        ["Pendulum-v1 (100k, 2 seeds)", "-172.2", "-200.0 ± 50.0", "-300.0 ± 0.0 (50k, 1 seed)", "", ""]
    ]
    assert zoo_table.goal_lines(summary, TABLE_VARIANTS) == [
        "- ppo_ewma: not compared (another budget than SB3 PPO's): Pendulum-v1"
    ]


def test_readme_holds_the_table_experiments_summary(tmp_path):
    """The README's summary table is a copy of benchmark.md's (``--report-only --update-readme`` refreshes it), and the
    copy replaces only what lies between the markers."""
    from benchmarks.learning import zoo_table

    report = zoo_table.RESULTS_ROOT / "table" / "benchmark.md"
    assert zoo_table.summary_table(zoo_table.README.read_text()) == zoo_table.summary_table(report.read_text())
    source, target = tmp_path / "benchmark.md", tmp_path / "README.md"
    source.write_text(f"intro\n{zoo_table.SUMMARY_START}\n| new |\n{zoo_table.SUMMARY_END}\n")
    target.write_text(f"# title\n{zoo_table.SUMMARY_START}\n| old |\n| rows |\n{zoo_table.SUMMARY_END}\nafter\n")
    zoo_table.copy_summary_table(source, target)
    assert target.read_text() == f"# title\n{zoo_table.SUMMARY_START}\n| new |\n{zoo_table.SUMMARY_END}\nafter\n"
    (tmp_path / "other.md").write_text("no table here")
    with pytest.raises(ValueError, match="markers"):
        zoo_table.copy_summary_table(source, tmp_path / "other.md")
    assert (tmp_path / "other.md").read_text() == "no table here"
    with pytest.raises(SystemExit):
        zoo_table.main(["--experiment", "ewma_age", "--report-only", "--update-readme"])


@pytest.mark.parametrize("experiment", ["table", "ewma_age", "ppg_ewma_age"])
def test_zoo_experiments_are_well_formed(experiment):
    """Every experiment compares with SB3 PPO through rl-zoo3, names each column once, and a rule column selects that
    named rule of sb3_ewma.common.ewma_age with the algorithm's -params."""
    from benchmarks.learning.zoo_tasks import EXPERIMENTS, task_by_env
    from sb3_ewma.common.ewma_age import EWMA_AGE_RULES

    variants, envs = EXPERIMENTS[experiment]
    names = [variant.name for variant in variants]
    assert len(set(names)) == len(names) and [v for v in variants if v.is_reference] == [variants[0]]
    for variant in variants:
        algo, _, rule = variant.name.partition("-")
        assert algo == variant.algo
        assert dict(variant.params) == ({"ewma_decay": repr(rule)} if rule else {})
        assert not rule or rule in EWMA_AGE_RULES
    assert [task_by_env(env).env for env in envs or ()] == list(envs or ())  # raises on an unknown id


def test_zoo_table_runs_the_commands_then_resumes(tmp_path, capsys):
    from benchmarks.learning import zoo_table

    argv = ["--envs", "CartPole-v1", "--variants", "ppo,ppo_ewma", "--seeds", "1", "--max-steps", "1024"]
    argv += ["--final-episodes", "2", "--out", str(tmp_path)]
    out_dir = zoo_table.main(argv)
    # the finished runs are appended to runs.jsonl (by this process); their logs lie under the ignored logs/
    runs_file = out_dir / results_store.RUNS_FILE
    results = results_store.read(runs_file)
    assert sorted(result["run_id"] for result in results) == ["CartPole-v1__ppo__seed=0", "CartPole-v1__ppo_ewma__seed=0"]
    assert not (out_dir / "runs").exists()
    assert (out_dir / ".gitignore").read_text().splitlines() == ["zoo_logs/", "logs/"]
    assert sorted(path.name for path in (out_dir / "logs").iterdir()) == sorted(f"{r['run_id']}.log" for r in results)
    for result in results:
        assert result["status"] == "finished" and result["n_timesteps"] == 1024 and result["reduced"]
        assert result["final"]["eval_episodes"] == 2 and result["cpu_s"] > 0
        assert ("rl_zoo3.train" in result["command"]) == (result["variant"] == "ppo")
        assert "--num-threads 1" in result["command"] and result["curve"]
    report = (out_dir / "benchmark.md").read_text()
    assert "| ppo_ewma | CartPole-v1 |" in report and "1.024k (reduced)" in report and "2 of its 2 runs finished" in report
    assert (out_dir / "curves" / "CartPole-v1.png").stat().st_size > 0
    capsys.readouterr()
    before = runs_file.read_bytes()
    zoo_table.main(argv)
    assert "2 runs: 2 already finished, 0 to run" in capsys.readouterr().out
    assert runs_file.read_bytes() == before
    with pytest.raises(ValueError, match=r"unknown variants \['PPO-EWMA'\].*'ppo_ewma', 'ppg_ewma'"):
        zoo_table.main([*argv, "--variants", "ppo,PPO-EWMA"])


def test_zoo_table_runs_again_a_run_of_another_budget(tmp_path):
    from benchmarks.learning import zoo_table

    (job,) = zoo_table.build_jobs("table", 1, envs=["Pendulum-v1"], max_steps=5000, variant_names=["ppo_ewma"])
    assert (job.run_id, job.budget, job.tuned, job.reduced) == ("Pendulum-v1__ppo_ewma__seed=0", 5000, 100_000, True)
    assert not zoo_table.is_done(job, zoo_table.finished_runs(tmp_path))
    path = tmp_path / results_store.RUNS_FILE
    results_store.append(path, {"status": "finished", "run_id": job.run_id, "n_timesteps": 100_000})
    assert not zoo_table.is_done(job, zoo_table.finished_runs(tmp_path))  # trained for the tuned budget, not this job's
    results_store.append(path, {"status": "finished", "run_id": job.run_id, "n_timesteps": 5000})
    assert zoo_table.is_done(job, zoo_table.finished_runs(tmp_path))  # the last record of a run counts
    assert [result["n_timesteps"] for result in zoo_table.load_results(zoo_table.finished_runs(tmp_path))] == [5000]


def test_results_store_round_trip(tmp_path):
    """Records appended to runs.jsonl read back as written (NaN as null, then NaN again in a table); the last record
    of a run id counts; a record cut short by a killed process is skipped, and the next one starts a line of its own."""
    path = tmp_path / "experiment" / results_store.RUNS_FILE
    assert results_store.read(path) == [] and results_store.latest(path) == {}
    first = {"run_id": "a", "final": {"mean_reward": 1.5, "curve": [[10, 0.25], [20, math.nan]]}, "seed": 0}
    results_store.append(path, first)
    results_store.append(path, {"run_id": "b", "value": 2})
    results_store.append(path, {"run_id": "a", "value": 3})
    assert results_store.read(path)[0] == {**first, "final": {"mean_reward": 1.5, "curve": [[10, 0.25], [20, None]]}}
    assert results_store.latest(path) == {"a": {"run_id": "a", "value": 3}, "b": {"run_id": "b", "value": 2}}
    assert "NaN" not in path.read_text()  # strict JSON
    with pytest.raises(ValueError, match="run_id"):
        results_store.append(path, {"value": 4})

    with open(path, "a") as file:
        file.write('{"run_id": "c", "val')  # killed mid-write
    results_store.append(path, {"run_id": "d"})
    with pytest.warns(UserWarning, match="not a JSON record"):
        assert list(results_store.latest(path)) == ["a", "b", "d"]

    rows = [{"timesteps": "128", "mean_return": "nan", "wall_time": "1.5", "run_id": "x__seed=0", "aux_phases": ""}]
    data = results_store.table(rows)
    assert data["columns"] == ["timesteps", "mean_return", "wall_time", "run_id", "aux_phases"]
    (cells,) = data["rows"]
    assert cells[0] == 128 and math.isnan(cells[1]) and cells[2:] == [1.5, "x__seed=0", None]
    path.write_text("")
    results_store.append(path, {"run_id": "e", "evaluations": data})
    (row,) = results_store.table_rows(results_store.latest(path)["e"]["evaluations"])
    assert row[0] == 128 and math.isnan(row[1]) and row[2:4] == [1.5, "x__seed=0"] and math.isnan(row[4])


def test_results_store_gathers_the_files_of_each_run(tmp_path):
    """The one-off conversion: per-run CSVs with their manifest, and per-run JSON files, become runs.jsonl, from which
    the report reads the same evaluations and a resumed experiment knows what is done; the per-run files are deleted."""
    import json

    import pandas as pd

    from benchmarks.harness.report import load_evaluations
    from benchmarks.learning import zoo_table

    specs = ewma_comparison.build_specs("smoke", {})[:2]
    harness = tmp_path / "ewma_comparison" / "smoke"
    originals = {}
    for number, spec in enumerate(specs):
        for timesteps in range(spec.eval_every, spec.total_timesteps + 1, spec.eval_every):
            mean = math.nan if timesteps == spec.eval_every else number + timesteps / 7
            row = {**spec.columns(), "timesteps": timesteps, "mean_return": mean, "episodes": 3, "wall_time": 0.1}
            common.append_csv(harness / "runs" / f"{spec.run_id}.csv", row)
        originals[spec.run_id] = pd.read_csv(harness / "runs" / f"{spec.run_id}.csv")
        manifest_row = {"run_id": spec.run_id, "spec_hash": spec.spec_hash, "variant": spec.variant, "algo": spec.algo}
        manifest_row |= {"env": spec.env, "n_envs": spec.n_envs, "seed": spec.seed, "timesteps": spec.total_timesteps}
        manifest_row |= {"wall_time": 1.25, "steps_per_second": 100.0, "final_return": math.nan, "finished_at": "now"}
        common.append_csv(harness / "manifest.csv", manifest_row, common.MANIFEST_FIELDS)
    common.append_csv(harness / "runs" / "abandoned__seed=0.csv", {"run_id": "abandoned__seed=0", "timesteps": 64})
    (job,) = zoo_table.build_jobs("table", 1, envs=["CartPole-v1"], max_steps=1024, variant_names=["ppo_ewma"])
    zoo = tmp_path / "zoo_table" / "table"
    result = {"status": "finished", "run_id": job.run_id, "n_timesteps": 1024, "curve": [[512, 9.5], [1024, 20.0]]}
    (zoo / "runs").mkdir(parents=True)
    (zoo / "runs" / f"{job.run_id}.json").write_text(json.dumps(result, indent=1))

    written = results_store.main(["--gather", str(tmp_path)])
    assert written == [harness / results_store.RUNS_FILE, zoo / results_store.RUNS_FILE]
    assert not (harness / "runs").exists() and not (harness / "manifest.csv").exists() and not (zoo / "runs").exists()
    common.append_csv(zoo / "runs" / "again.csv", {"run_id": "again"})
    with pytest.raises(FileExistsError):
        results_store.gather(zoo)  # once only

    manifest = common.Manifest(harness / results_store.RUNS_FILE)
    assert all(manifest.is_done(spec) for spec in specs) and len(manifest.records) == 2
    assert manifest.rows[specs[0].run_id]["spec_hash"] == specs[0].spec_hash
    assert pd.DataFrame(manifest.rows.values())["final_return"].astype(float).isna().all()
    assert results_store.latest(harness / results_store.RUNS_FILE)["abandoned__seed=0"]["status"] == "unfinished"
    evaluations = load_evaluations(specs, harness)
    for spec in specs:
        frame = evaluations[evaluations["run_id"] == spec.run_id].reset_index(drop=True)
        pd.testing.assert_frame_equal(frame[list(originals[spec.run_id].columns)], originals[spec.run_id])
    assert zoo_table.is_done(job, zoo_table.finished_runs(zoo))
    assert zoo_table.load_results(zoo_table.finished_runs(zoo)) == [result]


def test_zoo_table_children_keep_the_users_pythonpath(tmp_path, monkeypatch):
    """The training processes get the repository first on PYTHONPATH, then the user's own entries (where packages
    may be installed), not the repository alone."""
    import os
    import subprocess

    from benchmarks.learning import zoo_table

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/opt/site-packages", "/more/packages"]))
    environments = []

    def fake_run(argv, env, **kwargs):
        environments.append(env)
        return subprocess.CompletedProcess(argv, 1)

    monkeypatch.setattr(zoo_table.subprocess, "run", fake_run)
    (job,) = zoo_table.build_jobs("table", 1, envs=["CartPole-v1"], max_steps=1024, variant_names=["ppo_ewma"])
    assert zoo_table.execute(job, tmp_path)["status"] == "failed"
    (env,) = environments
    assert env["PYTHONPATH"].split(os.pathsep) == [str(zoo_table.REPO_ROOT), "/opt/site-packages", "/more/packages"]
    monkeypatch.delenv("PYTHONPATH")
    assert zoo_table.child_python_path() == str(zoo_table.REPO_ROOT)


class _TimedProximal:
    def __init__(self, events: list) -> None:
        self.events = events

    def log_prob(self) -> None:
        self.events.append("proximal")

    def step(self) -> None:
        self.events.append("ewma")


class _TimedModel:
    """The methods the throughput benchmark times, recording their calls: ``train`` calls the proximal pass and the
    EWMA update (the proximal policy's ``step``), as the decoupled algorithms' does."""

    def __init__(self, device: str, events: list) -> None:
        import torch as th

        self.device = th.device(device)
        self.events = events
        self.proximal = _TimedProximal(events)

    def train(self) -> None:
        self.events.append("train")
        self.proximal.log_prob()
        self.proximal.step()


def test_throughput_timer_synchronizes_before_and_after_each_part(monkeypatch):
    """On CUDA every timed part (train, the proximal pass, the EWMA update) synchronizes the model's device when it
    starts and when it ends, so that kernels queued before a part are not counted in it; on the CPU, CUDA is never
    called."""
    import torch as th

    events: list = []
    monkeypatch.setattr(th.cuda, "synchronize", lambda device=None: events.append(("synchronize", th.device(device))))
    model = _TimedModel("cuda:0", events)  # a device object only: nothing runs on CUDA
    timer = throughput.TrainTimer(model)
    model.train()
    sync = ("synchronize", th.device("cuda:0"))
    assert events == [sync, "train", sync, "proximal", sync, sync, "ewma", sync, sync]
    assert set(timer.seconds) == {"train", "proximal", "ewma"} and all(value >= 0 for value in timer.seconds.values())

    def no_cuda(*args, **kwargs):
        raise AssertionError("CUDA called for a model on the CPU")

    events.clear()
    monkeypatch.setattr(th.cuda, "synchronize", no_cuda)
    monkeypatch.setattr(th.cuda, "is_available", no_cuda)
    model = _TimedModel("cpu", events)
    throughput.TrainTimer(model)
    model.train()
    assert events == ["train", "proximal", "ewma"]


def test_train_step_measures_each_format_on_the_same_parameters_and_data(tmp_path, capsys):
    from benchmarks.timing import train_step

    results = train_step.main(["--preset", "smoke", "--repeats", "1", "--algos", "ppo_ewma", "--out", str(tmp_path)])
    variants = results["ppo_ewma"]
    assert list(variants) == list(train_step.VARIANTS) and all(values["seconds"] > 0 for values in variants.values())
    assert variants["float32"]["loss_change"] == 0.0  # the reference against itself
    assert variants["channels_last"]["loss_change"] < 1e-5  # the same numbers up to the order of the sums
    assert 0 < variants["bfloat16"]["loss_change"] < 5e-2  # bfloat16's 8 bits of mantissa
    table = (tmp_path / "train_step" / "smoke" / "results.md").read_text()
    assert "| ppo_ewma | channels_last_bfloat16 |" in table and "python -m benchmarks.timing.train_step" in table


def test_throughput_measures_the_fast_training_step_beside_the_plain_one(tmp_path):
    assert throughput.base_algorithm("ppo_ewma_async_fast") == ("ppo_ewma", True)
    assert throughput.training_precision_for("ppo_ewma") is None
    fast = throughput.training_precision_for("ppg_ewma_fast")
    assert str(fast.autocast_dtype) == "torch.bfloat16" and fast.channels_last
    with pytest.raises(ValueError, match="ppo_fast: SB3's PPO has no training_precision"):
        throughput.main(["--preset", "smoke", "--out", str(tmp_path), "--algos", "ppo_fast"])
    medians = throughput.main(
        ["--preset", "smoke", "--iterations", "1", "--out", str(tmp_path), "--algos", "ppo_ewma,ppo_ewma_fast"]
    )
    assert set(medians) == {"ppo_ewma", "ppo_ewma_fast"}
    results = (tmp_path / "throughput" / "smoke" / "results.md").read_text()
    assert "channels_last + bf16 training step (speed-up of learn over the same algorithm): ppo_ewma_fast: " in results


def test_throughput_names_the_cuda_graphs_acting_step():
    """``_cudagraphs`` after ``_compiled``: the same algorithm and settings, compiled, the acting step's mode set."""
    name = "ppo_ewma_fast_compiled_cudagraphs"
    assert throughput.base_algorithm(name) == ("ppo_ewma", False)
    assert throughput.training_precision_for(name) is not None
    config = throughput.parse_args(["--preset", "smoke"])
    assert throughput.settings_for(name, config)["compile_step"] is True
    assert throughput.settings_for("ppo_ewma_compiled_cudagraphs", config) == throughput.settings_for(
        "ppo_ewma_compiled", config
    )
    with pytest.raises(ValueError, match="ppo_ewma_cudagraphs: _cudagraphs follows _compiled"):
        throughput.run({**config, "algos": ["ppo_ewma_cudagraphs"]})


def test_throughput_compiles_with_fused_adam_on_cuda():
    """On CUDA a compiled row's Adam takes the fused step (so that the step compiles as one function); on the CPU, and
    eager anywhere, the algorithm's own optimizer settings."""
    config = throughput.parse_args(["--preset", "smoke"])
    cuda = {**config, "device": "cuda"}
    optimizer_kwargs = throughput.settings_for("ppo_ewma_compiled", cuda)["policy_kwargs"]["optimizer_kwargs"]
    assert optimizer_kwargs == {"eps": 1e-5, "fused": True}
    for name, settings in (("ppo_ewma", cuda), ("ppo_ewma_compiled", config)):
        policy_kwargs = throughput.settings_for(name, settings)["policy_kwargs"] or {}
        assert "optimizer_kwargs" not in policy_kwargs


# ----------------------------------------------------------------------------------------------------------------------
# the training diagnostics


def test_diagnostics_quantities_by_hand():
    import torch as th

    from benchmarks.harness import diagnostics

    weights = th.tensor([1.0, 2.0, 3.0])
    assert float(diagnostics.effective_sample_size(weights)) == pytest.approx(36 / 14)  # (1+2+3)^2 / (1+4+9)
    assert float(diagnostics.effective_sample_size(th.full((8,), 0.3))) == pytest.approx(8)  # equal weights: n
    stats = diagnostics.weight_stats(weights)
    assert stats == pytest.approx({"mean": 2.0, "max": 3.0, "ess": 36 / 14, "ess_fraction": 12 / 14})
    # the weights as the objective caps them: pi / pi_old = 200 becomes 100, 0.5 stays
    log_prob, old_log_prob = th.log(th.tensor([0.8, 0.1])), th.log(th.tensor([0.004, 0.2]))
    capped = diagnostics.capped_weights(log_prob, old_log_prob, imp_samp_max=100.0)
    assert capped.tolist() == pytest.approx([100.0, 0.5])
    assert diagnostics.capped_weights(log_prob, old_log_prob).tolist() == pytest.approx([200.0, 0.5])
    # ratios 0.7 and 1.3 lie outside [0.8, 1.2]; 0.85, 1 and 1.19 inside
    ratios = th.log(th.tensor([0.7, 0.85, 1.0, 1.19, 1.3]))
    assert diagnostics.fraction_outside_clip(ratios, 0.2) == pytest.approx(2 / 5)
    # KL[p, q] from r = q / p at samples of p: mean(r - 1 - log r); r = 2 and 1/2: ((1 - log 2) + (-1/2 + log 2)) / 2
    assert diagnostics.sampled_kl(th.log(th.tensor([2.0, 0.5]))) == pytest.approx(0.25)
    assert diagnostics.sampled_kl(th.zeros(5)) == 0.0
    # exact KL of two categorical distributions, per state
    before = th.distributions.Categorical(probs=th.tensor([[0.5, 0.5], [0.2, 0.8]]))
    after = th.distributions.Categorical(probs=th.tensor([[0.9, 0.1], [0.2, 0.8]]))
    expected = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert diagnostics.distribution_kl(before, after).tolist() == pytest.approx([expected, 0.0], abs=1e-6)
    assert diagnostics.kl_between([before], [after]) == pytest.approx(expected / 2, abs=1e-6)
    # a diagonal Gaussian: summed over the action dimensions
    normal = th.distributions.Normal(th.zeros(1, 2), th.ones(1, 2))
    shifted = th.distributions.Normal(th.ones(1, 2), th.ones(1, 2))
    assert diagnostics.distribution_kl(normal, shifted).tolist() == pytest.approx([1.0])  # 2 x (1/2)


def _learn(model_class, staleness: int, mode: str, steps: int):
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    model = model_class(
        "MlpPolicy", env, n_steps=32, batch_size=16, n_epochs=2, ewma_decay=None, imp_samp_max=100.0, seed=0, device="cpu"
    )
    model.set_staleness(staleness, mode)
    model.learn(steps)
    return model


@pytest.mark.parametrize("mode", ["decoupled", "behavior", "proximal"])
def test_diagnostics_leave_training_unchanged_and_record_each_iteration(mode):
    import torch as th

    from benchmarks.harness.diagnostics import DIAGNOSTIC_COLUMNS, diagnosed
    from sb3_ewma.ablations import StalePPO_EWMA

    plain = _learn(StalePPO_EWMA, 2, mode, 6 * 64)
    model = _learn(diagnosed(StalePPO_EWMA), 2, mode, 6 * 64)
    # extra forward passes without gradients: the same parameters as without the diagnostics
    for name, parameter in plain.policy.state_dict().items():
        assert th.equal(parameter, model.policy.state_dict()[name]), name
    rows = model.take_diagnostic_rows()
    assert model.take_diagnostic_rows() == []  # taken once
    assert [row["timesteps"] for row in rows] == [64 * k for k in range(1, 7)]
    assert all(set(row) == set(DIAGNOSTIC_COLUMNS) for row in rows)
    # staleness 2: the first two rollouts are queued, nothing trained, nothing moved
    assert [row["trained"] for row in rows] == [0, 0, 1, 1, 1, 1]
    assert all(math.isnan(row["ess"]) and row["kl_moved"] == 0.0 for row in rows[:2])
    for row in rows[2:]:
        assert row["minibatch_size"] == 16
        assert 0 < row["ess"] <= 16 + 1e-6 and row["ess_fraction"] == pytest.approx(row["ess"] / 16, rel=0.3)
        assert row["ess_min"] <= row["ess"] and row["is_weight_max"] >= row["is_weight_mean"] > 0
        assert 0.0 <= row["outside_clip"] <= 1.0 and row["recent_behavior_kl"] >= 0.0
        assert row["kl_moved"] > 0.0 and row["kl_per_step"] == pytest.approx(row["kl_moved"] / 64)
    # data two iterations old: the recent policy differs from the behavior policy
    assert max(row["recent_behavior_kl"] for row in rows[2:]) > 0.0


def test_diagnostics_at_staleness_zero_find_recent_equal_to_behavior():
    from benchmarks.harness.diagnostics import diagnosed
    from sb3_ewma.ablations import StalePPO_EWMA

    rows = _learn(diagnosed(StalePPO_EWMA), 0, "decoupled", 3 * 64).take_diagnostic_rows()
    assert [row["trained"] for row in rows] == [1, 1, 1]
    for row in rows:
        # the data was collected by the policy it is trained from: every ratio is 1 before the first step
        assert row["outside_clip"] == 0.0 and row["recent_behavior_kl"] == pytest.approx(0.0, abs=1e-6)


def test_diagnostics_of_ppg_mark_the_auxiliary_phase_and_read_b_simple():
    from stable_baselines3.common.env_util import make_vec_env

    from benchmarks.harness.diagnostics import diagnosed
    from sb3_ewma.ppg_ewma import PPG_EWMA

    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    model = diagnosed(PPG_EWMA)(
        "MlpPolicy", env, n_steps=32, batch_size=16, n_policy_iterations=2, n_aux_epochs=1, aux_batch_size=32,
        log_gradient_noise_scale=True, seed=0, device="cpu",
    )  # fmt: skip
    model.learn(4 * 64)
    rows = model.take_diagnostic_rows()
    assert [row["aux_phase"] for row in rows] == [0, 1, 0, 1]
    assert rows[-1]["gradient_noise_scale"] == pytest.approx(model.gradient_noise.latest.noise_scale)
    assert all(row["kl_moved"] > 0 for row in rows)


def test_runner_records_the_diagnostics_across_a_pause(tmp_path, monkeypatch):
    from dataclasses import replace

    spec = replace(_tiny_spec("ppo_ewma", ewma_decay=None, staleness=2, staleness_mode="behavior"), diagnostics=True)
    assert runner.model_class(spec).__name__ == "DiagnosedStalePPO_EWMA"
    clock = itertools.chain([0.0], itertools.repeat(100.0))
    monkeypatch.setattr(common, "clock", lambda: next(clock))
    assert runner.execute(spec, tmp_path, deadline=1.0)["status"] == "paused"
    diagnostics_csv = tmp_path / "checkpoints" / spec.run_id / "diagnostics.csv"
    assert [row["timesteps"] for row in read(diagnostics_csv)] == [str(spec.iteration_size)]
    # an invocation killed after it resumed left a row beyond the checkpoint: it is dropped
    common.append_csv(diagnostics_csv, {**read(diagnostics_csv)[-1], "timesteps": 2 * spec.iteration_size})
    monkeypatch.setattr(common, "clock", lambda: 0.0)
    record = runner.execute(spec, tmp_path)["record"]
    assert 0 < record["cpu_time"]  # over both invocations (CPU seconds of the process while it ran the run)
    rows = [dict(zip(record["diagnostics"]["columns"], row)) for row in record["diagnostics"]["rows"]]
    assert [row["timesteps"] for row in rows] == list(
        range(spec.iteration_size, spec.total_timesteps + 1, spec.iteration_size)
    )
    assert [row["trained"] for row in rows] == [0, 0, 1, 1, 1, 1, 1, 1]
    # the stale rollouts of the checkpoint were trained on after the pause: their recent-behavior KL is measured
    assert all(row["recent_behavior_kl"] >= 0 for row in rows[2:])
    # without diagnostics the run is the one it was before they existed (same hash, no diagnostics in the record)
    plain = replace(spec, diagnostics=False)
    assert plain.spec_hash != spec.spec_hash and "diagnostics" not in runner.execute(plain, tmp_path / "plain")["record"]


def test_diagnostics_left_the_hashes_of_the_finished_cpu_runs_unchanged():
    # (batch_size_invariance's PPG runs count through their hash of when PPG took ewma_decay=None)
    for module in (ewma_comparison, staleness, batch_size_invariance):
        specs = module.build_specs("cpu", {})
        manifest = common.Manifest(common.RESULTS_DIR / module.NAME / "cpu" / results_store.RUNS_FILE)
        assert all(manifest.is_done(spec) for spec in specs), module.NAME


def test_breakout_preregistered_preset_holds_the_preregistered_runs():
    stale = staleness.build_specs("breakout_preregistered", {})
    assert all(spec.diagnostics for spec in stale) and {spec.iteration_size for spec in stale} == {64 * 256}
    cells = {(spec.variant, spec.labels["staleness"]) for spec in stale}
    modes = ("decoupled", "behavior", "proximal", "ewma")
    assert cells == {("decoupled", 0), ("ewma", 0)} | {(mode, level) for mode in modes for level in (2, 8)}
    assert len(stale) == 5 * len(cells)
    for spec in stale:
        assert spec.hyperparams["staleness_mode"] == ("decoupled" if spec.variant == "ewma" else spec.variant)
        assert ("ewma_decay" not in spec.hyperparams) == (spec.variant == "ewma")  # "auto": the EWMA on
    batch = {
        (spec.variant, spec.n_envs, spec.seed): spec
        for spec in batch_size_invariance.build_specs("breakout_preregistered", {})
    }
    assert {n_envs for _, n_envs, _ in batch} == {16, 4, 1} and {seed for *_, seed in batch} == set(range(5))
    reference = batch[("ppo_ewma", 16, 0)]
    assert reference.aliases == ("ppo_no_lr",) and reference.hyperparams["batch_size"] == 256
    assert batch[("ppg_ewma", 16, 0)].aliases == ("no_lr",)
    for n_envs, factor in ((4, 2), (1, 4)):
        full, ablation, plain = (batch[(variant, n_envs, 0)].hyperparams for variant in ("ppo_ewma", "ppo_no_lr", "ppo"))
        assert full["n_epochs"] == 1 and full["batch_size"] == 256 * n_envs // 16
        assert math.isclose(full["learning_rate"], reference.hyperparams["learning_rate"] / factor)  # / sqrt(16 / n)
        assert ablation["learning_rate"] == reference.hyperparams["learning_rate"]
        assert plain["ewma_decay"] is None and math.isclose(plain["learning_rate"], full["learning_rate"])
    ewma = ewma_comparison.build_specs("breakout_preregistered", {})
    assert len(ewma) == 4 * 14 and {spec.iteration_size for spec in ewma} == {64 * 128} and ewma[0].diagnostics


def test_breakout_large_steps_preset_holds_the_preregistered_runs_and_its_candidates():
    """Staleness with large steps: the breakout_preregistered runs with the chosen clip range and step size, no
    PPO-EWMA; the regime diagnostics' candidates are that iteration with one or two hyperparameters changed."""
    from benchmarks.learning import regime_diagnostics

    regime = {
        (spec.variant, spec.labels["staleness"], spec.seed): spec
        for spec in staleness.build_specs("breakout_preregistered", {})
    }
    moving = staleness.build_specs("breakout_large_steps", {})
    cells = {(spec.variant, spec.labels["staleness"]) for spec in moving}
    assert cells == {("decoupled", 0)} | {(mode, level) for mode in staleness.MODES for level in (2, 8)}
    assert len(moving) == 5 * len(cells) and {spec.total_timesteps for spec in moving} == {2 * 2**20}
    for spec in moving:
        assert spec.diagnostics and spec.iteration_size == 64 * 256 and spec.hyperparams["batch_size"] == 2048
        expected = dict(regime[(spec.variant, spec.labels["staleness"], spec.seed)].hyperparams)
        expected.update(clip_range=0.5, learning_rate=2e-3)
        assert spec.hyperparams == expected
    clip03 = staleness.build_specs("breakout_clip0.3", {})
    assert len(clip03) == len(moving)
    for spec in clip03:
        expected = dict(regime[(spec.variant, spec.labels["staleness"], spec.seed)].hyperparams, clip_range=0.3)
        assert spec.hyperparams == expected
    candidates = regime_diagnostics.build_specs("breakout_large_steps", {})
    assert len(candidates) == 3 * len(PRESETS["breakout_large_steps"].runs["regime_diagnostics"].options["candidates"])
    base = PRESETS["cpu"].setting.hyperparams("ppo_ewma")
    for spec in candidates:
        changed = {key for key, value in spec.hyperparams.items() if base.get(key) != value}
        assert changed - {"n_steps", "batch_size", "ewma_decay", "imp_samp_max", "staleness", "staleness_mode"} <= {
            "learning_rate",
            "n_epochs",
            "clip_range",
        }
    assert {spec.labels["regime"] for spec in candidates} >= {"64x256, clip 0.5, lr 0.002", "64x256, epochs 12"}
    # an experiment the preset's row does not name refuses it on its command line
    with pytest.raises(SystemExit):
        ewma_comparison.main(["--preset", "breakout_large_steps", "--list"])


def test_breakout_128_minibatches_preset_holds_the_preregistered_runs():
    """PPO and PPO-EWMA at the breakout_preregistered comparison's setting with 128 minibatches of 64."""
    regime = {(spec.algo, spec.seed): spec for spec in ewma_comparison.build_specs("breakout_preregistered", {})}
    noise = ewma_comparison.build_specs("breakout_128_minibatches", {})
    assert sorted({spec.algo for spec in noise}) == ["ppo", "ppo_ewma"] and len(noise) == 2 * 10
    for spec in noise:
        assert spec.iteration_size == 64 * 128 and spec.hyperparams["batch_size"] == 64 and spec.diagnostics
        expected = dict(regime[(spec.algo, spec.seed)].hyperparams, batch_size=64)
        assert spec.hyperparams == expected and spec.total_timesteps == 2**20
    # PPO-EWMA's default EWMA: center of mass = minibatches per epoch
    assert "ewma_decay" not in next(spec for spec in noise if spec.algo == "ppo_ewma").hyperparams
    # the older anchor: the same runs but PPO-EWMA's center of mass, 1 / (1 - decay) - 1 = 384 (the iteration's steps)
    old = {(spec.algo, spec.seed): spec for spec in ewma_comparison.build_specs("breakout_128_minibatches_ewma384", {})}
    for spec in noise:
        if spec.algo == "ppo":  # PPO's arm is the same runs
            assert old[("ppo", spec.seed)].spec_hash == spec.spec_hash
        else:
            decay = old[("ppo_ewma", spec.seed)].hyperparams.pop("ewma_decay")
            assert math.isclose(1 / (1 - decay) - 1, 384) and old[("ppo_ewma", spec.seed)].hyperparams == spec.hyperparams


def test_regime_diagnostics_smoke_report(tmp_path):
    from benchmarks.learning import regime_diagnostics

    out_dir = regime_diagnostics.main(["--preset", "smoke", "--out", str(tmp_path), "--workers", "1"])
    text = (out_dir / "results.md").read_text()
    assert "### Staleness candidates" in text and "### Batch-size candidates" in text
    records = results_store.read(out_dir / results_store.RUNS_FILE)
    assert len(records) == len(regime_diagnostics.build_specs("smoke", {}))
    trained = []
    for record in records:
        frame = regime_diagnostics.diagnostics_frame(record)
        summary = regime_diagnostics.summarize_diagnostics(frame)
        assert len(frame) == record["timesteps"] // (int(record["n_envs"]) * 16)  # a row per iteration (16 steps)
        trained.append(summary["iterations"] == (frame["trained"] == 1).sum())
        trained[-1] = trained[-1] and summary["iterations"] > 0
    assert sum(trained) == len(records) - 1  # all but staleness 8, whose 8 iterations only queue their rollouts


def test_statistics_of_the_reports_by_hand():
    from scipy import stats

    from benchmarks.harness import statistics

    # Mann-Whitney (scipy, exact): x above y in all 3 x 3 pairs: U = 9, p = 1 / C(6, 3) = 1/20
    u, p, z = statistics.mann_whitney_greater([4.0, 5.0, 6.0], [1.0, 2.0, 3.0])
    assert u == 9 and p == pytest.approx(1 / 20) and z == pytest.approx((9 - 4.5) / math.sqrt(9 * 7 / 12))
    # 5 against 5 seeds, complete separation: p = 1/252, the smallest an appendix-F test of 5 seeds can give
    assert statistics.mann_whitney_greater(range(5, 10), range(5))[1] == pytest.approx(1 / 252)
    # a tie counts one half; reversed groups give p = 1
    assert statistics.mann_whitney_greater([1.0], [1.0])[:2] == (0.5, 1.0)
    assert statistics.mann_whitney_greater([1.0, 2.0], [3.0, 4.0])[1] == 1.0
    # 14 against 14 (C(28, 14) > EXACT_LIMIT): the normal approximation, p = 1 - Phi(z)
    u, p, z = statistics.mann_whitney_greater([value + 0.5 for value in range(14)], range(0, 28, 2))
    assert p == pytest.approx(stats.norm.sf(z)) and z == pytest.approx((u - 98) / math.sqrt(196 * 29 / 12))
    # Wilcoxon signed-rank (paired): 5 positive differences, exact one-sided p = 1 / 2^5; no difference at all: NaN
    assert statistics.wilcoxon_p([2.0, 3.0, 4.0, 5.0, 6.0], [1.0, 1.0, 1.0, 1.0, 1.5]) == pytest.approx(1 / 32)
    assert statistics.wilcoxon_p([1.0, 6.0], [2.0, 7.0]) == pytest.approx(1.0)
    assert math.isnan(statistics.wilcoxon_p([1.0, 2.0], [1.0, 2.0]))


def test_paired_bootstrap_intervals_and_the_detectable_difference():
    import numpy as np
    from scipy import stats

    from benchmarks.harness import statistics

    # seeds far apart, every pair 0.5 apart: the paired interval is 0.5 exactly (it excludes 0), although the two
    # cells' values overlap
    base = np.array([1.0, 5.0, 2.0, 8.0, 3.0])
    assert statistics.paired_difference(base + 0.5, base) == (0.5, 0.5, 0.5)
    # symmetric noise around no difference: the interval holds 0
    estimate, low, high = statistics.paired_difference(base + np.array([-1.0, 1.0, -2.0, 2.0, 0.0]), base)
    assert estimate == 0.0 and low < 0 < high
    with pytest.raises(ValueError):
        statistics.paired_difference([1.0, 2.0], [1.0])
    # the spread of the means (2, 5, 2) of three batch sizes; the same seeds' shift in every group changes nothing
    assert statistics.paired_spread([[1.0, 3.0], [4.0, 6.0], [2.0, 2.0]])[0] == 3.0
    assert statistics.paired_spread([[1.0, 3.0], [5.0, 7.0], [3.0, 5.0]]) == (4.0, 4.0, 4.0)
    # a curve point's interval of the mean holds the mean; one seed is its own interval
    low, high = statistics.mean_interval([1.0, 2.0, 3.0, 4.0])
    assert 1.0 <= low < 2.5 < high <= 4.0 and statistics.mean_interval([2.0]) == (2.0, 2.0)
    # the paired t-test detects the difference with 80% power: the noncentral t's tail beyond the critical value
    delta = statistics.detectable_difference(sigma=2.0, pairs=10)
    critical = stats.t.ppf(0.975, 9)
    power = stats.nct.sf(critical, 9, delta / 2.0 * math.sqrt(10)) + stats.nct.cdf(-critical, 9, delta / 2.0 * math.sqrt(10))
    assert power == pytest.approx(0.8, abs=1e-4)
    assert math.isnan(statistics.detectable_difference(1.0, 1))


def test_staleness_contrasts_of_the_preregistration():
    import pandas as pd

    finals = {("decoupled", 0): [9, 9, 9, 9, 9], ("decoupled", 2): range(10, 15), ("proximal", 2): range(5)}
    finals[("behavior", 2)] = [12, 12, 12, 12, 12]
    rows = [
        {"variant": variant, "staleness": level, "seed": seed, "timesteps": 100, "total_timesteps": 100, "value": value}
        for (variant, level), values in finals.items()
        for seed, value in enumerate(values)
    ]
    frame = pd.DataFrame(rows)
    names = [contrast[0] for contrast in staleness.contrasts(frame, [0, 2])]
    # no PPO-EWMA cells: its contrast is left out
    assert names == [
        "decoupled - recent for both, staleness 2",
        "decoupled - behavior for both, staleness 2",
        "decoupled loss from 0 to 2",
    ]
    table = staleness.contrasts_table(frame, [0, 2]).splitlines()
    assert "paired" in table[0]
    # decoupled 10..14 against recent-for-both 0..4, seed by seed: +10 in every pair, so the paired interval is
    # [+10, +10]; Wilcoxon p = 1/2^5, Mann-Whitney p = 1/252
    assert table[2] == "| decoupled - recent for both, staleness 2 | 5 | +10 | [+10, +10] | > 0 | 0.0312 | 0.00397 |"
    assert table[4].startswith("| decoupled loss from 0 to 2 | 5 | -3 | [") and table[4].endswith("| - | - | - |")


def test_reports_of_unfinished_experiments_say_they_are_partial(tmp_path):
    out_dir = staleness.main(["--preset", "smoke", "--out", str(tmp_path), "--report-only"])
    assert "**Partial results: 0 of 7 runs finished.**" in (out_dir / "results.md").read_text()


def test_staleness_report_with_diagnostics_shows_intervals_and_the_diagnostics(tmp_path):
    from dataclasses import replace

    from benchmarks.harness import cli
    from benchmarks.harness.report import write_report

    specs = [replace(spec, diagnostics=True) for spec in staleness.build_specs("smoke", {})]
    cli.run_specs(specs, tmp_path, workers=1)
    text = write_report(staleness.EXPERIMENT, specs, tmp_path, command="test").read_text()
    assert "95% bootstrap interval of the mean" in text and "Paper (figure 1): decoupled >= behavior" in text
    assert "## Training diagnostics" in text and (tmp_path / "staleness_diagnostics.png").stat().st_size > 0
    assert "Partial results" not in text


@pytest.mark.parametrize("module", [batch_size_invariance, ewma_comparison], ids=lambda module: module.NAME)
def test_reports_with_diagnostics_hold_the_preregistered_statistics(module, tmp_path):
    from dataclasses import replace

    from benchmarks.harness import cli
    from benchmarks.harness.report import write_report

    specs = [replace(spec, diagnostics=True) for spec in module.build_specs("smoke", {})]
    cli.run_specs(specs, tmp_path, workers=1)
    text = write_report(module.EXPERIMENT, specs, tmp_path, command="test").read_text()
    if module is batch_size_invariance:
        assert "spread across batch sizes" in text and "| no_lr vs ppg_ewma | 1 | 1 / 1 |" in text
        assert "| ppg | 1 x 2 |" in text  # the spread of PPG over 4 and 1 environments, one seed each
        assert "## KL moved per environment step" in text and (tmp_path / "batch_size_invariance_kl_per_step.png").exists()
    else:
        assert "EWMA minus none" in text and "| PPO-EWMA - PPO (SB3) | 2 | " in text and "paired bootstrap" in text


def test_the_command_line_runs_only_the_algorithms_asked_for_and_evaluates_as_often_as_asked(tmp_path):
    """--algos keeps the runs of those algorithms (a pair left out is left out of the report's table); --eval-every
    rounds up to whole iterations; an algorithm without runs is refused, naming those with runs."""
    from benchmarks.harness import cli

    specs = ewma_comparison.build_specs("smoke", {"seeds": 2, "eval_every": 100})
    iteration = PRESETS["smoke"].setting.iteration_size
    assert {spec.eval_every for spec in specs} == {-(-100 // iteration) * iteration}
    kept = cli.select_algorithms(specs, "ppo, ppo_ewma")
    assert [(spec.algo, spec.seed) for spec in kept] == [
        (spec.algo, spec.seed) for spec in specs if spec.algo in ("ppo", "ppo_ewma")
    ] and len(kept) == 4
    refusal = r"--algos 'ppo,sac': the runs of this experiment are of ppg, ppg_ewma, ppo, ppo_ewma"
    with pytest.raises(SystemExit, match=refusal):
        cli.select_algorithms(specs, "ppo,sac")
    arguments = ["--preset", "smoke", "--algos", "ppo,ppo_ewma", "--seeds", "1", "--timesteps", "64", "--workers", "1"]
    out = cli.main(ewma_comparison.EXPERIMENT, [*arguments, "--out", str(tmp_path)])
    report = (out / "results.md").read_text()
    assert "| PPO-EWMA |" in report and "| PPG-EWMA |" not in report
    assert "command: `python -m benchmarks.learning.ewma_comparison --preset smoke --algos ppo,ppo_ewma" in report


def test_the_staleness_mechanism_table_takes_each_runs_median_then_the_mean_over_seeds():
    import pandas as pd

    rows = []
    for seed, values in ((0, (0.1, 0.2, 0.9)), (1, (0.3, 0.3, 0.5))):  # medians 0.2 and 0.3
        for value in values:
            row = {column: 1.0 for column in staleness.MECHANISM_COLUMNS}
            rows.append({**row, "outside_clip": value, "cell": "decoupled, staleness 2", "seed": seed})
    table = staleness.mechanism_table(pd.DataFrame(rows))
    line = next(line for line in table.splitlines() if line.startswith("| decoupled, staleness 2"))
    assert line.split(" | ")[1:3] == ["2", "0.25 (0.2-0.3)"]


def test_records_are_read_from_the_gzip_archive_then_the_file(tmp_path):
    import gzip

    path = tmp_path / results_store.RUNS_FILE
    (tmp_path / (results_store.RUNS_FILE + ".gz")).write_bytes(
        gzip.compress(b'{"run_id": "a", "x": 1}\n{"run_id": "b", "x": 2}\n')
    )
    results_store.append(path, {"run_id": "a", "x": 3})
    assert [record["x"] for record in results_store.read(path)] == [1, 2, 3]
    assert {key: record["x"] for key, record in results_store.latest(path).items()} == {"a": 3, "b": 2}


def test_archive_moves_the_finished_records_into_the_gzip_with_diagnostics_on_the_grid(tmp_path):
    import gzip
    import json

    path = tmp_path / results_store.RUNS_FILE
    (tmp_path / (results_store.RUNS_FILE + ".gz")).write_bytes(gzip.compress(b'{"run_id": "a", "x": 1}\n'))
    diagnostics = {"columns": ["timesteps", "kl"], "rows": [[128 * i, float(i)] for i in range(1, 33)]}
    results_store.append(path, {"run_id": "b", "status": "unfinished", "x": 2})
    results_store.append(path, {"run_id": "c", "status": "finished", "x": 3, "diagnostics": diagnostics})
    results_store.append(path, {"run_id": "a", "status": "finished", "x": 4})
    results_store.append(path, {"run_id": "d", "status": "finished", "x": 5})
    results_store.append(path, {"run_id": "d", "status": "failed", "x": 6})

    target = results_store.archive(tmp_path, diagnostics_grid=2048)
    records = results_store.latest(path)
    # each run's last record counts: the finished ones archived, the others (unfinished, failed) kept in runs.jsonl
    assert {key: record["x"] for key, record in records.items()} == {"a": 4, "c": 3, "b": 2, "d": 6}
    assert sorted(record["run_id"] for record in map(json.loads, path.read_text().splitlines())) == ["b", "d"]
    assert records["c"]["diagnostics"]["rows"] == [[2048, 16.0], [4096, 32.0]]  # iterations 16 and 32 of 128 steps
    assert records["c"]["diagnostics_grid"] == 2048 and "diagnostics_grid" not in records["a"]
    before = target.read_bytes()
    assert results_store.archive(tmp_path, diagnostics_grid=2048).read_bytes() == before  # reproducible, idempotent
    assert results_store.on_grid(records["c"], 4096)["diagnostics"]["rows"] == [[4096, 32.0]]

    with pytest.raises(ValueError, match="grid=0"):
        results_store.on_grid(records["c"], 0)
    with pytest.raises(ValueError, match="every 2048 steps; grid=3072 is not a multiple"):
        results_store.archive(tmp_path, diagnostics_grid=3072)
    assert target.read_bytes() == before  # refused before anything was written
    with pytest.raises(FileNotFoundError, match=r"no runs\.jsonl"):
        results_store.archive(tmp_path / "empty")


def test_saved_figures_are_palette_pngs_that_keep_the_plot(tmp_path):
    """save_figure stores a 256-color palette PNG (committed figures stay small) whose pixels match the full-color one."""
    import matplotlib

    matplotlib.use("Agg")
    import numpy as np
    from PIL import Image

    from benchmarks.harness.report import new_figure, save_figure

    def draw():
        figure, axes = new_figure(1, 2)
        for ax, shift in zip(axes[0], (0.0, 1.0)):
            steps = np.linspace(0, 1, 50)
            ax.plot(steps, np.sin(steps * 6 + shift), label="a")
            ax.fill_between(steps, -1, 1, alpha=0.2)
            ax.legend()
        return figure

    full = tmp_path / "full.png"
    figure = draw()
    figure.tight_layout()
    figure.savefig(full, dpi=110)
    markdown = save_figure(draw(), tmp_path / "palette.png")
    assert markdown == "![palette](palette.png)"
    with Image.open(tmp_path / "palette.png") as palette, Image.open(full) as reference:
        assert palette.mode == "P"
        assert palette.size == reference.size
        difference = np.abs(np.asarray(palette.convert("RGB"), float) - np.asarray(reference.convert("RGB"), float))
    assert difference.mean() < 2.0  # of 255: the same picture
    assert (tmp_path / "palette.png").stat().st_size < full.stat().st_size


def test_proximal_noise_comes_from_the_minibatch_order_alone(tmp_path, monkeypatch):
    """Copies of one kept state trained with the same minibatch order end with the same anchor (noise 0), with
    different orders with different ones; PPO's anchor is its policy, PPO-EWMA's the EWMA; the smoke run reports."""
    import io
    import json

    import numpy as np

    from benchmarks.learning import proximal_noise

    minibatches = PRESETS["smoke"].runs["proximal_noise"].options["minibatches"]
    for decay in proximal_noise.ALGOS.values():
        setting = PRESETS["smoke"].setting
        hyperparams = setting.hyperparams("ppo_ewma", 4)
        policy_kwargs = hyperparams.pop("policy_kwargs")
        hyperparams.update(batch_size=16, ewma_decay=decay)
        env = importlib.import_module("benchmarks.harness.envs").make_env(setting.envs[0], 4, 0)
        model = proximal_noise.PPO_EWMA("MlpPolicy", env, policy_kwargs=policy_kwargs, seed=0, **hyperparams)
        keep = proximal_noise._KeepRollout()
        model.learn(128, callback=keep)
        anchor = proximal_noise.anchor_of(model)
        assert (anchor is model.policy) == (decay is None)
        same = proximal_noise.measure_point(keep.state, keep.buffer, env, 2, seed=0)
        assert same["noise"] > 0 and same["movement"] > 0
        # the same order twice: the copies are identical
        with monkeypatch.context() as patch:
            patch.setattr(np.random, "seed", lambda _requested, reseed=np.random.seed: reseed(7))
            identical = proximal_noise.measure_point(keep.state, keep.buffer, env, 2, seed=0)
        assert identical["noise"] == 0.0 and identical["movement"] > 0
        # the kept state is the model before that iteration's training
        before = proximal_noise.PPO_EWMA.load(io.BytesIO(keep.state), env=env)
        assert before.num_timesteps == 128 and before._n_updates < model._n_updates
        env.close()
    out_dir = proximal_noise.main(["--preset", "smoke", "--out", str(tmp_path)])
    text = (out_dir / "results.md").read_text()
    assert "noise ratio" in text and len(json.loads((out_dir / "runs.json").read_text())) == 2 * len(minibatches)


def test_ppg_runs_recorded_with_ewma_decay_none_count_as_done(tmp_path):
    # PPG took ewma_decay (None: no EWMA) until its constructor was written out; its runs of then are the same settings
    specs = batch_size_invariance.build_specs("cpu", {})
    ppg = next(spec for spec in specs if spec.algo == "ppg")
    ppg_ewma = next(spec for spec in specs if spec.algo == "ppg_ewma")
    assert "ewma_decay" not in ppg.hyperparams
    old_hash = replace(ppg, hyperparams={**ppg.hyperparams, "ewma_decay": None}).spec_hash
    assert ppg.recorded_hashes == (ppg.spec_hash, old_hash) and old_hash != ppg.spec_hash
    assert ppg_ewma.recorded_hashes == (ppg_ewma.spec_hash,)
    other_settings = replace(ppg, hyperparams={**ppg.hyperparams, "ewma_decay": None, "n_epochs": 2}).spec_hash
    for spec, recorded, done in ((ppg, old_hash, True), (ppg, other_settings, False), (ppg_ewma, old_hash, False)):
        manifest = common.Manifest(tmp_path / f"{spec.algo}-{recorded}.jsonl")
        manifest.add({"run_id": spec.run_id, "spec_hash": recorded, "wall_time": 1.0, "evaluations": []})
        assert manifest.is_done(spec) is done


def test_every_experiment_names_the_module_that_runs_it():
    """The command a report prints (``python -m <module> ...``) names a module that exists."""
    import importlib
    import importlib.util

    from benchmarks.harness.cli import experiment_module

    for name in ("ewma_comparison", "batch_size_invariance", "batch_size_invariance_authors", "staleness",
                 "overlapped_rollouts", "regime_diagnostics", "proximal_noise", "pilot", "zoo_table"):  # fmt: skip
        module = importlib.import_module(f"benchmarks.learning.{name}")
        experiment = getattr(module, "EXPERIMENT", None)
        if experiment is not None:
            assert importlib.util.find_spec(experiment_module(experiment)) is not None, name
    from benchmarks.learning import overlapped_rollouts

    assert experiment_module(overlapped_rollouts.EXPERIMENT) == "benchmarks.learning.overlapped_rollouts"


@pytest.mark.skipif(
    not any(shutil.which(name) for name in ("g++", "c++", "clang++")), reason="the compiled rows need a C++ compiler"
)
def test_contrib_throughput_smoke_times_every_pair(tmp_path):
    """The contrib benchmark's smoke preset: each EWMA algorithm timed against its parent, the compiled ones compiled
    (the benchmark raises otherwise)."""
    from benchmarks.timing import contrib_throughput

    summary = contrib_throughput.main(["--preset", "smoke", "--out", str(tmp_path)])
    for name in contrib_throughput.PAIRS:
        assert summary[name]["train"] > 0 and summary[name]["train_ratio"] > 0
    text = (tmp_path / contrib_throughput.NAME / "smoke" / "results.md").read_text()
    assert "| ppo_mask_ewma_compiled | ppo_mask |" in text


@pytest.mark.skipif(
    not any(shutil.which(name) for name in ("g++", "c++", "clang++")), reason="the compiled step needs a C++ compiler"
)
def test_recurrent_compile_cost_measures_what_compiling_saves(tmp_path):
    """One entry, one timed iteration each way: the report has the entry's row (times are the benchmark's to
    compare, not this test's)."""
    from benchmarks.timing import recurrent_compile_cost

    out = tmp_path / "cost.md"
    results = recurrent_compile_cost.main(["--iterations", "1", "--entries", "CartPoleNoVel-v1", "--out", str(out)])
    row = results["CartPoleNoVel-v1"]
    assert row["optimizer steps per iteration"] == 20
    assert row["compiled iteration (s)"] > 0 and row["eager iteration (s)"] > 0
    assert row["compiled / eager"] == pytest.approx(row["compiled iteration (s)"] / row["eager iteration (s)"])
    assert "| CartPoleNoVel-v1 |" in out.read_text()


@pytest.mark.skipif(
    not any(shutil.which(name) for name in ("g++", "c++", "clang++")), reason="the compiled loss needs a C++ compiler"
)
def test_step_profile_times_the_compiled_loss_with_and_without_the_proximal_policy():
    """The profile's call of the compiled loss follows the loss's signature (a time each way)."""
    from benchmarks.timing import step_profile

    assert step_profile.loss_ms(True, seed=0, repeats=1) > 0
    assert step_profile.loss_ms(False, seed=0, repeats=1) > 0
