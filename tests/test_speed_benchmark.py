"""The side-by-side speed benchmark (benchmarks/timing/speed.py): schedules, rounds, ratios, resume, one tiny run."""

import csv
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `benchmarks` is a directory of the repository, not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.timing import sbx_run, speed  # noqa: E402


def read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def test_lin_schedules_are_linear_in_the_progress_remaining_as_rl_zoo3_makes_them():
    schedule = speed.zoo_value("learning_rate", "lin_0.001")
    assert [schedule(progress) for progress in (1.0, 0.5, 0.0)] == pytest.approx([1e-3, 5e-4, 0.0])
    assert speed.zoo_value("clip_range", 0.2) == 0.2  # a number stays a number (SB3 makes it a constant schedule)
    assert speed.zoo_value("policy", "lin_0.1") == "lin_0.1"  # only the schedule keys are schedules
    rl_zoo3_utils = pytest.importorskip("rl_zoo3.utils")
    reference = rl_zoo3_utils.linear_schedule("0.2")
    ours, sbx = speed.zoo_value("clip_range", "lin_0.2"), sbx_run.zoo_value("lin_0.2")
    for progress in (1.0, 0.73, 0.1, 0.0):
        assert ours(progress) == sbx(progress) == reference(progress)
    # the CartPole entry keeps rl-zoo3's strings in the spec (JSON) and becomes schedules for the model
    spec = speed.measurement_spec(speed.TASKS["cartpole"], speed.IMPLEMENTATIONS["sb3_ppo"], 2048, 0)
    assert spec["hyperparams"]["learning_rate"] == "lin_0.001" and spec["n_envs"] == 8
    assert "n_timesteps" not in spec["hyperparams"] and "policy" not in spec["hyperparams"]
    kwargs = speed.model_kwargs(spec["hyperparams"])
    assert kwargs["learning_rate"](0.5) == pytest.approx(5e-4) and kwargs["n_epochs"] == 20
    json.dumps(spec)  # what the subprocess gets


def test_task_settings_per_family():
    pendulum = speed.TASKS["pendulum"]
    ppo = speed.task_settings(pendulum, speed.IMPLEMENTATIONS["ppo_ewma_compiled"])
    assert ppo["hyperparams"]["use_sde"] is True and ppo["normalize"] is None  # rl-zoo3's entry, gSDE kept
    ppg = speed.task_settings(pendulum, speed.IMPLEMENTATIONS["ppg_eager"])
    assert ppg["normalize"] == {"norm_obs": False, "norm_reward": True, "gamma": 0.9}
    breakout = speed.task_settings(speed.TASKS["breakout"], speed.IMPLEMENTATIONS["sbx_ppo"])
    assert breakout["n_envs"] == 64 and breakout["hyperparams"]["n_steps"] == 128
    assert breakout["hyperparams"]["batch_size"] == 1024 and breakout["hyperparams"]["n_epochs"] == 3
    assert breakout["hyperparams"]["policy_kwargs"] == {"net_arch": [64, 64]}
    assert speed.normalize_kwargs(True, 0.99) == {"gamma": 0.99} and speed.normalize_kwargs(None, 0.99) is None
    # every implementation of a family trains with the same settings on a task
    same = [speed.task_settings(speed.TASKS["cartpole"], speed.IMPLEMENTATIONS[name]) for name in ("sb3_ppo", "sbx_ppo")]
    assert same[0] == same[1]


def test_rounds_alternate_and_round_r_uses_seed_r():
    assert [speed.round_order("ABCDE", r) for r in range(3)] == [list("ABCDE"), list("BCDEA"), list("CDEAB")]
    names = ["sb3_ppo", "ppo_ewma_compiled", "sbx_ppo"]
    items = speed.plan(["cartpole", "pendulum"], names, rounds=2)
    assert items[:4] == [
        ("cartpole", "ppo_ewma_compiled", "cold"),
        ("cartpole", "sb3_ppo", 0),
        ("cartpole", "ppo_ewma_compiled", 0),
        ("cartpole", "sbx_ppo", 0),
    ]
    assert [impl for task, impl, label in items if task == "cartpole" and label == 1] == [
        "ppo_ewma_compiled",
        "sbx_ppo",
        "sb3_ppo",
    ]
    assert len(items) == 2 * (1 + 2 * 3) and len(speed.plan(["cartpole"], names, 2, cold=False)) == 6
    assert [speed.seed_of(label) for label in ("cold", 0, 1, 2)] == [0, 0, 1, 2]


