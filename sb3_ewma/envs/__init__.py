"""Environments: Procgen for Stable-Baselines3 (importing this registers the gymnasium ids ``procgen-<game>-<mode>``)."""

from sb3_ewma.envs.procgen import PROCGEN_KWARGS, ProcgenVecEnv, make_procgen_env
from sb3_ewma.envs.procgen_games import (
    PROCGEN_DISTRIBUTION_MODES,
    PROCGEN_GAMES,
    PROCGEN_MODE_GAMES,
    PROCGEN_NORMALIZATION_CONSTANTS,
    normalized_return,
    parse_procgen_env_id,
)
from sb3_ewma.envs.procgen_gymnasium import ProcgenGymnasiumEnv, register_procgen_envs
from sb3_ewma.envs.procgen_monitor import ProcgenMonitor

register_procgen_envs()

__all__ = [
    "PROCGEN_DISTRIBUTION_MODES",
    "PROCGEN_GAMES",
    "PROCGEN_KWARGS",
    "PROCGEN_MODE_GAMES",
    "PROCGEN_NORMALIZATION_CONSTANTS",
    "ProcgenGymnasiumEnv",
    "ProcgenMonitor",
    "ProcgenVecEnv",
    "make_procgen_env",
    "normalized_return",
    "parse_procgen_env_id",
    "register_procgen_envs",
]
