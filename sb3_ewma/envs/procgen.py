"""
Procgen (Cobbe et al. 2020) for Stable-Baselines3: :class:`ProcgenVecEnv`, and the loading, seeding and argument checks
it shares with :mod:`sb3_ewma.envs.procgen_gymnasium`. The ``procgen`` module is imported lazily.
"""

import numbers
import os
import re
from collections.abc import Sequence
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv, VecNormalize
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn

from sb3_ewma._install import install_hint
from sb3_ewma.envs.procgen_games import (
    PROCGEN_DISTRIBUTION_MODES,
    PROCGEN_GAMES,
    PROCGEN_MODE_GAMES,
)
from sb3_ewma.envs.procgen_monitor import ProcgenMonitor

PROCGEN_KWARGS: tuple[str, ...] = (
    "center_agent",
    "use_backgrounds",
    "use_monochrome_assets",
    "restrict_themes",
    "use_generated_assets",
    "paint_vel_info",
    "use_sequential_levels",
    "debug_mode",
    "num_threads",
    "resource_root",
)
"""Extra keyword arguments passed through to procgen's environment constructor."""

PROCGEN_RENDER_MODES: tuple[str | None, ...] = (None, "rgb_array")
PROCGEN_FPS = 15
# procgen passes its seeds to C as int32
_SEED_MODULUS = 2**31
_INSTALL_MESSAGE = (
    f"Procgen environments need the `procgen` module: install the extra with {install_hint('procgen')} "
    "(it installs the procgen-mirror distribution, which ships the `procgen` module with wheels for recent Pythons)"
)


# the Debian/Ubuntu and Fedora/RHEL packages of the system libraries that procgen's libenv.so links
_SYSTEM_LIBRARY_PACKAGES = {
    "libGL.so": ("libgl1", "mesa-libGL"),
    "libGLX.so": ("libglx0", "libglvnd-glx"),
    "libGLdispatch.so": ("libglvnd0", "libglvnd"),
    "libglib-2.0.so": ("libglib2.0-0", "glib2"),
}


def _missing_library_error(error: OSError) -> OSError | None:
    """The ``OSError`` naming the system package to install when ``libenv.so`` lacks a system library, else None."""
    message = str(error)
    missing = re.search(r"(lib[\w.+-]*\.so[\w.]*): cannot open shared object file", message)
    if missing is None or missing.group(1).startswith("libenv."):
        return None  # not a missing system library (procgen's own library missing is a broken install)
    library = missing.group(1)
    packages = next(
        (packages for prefix, packages in _SYSTEM_LIBRARY_PACKAGES.items() if library.startswith(prefix + ".")), None
    )
    if packages is None:
        install = f"Install the system package that provides {library}"
    else:
        install = f"Install it: `apt-get install {packages[0]}` (Debian, Ubuntu) or `dnf install {packages[1]}` (Fedora, RHEL)"
    return OSError(
        f"procgen could not load its environment library: {message}. procgen's libenv.so links system libraries that a "
        f"headless server may lack, here {library}. {install}. procgen needs libGL.so.1 (package libgl1 on Debian and "
        "Ubuntu, mesa-libGL on Fedora and RHEL) and glib (libglib2.0-0, glib2). On a machine without root, unpack "
        "these libraries into a folder and add it to LD_LIBRARY_PATH before starting Python."
    )


def _procgen_env_class() -> type:
    """Procgen's gym3 environment class, imported lazily; an ``ImportError`` saying how to install it."""
    try:
        from procgen import ProcgenGym3Env
    except ImportError as error:
        raise ImportError(_INSTALL_MESSAGE) from error
    return ProcgenGym3Env


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def to_procgen_seed(seed: int) -> int:
    """Map an integer seed to procgen's int32 ``rand_seed``: ``seed % 2**31``, a Python int."""
    if not _is_int(seed):
        raise ValueError(f"seed must be an integer or None, got {seed!r}")
    return int(seed) % _SEED_MODULUS


