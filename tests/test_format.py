"""Human numbers in messages and logs."""

import math

import pytest

from sb3_ewma import PPO_EWMA, center_of_mass_from_ewma_decay, ewma_decay_from_center_of_mass
from sb3_ewma.common.format import human_bytes, without_rounding_noise


@pytest.mark.parametrize(
    "n_bytes, text",
    [(0, "0 B"), (512, "512 B"), (999.6, "1 kB"), (786_432, "786 kB"), (6_442_450_944, "6.44 GB"), (2.5e13, "25 TB")],
)
def test_human_bytes(n_bytes, text):
    assert human_bytes(n_bytes) == text


def test_without_rounding_noise():
    noisy = center_of_mass_from_ewma_decay(ewma_decay_from_center_of_mass(8))
    assert noisy != 8.0  # 7.9999999999999964: what the logs showed
    assert without_rounding_noise(noisy) == 8.0
    assert without_rounding_noise(0.1 + 0.2) == 0.3
    assert without_rounding_noise(1 / 3) == pytest.approx(1 / 3, rel=1e-12)
    assert math.isinf(without_rounding_noise(math.inf)) and without_rounding_noise(0.0) == 0.0


def test_logged_center_of_mass_has_no_rounding_noise():
    # 8 minibatches per epoch: "auto" gives the decay 8/9, whose center of mass computes as 7.9999999999999964
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=4, n_epochs=1, seed=0, device="cpu")
    assert center_of_mass_from_ewma_decay(model.proximal_decay) != 8.0
    model.learn(32)
    assert model.logger.name_to_value["train/ewma_center_of_mass"] == 8.0
