"""
This package's algorithms by their rl-zoo3 name: the one registry that the rl-zoo3 integration (:mod:`sb3_ewma.zoo`,
``--algo``), the packaged hyperparameter files (``hyperparams/<name>.yml``) and :mod:`sb3_ewma.scale` (``--algo``, the
defaults of missing hyperparameters) read. Register a new algorithm here, with one line.
"""

import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path

from stable_baselines3.common.base_class import BaseAlgorithm

from sb3_ewma.common.checks import register_algorithms


class AlgorithmRegistry(Mapping[str, type[BaseAlgorithm]]):
    """
    Algorithm classes by name, each imported when it is first looked up: listing the names imports nothing (the
    sb3-contrib algorithms import sb3-contrib, which is slow), so :mod:`sb3_ewma.scale` can read the names at import.

    :param paths: the dotted path of each class, ``"package.module.Class"``, by name
    """

    def __init__(self, paths: dict[str, str]) -> None:
        self._paths = dict(paths)

    def __getitem__(self, name: str) -> type[BaseAlgorithm]:
        module, _, attribute = self._paths[name].rpartition(".")
        return getattr(importlib.import_module(module), attribute)

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._paths!r})"


ALGORITHMS: Mapping[str, type[BaseAlgorithm]] = AlgorithmRegistry(
    {
        "ppo_ewma": "sb3_ewma.ppo_ewma.PPO_EWMA",
        "ppg_ewma": "sb3_ewma.ppg_ewma.PPG_EWMA",
        "ppg": "sb3_ewma.ppg_ewma.PPG",
        "ppo_lstm_ewma": "sb3_ewma.recurrent_ppo_ewma.RecurrentPPO_EWMA",
        "ppo_mask_ewma": "sb3_ewma.maskable_ppo_ewma.MaskablePPO_EWMA",
    }
)
"""Algorithm class by rl-zoo3 name (a class is imported when first looked up)."""
# the algorithms that the errors of sb3_ewma.common.checks name ("it is an argument of PPG_EWMA")
register_algorithms(ALGORITHMS)

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
