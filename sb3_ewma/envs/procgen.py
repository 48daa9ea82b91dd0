"""
Procgen (Cobbe et al. 2020) for Stable-Baselines3: a ``VecEnv`` adapter over procgen's vectorized environment, and
the loading, seeding and argument checks it shares with the single-environment gymnasium wrapper registered for
rl-zoo3 (:mod:`sb3_ewma.envs.procgen_gymnasium`). The games, modes and normalization constants are in
:mod:`sb3_ewma.envs.procgen_games`, the episode statistics in :mod:`sb3_ewma.envs.procgen_monitor`.

The ``procgen`` module (distribution ``procgen-mirror``, extra ``procgen``) is imported lazily, so this module can be
imported without it.
"""

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


# the system packages (Debian/Ubuntu, Fedora/RHEL) of the shared libraries that procgen's libenv.so links and that a
# headless server image may lack; libGL.so.1's packages bring libGLX and libGLdispatch with them
_SYSTEM_LIBRARY_PACKAGES = {
    "libGL.so": ("libgl1", "mesa-libGL"),
    "libGLX.so": ("libglx0", "libglvnd-glx"),
    "libGLdispatch.so": ("libglvnd0", "libglvnd"),
    "libglib-2.0.so": ("libglib2.0-0", "glib2"),
}


