"""
Registers MinAtar's ids ``MinAtar/<Game>-v1`` (minimal action sets) in gymnasium on import, with episodes capped at
:data:`benchmarks.harness.envs.MINATAR_MAX_EPISODE_STEPS` steps: the module rl-zoo3 imports for MinAtar tasks
(``--gym-packages benchmarks.learning.minatar_envs``).
"""

import gymnasium as gym

from benchmarks.harness.envs import MINATAR_MAX_EPISODE_STEPS

MINATAR_GAMES = ("asterix", "breakout", "freeway", "seaquest", "space_invaders")


def register_minatar_envs() -> None:
    """Register the five games (ids already registered are left as they are)."""
    for game in MINATAR_GAMES:
        env_id = f"MinAtar/{game.title().replace('_', '')}-v1"
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point="minatar.gym:BaseEnv",
                kwargs={"game": game, "use_minimal_action_set": True},
                max_episode_steps=MINATAR_MAX_EPISODE_STEPS,
            )


register_minatar_envs()
