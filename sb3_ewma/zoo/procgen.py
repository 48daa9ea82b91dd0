"""Procgen ids (``procgen-<game>-<easy|hard>``) in rl-zoo3, built as procgen's native vectorized environment."""

from collections.abc import Callable
from typing import Any, Protocol, cast

import gymnasium as gym
import rl_zoo3.utils
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import VecEnv

from sb3_ewma.envs.procgen import PROCGEN_KWARGS, make_procgen_env
from sb3_ewma.envs.procgen_games import parse_procgen_env_id


class _ZooCreateTestEnv(Protocol):
    """
    rl-zoo3's ``create_test_env`` as it is called here: ``vec_env_cls`` is annotated ``type[VecEnv]`` but only called as
    SB3's ``make_vec_env`` calls it, so :func:`make_procgen_vec_env` will do.
    """

    def __call__(
        self,
        env_id: str,
        *,
        n_envs: int,
        stats_path: str | None,
        seed: int,
        log_dir: str | None,
        should_render: bool,
        hyperparams: dict[str, Any] | None,
        env_kwargs: dict[str, Any] | None,
        vec_env_cls: Callable[..., VecEnv] | None,
        vec_env_kwargs: dict[str, Any] | None,
    ) -> VecEnv: ...


# the original, before enjoy()/record_video() route it through the Procgen-aware version
_ZOO_CREATE_TEST_ENV = cast(_ZooCreateTestEnv, rl_zoo3.utils.create_test_env)
# gymnasium's wrappers that gymnasium.make adds, which the native Procgen VecEnv does without
_MAKE_WRAPPERS = ("OrderEnforcing", "PassiveEnvChecker", "HumanRendering")


def is_procgen_env_id(env_id: str) -> bool:
    """Whether ``env_id`` is one of the ids ``procgen-<game>-<easy|hard>`` registered by this package."""
    return parse_procgen_env_id(str(env_id)) is not None


# Procgen's native VecEnv for rl-zoo3


def _procgen_settings(env: gym.Env) -> tuple[dict[str, Any], str | None, tuple[str, ...]]:
    """
    The constructor arguments of the single Procgen environment ``env``, the file of its ``Monitor`` (if any) and the
    Monitor's ``info_keywords``.
    """
    from sb3_ewma.envs.procgen_gymnasium import ProcgenGymnasiumEnv

    monitor_file: str | None = None
    info_keywords: tuple[str, ...] = ()
    layer: gym.Env = env
    while isinstance(layer, gym.Wrapper):
        if isinstance(layer, Monitor):
            if layer.results_writer is not None:
                monitor_file = layer.results_writer.file_handler.name
            info_keywords = tuple(layer.info_keywords)
        elif type(layer).__name__ not in _MAKE_WRAPPERS:
            raise ValueError(
                f"The native Procgen VecEnv cannot apply the environment wrapper {type(layer).__name__} "
                "(rl-zoo3's `env_wrapper` wraps single environments): use a `vec_env_wrapper` instead"
            )
        layer = layer.env
    if not isinstance(layer, ProcgenGymnasiumEnv):
        raise ValueError(f"make_procgen_vec_env needs Procgen environments (procgen-<game>-<mode>), got {layer}")
    assert layer.spec is not None, "an environment made from a gymnasium id has a spec"
    kwargs = dict(layer.spec.kwargs)
    if kwargs.get("render_mode") == "human":
        # procgen renders rgb arrays; SB3's VecEnv.render("human") shows them in a window
        kwargs["render_mode"] = "rgb_array"
    return kwargs, monitor_file, info_keywords


def make_procgen_vec_env(env_fns: list[Callable[[], gym.Env]], **vec_env_kwargs: Any) -> VecEnv:
    """
    A ``VecEnv`` "class" for rl-zoo3 and SB3's ``make_vec_env`` (their ``vec_env_cls``): one
    :class:`~sb3_ewma.envs.ProcgenVecEnv` of ``len(env_fns)`` environments, configured like the environment that
    ``env_fns[0]`` builds (made only to read its configuration), with its episode statistics in the file of that
    environment's ``Monitor``. The environment does not normalize rewards (rl-zoo3's ``normalize`` does).

    :param env_fns: rl-zoo3's environment functions (one per environment) for a Procgen id
    :param vec_env_kwargs: must be empty (the ``num_threads`` environment keyword sets procgen's threads)
    :return: the vectorized environment
    """
    if vec_env_kwargs:
        raise ValueError(f"make_procgen_vec_env takes no VecEnv keyword arguments, got {vec_env_kwargs}")
    if len(env_fns) == 0:
        raise ValueError("make_procgen_vec_env needs at least one environment function")
    env = env_fns[0]()
    try:
        kwargs, monitor_file, info_keywords = _procgen_settings(env)
    finally:
        env.close()
    procgen_kwargs = {key: kwargs.pop(key) for key in PROCGEN_KWARGS if key in kwargs}
    return make_procgen_env(
        n_envs=len(env_fns),
        normalize_reward=False,
        monitor_filename=monitor_file,
        info_keywords=info_keywords,
        **kwargs,
        **procgen_kwargs,
    )


def create_test_env(
    env_id: str,
    n_envs: int = 1,
    stats_path: str | None = None,
    seed: int = 0,
    log_dir: str | None = None,
    should_render: bool = True,
    hyperparams: dict[str, Any] | None = None,
    env_kwargs: dict[str, Any] | None = None,
    vec_env_cls: type[VecEnv] | None = None,
    vec_env_kwargs: dict[str, Any] | None = None,
) -> VecEnv:
    """
    rl-zoo3's ``create_test_env`` (same arguments), building Procgen ids with :func:`make_procgen_vec_env` when no
    ``vec_env_cls`` is given.
    """
    vec_env_constructor: Callable[..., VecEnv] | None = vec_env_cls
    if vec_env_constructor is None and is_procgen_env_id(env_id):
        vec_env_constructor = make_procgen_vec_env
    return _ZOO_CREATE_TEST_ENV(
        env_id,
        n_envs=n_envs,
        stats_path=stats_path,
        seed=seed,
        log_dir=log_dir,
        should_render=should_render,
        hyperparams=hyperparams,
        env_kwargs=env_kwargs,
        vec_env_cls=vec_env_constructor,
        vec_env_kwargs=vec_env_kwargs,
    )
