"""
The named rules for the proximal EWMA's center of mass (sb3_ewma.common.ewma_age): "paper" (M), "max_age" (E x M),
"mean_age" (E x M / 2) and "auto", by hand-computed values, in the algorithms, their logs and the rescaling helper.
"""

import csv
import warnings

import pytest
from stable_baselines3.common.logger import configure

from sb3_ewma import PPO_EWMA, scale_hyperparams
from sb3_ewma.common.decoupled.options import resolve_ewma_decay
from sb3_ewma.common.ewma_age import (
    EWMA_DECAY_AUTO_SEVERAL_EPOCHS,
    ewma_age_rule,
    ewma_center_of_mass_by_rule,
    ewma_decay_by_rule,
)
from sb3_ewma.ppg_ewma import PPG_EWMA


@pytest.mark.parametrize(
    "name, minibatches, epochs, center_of_mass",
    [
        ("paper", 8, 3, 8.0),  # the paper's PPO-EWMA: 8 minibatches, 3 epochs
        ("max_age", 8, 3, 24.0),
        ("mean_age", 8, 3, 12.0),
        ("paper", 64, 10, 64.0),  # rl-zoo3's Pendulum-v1: 4 x 1024 steps, batch 64, 10 epochs
        ("max_age", 64, 10, 640.0),
        ("mean_age", 64, 10, 320.0),
        ("paper", 1, 20, 1.0),  # rl-zoo3's CartPole-v1: 8 x 32 steps, batch 256, 20 epochs
        ("max_age", 1, 20, 20.0),
        ("mean_age", 1, 20, 10.0),
        ("mean_age", 1, 1, 0.5),  # one step per iteration: half a step
        ("max_age", 5, 0, 5.0),  # no epoch is read as one
    ],
)
def test_center_of_mass_by_rule(name: str, minibatches: int, epochs: int, center_of_mass: float) -> None:
    assert ewma_center_of_mass_by_rule(name, minibatches, epochs) == center_of_mass
    assert ewma_decay_by_rule(name, minibatches, epochs) == pytest.approx(center_of_mass / (center_of_mass + 1))


def test_auto_is_the_mean_age_with_several_epochs_and_the_paper_rule_with_one() -> None:
    assert EWMA_DECAY_AUTO_SEVERAL_EPOCHS == "mean_age"
    assert ewma_age_rule("auto", 10) == "mean_age" and ewma_age_rule("auto", 2) == "mean_age"
    assert ewma_age_rule("auto", 1) == "paper" and ewma_age_rule("auto", 0) == "paper"
    assert ewma_center_of_mass_by_rule("auto", 64, 10) == 320.0  # rl-zoo3's Pendulum-v1: 10 epochs of 64 minibatches
    assert ewma_center_of_mass_by_rule("auto", 1, 20) == 10.0  # rl-zoo3's CartPole-v1: 20 epochs of 1
    assert ewma_center_of_mass_by_rule("auto", 8, 1) == 8.0  # the paper's PPG-EWMA: 1 epoch of 8
    assert ewma_center_of_mass_by_rule("auto", 8, 2) == 8.0  # max(M, E x M / 2): both 8
    assert resolve_ewma_decay("auto", 8, 3) == pytest.approx(12 / 13)
    assert resolve_ewma_decay("paper", 8, 3) == pytest.approx(8 / 9)
    assert resolve_ewma_decay("max_age", 8, 3) == pytest.approx(24 / 25)
    assert resolve_ewma_decay(0.5, 8, 3) == 0.5 and resolve_ewma_decay(None, 8, 3) is None


def test_unknown_rule() -> None:
    with pytest.raises(ValueError, match="'paper', 'max_age', 'mean_age'"):
        ewma_age_rule("oldest", 1)
    with pytest.raises(ValueError, match="one of"):
        PPO_EWMA("MlpPolicy", "CartPole-v1", ewma_decay="oldest")
    with pytest.raises(ValueError, match="minibatches_per_epoch"):
        ewma_center_of_mass_by_rule("paper", 0, 1)


@pytest.mark.parametrize("name, center_of_mass", [("auto", 6.0), ("paper", 4.0), ("max_age", 12.0), ("mean_age", 6.0)])
def test_algorithms_and_log_follow_the_rule(name: str, center_of_mass: float, tmp_path) -> None:
    # 1 env x 64 steps, batch 16: M = 4 minibatches per epoch, E = 3 epochs
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=16, n_epochs=3, ewma_decay=name, seed=0)
    assert model.proximal_decay == pytest.approx(center_of_mass / (center_of_mass + 1))
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(128)  # the second iteration's log holds the first one's training
    rows = list(csv.DictReader(open(tmp_path / "progress.csv")))
    assert float(rows[-1]["train/ewma_center_of_mass"]) == pytest.approx(center_of_mass)
    # PPG-EWMA: E = n_epochs (E_pi) of the policy phase
    ppg = PPG_EWMA("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=16, n_epochs=3, ewma_decay=name, seed=0)
    assert ppg.proximal_decay == pytest.approx(center_of_mass / (center_of_mass + 1))


@pytest.mark.parametrize(
    "name, reference_center_of_mass, report",
    [
        ("auto", 12, "'auto' = 'mean_age' (center of mass 12 = E x M / 2, M = 8 minibatches per epoch, E = 3 epochs)"),
        ("paper", 8, "'paper' (center of mass 8 = M, M = 8 minibatches per epoch, E = 3 epochs)"),
        ("max_age", 24, "'max_age' (center of mass 24 = E x M, M = 8 minibatches per epoch, E = 3 epochs)"),
        ("mean_age", 12, "'mean_age' (center of mass 12 = E x M / 2, M = 8 minibatches per epoch, E = 3 epochs)"),
    ],
)
def test_rescaling_follows_the_rule(name: str, reference_center_of_mass: int, report: str) -> None:
    from sb3_ewma.scale import scale_hyperparams_with_report

    # 64 envs x 256 steps, batch 2048: M = 8; 3 epochs; down to 16 envs: c = 4
    settings = {"n_envs": 64, "n_steps": 256, "batch_size": 2048, "n_epochs": 3, "ewma_decay": name}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaled = scale_hyperparams(settings, 16, algo="ppo_ewma")
        _, lines = scale_hyperparams_with_report(settings, 16, algo="ppo_ewma")
    expected = 4 * reference_center_of_mass
    assert scaled["ewma_decay"] == pytest.approx(expected / (expected + 1))
    assert any(report in line for line in lines), lines
