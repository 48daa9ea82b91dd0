"""Torch threads: the entry points' default (one thread for models without images on the CPU), and what wins over it."""

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch as th
import yaml
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_ewma import PPO_EWMA, zoo
from sb3_ewma.zoo import threads


class ImageEnv(gym.Env):
    observation_space = gym.spaces.Box(0, 255, (36, 36, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return np.zeros((36, 36, 3), np.uint8), {}

    def step(self, action):
        return np.zeros((36, 36, 3), np.uint8), 0.0, False, False, {}


@pytest.fixture
def no_thread_variables(monkeypatch: pytest.MonkeyPatch):
    for name in threads.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    th.set_num_threads(2)
    yield
    th.set_num_threads(1)


def test_auto_is_one_thread_for_an_mlp_and_torch_default_for_images_on_the_cpu(no_thread_variables) -> None:
    mlp = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu")
    cnn = PPO_EWMA("CnnPolicy", DummyVecEnv([ImageEnv]), n_steps=16, batch_size=16, device="cpu")
    assert threads.auto_num_threads(mlp) == 1
    assert threads.auto_num_threads(cnn) is None
    assert threads.apply_num_threads(threads.AUTO, cnn) is None and th.get_num_threads() == 2
    assert threads.apply_num_threads(threads.AUTO, mlp) == 1 and th.get_num_threads() == 1


@pytest.mark.parametrize("num_threads", [threads.TORCH_DEFAULT, 2])
def test_a_chosen_thread_count_wins(no_thread_variables, num_threads: int) -> None:
    mlp = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu")
    assert threads.apply_num_threads(num_threads, mlp) is None
    assert th.get_num_threads() == 2


def test_omp_num_threads_wins(no_thread_variables, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    mlp = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu")
    assert threads.apply_num_threads(threads.AUTO, mlp) is None
    assert th.get_num_threads() == 2


def run_train(log_folder: Path, *extra: str) -> None:
    zoo.train(
        [
            *("--algo", "ppo_ewma", "--env", "CartPole-v1", "-n", "64", "-f", str(log_folder), "--eval-freq", "-1"),
            *("-params", "n_steps:8", "batch_size:16", "n_epochs:1", "--seed", "0"),
            *extra,
        ]
    )


def test_train_uses_one_thread_by_default_and_restores_the_count(
    no_thread_variables, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    counts_at_learn: list[int] = []
    learn = zoo.ExperimentManager.learn

    def recording_learn(self, model):
        counts_at_learn.append(th.get_num_threads())
        return learn(self, model)

    monkeypatch.setattr(zoo.ExperimentManager, "learn", recording_learn)
    run_train(tmp_path, "--verbose", "1")
    assert counts_at_learn == [1]
    assert "Using 1 torch thread" in capsys.readouterr().out
    assert th.get_num_threads() == 2  # restored: the entry point changed nothing for its caller
    (run_dir,) = (tmp_path / "ppo_ewma").glob("CartPole-v1_*")
    args = yaml.load((run_dir / "CartPole-v1" / "args.yml").read_text(), Loader=yaml.UnsafeLoader)
    assert dict(args)["num_threads"] == threads.AUTO
    # --num-threads -1: torch's default, left alone
    run_train(tmp_path, "--num-threads", "-1", "--verbose", "0")
    assert counts_at_learn == [1, 2]


def test_train_help_documents_the_default(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        zoo.train(["-h"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "0 (the default: one thread, or torch's default when the model reads images on the CPU" in help_text
    assert "-1 (torch's default, one thread per core)" in help_text
