"""
The command line wastes nothing and leaves nothing behind: bad counts and ``-params`` values are refused as the
command line is parsed (before any run folder or environment exists), a failed start removes the run folder it
created (never an older one), ``enjoy`` / ``record_video`` take the newest run that holds a model, and the programs
report what the user got wrong in one line (``SB3_EWMA_TRACEBACK=1`` for the traceback).

Where a check belongs upstream (rl-zoo3 or SB3), its test says which upstream behavior it covers.
"""

import argparse
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import yaml

pytest.importorskip("rl_zoo3")

from sb3_ewma import _command, zoo
from sb3_ewma.zoo.arguments import CheckedStoreDict, check_train_counts
from sb3_ewma.zoo.checks import check_async_rollouts_env, latest_run_with_model

REPO_ROOT = Path(__file__).resolve().parent.parent
MONITOR_HEADER = '#{"t_start": 0, "env_id": "CartPole-v1"}\nr,l,t\n'

try:
    import procgen  # noqa: F401

    HAS_PROCGEN = True
except ImportError:
    HAS_PROCGEN = False


def train(log_folder: Path, *args: str) -> None:
    """``python -m sb3_ewma.train`` in this process: PPO-EWMA on CartPole-v1, one thread, no evaluation, quiet."""
    zoo.train(
        [
            *("--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(log_folder)),
            *("--num-threads", "1", "--eval-freq", "-1", "--verbose", "0", "--seed", "0", *args),
        ]
    )


def command(module: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m module args`` in a subprocess, with ``env`` added to the environment (and no SB3_EWMA_TRACEBACK)."""
    environment = {key: value for key, value in os.environ.items() if key != "SB3_EWMA_TRACEBACK"}
    environment.update({"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT), **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=300
    )


# ----------------------------------------------------------------------------------------------------------------------
# counts, before anything is written


@pytest.mark.parametrize(
    "flags, message",
    [
        # rl-zoo3 -optimize: "No trials are completed yet" / optuna's "max_workers must be greater than 0", after the
        # run folder exists
        (["-optimize", "--n-trials", "0"], "argument --n-trials: must be a number of trials >= 1, got 0"),
        (["-optimize", "--n-jobs", "-3"], "argument --n-jobs: must be a number of parallel jobs >= 1, or -1"),
        (["-optimize", "--n-jobs", "0"], "argument --n-jobs: must be a number of parallel jobs >= 1, or -1"),
        (["-optimize", "--max-total-trials", "0"], "argument --max-total-trials: must be a number of trials >= 1"),
        (["-optimize", "--n-evaluations", "0"], "argument --n-evaluations: must be a number of evaluations >= 1"),
        # rl-zoo3's evaluation: nan +/- nan and training goes on / an IndexError
        (["--eval-freq", "100", "--eval-episodes", "0"], "argument --eval-episodes: must be a number of episodes >= 1"),
        (["--eval-freq", "100", "--n-eval-envs", "0"], "argument --n-eval-envs: must be a number of environments >= 1"),
        # SB3: iteration % log_interval, a ZeroDivisionError at the first log
        (["--log-interval", "0"], "argument --log-interval: must be a number of iterations >= 1, -1"),
    ],
)
def test_bad_counts_are_refused_before_anything_is_written(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log_folder = tmp_path / "logs"
    with pytest.raises(SystemExit) as exit_info:
        train(log_folder, *flags)
    assert exit_info.value.code == 2  # argparse's error
    assert message in capsys.readouterr().err
    assert not log_folder.exists()


def test_counts_that_rl_zoo3_allows_pass() -> None:
    defaults = dict(
        n_timesteps=-1, n_trials=500, max_total_trials=None, n_jobs=1, n_evaluations=None, eval_episodes=5, n_eval_envs=1
    )
    check_train_counts(argparse.Namespace(**defaults, log_interval=-1))
    check_train_counts(argparse.Namespace(**{**defaults, "n_jobs": -1, "n_timesteps": 1, "log_interval": -2}))
    check_train_counts(argparse.Namespace(log_interval=-5))  # flags that the command lacks are skipped
    # counts of what is off, which rl-zoo3 does not read: evaluation (--eval-freq -1), the search (no -optimize)
    unused = dict(eval_episodes=0, n_eval_envs=0, n_trials=0, n_jobs=0, n_evaluations=0, max_total_trials=0)
    check_train_counts(argparse.Namespace(**{**defaults, **unused}, eval_freq=-1, optimize_hyperparameters=False))
    with pytest.raises(ValueError, match=r"argument --n-trials: must be a number of trials >= 1, got 0"):
        check_train_counts(argparse.Namespace(**{**defaults, "n_trials": 0}, optimize_hyperparameters=True))
    # -n 0 or below -1: rl-zoo3 trains the entry's budget (-n -100 trained 100,000 steps), so this warns
    for n_timesteps in (0, -2):
        with pytest.warns(UserWarning, match=rf"^-n {n_timesteps}: rl-zoo3 reads a budget of 0 or less as the hyperparameter"):
            check_train_counts(argparse.Namespace(**{**defaults, "n_timesteps": n_timesteps}))


# -params values


def params_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="train", exit_on_error=False)
    parser.add_argument("-params", "--hyperparams", nargs="+", action=CheckedStoreDict)
    return parser


def test_params_values_are_read_as_rl_zoo3_reads_them() -> None:
    args = params_parser().parse_args(["-params", "ewma_decay:'fast'", "policy_kwargs:dict(net_arch=[8])", "n_envs:4"])
    assert args.hyperparams == {"ewma_decay": "fast", "policy_kwargs": {"net_arch": [8]}, "n_envs": 4}
    # rl-zoo3's namespace (torch's nn is there)
    args = params_parser().parse_args(["-params", "policy_kwargs:dict(activation_fn=nn.ReLU)"])
    assert args.hyperparams["policy_kwargs"]["activation_fn"].__name__ == "ReLU"


@pytest.mark.parametrize(
    "pair, message",
    [
        # rl-zoo3's StoreDict: NameError: name 'fast' is not defined
        ("ewma_decay:fast", "the value 'fast' is read as Python and gives NameError: name 'fast' is not defined. A string"),
        ("ewma_decay:fast", """-params "ewma_decay:'fast'\""""),
        # rl-zoo3's StoreDict: a SyntaxError from <string>
        ("learning_rate", "'learning_rate' is not a key:value pair: write -params key:value"),
        ("learning_rate:", "'learning_rate:' has no value after the ':': write -params learning_rate:VALUE"),
        ("net_arch:[64,", "the value '[64,' is read as Python and gives SyntaxError"),
    ],
)
def test_params_that_are_not_python_say_how_to_write_them(pair: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentError) as error:
        params_parser().parse_args(["-params", pair])
    assert "-params/--hyperparams" in str(error.value) and message in str(error.value)