def test_timesteps_option():
    tasks = list(speed.TASKS)
    assert speed.parse_timesteps(None, tasks, None)["lunarlander"] == 200_000
    assert set(speed.parse_timesteps("2048", tasks, None).values()) == {2048}
    budgets = speed.parse_timesteps("lunarlander=1e6,breakout=5e5", tasks, None)
    assert budgets == {"cartpole": 100_000, "pendulum": 100_000, "lunarlander": 1_000_000, "breakout": 500_000}
    with pytest.raises(ValueError, match="unknown task"):
        speed.parse_timesteps("mountaincar=10", tasks, None)


def _row(task, impl, round_label, wall, final_return, digest="h"):
    return {
        "task": task,
        "impl": impl,
        "round": str(round_label),
        "settings_hash": digest,
        "wall_seconds": str(wall),
        "train_seconds": str(wall / 2),
        "learn_cpu_seconds": str(wall),
        "final_return": str(final_return),
        "step_mode": "compiled" if "compiled" in impl else "eager",
        "cache_new_files": "0",
    }


def test_medians_of_per_round_ratios_learns_and_the_goal():
    rows = [_row("cartpole", "sb3_ppo", r, wall, ret) for r, wall, ret in ((0, 10, 500), (1, 20, 498), (2, 12, 499))]
    rows += [_row("cartpole", "ppo_ewma_compiled", r, wall, ret) for r, wall, ret in ((0, 4, 500), (1, 12, 495), (2, 7, 490))]
    rows += [_row("cartpole", "ppo_ewma_compiled_process", r, wall, 100) for r, wall in ((0, 3), (1, 6), (2, 5))]
    rows += [_row("cartpole", "sbx_ppo", r, 5.0, 500) for r in range(3)]
    rows.append(_row("cartpole", "ppo_ewma_compiled", "cold", 30, 500))
    summary = speed.summarize(rows)["cartpole"]
    compiled = summary["ppo_ewma_compiled"]
    assert compiled["cold"] == 30 and compiled["walls"] == {"0": 4.0, "1": 12.0, "2": 7.0}
    assert speed.paired_ratios(compiled["walls"], summary["sb3_ppo"]["walls"]) == pytest.approx([0.4, 0.6, 7 / 12])
    # the median of the per-round ratios (0.583), not the ratio of the medians (7 / 12 as well here, but by chance)
    assert speed.median_ratio(compiled["walls"], summary["sb3_ppo"]["walls"]) == pytest.approx(7 / 12)
    assert speed.median_ratio({"0": 1.0}, {"1": 2.0}) is None
    # learns: not below SB3's mean by more than 2 pooled sample std, or at the threshold
    assert speed.learns([500, 495, 490], [500, 498, 499]) == "yes"
    assert speed.learns([100, 100, 100], [500, 498, 499]) == "no"
    assert speed.learns([480, 490, 500], [500, 500, 500], threshold=475) == "yes"
    assert speed.learns([476, 477, 478], [500, 500, 500], threshold=475) == "yes (threshold)"
    assert speed.learns([200], [500]) == "n/a" and speed.learns([200], [500], threshold=100) == "yes (threshold)"
    assert speed.learns([math.nan], [500]) == "n/a"
    lines, verdicts = speed.goal_table(speed.summarize(rows), ["cartpole"])
    row = "| CartPole-v1 | 0.583 (not met) | 0.300 (met) | 1.400 (behind) | 1.000 (behind) | - | - | yes / no / yes / - |"
    assert row in lines
    assert verdicts[0].endswith("not met: met on 0 of 1 task(s)") and verdicts[1].endswith(
        "met on every task measured (1 of 1)"
    )
    assert "ahead of SBX: not met" in verdicts[2] and verdicts[3].endswith("not measured")
    assert speed.goal_verdict([True, None]) == "met on every task measured (1 of 1); 1 task(s) not measured"
    table = "\n".join(speed.task_table(speed.TASKS["cartpole"], summary, list(summary)))
    assert "| ppo_ewma_compiled | compiled | 7.00 | 4.0-12.0 | 0.583 | 30.0 | 495.0 +- 5.0 (3) | yes | 50% | 1.00 |" in table
    assert "| ppo_ewma_compiled_process |" in table and "| no |" in table and "reference (reaches 475)" in table