def _random_seed() -> int:
    return int(np.random.default_rng().integers(_SEED_MODULUS))


def check_procgen_args(
    env_name: str,
    n_envs: int = 1,
    num_levels: int = 0,
    start_level: int = 0,
    distribution_mode: str = "hard",
    render_mode: str | None = None,
    procgen_kwargs: dict[str, Any] | None = None,
) -> None:
    """
    Check the arguments of :func:`make_procgen_env`, raising a ``ValueError`` that names the parameter and its allowed
    values (procgen aborts the process on some).
    """
    if env_name not in PROCGEN_GAMES:
        raise ValueError(f"env_name must be one of {PROCGEN_GAMES}, got {env_name!r}")
    if distribution_mode not in PROCGEN_DISTRIBUTION_MODES:
        raise ValueError(f"distribution_mode must be one of {PROCGEN_DISTRIBUTION_MODES}, got {distribution_mode!r}")
    if distribution_mode in PROCGEN_MODE_GAMES and env_name not in PROCGEN_MODE_GAMES[distribution_mode]:
        raise ValueError(
            f"distribution_mode {distribution_mode!r} is only available for env_name in "
            f"{PROCGEN_MODE_GAMES[distribution_mode]}, got {env_name!r}"
        )
    if not _is_int(n_envs) or n_envs < 1:
        raise ValueError(f"n_envs must be an integer >= 1, got {n_envs!r}")
    if not _is_int(num_levels) or not 0 <= num_levels < _SEED_MODULUS:
        raise ValueError(f"num_levels must be an integer in [0, 2**31) (0: unlimited levels), got {num_levels!r}")
    if not _is_int(start_level) or not 0 <= start_level < _SEED_MODULUS:
        raise ValueError(f"start_level must be an integer in [0, 2**31), got {start_level!r}")
    if distribution_mode == "exploration" and (num_levels != 0 or start_level != 0):
        raise ValueError(
            "distribution_mode 'exploration' fixes the level: num_levels and start_level must keep their defaults (0), "
            f"got num_levels={num_levels!r}, start_level={start_level!r}"
        )
    if render_mode not in PROCGEN_RENDER_MODES:
        raise ValueError(f"render_mode must be one of {PROCGEN_RENDER_MODES}, got {render_mode!r}")
    unknown = sorted(set(procgen_kwargs or {}) - set(PROCGEN_KWARGS))
    if unknown:
        raise ValueError(
            f"unknown procgen keyword argument(s) {unknown}: allowed are {PROCGEN_KWARGS} "
            "(the seed is set with `seed`, the number of environments with `n_envs`)"
        )
    # the values on which procgen aborts the process ("fatal: invalid dtype", "fassert failed", "failed to load image")
    options = procgen_kwargs or {}
    python_int = {name: isinstance(options[name], int) and not isinstance(options[name], bool) for name in options}
    if "num_threads" in options and not (python_int["num_threads"] and options["num_threads"] >= 0):
        raise ValueError(f"num_threads must be an integer >= 0, got {options['num_threads']!r}")
    if "debug_mode" in options and not python_int["debug_mode"]:
        raise ValueError(f"debug_mode must be an integer, got {options['debug_mode']!r}")
    root = options.get("resource_root", os.sep)
    if not (isinstance(root, str) and root.endswith(os.sep) and os.path.isdir(root)):
        raise ValueError(f"resource_root must be the path of an existing folder ending with {os.sep!r}, got {root!r}")


class ProcgenSettings(Protocol):
    """The settings of a procgen environment, as the wrappers of this package keep them."""

    env_name: str
    distribution_mode: str
    num_levels: int
    start_level: int
    render_mode: str | None
    procgen_kwargs: dict[str, Any]


