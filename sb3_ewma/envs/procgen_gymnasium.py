"""A single Procgen environment as a ``gymnasium.Env``, registered as ``procgen-<game>-<mode>`` (procgen imported lazily)."""

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

import sb3_ewma.envs.procgen as native
from sb3_ewma.envs.procgen_games import PROCGEN_GAMES, PROCGEN_REGISTERED_MODES


class ProcgenGymnasiumEnv(gym.Env):
    """
    A single Procgen environment as a ``gymnasium.Env``, the entry point of the ids registered by
    :func:`register_procgen_envs`; for training, the vectorized :func:`~sb3_ewma.envs.procgen.make_procgen_env` is
    much faster.

    The step that ends an episode returns ``terminated=True`` with the last observation before the final action
    (procgen never shows the final frame) and ``info["level_complete"]`` and ``info["is_success"]``; ``truncated`` is
    always False. ``reset(seed=s)`` rebuilds procgen with ``rand_seed=s % 2**31``; a ``reset()`` mid-episode rebuilds
    it with a seed drawn from ``self.np_random``.

    :param env_name: the game, one of :data:`PROCGEN_GAMES`
    :param distribution_mode: "easy", "hard" or a restricted mode
    :param num_levels: number of distinct levels (0: unlimited)
    :param start_level: seed of the first level
    :param render_mode: None or "rgb_array" (procgen's 512 x 512 frames)
    :param procgen_kwargs: options passed to procgen (:data:`PROCGEN_KWARGS`)
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": native.PROCGEN_FPS}

    def __init__(
        self,
        env_name: str = "coinrun",
        distribution_mode: str = "hard",
        num_levels: int = 0,
        start_level: int = 0,
        render_mode: str | None = None,
        **procgen_kwargs: Any,
    ) -> None:
        native.check_procgen_args(env_name, 1, num_levels, start_level, distribution_mode, render_mode, procgen_kwargs)
        native._procgen_env_class()
        self.env_name = env_name
        self.distribution_mode = distribution_mode
        self.num_levels = int(num_levels)
        self.start_level = int(start_level)
        # a single environment needs no worker threads (procgen's own gym registration does the same)
        self.procgen_kwargs = {"num_threads": 0, **procgen_kwargs}
        self.render_mode = render_mode
        self.observation_space = spaces.Box(low=0, high=255, shape=(64, 64, 3), dtype=np.uint8)
        self.action_space = spaces.Discrete(15)
        self._env: Any = None
        self._obs = np.zeros(self.observation_space.shape, dtype=np.uint8)
        self._level_seed = 0
        self._mid_episode = False

    def _build(self, rand_seed: int) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
        self._env = native._make_procgen(1, rand_seed, self)
        _, ob, _ = self._env.observe()
        self._obs = ob["rgb"][0]
        self._level_seed = int(self._env.get_info()[0]["level_seed"])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self._build(native.to_procgen_seed(seed))
        elif self._env is None or self._mid_episode:
            self._build(int(self.np_random.integers(native._SEED_MODULUS)))
        self._mid_episode = False
        return self._obs.copy(), {"level_seed": self._level_seed}

    def step(self, action: int | np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._env is None:
            raise RuntimeError("call reset() before step()")
        self._env.act(np.asarray(action, dtype=np.int32).reshape(1))
        rewards, ob, first = self._env.observe()
        raw_info = self._env.get_info()[0]
        terminated = bool(first[0])
        self._level_seed = int(raw_info["level_seed"])
        info: dict[str, Any] = {"level_seed": self._level_seed}
        if terminated:
            obs = self._obs
            info["level_complete"] = info["is_success"] = bool(raw_info["prev_level_complete"])
        else:
            obs = ob["rgb"][0]
        self._mid_episode = not terminated
        self._obs = ob["rgb"][0]
        return obs.copy(), float(rewards[0]), terminated, False, info

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array" or self._env is None:
            return None
        return self._env.get_info()[0]["rgb"]

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


def register_procgen_envs() -> list[str]:
    """
    Register the gymnasium ids ``procgen-<game>-<easy|hard>`` of every game (entry point :class:`ProcgenGymnasiumEnv`),
    leaving registered ids alone. Importing ``sb3_ewma.envs`` calls it.

    :return: the ids
    """
    env_ids = []
    for game in PROCGEN_GAMES:
        for mode in PROCGEN_REGISTERED_MODES:
            env_id = f"procgen-{game}-{mode}"
            if env_id not in gym.registry:
                gym.register(
                    id=env_id,
                    entry_point="sb3_ewma.envs.procgen_gymnasium:ProcgenGymnasiumEnv",
                    kwargs={"env_name": game, "distribution_mode": mode},
                )
            env_ids.append(env_id)
    return env_ids
