"""
One validation for scripts and the command line: the hyperparameters of an rl-zoo3 entry, ``-params`` and
``--scale-n-envs`` go through the constructors' own checks before any run folder exists, with the messages a script
gets; the command line's other mistakes (a YAML file indented with tabs, a device this machine lacks, ``n_envs:0``)
are one sentence each; training that meets NaN is one line and leaves no run folder; ``--version`` prints the version
and ``record_video`` prints no "error:" line on a run that works.
"""

import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch as th
import yaml

pytest.importorskip("rl_zoo3")

import sb3_ewma
from sb3_ewma import PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA, _command, _display, zoo
from sb3_ewma.__main__ import main as sb3_ewma_main
from sb3_ewma._quiet import import_without_pkg_resources_warning
from sb3_ewma.zoo.arguments import EVAL_FREQ_HELP
from sb3_ewma.zoo.checks import (
    available_devices,
    check_entry_values,
    device_problem,
    is_non_finite_error,
    non_finite_message,
    remove_run_folder_without_model,
    yaml_error_message,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
TRAIN = "python -m sb3_ewma.train"
TRACEBACK_HINT = "(SB3_EWMA_TRACEBACK=1 shows the traceback)"


def run_train(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, list[str]]:
    """``python -m sb3_ewma.train args`` as the program runs it (one-line errors), in this process: status, stderr lines."""
    from sb3_ewma.train import main

    monkeypatch.delenv(_command.TRACEBACK_VARIABLE, raising=False)
    argv = ["--num-threads", "1", "--verbose", "0", "--seed", "0", *args]
    try:
        _command.run_command(main, argv, prog=TRAIN)
        status = 0
    except SystemExit as exit_info:
        status = exit_info.code if isinstance(exit_info.code, int) else 1
    return status, capsys.readouterr().err.strip().splitlines()


def short_run(log_folder: Path, *flags: str) -> list[str]:
    """The flags of a 64-step PPO-EWMA run on CartPole-v1 (two environments, 32 steps each), ``-params`` last."""
    return [
        *("--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(log_folder), "-n", "64", "--num-threads", "1", *flags),
        *("-params", "n_steps:32", "n_envs:2", "batch_size:32"),
    ]


def api_message(algorithm: type, **kwargs: object) -> str:
    """What the Python API says of these arguments (the constructor's ValueError)."""
    with pytest.raises(ValueError) as error_info:
        algorithm("MlpPolicy", "CartPole-v1", **kwargs)
    return str(error_info.value)


# ----------------------------------------------------------------------------------------------------------------------
# the constructors' checks, on the command line


@pytest.mark.parametrize(
    "algo, algorithm, params, kwargs",
    [
        # rl-zoo3 turns the numbers into constant schedules, which the constructors accepted
        ("ppo_ewma", PPO_EWMA, ["n_epochs:0"], {"n_epochs": 0}),
        ("ppo_ewma", PPO_EWMA, ["learning_rate:-0.001"], {"learning_rate": -0.001}),
        ("ppo_ewma", PPO_EWMA, ["clip_range_vf:0"], {"clip_range_vf": 0}),
        ("ppo_ewma", PPO_EWMA, ["ewma_decay:2"], {"ewma_decay": 2}),
        ("ppg_ewma", PPG_EWMA, ["learning_rate:-0.001"], {"learning_rate": -0.001}),
        ("ppg_ewma", PPG_EWMA, ["n_policy_iterations:0"], {"n_policy_iterations": 0}),
        ("ppo_lstm_ewma", RecurrentPPO_EWMA, ["clip_range_vf:0"], {"clip_range_vf": 0}),
        ("ppo_mask_ewma", MaskablePPO_EWMA, ["learning_rate:-0.001"], {"learning_rate": -0.001}),
    ],
)
def test_params_get_the_constructors_checks_and_messages(
    algo: str,
    algorithm: type,
    params: list[str],
    kwargs: dict[str, object],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    message = api_message(algorithm, **kwargs)
    status, err = run_train(
        capsys, monkeypatch, "--algo", algo, "--env", "CartPole-v1", "-f", str(tmp_path), "-params", *params
    )
    assert status == 1
    assert err == [
        f"{TRAIN}: error: {message} (-params or the hyperparameter entry of --algo {algo}; nothing was written)",
        TRACEBACK_HINT,
    ]
    assert list(tmp_path.iterdir()) == []


def test_a_yaml_entry_gets_the_constructors_checks(tmp_path: Path) -> None:
    conf = tmp_path / "conf.yml"
    conf.write_text(yaml.safe_dump({"CartPole-v1": {"policy": "MlpPolicy", "n_timesteps": 64, "clip_range_vf": 0.0}}))
    log_folder = tmp_path / "logs"
    with pytest.raises(ValueError, match=r"^clip_range_vf must be .*, got 0.0 \(-params or the hyperparameter entry of"):
        zoo.train(["--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(log_folder), "-conf", str(conf)])
    assert not log_folder.exists()


def test_scaled_hyperparameters_get_the_constructors_checks(tmp_path: Path) -> None:
    # --scale-n-envs rescales the entry after -params: the rescaled values are what the constructor would get
    with pytest.raises(ValueError, match=r"learning_rate must be .*, rescaled by --scale-n-envs 4; nothing was written\)"):
        zoo.train(
            [
                *("--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(tmp_path)),
                *("--scale-n-envs", "4", "-params", "learning_rate:-0.001"),
            ]
        )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("scale", [[], ["--scale-n-envs", "4"]])
def test_n_envs_zero_is_refused_as_a_count(
    scale: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # rl-zoo3 built DummyVecEnv([]) after creating the run folder: an IndexError
    status, err = run_train(
        capsys, monkeypatch, "--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(tmp_path), *scale, "-params", "n_envs:0"
    )
    assert status == 1
    assert err == [
        f"{TRAIN}: error: n_envs must be an integer >= 1, got 0 (-params or the hyperparameter entry of --algo ppo_ewma; "
        "nothing was written)",
        TRACEBACK_HINT,
    ]
    assert list(tmp_path.iterdir()) == []


def test_rl_zoo3_algorithms_get_the_n_envs_count_too(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^n_envs must be an integer >= 1, got 0 \(-params or the hyperparameter entry of"):
        zoo.train(["--algo", "ppo", "--env", "CartPole-v1", "-f", str(tmp_path), "-params", "n_envs:0"])
    assert list(tmp_path.iterdir()) == []


def test_a_policy_keyword_of_another_algorithm_is_a_type_error_before_the_run_folder(tmp_path: Path) -> None:
    # the constructor's TypeError (check_policy_keywords) stays a TypeError, with where the value came from
    with pytest.raises(TypeError, match=r"has no keyword log_std_init=-2 .*\(-params or the hyperparameter entry of --algo"):
        zoo.train(
            [
                "--algo",
                "ppo_mask_ewma",
                "--env",
                "CartPole-v1",
                "-f",
                str(tmp_path),
                "-params",
                "policy_kwargs:dict(log_std_init=-2)",
            ]
        )
    assert list(tmp_path.iterdir()) == []


def test_check_entry_values_checks_the_numbers_rl_zoo3_makes_schedules_of() -> None:
    from rl_zoo3.utils import SimpleLinearSchedule
    from stable_baselines3.common.utils import ConstantSchedule

    kwargs = {"policy": "MlpPolicy", "learning_rate": ConstantSchedule(-1.0), "clip_range_vf": SimpleLinearSchedule(0.0)}
    # the numbers, as the entry wrote them: refused as the constructor refuses learning_rate=-1
    with pytest.raises(ValueError, match=r"^learning_rate must be a number >= 0 or a schedule, got -1 \(-params"):
        check_entry_values("ppo_ewma", PPO_EWMA, kwargs, {"learning_rate": -1, "clip_range_vf": "lin_0.0"})
    # a schedule ("lin_..." in the entry) is a schedule, as in a script; its start is checked as the number it is
    # (rl-zoo3's lin_X goes from X to 0: lin_0.0 is 0 all along, refused as the number 0 is)
    kwargs = {**kwargs, "learning_rate": SimpleLinearSchedule(1e-3), "clip_range_vf": SimpleLinearSchedule(0.2)}
    check_entry_values("ppo_ewma", PPO_EWMA, kwargs, {"learning_rate": "lin_1e-3", "clip_range_vf": "lin_0.2"})
    with pytest.raises(ValueError, match=r"^clip_range_vf must be .*got 0.0 \(the start of clip_range_vf 'lin_0.0', an"):
        check_entry_values("ppo_ewma", PPO_EWMA, kwargs, {"learning_rate": "lin_1e-3", "clip_range_vf": "lin_0.0"})
    # what the constructors accept passes, also where SB3's own checks are assertions
    check_entry_values("ppo_ewma", PPO_EWMA, {"policy": "MlpPolicy", "n_steps": 8, "batch_size": 4}, {"learning_rate": 1e-3})
    with pytest.raises(ValueError, match=r"^batch_size must be an integer >= 2, got 1"):
        check_entry_values("ppo_ewma", PPO_EWMA, {"policy": "MlpPolicy", "batch_size": 1}, {})


def test_valid_schedules_and_values_still_train(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zoo.train(
        [
            *short_run(tmp_path, "--verbose", "0", "--eval-freq", "-1"),
            *("learning_rate:'lin_1e-3'", "clip_range:0.1", "clip_range_vf:'lin_0.2'"),
        ]
    )
    assert (tmp_path / "ppo_ewma" / "CartPole-v1_1" / "CartPole-v1.zip").is_file()


# ----------------------------------------------------------------------------------------------------------------------
# one sentence each: a YAML file with tabs, a device this machine lacks


@pytest.mark.parametrize(
    "text, line",
    [
        ("CartPole-v1:\n\tpolicy: MlpPolicy\n\tn_timesteps: 64\n", 2),
        ("CartPole-v1:\n  policy: MlpPolicy\n\tn_timesteps: 64\n", 3),
    ],
)
def test_a_yaml_file_with_tabs_is_one_sentence_with_line_and_column(
    text: str, line: int, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # PyYAML's ScannerError printed its whole traceback
    conf = tmp_path / "tabs.yml"
    conf.write_text(text)
    log_folder = tmp_path / "logs"
    status, err = run_train(
        capsys, monkeypatch, "--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(log_folder), "-conf", str(conf)
    )
    assert status == 1
    assert err == [
        f"{TRAIN}: error: the hyperparameter file {conf} is not valid YAML, line {line}, column 1: found character '\\t' "
        "that cannot start any token (YAML indents with spaces, not tabs: replace the tabs). Nothing was written.",
        TRACEBACK_HINT,
    ]
    assert not log_folder.exists()


def test_yaml_error_message_without_a_tab() -> None:
    try:
        yaml.safe_load("a: [1, 2\nb: 3\n")
    except yaml.YAMLError as error:
        message = yaml_error_message("conf.yml", error)
    assert message.startswith("the hyperparameter file conf.yml is not valid YAML, line 2, column 2: ")
    assert "tabs" not in message and message.endswith("Nothing was written.")


MPS_PRESENT = bool(getattr(th.backends, "mps", None) and th.backends.mps.is_available())


@pytest.mark.skipif(MPS_PRESENT, reason="this machine has an MPS device")
@pytest.mark.parametrize("command", ["train", "enjoy"])
def test_an_unavailable_device_is_one_sentence(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # SB3 took "mps" and failed 19 frames deep when it moved the model there
    with pytest.raises(SystemExit) as exit_info:
        getattr(zoo, command)(["--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(tmp_path), "--device", "mps"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"python -m sb3_ewma.{command}: error: argument --device: 'mps' is not available on this machine "
        f"(torch.backends.mps.is_available() is False): use {available_devices()}"
    )
    assert list(tmp_path.iterdir()) == []


def test_device_problem_follows_sb3() -> None:
    assert device_problem("auto") is None and device_problem("cpu") is None
    # SB3 trains on the CPU for "cuda" without a GPU (the constructor warns): accepted, as SB3 accepts it
    assert device_problem("cuda") is None and device_problem(th.device("cpu")) is None
    assert device_problem("gpu") == f"'gpu' is not a device: use {available_devices()}"
    assert available_devices().startswith("auto, cpu")
    if th.cuda.is_available():
        count = th.cuda.device_count()
        assert device_problem(f"cuda:{count - 1}") is None
        assert f"this machine has {count} CUDA GPU(s)" in str(device_problem(f"cuda:{count}"))
    else:
        assert device_problem("cuda:3") is None


# ----------------------------------------------------------------------------------------------------------------------
# --eval-freq: rl-zoo3 evaluates only for values > 0, so every other value turns evaluation off (documented, said)


def test_eval_freq_zero_turns_evaluation_off_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zoo.train(short_run(tmp_path, "--eval-freq", "0"))
    out = capsys.readouterr().out
    assert "No evaluation: --eval-freq 0 turns it off (as any value <= 0 does; -1 by convention)" in out
    run = tmp_path / "ppo_ewma" / "CartPole-v1_1"
    assert (run / "CartPole-v1.zip").is_file() and not (run / "evaluations.npz").exists()


def test_eval_freq_help_says_what_turns_evaluation_off(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        zoo.train(["-h"])
    out = " ".join(capsys.readouterr().out.split())
    assert " ".join(EVAL_FREQ_HELP.split()) in out
    assert "any value <= 0, e.g. -1, turns evaluation off" in EVAL_FREQ_HELP


# ----------------------------------------------------------------------------------------------------------------------
# NaN on the command line: one line, and the run folder this start created removed


class NanReward(gym.Env):
    """An environment whose rewards are NaN."""

    observation_space = gym.spaces.Box(-1, 1, (2,))
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action: int) -> tuple:
        return np.zeros(2, dtype=np.float32), float("nan"), False, False, {}


def test_nan_in_training_is_one_line_and_removes_the_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env_id = "Sb3EwmaTestNanReward-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=NanReward, max_episode_steps=16)
    conf = tmp_path / "conf.yml"
    conf.write_text(yaml.safe_dump({env_id: {"policy": "MlpPolicy", "n_timesteps": 256, "n_steps": 32, "batch_size": 32}}))
    log_folder = tmp_path / "logs"
    older = log_folder / "ppo_ewma" / f"{env_id}_1"
    older.mkdir(parents=True)
    (older / "notes.txt").write_text("the user's\n")  # an older run's folder: never touched
    status, err = run_train(
        capsys, monkeypatch, "--algo", "ppo_ewma", "--env", env_id, "-f", str(log_folder), "-conf", str(conf)
    )
    assert status == 1
    assert len(err) == 2 and err[1] == TRACEBACK_HINT, err
    assert err[0].startswith(f"{TRAIN}: error: ") and ("non-finite" in err[0] or "NaN" in err[0]), err[0]
    run = log_folder / "ppo_ewma" / f"{env_id}_2"
    assert err[0].endswith(f"The run folder {run} was removed (no model had been saved in it).")
    assert [path.name for path in (log_folder / "ppo_ewma").iterdir()] == [f"{env_id}_1"]
    assert (older / "notes.txt").read_text() == "the user's\n"


def test_torchs_nan_error_is_one_line() -> None:
    # what NaN weights give, where nothing caught the NaN before: torch's distribution check, with the tensor printed
    error = ValueError(
        "Expected parameter logits (Tensor of shape (1, 2)) of distribution Categorical(logits: torch.Size([1, 2])) to "
        "satisfy the constraint IndependentConstraint(Real(), 1), but found invalid values:\ntensor([[nan, nan]])"
    )
    assert is_non_finite_error(error)
    message = non_finite_message(error, 96)
    assert "\n" not in message and "tensor(" not in message
    assert message.startswith("training stopped at step 96: the policy's logits became NaN or infinite")
    assert not is_non_finite_error(ValueError("batch_size must be an integer >= 2, got 1"))


def test_a_run_folder_with_a_model_saved_before_the_nan_stays(tmp_path: Path) -> None:
    run = tmp_path / "algo" / "Env_1"
    (run / "Env").mkdir(parents=True)
    (run / "Env" / "config.yml").write_text("{}")
    (run / "rl_model_64_steps.zip").write_bytes(b"")  # a checkpoint of before the NaN
    assert not remove_run_folder_without_model(str(run), "Env", created_parents=(str(tmp_path / "algo"),))
    assert (run / "rl_model_64_steps.zip").is_file()
    (run / "rl_model_64_steps.zip").unlink()
    (run / "0.monitor.csv").write_text('#{"t_start": 0}\nr,l,t\n10.0,10,0.1\n')  # episodes, logs: this start's
    assert remove_run_folder_without_model(str(run), "Env", created_parents=(str(tmp_path / "algo"),))
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------------------------------------------------
# --version, and no "error:" line on a run that works


def test_version_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    version = (REPO_ROOT / "sb3_ewma" / "version.txt").read_text().strip()
    for flag in ("--version", "-V"):
        sb3_ewma_main([flag], prog="sb3-ewma")
        assert capsys.readouterr().out == f"sb3-ewma {version}\n"
    assert sb3_ewma.__version__ == version


def test_version_as_a_program() -> None:
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "sb3_ewma", "--version"], cwd=REPO_ROOT, env=environment, capture_output=True, text=True
    )
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout == f"sb3-ewma {sb3_ewma.__version__}\n"


def test_headless_sdl_sets_a_default_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER"):
        monkeypatch.delenv(name, raising=False)
    with _display.headless_sdl():
        assert os.environ["SDL_VIDEODRIVER"] == "dummy"
    assert "SDL_VIDEODRIVER" not in os.environ
    monkeypatch.setenv("SDL_VIDEODRIVER", "x11")  # the user's: untouched
    with _display.headless_sdl():
        assert os.environ["SDL_VIDEODRIVER"] == "x11"
    assert os.environ["SDL_VIDEODRIVER"] == "x11"
    monkeypatch.delenv("SDL_VIDEODRIVER")
    monkeypatch.setenv("DISPLAY", ":0")  # a display: pygame's own choice
    with _display.headless_sdl():
        assert "SDL_VIDEODRIVER" not in os.environ


def test_record_video_prints_no_error_line_on_a_headless_machine(tmp_path: Path) -> None:
    try:
        import_without_pkg_resources_warning("imageio_ffmpeg")
        import moviepy  # noqa: F401
    except Exception as error:
        pytest.skip(f"recording videos needs a working moviepy: {error!r}")
    pytest.importorskip("pygame")
    zoo.train(short_run(tmp_path, "--verbose", "0", "--eval-freq", "-1"))
    hidden = ("DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER", "XDG_RUNTIME_DIR", "SB3_EWMA_TRACEBACK")
    environment = {key: value for key, value in os.environ.items() if key not in hidden}
    environment.update({"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)})
    result = subprocess.run(
        [
            *(sys.executable, "-m", "sb3_ewma.record_video", "--algo", "ppo_ewma", "--env", "CartPole-v1"),
            *("-f", str(tmp_path), "-n", "10", "-o", str(tmp_path / "videos")),
        ],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "XDG_RUNTIME_DIR" not in result.stderr + result.stdout
    assert not [line for line in (result.stderr + result.stdout).splitlines() if line.startswith("error:")]
    assert len(list((tmp_path / "videos").glob("*.mp4"))) == 1


# ----------------------------------------------------------------------------------------------------------------------
# the second bad-input trial (benchmarks/results/bad_input_trial/results.md): one line each, nothing written


ENTRY_ORIGIN = "-params or the hyperparameter entry of --algo ppo_ewma"


@pytest.mark.parametrize(
    "params, message",
    [
        # SB3's VecFrameStack asserted it without a message
        (["frame_stack:0"], f"frame_stack must be an integer >= 1, got 0 ({ENTRY_ORIGIN}; nothing was written)"),
        # rl-zoo3: "invalid literal for int() with base 10", after reading the entry
        (
            ["n_timesteps:'1e5'"],
            f"n_timesteps must be a number of steps (rl-zoo3 reads it with int()), got '1e5' ({ENTRY_ORIGIN}; nothing was "
            f"written)",
        ),
        # rl-zoo3: "could not convert string to float: 'abc'"
        (
            ["learning_rate:'lin_abc'"],
            f"learning_rate: cannot read 'lin_abc'; rl-zoo3 takes a number or a schedule string like 'lin_2.5e-4' "
            f"({ENTRY_ORIGIN}; nothing was written)",
        ),
        # lin_0 is 0 all along: refused as clip_range_vf:0 is (SB3 asserted it after the run folder existed)
        (
            ["clip_range_vf:'lin_0'"],
            "clip_range_vf must be None, a number > 0 (math.inf: no clipping) or a schedule (a function of the progress "
            f"remaining), got 0.0 (the start of clip_range_vf 'lin_0', an rl-zoo3 linear schedule) ({ENTRY_ORIGIN}; "
            "nothing was written)",
        ),
        # torch: "Invalid learning rate: -0.001"
        (
            ["learning_rate:'lin_-1e-3'"],
            "learning_rate must be a number >= 0 or a schedule, got -0.001 (the start of learning_rate 'lin_-1e-3', an "
            f"rl-zoo3 linear schedule) ({ENTRY_ORIGIN}; nothing was written)",
        ),
        # eval's traceback (NameError)
        (
            ["policy_kwargs:'dict(net_arch=big)'"],
            f"policy_kwargs 'dict(net_arch=big)' ({ENTRY_ORIGIN}) is read as Python and gives NameError: name 'big' is "
            'not defined; write it as Python, with names of torch as nn and th: "dict(net_arch=[64, 64], '
            'activation_fn=nn.Tanh)". Nothing was written.',
        ),
        # SB3: "'str' object is not callable"
        (
            ["policy_kwargs:dict(activation_fn='tanh')"],
            "policy_kwargs activation_fn must be a class, such as torch.nn.Tanh (nn.Tanh in an rl-zoo3 policy_kwargs "
            f"string), got 'tanh' ({ENTRY_ORIGIN}; nothing was written)",
        ),
        # rl-zoo3's import: "No module named 'not_a_module'", without the key
        (
            ["env_wrapper:'not_a_module.Wrapper'"],
            f"No module named 'not_a_module' (env_wrapper: 'not_a_module.Wrapper', {ENTRY_ORIGIN}: rl-zoo3 imports each "
            "value as 'module.Class' from the modules Python finds; nothing was written)",
        ),
    ],
)
def test_entry_values_rl_zoo3_fails_on_unnamed_are_one_sentence(
    params: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log_folder = tmp_path / "logs"
    status, err = run_train(
        capsys, monkeypatch, "--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(log_folder), "-params", *params
    )
    assert status == 1
    assert err == [f"{TRAIN}: error: {message}", TRACEBACK_HINT]
    assert not log_folder.exists()


def test_the_entrys_n_timesteps_is_checked_only_when_it_is_used() -> None:
    from sb3_ewma.zoo.checks import check_entry_counts

    check_entry_counts("ppo_ewma", {"n_timesteps": -5}, n_timesteps_flag=64)  # -n 64 replaces it, as in rl-zoo3
    check_entry_counts("ppo_ewma", {"n_timesteps": 1e5, "frame_stack": None, "n_envs": 8})
    # what rl-zoo3's int() reads: a string of digits, 0 or less (nothing trains)
    for n_timesteps in ("256", -1, 0):
        check_entry_counts("ppo_ewma", {"n_timesteps": n_timesteps})
    with pytest.raises(ValueError, match=r"^n_timesteps must be a number of steps .*got '1e5' \(-params or the"):
        check_entry_counts("ppo_ewma", {"n_timesteps": "1e5"})


@pytest.mark.parametrize(
    "content, message",
    [
        # rl-zoo3: 36 lines ending in "'list' object has no attribute 'keys'"
        (
            "- CartPole-v1\n- policy: MlpPolicy\n",
            "the hyperparameter file {conf} holds a list, not a mapping of environment ids to entries: write "
            "'CartPole-v1:' and under it the entry's 'key: value' lines, indented. Nothing was written.",
        ),
        # the constructor: "missing 1 required positional argument: 'policy'"
        (
            "CartPole-v1:\n  n_timesteps: 64\n",
            "the hyperparameter entry of --algo ppo_ewma has no policy: add one (MlpPolicy, CnnPolicy, MultiInputPolicy) "
            "to the entry, or -params \"policy:'MlpPolicy'\"; nothing was written",
        ),
    ],
)
def test_a_hyperparameter_file_rl_zoo3_cannot_read_is_one_sentence(
    content: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "conf.yml"
    conf.write_text(content)
    log_folder = tmp_path / "logs"
    status, err = run_train(
        capsys, monkeypatch, "--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(log_folder), "-conf", str(conf)
    )
    assert status == 1
    assert err == [f"{TRAIN}: error: {message.format(conf=conf)}", TRACEBACK_HINT]
    assert not log_folder.exists()


def test_an_optuna_storage_that_is_not_one_is_an_argparse_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLAlchemy's URL parser failed with a 40-line traceback
    log_folder = tmp_path / "logs"
    status, err = run_train(
        capsys,
        monkeypatch,
        *("--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(log_folder)),
        *("-optimize", "--n-trials", "1", "--storage", "bogus"),
    )
    assert status == 2
    assert err[-1] == (
        f"{TRAIN}: error: argument --storage: 'bogus' is neither a journal file (a path ending in .log) nor a database "
        "URL (sqlite:///study.db, postgresql://user@host/db)"
    )
    assert not log_folder.exists()


def test_save_freq_zero_turns_checkpoints_off_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sb3_ewma.zoo.arguments import SAVE_FREQ_HELP

    zoo.train(short_run(tmp_path, "--eval-freq", "-1", "--save-freq", "0"))
    out = capsys.readouterr().out
    assert "No checkpoints: --save-freq 0 turns them off (as any value <= 0 does; -1 by convention)" in out
    run = tmp_path / "ppo_ewma" / "CartPole-v1_1"
    assert (run / "CartPole-v1.zip").is_file() and not list(run.glob("rl_model_*"))
    with pytest.raises(SystemExit):
        zoo.train(["-h"])
    assert " ".join(SAVE_FREQ_HELP.split()) in " ".join(capsys.readouterr().out.split())


def test_record_video_refuses_an_output_folder_it_cannot_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # rl-zoo3 played the episode, then failed with "'DummyVecEnv' object has no attribute 'recorded_frames'"
    blocker = tmp_path / "videos"
    blocker.write_text("a user's file")
    with pytest.raises(SystemExit) as exit_info:
        zoo.record_video(["--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(tmp_path), "-o", str(blocker)])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"python -m sb3_ewma.record_video: error: argument -o/--output-folder: {str(blocker)!r} cannot be written: "
        f"{blocker} is a file, not a folder"
    )
    assert blocker.read_text() == "a user's file"


def test_a_log_folder_that_cannot_be_written_is_an_argument_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    status, lines = run_train(capsys, monkeypatch, *short_run(blocker / "logs"))
    assert status == 2
    assert lines[-1] == (
        f"{TRAIN}: error: argument -f/--log-folder: '{blocker / 'logs'}' cannot be written: {blocker} is a file, not a folder"
    )
    assert blocker.read_text() == "not a folder"


# ----------------------------------------------------------------------------------------------------------------------
# rough edges a new user met: an entry without n_timesteps, JSON hyperparameter files, environments of packages that
# are not installed


def test_an_entry_without_n_timesteps_trains_with_n_and_is_one_sentence_without(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # rl-zoo3: "KeyError: 'n_timesteps'" with its traceback, -n given or not
    conf = tmp_path / "conf.yml"
    conf.write_text("CartPole-v1:\n  policy: MlpPolicy\n  n_steps: 32\n  batch_size: 32\n")
    log_folder = tmp_path / "logs"
    flags = ("--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(log_folder), "-conf", str(conf), "--eval-freq", "-1")
    status, err = run_train(capsys, monkeypatch, *flags)
    assert status == 1
    assert err == [
        f"{TRAIN}: error: the hyperparameter entry of --algo ppo_ewma has no n_timesteps, the number of steps to train: "
        "add it to the entry, or give -n; nothing was written",
        TRACEBACK_HINT,
    ]
    assert not log_folder.exists()
    status, err = run_train(capsys, monkeypatch, *flags, "-n", "32")
    assert status == 0, err
    run = log_folder / "ppo_ewma" / "CartPole-v1_1"
    assert (run / "CartPole-v1.zip").is_file()
    # the entry recorded as written
    config = yaml.unsafe_load((run / "CartPole-v1" / "config.yml").read_text())
    assert dict(config) == {"policy": "MlpPolicy", "n_steps": 32, "batch_size": 32}


JSON_ENTRY = (
    '{"CartPole-v1": {"policy": "MlpPolicy", "n_timesteps": 32, "n_steps": 32, "batch_size": 32, "learning_rate": 1e-3}}'
)


def test_a_json_hyperparameter_file_reads_as_the_scale_helper_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # rl-zoo3 imported "hp.json" as a module: "No module named 'hp'"
    conf = tmp_path / "hp.json"
    conf.write_text(JSON_ENTRY)
    log_folder = tmp_path / "logs"
    status, err = run_train(
        capsys,
        monkeypatch,
        *("--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(log_folder), "-conf", str(conf), "--eval-freq", "-1"),
    )
    assert status == 0, err
    run = log_folder / "ppo_ewma" / "CartPole-v1_1"
    config = dict(yaml.unsafe_load((run / "CartPole-v1" / "config.yml").read_text()))
    # JSON's 1e-3 is a number (YAML 1.1 reads it as a string)
    assert config == {"policy": "MlpPolicy", "n_timesteps": 32, "n_steps": 32, "batch_size": 32, "learning_rate": 0.001}
    assert dict(yaml.unsafe_load((run / "CartPole-v1" / "args.yml").read_text()))["conf_file"] == str(conf)
    # python -m sb3_ewma.scale reads the same file the same way
    from sb3_ewma.scale import main as scale_main

    capsys.readouterr()
    assert scale_main([str(conf), "CartPole-v1", "--n-envs", "1", "--reference-n-envs", "1", "--algo", "ppo_ewma"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["CartPole-v1"]["learning_rate"] == 0.001


@pytest.mark.parametrize(
    "name, content, message",
    [
        (
            "hp.json",
            '{"CartPole-v1": {"policy": "MlpPolicy",}}',
            "the hyperparameter file {conf} is not valid JSON, line 1, column 40: Expecting property name enclosed in "
            "double quotes. Nothing was written.",
        ),
        (
            "hp.toml",
            "[CartPole-v1]\n",
            "-conf {conf}: the hyperparameters are read from a YAML file (.yml, .yaml), a JSON file (.json), a Python "
            "file (.py) that defines hyperparams, or the dotted name of a Python module that does (package.module). "
            "Nothing was written.",
        ),
    ],
)
def test_a_hyperparameter_file_of_another_form_is_one_sentence(
    name: str, content: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / name
    conf.write_text(content)
    log_folder = tmp_path / "logs"
    status, err = run_train(
        capsys, monkeypatch, "--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(log_folder), "-conf", str(conf)
    )
    assert status == 1
    assert err == [f"{TRAIN}: error: {message.format(conf=conf)}", TRACEBACK_HINT]
    assert not log_folder.exists()


def test_an_environment_of_a_package_not_installed_names_the_package(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # without minigrid, rl-zoo3 said "you maybe meant 'no close match found...'?": its ids are not registered
    import rl_zoo3.import_envs  # noqa: F401  (registers MiniGrid's ids, with minigrid installed)

    for env_id in [env_id for env_id in gym.envs.registry if env_id.startswith(("MiniGrid-", "BabyAI-"))]:
        monkeypatch.delitem(gym.envs.registry, env_id)
    monkeypatch.setitem(sys.modules, "minigrid", None)  # not importable
    log_folder = tmp_path / "logs"
    status, err = run_train(capsys, monkeypatch, "--algo", "ppo_ewma", "--env", "MiniGrid-Empty-5x5-v0", "-f", str(log_folder))
    assert status == 2
    assert err[-1] == (
        f"{TRAIN}: error: argument --env: MiniGrid-Empty-5x5-v0 is an environment of the minigrid package, which is not "
        "installed: pip install minigrid"
    )
    assert not log_folder.exists()


def test_an_environment_whose_dependency_is_not_installed_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # without MuJoCo, gymnasium's DependencyNotInstalled came at the end of a 108-line traceback
    for module in [module for module in sys.modules if module.startswith("gymnasium.envs.mujoco")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "mujoco", None)
    log_folder = tmp_path / "logs"
    for algo in ("ppo_ewma", "ppo"):  # rl-zoo3's own algorithms too
        status, err = run_train(capsys, monkeypatch, "--algo", algo, "--env", "Hopper-v4", "-f", str(log_folder))
        assert status == 2
        assert err[-1] == (
            f"{TRAIN}: error: argument --env: Hopper-v4 cannot be made: MuJoCo is not installed, run "
            '`pip install "gymnasium[mujoco]"`'
        )
    assert not log_folder.exists()


def test_a_gym_package_that_does_not_exist_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # rl-zoo3 said "No module named 'sb3_ewma_no_such_package'", without the flag
    log_folder = tmp_path / "logs"
    for packages in (["sb3_ewma_no_such_package"], ["gymnasium", "sb3_ewma_no_such_package.envs"]):
        status, err = run_train(
            capsys,
            monkeypatch,
            "--algo",
            "ppo_ewma",
            "--env",
            "CartPole-v1",
            "--gym-packages",
            *packages,
            "-f",
            str(log_folder),
        )
        assert status == 2
        assert err[-1].startswith(f"{TRAIN}: error: argument --gym-packages: no module named {packages[-1]!r} (install")
    assert not log_folder.exists()


def test_an_env_kwarg_the_environment_does_not_take_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # rl-zoo3: "TypeError: CartPoleEnv.__init__() got an unexpected keyword argument 'foo'", and a run folder left
    log_folder = tmp_path / "logs"
    for flag in ("--env-kwargs", "--eval-env-kwargs"):
        status, err = run_train(
            capsys, monkeypatch, "--algo", "ppo_ewma", "--env", "CartPole-v1", flag, "foo:1", "-n", "64", "-f", str(log_folder)
        )
        assert status == 1
        assert err[0].startswith(f"{TRAIN}: error: {flag}")
        assert "{'foo': 1}: CartPoleEnv.__init__() got an unexpected keyword argument 'foo'" in err[0]
    assert not log_folder.exists()


def test_env_kwargs_that_change_a_procgen_runs_game_or_mode_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # they trained another game or mode under the id's name and hyperparameter entry
    pytest.importorskip("procgen")
    log_folder = tmp_path / "logs"
    for pair, shown in (
        ("env_name:'coinrun'", "env_name='coinrun'"),
        ("distribution_mode:'hard'", "distribution_mode='hard'"),
    ):
        status, err = run_train(
            capsys,
            monkeypatch,
            "--algo",
            "ppo_ewma",
            "--env",
            "procgen-starpilot-easy",
            "--env-kwargs",
            pair,
            "-f",
            str(log_folder),
        )
        assert status == 1
        assert err[0] == (
            f"{TRAIN}: error: --env-kwargs {shown}: a Procgen run's game and mode are those of --env procgen-starpilot-easy "
            "(procgen-<game>-<easy|hard>, whose entry this run takes): pass that id instead"
        )
    assert not log_folder.exists()


def test_env_package_problem_leaves_other_ids_to_rl_zoo3(monkeypatch: pytest.MonkeyPatch) -> None:
    from gymnasium.envs.registration import EnvSpec

    from sb3_ewma.zoo.checks import env_package_problem

    assert env_package_problem("CartPole-v1") is None
    assert env_package_problem("CartPol-v1") is None  # a typo: rl-zoo3 suggests the nearest id
    monkeypatch.setitem(gym.envs.registry, "Fake-v0", EnvSpec("Fake-v0", entry_point="sb3_ewma_no_such_module:FakeEnv"))
    assert env_package_problem("Fake-v0") == (
        "Fake-v0 cannot be made: its module needs sb3_ewma_no_such_module, which is not installed"
    )


def test_a_number_rl_zoo3_makes_a_schedule_of_warns_as_in_a_script() -> None:
    import re
    import warnings

    from rl_zoo3.utils import SimpleLinearSchedule
    from stable_baselines3.common.utils import ConstantSchedule

    # rl-zoo3 turns clip_range: 0 (and lin_0) into a schedule, which the real call cannot read: the number warns here
    for raw, schedule in ((0, ConstantSchedule(0.0)), ("lin_0", SimpleLinearSchedule(0.0))):
        kwargs = {"policy": "MlpPolicy", "clip_range": schedule}
        with pytest.warns(UserWarning, match=rf"^clip_range=0(\.0)? is not > 0: no update .* \({re.escape(ENTRY_ORIGIN)}\)$"):
            check_entry_values("ppo_ewma", PPO_EWMA, kwargs, {"clip_range": raw})
    # a negative number stays a number, whose warning the real call gives: not twice
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_entry_values("ppo_ewma", PPO_EWMA, {"policy": "MlpPolicy", "clip_range": -1.0}, {"clip_range": -1.0})
    assert not caught


def test_normalize_is_read_as_rl_zoo3_reads_it() -> None:
    # its truth value for a number (rl-zoo3: `if self.normalize:` with no keyword arguments), a dict or "dict(...)"
    from sb3_ewma.zoo.derivation import normalize_settings

    assert normalize_settings(1) == {} and normalize_settings(1.0) == {} and normalize_settings(True) == {}
    assert normalize_settings(0) is None and normalize_settings(False) is None and normalize_settings(None) is None
    assert normalize_settings("dict(norm_obs=False)") == {"norm_obs": False}
    with pytest.raises(ValueError, match=r"^normalize must be a bool, a dict or a 'dict\(...\)' string, got \[1\]"):
        normalize_settings([1])
