"""
Batch size-invariance helper (Hilton, Cobbe & Schulman 2021, sections 3-4 and appendices B, D, E).

Rescales the hyperparameters of PPO-EWMA / PPG-EWMA tuned with ``reference_n_envs`` environments so that training with
``n_envs`` environments behaves the same as a function of the number of environment steps. With
``c = reference_n_envs / n_envs`` (both the optimization and the iteration batch size are divided by ``c``):

- Adam step size ``/ sqrt(c)`` (plain SGD learning rate ``/ c``);
- optionally Adam ``beta1``, ``beta2`` raised to the power ``1 / c``;
- ``batch_size / c`` (``n_steps`` unchanged: the same number of minibatches per epoch);
- center of mass of the proximal-policy EWMA ``* c``;
- span (in iterations) of the EWMA advantage moments ``* c``;
- PPG: ``n_policy_iterations * c`` (the phase batch size stays constant, so the auxiliary phase is unchanged).

The rules themselves are :mod:`sb3_ewma.scale.batch_size_rules` (one pure function each); this module applies them to
hyperparameter dicts and rl-zoo3 entries: defaults of missing keys, numbers, rl-zoo3 schedule strings and schedules,
``policy_kwargs`` strings, the report and its caveats, and the command line.

Command line: ``python -m sb3_ewma.scale FILE ENTRY --n-envs N`` prints the rescaled rl-zoo3 entry;
``python -m sb3_ewma.scale --algo ppg_ewma --env procgen-starpilot-easy --n-envs 16`` reads the packaged file.

The package: :mod:`~sb3_ewma.scale.api` (the public functions, the algorithm's defaults), :mod:`~sb3_ewma.scale.rules`
(each rule applied to a hyperparameter dict), :mod:`~sb3_ewma.scale.zoo_entry` (numbers, schedules, ``"lin_<value>"``
strings and ``policy_kwargs`` strings as rl-zoo3 entries write them; the YAML of an entry) and
:mod:`~sb3_ewma.scale.cli` (the command line).
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
