"""
The package's commands and what the documentation says of them: ``python -m sb3_ewma <command>`` and the console
command ``sb3-ewma``, the ``plots`` command on this package's logs (rl-zoo3's ``plot_train`` draws an empty legend for
runs shorter than its episode window), ``enjoy`` on a machine without a display, and statements of the docs checked
against the code (the wheel's version, the logs of the recurrent and maskable algorithms, ``ppo_mask_ewma`` without
``-conf``, the c printed under torchrun).
"""

import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sb3_ewma import __main__ as package_main
from sb3_ewma import plots

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
MONITOR_HEADER = '#{"t_start": 0, "env_id": "CartPole-v1"}\nr,l,t\n'


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    env.pop("SB3_EWMA_TRACEBACK", None)
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


# python -m sb3_ewma, sb3-ewma


def test_python_m_sb3_ewma_lists_and_dispatches_the_commands(tmp_path: Path) -> None:
    result = run("-m", "sb3_ewma")
    assert result.returncode == 2
    assert "Gym has been unmaintained" not in result.stderr  # the legacy gym banner (tests/test_quiet.py)
    for command in ("train", "enjoy", "record_video", "push_to_hub", "load_from_hub", "scale", "plots"):
        assert re.search(rf"^  {command} +\S", result.stdout, re.MULTILINE), result.stdout
    # a command's own errors, with its name
    result = run("-m", "sb3_ewma", "train", "--algo", "ppo_ewma", "--log-interval", "0", "-f", str(tmp_path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "python -m sb3_ewma train: error: argument --log-interval: must be a number of iterations >= 1" in result.stderr
    assert list(tmp_path.iterdir()) == []
    result = run("-m", "sb3_ewma", "traint")
    assert result.returncode == 1 and "error: unknown command 'traint': choose one of train, enjoy" in result.stderr


def test_every_command_runs(capsys: pytest.CaptureFixture[str]) -> None:
    for command in package_main.COMMANDS:
        with pytest.raises(SystemExit) as exit_info:
            package_main.main([command.replace("_", "-"), "-h"], prog="sb3-ewma")
        assert exit_info.value.code == 0
        assert "usage:" in capsys.readouterr().out
    package_main.main(["scale", "--algo", "ppo_ewma", "--env", "CartPole-v1", "--n-envs", "4"])
    out = capsys.readouterr()
    assert "CartPole-v1:\n  n_envs: 4\n" in out.out and "c = reference / target = 2" in out.err


def test_console_command_is_declared() -> None:
    setup = (REPO / "setup.py").read_text()
    match = re.search(r'"console_scripts": \["sb3-ewma=([\w.]+):(\w+)"\]', setup)
    assert match is not None
    assert getattr(importlib.import_module(match.group(1)), match.group(2)) is package_main.console_main


# plots


def monitor_run(folder: Path, episodes: int, rewards: float = 10.0) -> Path:
    folder.mkdir(parents=True)
    rows = "".join(f"{rewards + episode},{10 + episode},{episode * 0.1:.1f}\n" for episode in range(episodes))
    (folder / "0.monitor.csv").write_text(MONITOR_HEADER + rows)
    return folder


def test_short_runs_are_drawn(tmp_path: Path) -> None:
    # rl-zoo3's plot_train: `if x.shape[0] >= args.episode_window` (100), otherwise no line and an empty legend
    log_path = tmp_path / "ppo_ewma"
    monitor_run(log_path / "CartPole-v1_1", 150)
    monitor_run(log_path / "CartPole-v1_2", 5)
    monitor_run(log_path / "CartPole-v1_3", 0)
    folders = plots.run_folders(str(tmp_path), "ppo_ewma", ["CartPole-v1"])
    curves, skipped = plots.training_curves(folders)
    assert [curve.label for curve in curves] == ["CartPole-v1_1", "CartPole-v1_2 (5 episodes < window 100: mean so far)"]
    long, short = curves
    assert len(long.x) == 51 and long.y[0] == pytest.approx(np.mean(10.0 + np.arange(100)))
    np.testing.assert_allclose(short.y, np.cumsum(10.0 + np.arange(5)) / np.arange(1, 6))
    np.testing.assert_allclose(short.x, np.cumsum(10 + np.arange(5)))  # timesteps
    assert skipped == [f"{log_path / 'CartPole-v1_3'}: no episode yet"]


def test_plots_writes_the_figure_and_overwrites_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monitor_run(tmp_path / "ppo_ewma" / "CartPole-v1_1", 5)
    figure = tmp_path / "curves.png"
    plots.main(["-a", "ppo_ewma", "-e", "CartPole-v1", "-f", str(tmp_path), "-o", str(figure)])
    assert figure.read_bytes().startswith(b"\x89PNG") and f"Saved {figure} (1 run(s))" in capsys.readouterr().out
    written = figure.read_bytes()
    with pytest.raises(FileExistsError, match=r"curves.png: the file exists; choose another name"):
        plots.main(["-a", "ppo_ewma", "-e", "CartPole-v1", "-f", str(tmp_path), "-o", str(figure)])
    assert figure.read_bytes() == written
    with pytest.raises(ValueError, match=r"nothing to plot: no run of Pendulum-v1 in .*ppo_ewma has an episode"):
        plots.main(["-a", "ppo_ewma", "-e", "Pendulum-v1", "-f", str(tmp_path), "-o", str(tmp_path / "other.png")])
    with pytest.raises(FileNotFoundError, match=r"no folder .*ppg: -f is the log folder of train"):
        plots.main(["-a", "ppg", "-e", "CartPole-v1", "-f", str(tmp_path), "-o", str(tmp_path / "other.png")])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["curves.png", "ppo_ewma"]


def test_plots_without_matplotlib_says_which_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real_find_spec(name, *a)
    )
    with pytest.raises(ImportError, match=r"needs matplotlib, of the plots extra: `pip install -e \".\[plots\]\"`"):
        plots.main(["-a", "ppo_ewma", "-e", "CartPole-v1", "-f", str(tmp_path), "-o", str(tmp_path / "x.png")])
    assert list(tmp_path.iterdir()) == []


def test_plots_without_a_display_asks_for_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monitor_run(tmp_path / "ppo_ewma" / "CartPole-v1_1", 5)
    with pytest.raises(ValueError, match=r"no display .*: write it to a file with -o FILE.png"):
        plots.main(["-a", "ppo_ewma", "-e", "CartPole-v1", "-f", str(tmp_path)])


# enjoy on a machine without a display


def test_enjoy_without_a_display_plays_without_rendering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("rl_zoo3")
    from sb3_ewma import zoo

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    zoo.train(
        [
            *("--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(tmp_path), "-n", "64", "--verbose", "0"),
            *("--eval-freq", "-1", "-params", "n_envs:2", "n_steps:32", "batch_size:32"),
        ]
    )
    capsys.readouterr()
    zoo.enjoy(["--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(tmp_path), "-n", "5"])
    assert "No display (DISPLAY is not set): playing without rendering, as with --no-render" in capsys.readouterr().out


# the documentation against the code


def test_install_page_names_the_wheel_of_this_version() -> None:
    version = (REPO / "sb3_ewma" / "version.txt").read_text().strip()
    wheels = re.findall(r"dist/sb3_ewma-([\w.]+)-py3-none-any\.whl", (DOCS / "guide" / "install.md").read_text())
    assert wheels == [version]


@pytest.mark.parametrize("name", ["RecurrentPPO_EWMA", "MaskablePPO_EWMA"])
def test_recurrent_and_maskable_log_the_gradient_noise_scale_and_time_keys(name: str) -> None:
    from sb3_contrib.common.envs import InvalidActionEnvDiscrete
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.vec_env import DummyVecEnv

    import sb3_ewma

    page = (DOCS / "modules" / f"{name.lower().replace('ppo_ewma', '_ppo_ewma')}.md").read_text()
    assert "except `train/gradient_noise_scale`" not in page
    assert "`train/gradient_noise_scale` with\n`log_gradient_noise_scale=True`, `time/collection_s`" in page
    if name == "MaskablePPO_EWMA":
        env, policy = DummyVecEnv([lambda: InvalidActionEnvDiscrete(dim=4, ep_length=8, n_invalid_actions=1)] * 2), "MlpPolicy"
    else:
        env, policy = make_vec_env("CartPole-v1", n_envs=2), "MlpLstmPolicy"
    for options, keys in [
        ({"log_gradient_noise_scale": True}, {"train/gradient_noise_scale"}),
        ({"async_rollouts": True}, {"time/collection_s", "time/collection_wait_s"}),
    ]:
        model = getattr(sb3_ewma, name)(policy, env, n_steps=16, batch_size=16, n_epochs=1, device="cpu", **options)
        model.set_logger(configure(None, []))
        logged: set[str] = set()
        dump = model.logger.dump

        def record(step: int = 0, dump=dump, logged=logged, logger=model.logger) -> None:
            logged.update(logger.name_to_value)
            dump(step)

        model.logger.dump = record
        model.learn(64)
        assert keys <= logged, (options, sorted(logged))


def test_ppo_mask_ewma_trains_without_conf() -> None:
    pytest.importorskip("rl_zoo3")
    from sb3_ewma.zoo.derivation import zoo_entry_for

    choice = zoo_entry_for("ppo_mask_ewma", "CartPole-v1")
    assert choice.source == "derived" and choice.path is not None and choice.path.name == "ppo.yml"
    assert "pass `-conf`" not in (DOCS / "modules" / "maskable_ppo_ewma.md").read_text()
    assert "none (pass `-conf`)" not in (DOCS / "guide" / "algos.md").read_text()
    # it trains so: tests/test_zoo.py::test_budget_shorter_than_one_rollout_trains[ppo_mask_ewma-CartPole-v1]


def test_torchrun_c_is_the_scale_reports_c(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("rl_zoo3")
    from sb3_ewma.scale import scale_hyperparams_with_report
    from sb3_ewma.zoo import zoo_hyperparams_per_rank

    entry = {"n_envs": 8, "n_steps": 128, "batch_size": 256}
    zoo_hyperparams_per_rank(dict(entry), dict(entry), world_size=2, scaled=False)
    printed = capsys.readouterr().out
    assert "n_envs=8 per rank, 16 environments in total, with hyperparameters written for 8: c = reference / target" in printed
    assert "= 8 / 16 = 0.5 (batch size-invariance" in printed
    with pytest.warns(UserWarning, match="batch size-invariance needs"):  # n_epochs, advantage_normalization
        _, report = scale_hyperparams_with_report(entry, 16, algo="ppo_ewma")
    assert "n_envs: 8 -> 16 (c = reference / target = 0.5)" in report


def test_install_page_says_where_the_gym_banner_comes_from_and_how_it_is_silenced() -> None:
    # tests/test_quiet.py: SB3's patch_gym imports gym whenever installed; gym prints gym-notices' notice
    page = (DOCS / "guide" / "install.md").read_text()
    section = " ".join(page[page.index("### The legacy gym banner") : page.index("## Check the install")].split())
    sources = ("stable_baselines3/common/vec_env/patch_gym.py", "procgen/gym_registration.py")
    for statement in (*sources, "`procgen` extra pins `gym-notices<0.1`", 'pip install "gym-notices<0.1"'):
        assert statement in section
    assert "`import sb3_ewma` redirects no stream" in section
    assert '"gym-notices<0.1"' in (REPO / "setup.py").read_text()
    gym = pytest.importorskip("gym")
    # gym's own import of its notices is optional, and prints the notice of its version only
    source = Path(gym.__file__).read_text()
    assert "import gym_notices.notices as notices" in source and "notices.notices.get(__version__)" in source