def test_resume_skips_what_was_measured_with_the_same_settings(tmp_path, monkeypatch):
    calls = []

    def fake_child(spec, config, cache_dir=None):
        calls.append((spec["task"], spec["impl"], spec["seed"], spec["timesteps"], cache_dir is not None))
        return {
            "wall_seconds": 1.0 + len(calls),
            "train_seconds": 0.5,
            "learn_cpu_seconds": 1.0,
            "child_cpu_seconds": 2.0,
            "final_return": 10.0,
            "episodes": 3,
            "steps": spec["timesteps"],
            "step_mode": "compiled",
            "cache_new_files": 0,
            "versions": {"torch": "x"},
        }

    monkeypatch.setattr(speed, "run_child", fake_child)
    argv = ["--out", str(tmp_path), "--tasks", "cartpole", "--algos", "sb3_ppo,ppo_ewma_compiled", "--timesteps", "512"]
    summary = speed.main([*argv, "--rounds", "2"])
    out_dir = tmp_path / "speed" / "cpu"
    rows = read(out_dir / "measurements.csv")
    # one cold measurement, one untimed priming run (not recorded), then 2 rounds of 2
    assert [(row["impl"], row["round"], row["seed"], row["cache"]) for row in rows] == [
        ("ppo_ewma_compiled", "cold", "0", "cold"),
        ("sb3_ppo", "0", "0", "-"),
        ("ppo_ewma_compiled", "0", "0", "warm"),
        ("ppo_ewma_compiled", "1", "1", "warm"),
        ("sb3_ppo", "1", "1", "-"),
    ]
    assert len(calls) == 6 and calls[0][-1] and not any(call[-1] for call in calls[1:])
    assert calls[2][:2] == ("cartpole", "ppo_ewma_compiled") and calls[2][3] == 512  # the priming run
    assert set(summary["cartpole"]) == {"sb3_ppo", "ppo_ewma_compiled"}
    text = (out_dir / "results.md").read_text()
    assert "## Goal" in text and "| ppo_ewma_compiled | compiled |" in text and "--rounds 2" in text
    # the same command again: nothing to measure
    calls.clear()
    speed.main([*argv, "--rounds", "2"])
    assert calls == [] and len(read(out_dir / "measurements.csv")) == 5
    # a third round: only its measurements (and the priming run of the compiled implementation)
    speed.main([*argv, "--rounds", "3"])
    assert [call[:3] for call in calls] == [("cartpole", "sb3_ppo", 2)] + [("cartpole", "ppo_ewma_compiled", 2)] * 2
    # other settings (budget): measured anew, the old rows kept in the CSV but not reported
    calls.clear()
    speed.main([*argv[:-1], "1024", "--rounds", "1", "--no-cold"])
    assert len(calls) == 3 and len(read(out_dir / "measurements.csv")) == 7 + 2
    assert speed.main([*argv[:-1], "1024", "--rounds", "1", "--report-only"])["cartpole"]["sb3_ppo"]["walls"].keys() == {"0"}


def test_a_failed_measurement_is_reported_and_retried(tmp_path, monkeypatch):
    def failing_child(spec, config, cache_dir=None):
        raise RuntimeError("exit status 1")

    monkeypatch.setattr(speed, "run_child", failing_child)
    argv = ["--out", str(tmp_path), "--tasks", "cartpole", "--algos", "sb3_ppo", "--timesteps", "512", "--rounds", "1"]
    with pytest.raises(SystemExit, match="1 measurement"):
        speed.main(argv)
    assert "cartpole sb3_ppo round 0" in (tmp_path / "speed" / "cpu" / "results.md").read_text()


def test_smoke_one_tiny_measurement_of_sb3_ppo_and_ppo_ewma_eager(tmp_path):
    argv = ["--out", str(tmp_path), "--preset", "smoke", "--tasks", "cartpole", "--algos", "sb3_ppo,ppo_ewma_eager"]
    summary = speed.main([*argv, "--timesteps", "256"])
    rows = read(tmp_path / "speed" / "smoke" / "measurements.csv")
    assert [(row["impl"], row["round"], row["steps"]) for row in rows] == [
        ("sb3_ppo", "0", "256"),
        ("ppo_ewma_eager", "0", "256"),
    ]
    assert all(float(row["wall_seconds"]) > 0 and float(row["child_cpu_seconds"]) > 0 for row in rows)
    assert rows[0]["step_mode"] == "eager (SB3)" and rows[1]["step_mode"] == "eager (compile_step=False)"
    assert json.loads(rows[1]["versions"])["torch"]
    assert set(summary["cartpole"]) == {"sb3_ppo", "ppo_ewma_eager"}
    assert "- machine: " in (tmp_path / "speed" / "smoke" / "results.md").read_text()


@pytest.mark.skipif(not speed.DEFAULT_SBX_PYTHON.exists(), reason="SBX's virtualenv (.venv-sbx) is not installed")
def test_smoke_one_tiny_measurement_of_sbx():
    spec = speed.measurement_spec(speed.TASKS["cartpole"], speed.IMPLEMENTATIONS["sbx_ppo"], 256, 0)
    result = speed.run_child(spec, {"sbx_python": speed.DEFAULT_SBX_PYTHON, "child_timeout": 300})
    assert result["steps"] == 256 and result["wall_seconds"] > 0 and result["step_mode"] == "jax.jit"
    assert result["versions"]["sbx-rl"]
