"""
Environments and networks of the benchmarks, named by plain strings so that run specifications stay picklable.

Environment ids:

- ``MinAtar/<Game>-v1`` (e.g. ``MinAtar/Breakout-v1``): MinAtar (Young & Tian 2019) through ``minatar.gym``; the
  boolean ``(10, 10, C)`` frames become float32 ``(C, 10, 10)`` arrays, episodes are capped at
  :data:`MINATAR_MAX_EPISODE_STEPS` steps (a truncation, which SB3 bootstraps).
- ``procgen-<game>-<easy|hard>`` (e.g. ``procgen-starpilot-easy``): Procgen's vectorized environment
  (:func:`sb3_ewma.envs.make_procgen_env`, unlimited levels) with the paper's reward normalization for training.
- ``fake-image``: random 64x64x3 uint8 frames that cost nothing to step (timing only).
- any other gymnasium id (``CartPole-v1``...): ``make_vec_env`` with a ``Monitor`` per environment.

Networks: ``"mlp"`` (SB3's MLP on the flattened observation; ``net_arch`` from the hyperparameters),
``"minatar_cnn"`` (the MinAtar paper's conv 16x3x3 + 128 units), ``"impala"`` (the IMPALA CNN of the paper) and
``"nature"`` (SB3's NatureCNN).
"""

from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv
from torch import nn

MINATAR_MAX_EPISODE_STEPS = 1000
"""Episode cap of the MinAtar games (MinAtar itself has none: a good Breakout player never loses)."""

NETWORKS = ("mlp", "minatar_cnn", "impala", "nature")