def test_params_not_python_before_anything_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for flags in (["-params", "ewma_decay:fast"], ["--env-kwargs", "render_mode:human_"]):
        with pytest.raises(SystemExit):
            train(tmp_path / "logs", "-n", "64", *flags)
        assert "is read as Python" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


# async_rollouts against the environment


def test_async_rollouts_process_is_checked_against_procgen_before_the_environments() -> None:
    process = {"async_rollouts": "process"}
    with pytest.raises(ValueError, match=r"'process' .* procgen-coinrun-easy steps in threads .* num_threads:0"):
        check_async_rollouts_env("ppo_ewma", "procgen-coinrun-easy", True, process, None)
    with pytest.raises(ValueError, match=r"num_threads=4"):
        check_async_rollouts_env("ppo_ewma", "procgen-coinrun-easy", True, process, {"num_threads": 4})
    check_async_rollouts_env("ppo_ewma", "procgen-coinrun-easy", True, process, {"num_threads": 0})
    check_async_rollouts_env("ppo_ewma", "procgen-coinrun-easy", True, {"async_rollouts": True}, None)
    check_async_rollouts_env("ppo_ewma", "CartPole-v1", False, process, None)


@pytest.mark.skipif(not HAS_PROCGEN, reason="procgen is not installed")
def test_async_rollouts_process_on_procgen_leaves_no_run_folder(tmp_path: Path) -> None:
    # the algorithm's own check (sb3_ewma.common.collection.process.check_forkable_env) runs at learn(), after
    # rl-zoo3 created the run folder and the environments
    with pytest.raises(ValueError, match=r"async_rollouts='process' .* procgen-coinrun-easy"):
        zoo.train(
            [
                *("--algo", "ppo_ewma", "--env", "procgen-coinrun-easy", "-n", "64", "-f", str(tmp_path)),
                *("--eval-freq", "-1", "-params", "async_rollouts:'process'", "n_envs:2"),
            ]
        )
    assert list(tmp_path.iterdir()) == []


