"""This package's algorithms, hyperparameter files, samplers and Procgen ids, made known to rl-zoo3 (:func:`register_zoo`)."""

from collections.abc import Mapping

import rl_zoo3.hyperparams_opt
import rl_zoo3.utils
from stable_baselines3.common.base_class import BaseAlgorithm

from sb3_ewma import hyperparams_opt
from sb3_ewma.algorithms import ALGORITHMS, HYPERPARAMS_DIR, packaged_hyperparams_file
from sb3_ewma.envs.procgen_gymnasium import register_procgen_envs

ZOO_ALGORITHMS: Mapping[str, type[BaseAlgorithm]] = ALGORITHMS
"""This package's algorithms by rl-zoo3 name (``--algo``): :data:`sb3_ewma.algorithms.ALGORITHMS`."""

ZOO_ALGOS: tuple[str, ...] = tuple(ZOO_ALGORITHMS)
"""The rl-zoo3 names of this package's algorithms."""


def zoo_algorithms() -> dict[str, type[BaseAlgorithm]]:
    """:return: a copy of :data:`ZOO_ALGORITHMS`"""
    return dict(ZOO_ALGORITHMS)


def register_zoo() -> None:
    """
    Make rl-zoo3 know this package: the algorithms (``rl_zoo3.ALGOS``), their hyperparameter samplers
    (``rl_zoo3.hyperparams_opt``) and the Procgen ids (gymnasium registry). Safe to call several times.
    """
    register_procgen_envs()
    # rl_zoo3.ALGOS is rl_zoo3.utils.ALGOS, the dict every rl-zoo3 module imports
    rl_zoo3.utils.ALGOS.update(zoo_algorithms())
    rl_zoo3.hyperparams_opt.HYPERPARAMS_SAMPLER.update(hyperparams_opt.HYPERPARAMS_SAMPLER)
    rl_zoo3.hyperparams_opt.HYPERPARAMS_CONVERTER.update(hyperparams_opt.HYPERPARAMS_CONVERTER)


def default_conf_file(algo: str) -> str | None:
    """
    :param algo: an rl-zoo3 algorithm name
    :return: the path of this package's hyperparameter file for ``algo``, else None (``ppo_mask_ewma`` has none: its
        entries are derived)
    """
    if algo not in ZOO_ALGOS or not packaged_hyperparams_file(algo).is_file():
        return None
    return str(packaged_hyperparams_file(algo))


__all__ = ["HYPERPARAMS_DIR", "ZOO_ALGORITHMS", "ZOO_ALGOS", "default_conf_file", "register_zoo", "zoo_algorithms"]