def _make_procgen(num: int, rand_seed: int, settings: ProcgenSettings) -> Any:
    """Create procgen's gym3 environment (the one that ``procgen.ProcgenEnv`` wraps) of ``num`` copies."""
    env_class = _procgen_env_class()
    kwargs = dict(settings.procgen_kwargs)
    if settings.distribution_mode != "exploration":
        # exploration mode sets them itself and refuses them as arguments
        kwargs.update(num_levels=int(settings.num_levels), start_level=int(settings.start_level))
    try:
        # procgen loads its environment library (libenv.so, through cffi) here, not when it is imported
        return env_class(
            num=int(num),
            env_name=settings.env_name,
            distribution_mode=settings.distribution_mode,
            rand_seed=int(rand_seed),
            render_mode=settings.render_mode,
            **kwargs,
        )
    except OSError as error:
        missing = _missing_library_error(error)
        if missing is None:
            raise
        raise missing from error


class ProcgenVecEnv(VecEnv):
    """
    SB3 ``VecEnv`` over procgen's vectorized gym3 environment: uint8 ``64 x 64 x 3`` RGB observations (channel-last),
    ``Discrete(15)`` actions.

    Procgen resets each environment itself: the step that ends an episode returns ``done=True`` with the next episode's
    first observation, and its ``infos[i]`` holds ``"level_complete"`` and ``"is_success"`` (the level was solved),
    ``"prev_level_seed"``, ``"terminal_observation"`` (the last observation **before** the final action: procgen never
    shows the final frame) and ``"TimeLimit.truncated"`` (always False: every episode end is terminal, as in the
    paper). Every step's info holds ``"level_seed"``, the seed of the level being played.

    Procgen takes its seed at construction only: the ``reset()`` after ``seed(s)`` rebuilds the environment with
    ``rand_seed=s % 2**31``, and a ``reset()`` after steps rebuilds it with a seed drawn from a generator seeded by the
    last seed. ``get_attr``, ``set_attr`` and ``env_method`` reach this adapter, shared by all environments
    (``get_attr`` and ``env_method`` fall back to procgen's environment).

    :param env_name: the game, one of :data:`PROCGEN_GAMES`
    :param num_envs: number of parallel environments
    :param num_levels: number of distinct levels (0: unlimited)
    :param start_level: seed of the first level
    :param distribution_mode: "easy", "hard", or a restricted mode for the games that have it (:data:`PROCGEN_MODE_GAMES`)
    :param seed: procgen's ``rand_seed`` (random when None)
    :param render_mode: None, or "rgb_array" for procgen's 512 x 512 frames in ``render()`` and ``get_images()``
    :param procgen_kwargs: options passed to procgen (:data:`PROCGEN_KWARGS`), e.g. ``num_threads``
    """

    # gymnasium's ``render_modes`` and ``render_fps`` (SB3's VecEnv sets only the render modes)
    metadata: dict[str, Any]

    def __init__(
        self,
        env_name: str,
        num_envs: int = 64,
        num_levels: int = 0,
        start_level: int = 0,
        distribution_mode: str = "hard",
        seed: int | None = None,
        render_mode: str | None = None,
        **procgen_kwargs: Any,
    ) -> None:
        check_procgen_args(env_name, num_envs, num_levels, start_level, distribution_mode, render_mode, procgen_kwargs)
        self.env_name = env_name
        self.num_levels = int(num_levels)
        self.start_level = int(start_level)
        self.distribution_mode = distribution_mode
        self.procgen_kwargs = dict(procgen_kwargs)
        # read by VecEnv.__init__ through get_attr
        self.render_mode = render_mode
        self.closed = False
        self._env: Any = None
        self._num = int(num_envs)
        self._pending_seed: int | None = None
        rand_seed = to_procgen_seed(seed) if seed is not None else _random_seed()
        self._seed_rng = np.random.default_rng(rand_seed)
        self._build(rand_seed)

        observation_space, action_space = self._procgen_spaces()
        super().__init__(self._num, observation_space, action_space)
        self.metadata = {**self.metadata, "render_fps": PROCGEN_FPS}
        self._actions = np.zeros(self._num, dtype=np.int32)

    def _build(self, rand_seed: int) -> None:
        """(Re)create the procgen environment with the given seed."""
        if self._env is not None:
            self._env.close()
            self._env = None
        self._env = _make_procgen(self._num, rand_seed, self)
        _, ob, _ = self._env.observe()
        self._obs: np.ndarray = ob["rgb"]
        self._level_seeds = [int(info["level_seed"]) for info in self._env.get_info()]
        self._stepped = False

    def _procgen_spaces(self) -> tuple[spaces.Box, spaces.Discrete]:
        """The gymnasium equivalents of procgen's gym3 spaces (observation ``rgb``, action)."""
        ob_space = self._env.ob_space["rgb"]
        observation_space = spaces.Box(low=0, high=255, shape=tuple(ob_space.shape), dtype=np.uint8)
        return observation_space, spaces.Discrete(int(self._env.ac_space.eltype.n))

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("this ProcgenVecEnv is closed")

    def reset(self) -> VecEnvObs:
        """
        Start new episodes: rebuild procgen with the seed given to ``seed()``, or with a new one after steps.

        :return: the first observations, uint8 ``(num_envs, 64, 64, 3)``
        """
        self._check_open()
        if self._pending_seed is not None:
            seed, self._pending_seed = self._pending_seed, None
            self._build(seed)
        elif self._stepped:
            self._build(int(self._seed_rng.integers(_SEED_MODULUS)))
        self.reset_infos = [{"level_seed": level_seed} for level_seed in self._level_seeds]
        self._reset_seeds()
        self._reset_options()
        return self._obs.copy()

    def step_async(self, actions: np.ndarray) -> None:
        self._check_open()
        self._actions = np.asarray(actions).reshape(self._num).astype(np.int32)

    def step_wait(self) -> VecEnvStepReturn:
        self._check_open()
        self._env.act(self._actions)
        rewards, ob, dones = self._env.observe()
        raw_infos = self._env.get_info()
        self._stepped = True
        infos: list[dict[str, Any]] = []
        for i, raw_info in enumerate(raw_infos):
            info: dict[str, Any] = {"level_seed": int(raw_info["level_seed"])}
            if dones[i]:
                info["level_complete"] = info["is_success"] = bool(raw_info["prev_level_complete"])
                info["prev_level_seed"] = int(raw_info["prev_level_seed"])
                info["terminal_observation"] = self._obs[i].copy()
                info["TimeLimit.truncated"] = False
            infos.append(info)
        self._obs = ob["rgb"]
        self._level_seeds = [info["level_seed"] for info in infos]
        return self._obs.copy(), rewards.astype(np.float32), dones.astype(bool), infos

    def close(self) -> None:
        """Release procgen's environment (its C state and buffers). Further calls other than ``close`` raise."""
        if self._env is not None:
            self._env.close()
            self._env = None
        self.closed = True

    def seed(self, seed: int | None = None) -> list[int | None]:
        """
        Set procgen's seed for the next ``reset()``, which rebuilds the environment; later rebuilds draw seeds from it.

        :param seed: the seed (random when None)
        :return: the procgen seed, once per environment
        """
        rand_seed = to_procgen_seed(seed) if seed is not None else _random_seed()
        self._pending_seed = rand_seed
        self._seed_rng = np.random.default_rng(rand_seed)
        return [rand_seed for _ in range(self._num)]

    def get_images(self) -> list[np.ndarray]:
        """:return: one RGB frame per environment: 512 x 512 with ``render_mode="rgb_array"``, else the observation"""
        self._check_open()
        if self.render_mode == "rgb_array":
            return [info["rgb"] for info in self._env.get_info()]
        return list(self._obs.copy())

    def _attr_owner(self, attr_name: str) -> Any:
        if hasattr(self, attr_name):
            return self
        if self._env is not None and hasattr(self._env, attr_name):
            return self._env
        raise AttributeError(f"neither ProcgenVecEnv nor procgen's environment has an attribute {attr_name!r}")

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        value = getattr(self._attr_owner(attr_name), attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set an attribute of this adapter, shared by all environments: ``indices`` must cover them all (or be None)."""
        if sorted(self._get_indices(indices)) != list(range(self._num)):
            raise ValueError("procgen's environments share their attributes: set_attr needs indices=None (all envs)")
        setattr(self, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        """Call a method of this adapter (or of procgen's environment) once; its result is repeated per index."""
        result = getattr(self._attr_owner(method_name), method_name)(*method_args, **method_kwargs)
        return [result for _ in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        """False: procgen's environments are not gymnasium environments."""
        return [False for _ in self._get_indices(indices)]


def make_procgen_env(
    env_name: str,
    n_envs: int = 64,
    num_levels: int = 0,
    start_level: int = 0,
    distribution_mode: str = "hard",
    seed: int | None = None,
    normalize_reward: bool = False,
    gamma: float = 0.99,
    clip_reward: float = 10.0,
    render_mode: str | None = None,
    monitor_filename: str | None = None,
    info_keywords: Sequence[str] = (),
    **procgen_kwargs: Any,
) -> VecEnv:
    """
    Create a vectorized Procgen environment for SB3: a :class:`ProcgenVecEnv` in a
    :class:`~sb3_ewma.envs.procgen_monitor.ProcgenMonitor` (raw episode statistics in ``info["episode"]``), optionally
    in the paper's reward normalization, SB3's ``VecNormalize(norm_obs=False, norm_reward=True)`` (see :ref:`procgen`).

    :param env_name: the game, one of :data:`PROCGEN_GAMES`
    :param n_envs: number of parallel environments (the paper: 64 per worker)
    :param num_levels: number of distinct levels (0: unlimited)
    :param start_level: seed of the first level
    :param distribution_mode: "easy", "hard" or a restricted mode (:data:`PROCGEN_MODE_GAMES`)
    :param seed: procgen's seed (random when None)
    :param normalize_reward: wrap the env in the reward-normalizing ``VecNormalize``
    :param gamma: discount of the returns whose standard deviation scales the rewards (the paper: 0.99)
    :param clip_reward: bound of the normalized rewards
    :param render_mode: None or "rgb_array" (512 x 512 frames, for video recording)
    :param monitor_filename: a Monitor CSV file for the episode statistics (None: none)
    :param info_keywords: keys of the step's info to add to the episode statistics (``Monitor``'s argument)
    :param procgen_kwargs: options passed to procgen (:data:`PROCGEN_KWARGS`), e.g. ``num_threads``
    :return: the ``VecEnv``
    """
    check_procgen_args(env_name, n_envs, num_levels, start_level, distribution_mode, render_mode, procgen_kwargs)
    if seed is not None:
        to_procgen_seed(seed)  # a seed that is no integer is said before procgen is imported
    if normalize_reward:
        if not (isinstance(gamma, numbers.Real) and 0.0 <= gamma <= 1.0):
            raise ValueError(f"gamma must be a number in [0, 1], got {gamma!r}")
        if not (isinstance(clip_reward, numbers.Real) and clip_reward > 0):
            raise ValueError(f"clip_reward must be a number > 0, got {clip_reward!r}")
    # raises the ImportError with the install hint before any work when procgen is missing
    _procgen_env_class()
    procgen_env = ProcgenVecEnv(
        env_name,
        num_envs=n_envs,
        num_levels=num_levels,
        start_level=start_level,
        distribution_mode=distribution_mode,
        seed=seed,
        render_mode=render_mode,
        **procgen_kwargs,
    )
    venv: VecEnv = ProcgenMonitor(procgen_env, monitor_filename, info_keywords)
    if normalize_reward:
        venv = VecNormalize(venv, training=True, norm_obs=False, norm_reward=True, gamma=gamma, clip_reward=clip_reward)
    return venv