class MinAtarObservation(gym.ObservationWrapper):
    """Boolean ``(10, 10, C)`` MinAtar frames as float32 ``(C, 10, 10)`` arrays of 0 and 1 (channels first)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        height, width, channels = env.observation_space.shape  # type: ignore[misc]
        self.observation_space = gym.spaces.Box(0.0, 1.0, (channels, height, width), np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.transpose(observation, (2, 0, 1)), dtype=np.float32)


class MinAtarCNN(BaseFeaturesExtractor):
    """
    The network of the MinAtar paper: one 3x3 convolution with 16 channels, ReLU, a 128-unit linear layer, ReLU.

    :param observation_space: float ``(C, H, W)`` observations
    :param features_dim: units of the linear layer
    """

    def __init__(self, observation_space: gym.spaces.Box, features_dim: int = 128) -> None:
        super().__init__(observation_space, features_dim)
        channels, height, width = observation_space.shape
        self.net = nn.Sequential(
            nn.Conv2d(channels, 16, kernel_size=3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(16 * (height - 2) * (width - 2), features_dim),
            nn.ReLU(),
        )

    def forward(self, observations: th.Tensor) -> th.Tensor:
        return self.net(observations)


class RandomImageEnv(gym.Env):
    """
    64x64x3 uint8 random frames, 15 actions, episodes of 500 steps: an environment that costs nothing.

    Not SB3's ``FakeImageEnv(action_dim=15, screen_height=64, screen_width=64, n_channels=3)``: it draws a new frame
    with ``observation_space.sample()`` at every step, 1.65 ms per step against 0.5 us here (medians of 7 x 2000 steps,
    one CPU thread), more than Procgen itself, which would swamp the algorithm timings this environment is for.
    """

    observation_space = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
    action_space = gym.spaces.Discrete(15)

    def __init__(self) -> None:
        self._rng = np.random.default_rng(0)
        self._t = 0
        self._frame = self._rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        self._t = 0
        return self._frame, {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._t += 1
        return self._frame, float(action == 0), False, self._t >= 500, {}


def _make_minatar(env_id: str) -> gym.Env:
    return MinAtarObservation(gym.wrappers.TimeLimit(gym.make(env_id), MINATAR_MAX_EPISODE_STEPS))


def is_procgen(env_id: str) -> bool:
    """Whether ``env_id`` names a Procgen game (``procgen-<game>-<mode>``)."""
    return env_id.startswith("procgen-")


def procgen_game_and_mode(env_id: str) -> tuple[str, str]:
    """``("starpilot", "easy")`` for ``"procgen-starpilot-easy"``; a ``ValueError`` for anything else."""
    _, game, mode = [*env_id.split("-"), "", ""][:3]
    if not is_procgen(env_id) or not game or not mode:
        raise ValueError(f"not a Procgen id 'procgen-<game>-<mode>': {env_id!r}")
    return game, mode


def make_env(env_id: str, n_envs: int, seed: int, *, training: bool = True) -> VecEnv:
    """
    The vectorized environment ``env_id`` (see the module docstring) with ``n_envs`` copies.

    :param env_id: environment id
    :param n_envs: number of parallel environments
    :param seed: seed of the first environment (the others get ``seed + i``; Procgen derives all levels from it)
    :param training: Procgen only: normalize rewards (training) or leave them raw (evaluation)
    :return: the ``VecEnv``; every episode end carries ``info["episode"]["r"]``, the raw return
    """
    if env_id == "fake-image":
        return DummyVecEnv([RandomImageEnv for _ in range(n_envs)])
    if is_procgen(env_id):
        from sb3_ewma.envs import make_procgen_env

        game, mode = procgen_game_and_mode(env_id)
        return make_procgen_env(game, n_envs=n_envs, distribution_mode=mode, seed=seed, normalize_reward=training)
    if env_id.startswith("MinAtar/"):
        import minatar.gym

        if env_id not in gym.registry:
            minatar.gym.register_envs()
        # make_vec_env puts its Monitor around this, outside the time limit, so that truncated episodes are counted
        return make_vec_env(partial(_make_minatar, env_id), n_envs=n_envs, seed=seed)
    return make_vec_env(env_id, n_envs=n_envs, seed=seed)


def policy_for(network: str) -> tuple[str, dict[str, Any]]:
    """
    The policy name and ``policy_kwargs`` of a network (the hyperparameters' own ``policy_kwargs`` are merged on top).

    :param network: one of :data:`NETWORKS`
    :return: ``(policy, policy_kwargs)``
    """
    if network == "mlp":
        return "MlpPolicy", {}
    if network == "minatar_cnn":
        return "MlpPolicy", {"features_extractor_class": MinAtarCNN, "net_arch": []}
    if network == "impala":
        from sb3_ewma.common.torch_layers import ImpalaCNN

        return "CnnPolicy", {"features_extractor_class": ImpalaCNN, "net_arch": [], "ortho_init": False}
    if network == "nature":
        return "CnnPolicy", {}
    raise ValueError(f"unknown network {network!r}: choose among {NETWORKS}")


def score(env_id: str, returns: Any) -> Any:
    """
    The score plotted across games: Procgen's normalized return (``(R - R_min) / (R_max - R_min)``, the paper's
    metric) for Procgen ids, the raw return otherwise.
    """
    if is_procgen(env_id):
        from sb3_ewma.envs import normalized_return

        game, mode = procgen_game_and_mode(env_id)
        return normalized_return(game, np.asarray(returns, dtype=np.float64), mode)
    return returns


def short_name(env_id: str) -> str:
    """A short, file-name friendly name: ``breakout`` for ``MinAtar/Breakout-v1``, ``starpilot-easy`` for Procgen."""
    if is_procgen(env_id):
        game, mode = procgen_game_and_mode(env_id)
        return f"{game}-{mode}"
    return env_id.split("/")[-1].split("-v")[0].lower()


def default_env_id(env: str | None, mode: str) -> str:
    """The environment id: ``procgen-<game>-<mode>`` for a Procgen ``<game>-<mode>``; by default starpilot if procgen
    is installed, else ``fake-image``."""
    if env is None:
        try:
            import procgen  # noqa: F401

            return f"procgen-starpilot-{mode}"
        except ImportError:
            return "fake-image"
    game, _, game_mode = env.partition("-")
    from sb3_ewma.envs import PROCGEN_GAMES

    if game in PROCGEN_GAMES and game_mode in ("", "easy", "hard"):
        return f"procgen-{game}-{game_mode or mode}"
    return env
