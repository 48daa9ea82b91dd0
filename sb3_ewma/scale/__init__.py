"""
Batch size-invariance helper (Hilton, Cobbe & Schulman 2021): rescale the hyperparameters of PPO-EWMA / PPG-EWMA tuned
with ``reference_n_envs`` environments for ``n_envs`` environments. See :ref:`batch_size_invariance`.

The rules are :mod:`sb3_ewma.scale.batch_size_rules`; :mod:`~sb3_ewma.scale.api` applies them to hyperparameter dicts
and rl-zoo3 entries, and ``python -m sb3_ewma.scale FILE ENTRY --n-envs N`` (:mod:`~sb3_ewma.scale.cli`) prints a
rescaled rl-zoo3 entry.
"""

from sb3_ewma.scale.api import (
    ALGOS,
    LR_RULES,
    PPG_KEYS,
    algorithm_defaults,
    scale_hyperparams,
    scale_hyperparams_with_report,
)
from sb3_ewma.scale.cli import main
from sb3_ewma.scale.zoo_entry import ZOO_ENTRY_KEYS, ScaledSchedule, dump_entry, scale_schedule

__all__ = [
    "ALGOS",
    "LR_RULES",
    "PPG_KEYS",
    "ZOO_ENTRY_KEYS",
    "ScaledSchedule",
    "algorithm_defaults",
    "dump_entry",
    "main",
    "scale_hyperparams",
    "scale_hyperparams_with_report",
    "scale_schedule",
]