# failed starts


def test_a_failed_optimization_removes_its_run_folder_and_no_other(tmp_path: Path) -> None:
    # rl-zoo3's -optimize creates the run folder in setup_experiment, then fails in hyperparameters_optimization
    # (here: a storage URL that Optuna cannot open)
    older = tmp_path / "ppo_ewma" / "CartPole-v1_1"
    older.mkdir(parents=True)
    (older / "0.monitor.csv").write_text(MONITOR_HEADER)  # an older failed run's: not this start's to remove
    with pytest.raises(Exception, match="nosuchdb"):
        train(tmp_path, "-n", "64", "-optimize", "--n-trials", "1", "--storage", "nosuchdb://nowhere")
    assert [path.name for path in (tmp_path / "ppo_ewma").iterdir()] == ["CartPole-v1_1"]
    assert (older / "0.monitor.csv").read_text() == MONITOR_HEADER


class ResetFails(gym.Env):
    """An environment that cannot start: its first reset raises (SB3 resets at the start of learn)."""

    observation_space = gym.spaces.Box(-1, 1, (2,))
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        raise RuntimeError("the simulator is not running")


def test_a_start_that_fails_at_the_first_step_removes_its_run_folder(tmp_path: Path) -> None:
    # rl-zoo3 writes config.yml, args.yml and command.txt once the model is built, then learn() fails at reset
    env_id = "Sb3EwmaTestResetFails-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=ResetFails)
    conf = tmp_path / "conf.yml"
    conf.write_text(yaml.safe_dump({env_id: {"policy": "MlpPolicy", "n_timesteps": 64, "n_steps": 32, "batch_size": 32}}))
    log_folder = tmp_path / "logs"
    older = log_folder / "ppo_ewma" / f"{env_id}_1" / env_id
    older.mkdir(parents=True)
    (older / "config.yml").write_text("the user's\n")  # an older run's configuration: never touched
    arguments = ["--algo", "ppo_ewma", "--env", env_id, "-f", str(log_folder), "-conf", str(conf), "--eval-freq", "-1"]
    with pytest.raises(RuntimeError, match="the simulator is not running"):
        zoo.train(arguments)
    assert [path.name for path in (log_folder / "ppo_ewma").iterdir()] == [f"{env_id}_1"]
    assert (older / "config.yml").read_text() == "the user's\n"


# enjoy and record_video: the newest run with a model


