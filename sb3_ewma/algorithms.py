"""
This package's algorithms by their rl-zoo3 name: the one registry that the rl-zoo3 integration (:mod:`sb3_ewma.zoo`,
``--algo``), the packaged hyperparameter files (``hyperparams/<name>.yml``) and :mod:`sb3_ewma.scale` (``--algo``, the
defaults of missing hyperparameters) read. Register a new algorithm here, with one line.
"""

from pathlib import Path

from stable_baselines3.common.base_class import BaseAlgorithm

from sb3_ewma.maskable_ppo_ewma import MaskablePPO_EWMA
from sb3_ewma.ppg_ewma import PPG, PPG_EWMA
from sb3_ewma.ppo_ewma import PPO_EWMA
from sb3_ewma.recurrent_ppo_ewma import RecurrentPPO_EWMA

ALGORITHMS: dict[str, type[BaseAlgorithm]] = {
    "ppo_ewma": PPO_EWMA,
    "ppg_ewma": PPG_EWMA,
    "ppg": PPG,
    "ppo_lstm_ewma": RecurrentPPO_EWMA,
    "ppo_mask_ewma": MaskablePPO_EWMA,
}
"""Algorithm class by rl-zoo3 name."""

HYPERPARAMS_DIR = Path(__file__).parent / "hyperparams"
"""This package's rl-zoo3 hyperparameter files, ``<name>.yml`` for each name of :data:`ALGORITHMS`."""


def packaged_hyperparams_file(algo: str) -> Path:
    """
    :param algo: a name of :data:`ALGORITHMS`
    :return: the path of its packaged hyperparameter file
    """
    if algo not in ALGORITHMS:
        raise ValueError(f"algo must be one of {tuple(ALGORITHMS)}, got {algo!r}")
    return HYPERPARAMS_DIR / f"{algo}.yml"
