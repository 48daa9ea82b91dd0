"""
The ``conftest.py`` of SB3's own tests when ``.ci/gpu_session check`` runs them (``.gpu/sb3_tests``, from a checkout of
stable-baselines3): the tests import ``PPO`` from ``stable_baselines3``, which here is sb3-ewma's ``PPO_EWMA`` (pytest
loads this file before it imports the test modules beside it), so that SB3's checks of PPO (``test_save_load.py``:
save and load on every device, parameters on the loaded model's device) run on ``PPO_EWMA``. Select them with
``-k "PPO or ppo"``: the other algorithms' tests are SB3's own.
"""

from typing import Any

import stable_baselines3
import torch as th

from sb3_ewma import PPO_EWMA

stable_baselines3.PPO = PPO_EWMA


def pytest_configure(config: Any) -> None:
    """Register SB3's marker (its own pytest settings are not copied)."""
    config.addinivalue_line("markers", "expensive: marks tests as expensive (deselect with '-m \"not expensive\"')")


def pytest_report_header(config: Any) -> list[str]:
    """Say which class and which device (the tests' ``device="auto"``) the run uses."""
    device = f"cuda ({th.cuda.get_device_name(0)})" if th.cuda.is_available() else "cpu"
    return [f"SB3's tests with PPO_EWMA swapped in for PPO; device 'auto' is {device}"]