def test_latest_run_with_model_skips_and_names_the_runs_without_one(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    log_path = tmp_path / "ppo_ewma"
    assert latest_run_with_model(str(log_path), "CartPole-v1") == 0
    for run, files in {1: ["CartPole-v1.zip"], 2: ["best_model.zip"], 3: ["rl_model_64_steps.zip"], 4: [], 5: []}.items():
        (log_path / f"CartPole-v1_{run}").mkdir(parents=True)
        for name in files:
            (log_path / f"CartPole-v1_{run}" / name).write_bytes(b"")
    (log_path / "CartPole-v1_5" / "0.monitor.csv").write_text(MONITOR_HEADER)
    (log_path / "CartPole-v1_12.zip").write_bytes(b"")  # not a folder
    (log_path / "CartPole-v1-extra_9").mkdir()  # another environment's
    assert latest_run_with_model(str(log_path), "CartPole-v1") == 3
    out = capsys.readouterr().out
    assert f"{log_path / 'CartPole-v1_5'}, {log_path / 'CartPole-v1_4'}" in out and "CartPole-v1_3" not in out
    (log_path / "CartPole-v1_3" / "rl_model_64_steps.zip").unlink()
    (log_path / "CartPole-v1_2" / "best_model.zip").unlink()
    assert latest_run_with_model(str(log_path), "CartPole-v1") == 1
    (log_path / "CartPole-v1_1" / "CartPole-v1.zip").unlink()
    assert latest_run_with_model(str(log_path), "CartPole-v1") == 5  # none with a model: rl-zoo3's choice, its error
    assert latest_run_with_model(str(log_path), "Pendulum-v1") == 0


@pytest.mark.parametrize("entry_point", ["enjoy", "record_video"])
def test_enjoy_plays_the_newest_run_with_a_model(entry_point: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # rl-zoo3's enjoy took the newest run folder, and failed on one without a model ("No model found")
    train(tmp_path, "-n", "64", "-params", "n_envs:2", "n_steps:32")
    (tmp_path / "ppo_ewma" / "CartPole-v1_2").mkdir()
    (tmp_path / "ppo_ewma" / "CartPole-v1_2" / "0.monitor.csv").write_text(MONITOR_HEADER)
    capsys.readouterr()
    args = ["--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(tmp_path), "-n", "5", "--no-render"]
    if entry_point == "enjoy":
        zoo.enjoy(args)
    else:
        zoo.record_video([*args, "-o", str(tmp_path / "videos")])
    out = capsys.readouterr().out
    assert f"Skipped the newer run folder(s) without a model: {tmp_path / 'ppo_ewma' / 'CartPole-v1_2'}" in out
    assert f"Loading {tmp_path / 'ppo_ewma' / 'CartPole-v1_1' / 'CartPole-v1.zip'}" in out


FAKE_FFMPEG = """#!{python}
# a stand-in for the ffmpeg program: writes its output file (its last .mp4 or .gif argument that is not its input)
import sys
args = sys.argv[1:]
source = args[args.index("-i") + 1]
open([arg for arg in args if arg.endswith((".mp4", ".gif")) and arg != source][-1], "wb").write(b"video")
"""


def test_record_training_records_each_checkpoint_with_this_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """rl-zoo3's record_training records each video with `python -m rl_zoo3.record_video`, which does not know
    ppo_ewma: here each is this package's record_video, then ffmpeg (a stand-in) joins them."""
    train(tmp_path, "-n", "64", "-params", "n_envs:2", "n_steps:32", "--save-freq", "64")
    args = ["--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(tmp_path), "-n", "5"]
    videos = tmp_path / "ppo_ewma" / "CartPole-v1_1" / "videos"
    monkeypatch.setenv("PATH", str(tmp_path / "no_ffmpeg"))
    with pytest.raises(OSError, match="record_training joins its videos with the ffmpeg program, which is not on PATH"):
        zoo.record_training(args)
    assert not videos.exists()  # refused before anything is written
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    (bin_folder / "ffmpeg").write_text(FAKE_FFMPEG.format(python=sys.executable))
    (bin_folder / "ffmpeg").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    zoo.record_training(args)
    recorded = sorted(path.name for path in videos.iterdir())
    assert recorded == [
        "checkpoint-64-ppo_ewma-CartPole-v1-step-0-to-step-5.mp4",
        "final-model-ppo_ewma-CartPole-v1-step-0-to-step-5.mp4",
        "training.mp4",
    ]
    assert f"Saving video to {videos / 'training.mp4'}" in capsys.readouterr().out


@pytest.mark.parametrize("entry_point", ["enjoy", "record_video"])
@pytest.mark.parametrize(
    "flags, message",
    [
        (["-n", "0"], "-n/--n-timesteps: must be a number of steps to play >= 1, got 0"),
        (["--n-envs", "-1"], "--n-envs: must be a number of environments >= 1, got -1"),
    ],
)
def test_enjoy_counts_are_refused_before_anything_is_loaded(
    entry_point: str, flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # rl-zoo3's enjoy plays nothing for -n 0, without a word
    with pytest.raises(SystemExit) as exit_info:
        getattr(zoo, entry_point)(["--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(tmp_path), *flags])
    assert exit_info.value.code == 2
    assert f"error: argument {message}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


# one line, not a traceback


def test_a_user_error_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from sb3_ewma.train import main

    monkeypatch.delenv(_command.TRACEBACK_VARIABLE, raising=False)
    argv = ["--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(tmp_path), "-n", "64", "-params", "foo_bar:1"]
    with pytest.raises(SystemExit) as exit_info:
        _command.run_command(main, argv, prog="python -m sb3_ewma.train")
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("python -m sb3_ewma.train: error: -params or the hyperparameter entry of --algo ppo_ewma: PPO")
    assert err[1:] == ["(SB3_EWMA_TRACEBACK=1 shows the traceback)"]
    # with the variable: the error itself
    monkeypatch.setenv(_command.TRACEBACK_VARIABLE, "1")
    with pytest.raises(ValueError, match="has no argument foo_bar=1"):
        _command.run_command(main, argv, prog="python -m sb3_ewma.train")
    # errors that are not the user's keep their traceback
    monkeypatch.delenv(_command.TRACEBACK_VARIABLE)

    def broken(argv: object) -> None:
        raise ZeroDivisionError("a bug")

    with pytest.raises(ZeroDivisionError):
        _command.run_command(broken, [])
    assert list(tmp_path.iterdir()) == []


class ConnectError(Exception):
    """httpx's (huggingface_hub's client) ConnectError, which is no OSError."""


def test_a_network_error_is_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_command.TRACEBACK_VARIABLE, raising=False)

    def push(argv: object) -> None:
        try:
            raise ConnectError("[Errno -3] Temporary failure in name resolution")
        except ConnectError as error:
            raise RuntimeError("the upload failed") from error

    with pytest.raises(SystemExit) as exit_info:
        _command.run_command(push, [], prog="push")
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.splitlines()[0] == (
        "push: error: cannot reach the network (ConnectError: [Errno -3] Temporary failure in name resolution): check the "
        "connection, or the proxy"
    )
    assert _command.error_line(AssertionError("The folder was not found")) == "AssertionError: The folder was not found"


def test_load_from_hub_without_a_network_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # huggingface_hub (through httpx) raises a ConnectError, an 80-line traceback through rl-zoo3's script
    httpx = pytest.importorskip("httpx2")
    huggingface_hub = pytest.importorskip("huggingface_hub")
    from sb3_ewma.load_from_hub import main

    def hf_hub_download(*args: object, **kwargs: object) -> str:
        raise httpx.ConnectError("[Errno -2] Name or service not known")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hf_hub_download)
    monkeypatch.setenv("TRUST_REMOTE_CODE", "True")
    monkeypatch.delenv(_command.TRACEBACK_VARIABLE, raising=False)
    with pytest.raises(SystemExit) as exit_info:
        _command.run_command(
            main, ["--algo", "ppo_ewma", "--env", "CartPole-v1", "-orga", "someone", "-f", str(tmp_path)], prog="load"
        )
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.splitlines() == [
        "load: error: cannot reach the network (ConnectError: [Errno -2] Name or service not known): check the "
        "connection, or the proxy",
        "(SB3_EWMA_TRACEBACK=1 shows the traceback)",
    ]
    assert list(tmp_path.iterdir()) == []


def test_the_program_prints_one_line(tmp_path: Path) -> None:
    args = ("--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(tmp_path), "-params", "foo_bar:1")
    result = command("sb3_ewma.train", *args)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-2].startswith("python -m sb3_ewma.train: error: -params or the hyperparameter")
    assert list(tmp_path.iterdir()) == []
    result = command("sb3_ewma.train", *args, env={"SB3_EWMA_TRACEBACK": "1"})
    assert result.returncode == 1 and "Traceback" in result.stderr and "ValueError" in result.stderr