def _missing_library_error(error: OSError) -> OSError | None:
    """
    The error to raise when procgen's ``libenv.so`` could not be loaded because a system library it links is missing,
    saying which system package to install; None for any other ``OSError``.

    :param error: the error raised while procgen loaded its environment library
    """
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
    """Import procgen lazily and return its gym3 environment class, or raise an ``ImportError`` saying how to install it."""
    try:
        from procgen import ProcgenGym3Env
    except ImportError as error:
        raise ImportError(_INSTALL_MESSAGE) from error
    return ProcgenGym3Env


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def to_procgen_seed(seed: int) -> int:
    """
    Map any integer seed to procgen's range: procgen's ``rand_seed`` is an int32, so seeds are taken
    modulo ``2**31`` (SB3 and rl-zoo3 may draw seeds up to ``2**32 - 1``).

    :param seed: an integer
    :return: ``seed % 2**31``, a Python int
    """
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
    Validate the arguments of a procgen environment, raising a ``ValueError`` that names the parameter and the
    allowed values (procgen itself aborts the process on some invalid combinations).

    :param env_name: the game
    :param n_envs: number of parallel environments
    :param num_levels: number of distinct levels (0: unlimited)
    :param start_level: seed of the first level
    :param distribution_mode: one of :data:`PROCGEN_DISTRIBUTION_MODES`, supported by the game
    :param render_mode: None or "rgb_array"
    :param procgen_kwargs: extra keyword arguments, names from :data:`PROCGEN_KWARGS`
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
    SB3 ``VecEnv`` over procgen's vectorized environment (``procgen.ProcgenEnv`` is a thin baselines-style wrapper
    around the same gym3 ``ProcgenGym3Env`` used here). Observations are the uint8 ``64 x 64 x 3`` (channel-last)
    RGB frames, actions ``Discrete(15)``, with gymnasium spaces; SB3 adds ``VecTransposeImage`` itself for CNN policies.

    Episodes: procgen resets each environment automatically when its episode ends; the step that ends it returns
    the reward of the last action, ``done=True`` and already the first observation of the next episode. At that step
    ``infos[i]`` holds

    - ``"level_complete"`` and ``"is_success"``: procgen's ``prev_level_complete`` (the level was solved rather than
      failed or timed out; SB3 logs the mean of ``is_success`` as ``rollout/success_rate``);
    - ``"prev_level_seed"``: the finished level's seed;
    - ``"terminal_observation"``: procgen never exposes the true final frame, so this is the last observation
      **before** the final action (the best available; SB3's PPO only reads it for truncated episodes);
    - ``"TimeLimit.truncated"``: always False. Procgen does not report whether an episode hit its time limit, and
      the paper (like the Procgen baselines) treats every episode end as terminal, so nothing is bootstrapped.

    Every step's info also holds ``"level_seed"``, the seed of the level now being played. The episode statistics
    (``info["episode"]``) come from the :class:`~sb3_ewma.envs.procgen_monitor.ProcgenMonitor` (SB3's ``VecMonitor``)
    that :func:`make_procgen_env` puts around this env.

    Seeding: procgen takes its seed (``rand_seed``) at construction only and derives the levels of all environments
    from it. ``seed(s)`` therefore stores ``s`` and the next ``reset()`` rebuilds the procgen environment with
    ``rand_seed=s``: ``ProcgenVecEnv(..., seed=s)`` and ``env.seed(s); env.reset()`` play the same levels, and the
    same actions give the same trajectories. Procgen cannot reset an episode either, so a ``reset()`` after steps
    have been taken also rebuilds the environment, with a seed drawn from a generator seeded by the last seed
    (reproducible, but new levels each time). A ``reset()`` of a fresh environment does not rebuild it.
    Seeds are taken modulo ``2**31`` (procgen's seeds are int32).

    Attributes (``get_attr`` / ``set_attr`` / ``env_method``) are those of this adapter, shared by all its
    environments, falling back to procgen's gym3 environment for ``get_attr`` and ``env_method``.

    :param env_name: the game, one of :data:`PROCGEN_GAMES`
    :param num_envs: number of parallel environments
    :param num_levels: number of distinct levels (0: unlimited, the paper's setting)
    :param start_level: seed of the first level (levels are ``start_level .. start_level + num_levels - 1``)
    :param distribution_mode: "easy", "hard" (the paper's), or "extreme" / "memory" / "exploration" for the games that
        have them (:data:`PROCGEN_MODE_GAMES`)
    :param seed: procgen's ``rand_seed`` (random when None)
    :param render_mode: None, or "rgb_array" to make procgen render 512 x 512 frames for ``render()`` /
        ``get_images()`` (slower; without it ``get_images()`` returns the 64 x 64 observations)
    :param procgen_kwargs: options passed to procgen (:data:`PROCGEN_KWARGS`), e.g. ``num_threads``,
        ``use_backgrounds``, ``paint_vel_info``
    """

    # gymnasium's metadata (``render_modes`` and ``render_fps``): SB3's VecEnv only sets the list of render modes
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
        self.current_seed = rand_seed
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
        Start new episodes in all environments: rebuilds the procgen environment with the seed given to ``seed()``
        if any, else with a new reproducible seed when steps were taken since the last (re)build
        (procgen cannot reset episodes); a fresh environment is used as it is.

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
        Set procgen's seed for the next ``reset()``, which rebuilds the environment with ``rand_seed=seed % 2**31``
        (procgen only takes seeds at construction). Later rebuilds draw their seeds from a generator seeded by it.

        :param seed: the seed (random when None)
        :return: the procgen seed, once per environment (procgen derives the environments' levels from it)
        """
        rand_seed = to_procgen_seed(seed) if seed is not None else _random_seed()
        self._pending_seed = rand_seed
        self._seed_rng = np.random.default_rng(rand_seed)
        return [rand_seed for _ in range(self._num)]

    def get_images(self) -> list[np.ndarray]:
        """
        :return: one RGB frame per environment: procgen's 512 x 512 render with ``render_mode="rgb_array"``,
            else the 64 x 64 observation
        """
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
        """
        Set an attribute of this adapter. Procgen's environments share one adapter, so ``indices`` must
        cover all of them (or be None).
        """
        if sorted(self._get_indices(indices)) != list(range(self._num)):
            raise ValueError("procgen's environments share their attributes: set_attr needs indices=None (all envs)")
        setattr(self, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        """Call a method of this adapter (or of procgen's environment) once; its result is repeated per index."""
        result = getattr(self._attr_owner(method_name), method_name)(*method_args, **method_kwargs)
        return [result for _ in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        """False: procgen's environments are not gymnasium environments that wrappers could wrap."""
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
    :class:`~sb3_ewma.envs.procgen_monitor.ProcgenMonitor` (SB3's ``VecMonitor``: raw episode returns, lengths and
    Procgen's statistics in ``info["episode"]``), optionally in a reward-normalizing ``VecNormalize``.

    With ``normalize_reward=True`` the rewards are normalized as in the paper (and in the Procgen baselines): each
    environment keeps a discounted return ``ret = gamma * ret + r`` (reset at episode ends), rewards are divided
    by the running standard deviation of these returns and clipped to ``[-clip_reward, clip_reward]``.
    SB3's ``VecNormalize(norm_obs=False, norm_reward=True, gamma=gamma, clip_reward=clip_reward)`` implements
    exactly this and is returned around the procgen env: save its statistics with the model, and set
    ``training=False, norm_reward=False`` on evaluation copies. The ``info["episode"]`` statistics keep the raw
    returns, as they are computed beneath it.

    :param env_name: the game, one of :data:`PROCGEN_GAMES`
    :param n_envs: number of parallel environments (the paper: 64 per worker)
    :param num_levels: number of distinct levels (0: unlimited, the paper's setting)
    :param start_level: seed of the first level
    :param distribution_mode: "easy", "hard" (the paper's) or a restricted mode (:data:`PROCGEN_MODE_GAMES`)
    :param seed: procgen's seed (random when None)
    :param normalize_reward: wrap the env in the reward-normalizing ``VecNormalize``
    :param gamma: discount of the return whose standard deviation scales the rewards (0.99 in the paper,
        independent of the algorithm's discount 0.999)
    :param clip_reward: bound of the normalized rewards (10 in the paper)
    :param render_mode: None or "rgb_array" (procgen renders 512 x 512 frames; use it for video recording)
    :param monitor_filename: a Monitor CSV file for the episode statistics (None: none)
    :param info_keywords: keys of the step's info to add to the episode statistics (``Monitor``'s argument)
    :param procgen_kwargs: options passed to procgen (:data:`PROCGEN_KWARGS`), e.g. ``num_threads``
    :return: the ``VecEnv``
    """
    check_procgen_args(env_name, n_envs, num_levels, start_level, distribution_mode, render_mode, procgen_kwargs)
    if normalize_reward:
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
        if not clip_reward > 0:
            raise ValueError(f"clip_reward must be > 0, got {clip_reward!r}")
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
