"""
rl-zoo3 integration: the algorithms of :data:`sb3_ewma.algorithms.ALGORITHMS`, the Procgen environment ids
``procgen-<game>-<easy|hard>``, this package's hyperparameter files and its hyperparameter samplers, for
``python -m sb3_ewma.train`` / ``python -m sb3_ewma.enjoy`` / ``python -m sb3_ewma.record_video``, which accept
every rl-zoo3 flag.

How it hooks into rl-zoo3 (2.9):

- :func:`register_zoo` adds the algorithms (:data:`sb3_ewma.algorithms.ALGORITHMS`) to ``rl_zoo3.ALGOS`` (the one
  dict that ``rl_zoo3.utils``, ``rl_zoo3.exp_manager``, ``train``, ``enjoy`` and ``record_video`` share; ``train()``
  builds its ``--algo`` choices from it when called), the samplers to ``rl_zoo3.hyperparams_opt.HYPERPARAMS_SAMPLER`` and
  ``HYPERPARAMS_CONVERTER``, and registers the Procgen ids in gymnasium.
- :class:`ExperimentManager` subclasses rl-zoo3's: it reads this package's ``hyperparams/<algo>.yml`` when no
  ``-conf`` is given, evaluates ``policy_kwargs`` strings with ``ImpalaCNN`` in scope, keeps an explicit ``gamma`` of
  the ``normalize`` settings (rl-zoo3 replaces it with the algorithm's discount; the paper normalizes rewards with
  0.99 while discounting with 0.999), optionally rescales the entry for another number of environments
  (``--scale-n-envs``), and for Procgen ids builds procgen's native vectorized environment and evaluates with
  stochastic actions. :func:`train` runs ``rl_zoo3.train.train()`` with it, and with :class:`TrainArgumentParser`
  (rl-zoo3's parser plus the ``--scale-*`` flags, so that ``-h`` prints one usage block).
- Where rl-zoo3 has no extension point, a name of its module is replaced for the duration of one call and restored:
  ``ExperimentManager`` and ``argparse`` in ``rl_zoo3.train`` (``train()`` looks both up when it runs),
  ``create_test_env`` in ``rl_zoo3.enjoy`` and ``rl_zoo3.utils``. rl-zoo3's ``record_video`` is a script (its code
  under ``if __name__ == "__main__"``), run with ``runpy`` as ``python -m`` would, without importing it first.
- For Procgen ids, :func:`make_procgen_vec_env` is given to rl-zoo3 as its ``VecEnv`` class (the ``vec_env_cls``
  argument of ``make_vec_env``): instead of stepping ``n_envs`` copies of the single-environment wrapper, it creates
  one :class:`~sb3_ewma.envs.ProcgenVecEnv` of ``n_envs`` environments, configured like the copies would have been
  (same ``--env-kwargs``). rl-zoo3's own wrappers (``VecNormalize``, ``vec_env_wrapper``, ``frame_stack``,
  ``VecTransposeImage``) are applied on top as usual. :func:`enjoy` and :func:`record_video` route
  ``create_test_env`` the same way.

rl-zoo3 is an optional dependency: importing this module without it raises an ``ImportError`` that says how to
install the ``zoo`` extra.
"""

import argparse
import contextlib
import importlib
import runpy
import sys
import tempfile
import types
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch as th
import yaml
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import VecEnv
from torch import nn

from sb3_ewma import hyperparams_opt
from sb3_ewma._quiet import import_without_pkg_resources_warning
from sb3_ewma.algorithms import ALGORITHMS, HYPERPARAMS_DIR, packaged_hyperparams_file
from sb3_ewma.common import distributed, threads
from sb3_ewma.common.allocator import keep_freed_memory
from sb3_ewma.common.install import install_hint
from sb3_ewma.common.torch_layers import ImpalaCNN
from sb3_ewma.envs.procgen import PROCGEN_KWARGS, make_procgen_env, register_procgen_envs
from sb3_ewma.envs.procgen_games import parse_procgen_env_id
from sb3_ewma.scale import LR_RULES, scale_hyperparams_with_report
from sb3_ewma.zoo_derivation import EntryChoice, missing_entry_hint, zoo_entry_for

ZOO_INSTALL_MESSAGE = (
    "The rl-zoo3 integration of sb3-ewma needs rl-zoo3 (and sb3-contrib, optuna): install the extra with "
    f"{install_hint('zoo')}"
)

try:
    import rl_zoo3
    import rl_zoo3.exp_manager
    import rl_zoo3.hyperparams_opt
    import rl_zoo3.train
    import rl_zoo3.utils
except ImportError as error:
    raise ImportError(f"{ZOO_INSTALL_MESSAGE} (missing module: {error.name})") from error


def zoo_hyperparams_per_rank(
    hyperparams: dict[str, Any], saved_hyperparams: dict[str, Any], world_size: int, scaled: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """
    rl-zoo3 under torchrun: the hyperparameters each rank trains with, and a note on what that means for c.

    :param scaled: whether the entry was rescaled (``--scale-n-envs N``) for ``N`` environments in total, which are
        then split over the ranks (:func:`sb3_ewma.common.distributed.per_rank_hyperparams`); otherwise the entry is
        per rank, as written
    """
    n_envs = int(hyperparams.get("n_envs", 1))
    if scaled:
        hyperparams = distributed.per_rank_hyperparams(hyperparams, world_size)
        per_rank_saved = distributed.per_rank_hyperparams(dict(saved_hyperparams), world_size)
        saved_hyperparams = type(saved_hyperparams)(per_rank_saved.items())
        print(
            f"Data-parallel training on {world_size} ranks: the entry rescaled for {n_envs} environments in total (c "
            f"above) runs as n_envs={hyperparams.get('n_envs')} and batch_size={hyperparams.get('batch_size')} per rank"
        )
    else:
        print(
            f"Data-parallel training on {world_size} ranks: n_envs={n_envs} per rank, {world_size * n_envs} environments in "
            f"total, with hyperparameters written for {n_envs}: c = {world_size} (batch size-invariance). To train as "
            f"the entry does with {n_envs} environments in total, add --scale-n-envs {n_envs}; to rescale it for all "
            f"{world_size * n_envs}, add --scale-n-envs {world_size * n_envs}"
        )
    return hyperparams, saved_hyperparams


def _import_zoo(name: str) -> types.ModuleType:
    """Import a module of rl-zoo3 (or one it needs), or raise an ``ImportError`` that says which extra to install."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ImportError(f"{ZOO_INSTALL_MESSAGE} (missing module: {error.name})") from error


ZOO_ALGORITHMS: Mapping[str, type[BaseAlgorithm]] = ALGORITHMS
"""This package's algorithms by rl-zoo3 name (``--algo``), added to ``rl_zoo3.ALGOS`` by :func:`register_zoo`: the
registry :data:`sb3_ewma.algorithms.ALGORITHMS`."""

ZOO_ALGOS: tuple[str, ...] = tuple(ZOO_ALGORITHMS)
"""The rl-zoo3 names of this package's algorithms."""


POLICY_KWARGS_NAMESPACE: dict[str, Any] = {"ImpalaCNN": ImpalaCNN, "nn": nn, "th": th}
"""Names available to ``policy_kwargs`` strings, besides those rl-zoo3 provides."""

# the original, before enjoy()/record_video() route it through the Procgen-aware version
_ZOO_CREATE_TEST_ENV = rl_zoo3.utils.create_test_env
# gymnasium's wrappers that gymnasium.make adds, which the native Procgen VecEnv does without
_MAKE_WRAPPERS = ("OrderEnforcing", "PassiveEnvChecker", "HumanRendering")


def zoo_algorithms() -> dict[str, type[BaseAlgorithm]]:
    """:return: a copy of :data:`ZOO_ALGORITHMS`"""
    return dict(ZOO_ALGORITHMS)


def register_zoo() -> None:
    """
    Make rl-zoo3 know this package: the algorithms (``rl_zoo3.ALGOS``), their hyperparameter samplers
    (``rl_zoo3.hyperparams_opt.HYPERPARAMS_SAMPLER`` and ``HYPERPARAMS_CONVERTER``) and the Procgen ids
    ``procgen-<game>-<easy|hard>`` (gymnasium registry). Safe to call several times.

    Enough to use rl-zoo3's own ``ExperimentManager`` with these algorithms; :func:`train` adds this package's
    defaults (hyperparameter files, Procgen's native ``VecEnv``, ``ImpalaCNN`` in ``policy_kwargs``).
    """
    register_procgen_envs()
    # rl_zoo3.ALGOS is rl_zoo3.utils.ALGOS, the dict every rl-zoo3 module imports
    rl_zoo3.utils.ALGOS.update(zoo_algorithms())
    rl_zoo3.hyperparams_opt.HYPERPARAMS_SAMPLER.update(hyperparams_opt.HYPERPARAMS_SAMPLER)
    rl_zoo3.hyperparams_opt.HYPERPARAMS_CONVERTER.update(hyperparams_opt.HYPERPARAMS_CONVERTER)


def default_conf_file(algo: str) -> str | None:
    """
    :param algo: an rl-zoo3 algorithm name
    :return: the path of this package's hyperparameter file for ``algo`` (one of :data:`ZOO_ALGOS`), else None
        (``ppo_mask_ewma`` has none: rl-zoo3 has no MaskablePPO entries, pass ``-conf``)
    """
    if algo not in ZOO_ALGOS or not packaged_hyperparams_file(algo).is_file():
        return None
    return str(packaged_hyperparams_file(algo))


def is_procgen_env_id(env_id: str) -> bool:
    """Whether ``env_id`` is one of the ids ``procgen-<game>-<easy|hard>`` registered by this package."""
    return parse_procgen_env_id(str(env_id)) is not None


# ----------------------------------------------------------------------------------------------------------------------
# Procgen's native VecEnv for rl-zoo3


def _procgen_settings(env: gym.Env) -> tuple[dict[str, Any], str | None, tuple[str, ...]]:
    """
    The constructor arguments of the single Procgen environment ``env`` built by an rl-zoo3 environment function,
    the file of its ``Monitor`` (if any) and the Monitor's ``info_keywords``.
    """
    from sb3_ewma.envs.procgen import ProcgenGymnasiumEnv

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
    A ``VecEnv`` "class" for rl-zoo3 and SB3's ``make_vec_env`` (their ``vec_env_cls``) that builds procgen's native
    vectorized environment instead of stepping one environment per function: a
    :class:`~sb3_ewma.envs.ProcgenVecEnv` of ``len(env_fns)`` environments, configured like the environment that
    ``env_fns[0]`` builds (the game, distribution mode and ``env_kwargs`` such as ``num_levels``, ``start_level`` or
    procgen's options). That environment is created only to read its configuration (cheap: the single-environment
    wrapper starts procgen lazily) and closed. Its episode statistics (SB3's ``VecMonitor``, in
    :class:`~sb3_ewma.envs.ProcgenMonitor`) go to the file of that environment's ``Monitor``, if it had one. Training
    and evaluation environments get the same wrappers (SB3's ``sync_envs_normalization`` needs that to copy the
    ``VecNormalize`` statistics).

    The seed is set afterwards by ``make_vec_env`` (``VecEnv.seed``); reward normalization is rl-zoo3's ``normalize``
    setting (``VecNormalize``), so the environment itself does not normalize.

    :param env_fns: rl-zoo3's environment functions (one per environment) for a Procgen id
    :param vec_env_kwargs: must be empty (procgen runs its environments in threads of its own; use the
        ``num_threads`` environment keyword argument to set their number)
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
    if vec_env_cls is None and is_procgen_env_id(env_id):
        vec_env_cls = make_procgen_vec_env  # type: ignore[assignment]
    return _ZOO_CREATE_TEST_ENV(
        env_id,
        n_envs=n_envs,
        stats_path=stats_path,
        seed=seed,
        log_dir=log_dir,
        should_render=should_render,
        hyperparams=hyperparams,
        env_kwargs=env_kwargs,
        vec_env_cls=vec_env_cls,
        vec_env_kwargs=vec_env_kwargs,
    )


# ----------------------------------------------------------------------------------------------------------------------
# experiment manager


@dataclass(frozen=True)
class ScaleOptions:
    """
    Rescale the hyperparameter entry for another number of environments (batch size-invariance), with
    :func:`sb3_ewma.scale_hyperparams`.

    :param n_envs: the target number of environments
    :param lr_rule: override the step size rule detected from the optimizer ("sqrt" or "linear")
    :param scale_adam_betas: also raise Adam's betas to the power ``1 / c``
    :param scale_aux_learning_rate: PPG: also rescale ``aux_learning_rate``
    """

    n_envs: int
    lr_rule: str | None = None
    scale_adam_betas: bool = False
    scale_aux_learning_rate: bool = False


def _normalize_settings(normalize: Any) -> dict[str, Any]:
    """The keyword arguments written in an rl-zoo3 ``normalize`` setting (a dict or a string to evaluate)."""
    if isinstance(normalize, str):
        value = eval(normalize, vars(rl_zoo3.exp_manager).copy())
        return dict(value) if isinstance(value, dict) else {}
    if isinstance(normalize, dict):
        return dict(normalize)
    return {}


class ExperimentManager(rl_zoo3.exp_manager.ExperimentManager):
    """
    rl-zoo3's experiment manager (same arguments), with this package's defaults:

    - without ``config`` (``-conf``), the algorithms of :data:`ZOO_ALGOS` read ``sb3_ewma/hyperparams/<algo>.yml``
      where it has an entry for the environment; otherwise their entry is derived from rl-zoo3's tuned entry of the
      parent algorithm (``ppo.yml``, ``ppo_lstm.yml``) by :mod:`sb3_ewma.zoo_derivation`, with one printed line
      naming the source entry and the changes (``config.yml`` records the derived entry); an environment that
      neither file has gets rl-zoo3's error plus a line on ``-conf`` / ``-params``;
    - ``policy_kwargs`` strings are evaluated with :data:`POLICY_KWARGS_NAMESPACE` (``ImpalaCNN``) in scope;
    - a ``gamma`` written in the ``normalize`` setting is kept (rl-zoo3 replaces it by the algorithm's ``gamma``);
    - with ``scale``, the hyperparameter entry (after the ``--hyperparams`` overrides) is rescaled from its ``n_envs``
      (1 when absent, as rl-zoo3 reads it) to ``scale.n_envs`` before anything else uses it, and the report printed;
    - for Procgen ids the environments are one native :class:`~sb3_ewma.envs.ProcgenVecEnv`
      (:func:`make_procgen_vec_env`, whatever ``--vec-env`` says) and evaluations use stochastic actions, as the
      agent acts during training (a deterministic Procgen policy easily gets stuck).

    :param scale: rescaling options, or None: those of the ``--scale-*`` flags in ``args`` (:class:`TrainArgumentParser`)
    """

    def __init__(
        self, args: Any, algo: str, env_id: str, *manager_args: Any, scale: ScaleOptions | None = None, **kwargs: Any
    ) -> None:
        # without -conf: this package's entry, or one derived from rl-zoo3's parent entry (sb3_ewma.zoo_derivation)
        self.entry_choice: EntryChoice | None = None
        if kwargs.get("config") is None and algo in ZOO_ALGOS:
            self.entry_choice = zoo_entry_for(algo, env_id, rl_zoo3.exp_manager.ExperimentManager.is_atari(env_id))
            if self.entry_choice.source == "package":
                kwargs["config"] = str(self.entry_choice.path)
            elif self.entry_choice.source == "missing" and default_conf_file(algo) is not None:
                kwargs["config"] = default_conf_file(algo)
            if kwargs.get("config") is not None and hasattr(args, "conf_file"):
                # recorded in args.yml
                args.conf_file = kwargs["config"]
        super().__init__(args, algo, env_id, *manager_args, **kwargs)
        # under torchrun: rank 0 chooses the run folder (the next free <env>_<n>) and the seed, once for all ranks
        self.rank, self.world_size = distributed.join_torchrun(self.device)
        if getattr(args, "keep_freed_memory", False):
            keep_freed_memory()
        self.seed, self.save_path = distributed.broadcast_from_rank0((self.seed, self.save_path))
        self.params_path = f"{self.save_path}/{self.env_name}"
        if scale is None:
            scale = scale_options_from_args(args)
        if scale is not None and algo not in ZOO_ALGOS:
            raise ValueError(f"--scale-n-envs rescales the hyperparameters of {ZOO_ALGOS}, not of {algo!r}")
        self.scale = scale
        self.is_procgen = is_procgen_env_id(env_id)
        if self.is_procgen:
            self.vec_env_class = make_procgen_vec_env  # type: ignore[assignment]
            self.vec_env_kwargs = {}
            self.deterministic_eval = False

    def setup_experiment(self) -> tuple[BaseAlgorithm, dict[str, Any]] | None:
        """rl-zoo3's, then torch's thread count for the model built (``--num-threads``, :mod:`sb3_ewma.common.threads`)."""
        result = super().setup_experiment()
        if result is not None:
            count = threads.apply_num_threads(getattr(self.args, "num_threads", threads.TORCH_DEFAULT), result[0])
            if count is not None and self.verbose > 0:
                print(f"Using {count} torch thread (--num-threads N to choose, -1 for torch's default)")
        return result

    def read_hyperparameters(self) -> tuple[dict[str, Any], dict[str, Any]]:
        hyperparams, saved_hyperparams = self._read_scaled_hyperparameters()
        if self.world_size > 1:
            hyperparams, saved_hyperparams = zoo_hyperparams_per_rank(
                hyperparams, saved_hyperparams, self.world_size, scaled=self.scale is not None
            )
        return hyperparams, saved_hyperparams

    def _read_entry(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """
        rl-zoo3's reading of the entry (``-params`` overrides, Optuna trial, ``--env-kwargs``), from the derived entry
        when :func:`~sb3_ewma.zoo_derivation.zoo_entry_for` derived one (after printing the line that says so); an
        environment without any entry gets rl-zoo3's error plus :func:`~sb3_ewma.zoo_derivation.missing_entry_hint`.
        """
        choice = self.entry_choice
        if choice is not None and choice.source == "derived":
            assert choice.derivation is not None
            print(choice.message(self.algo, self.env_name.gym_id))
            with tempfile.TemporaryDirectory(prefix="sb3_ewma_derived_") as folder:
                path = Path(folder) / f"{self.algo}.yml"
                path.write_text(yaml.safe_dump({self.env_name.gym_id: choice.derivation.entry}, sort_keys=True))
                with _patched(self, "config", str(path)):
                    return super().read_hyperparameters()
        if choice is not None and choice.source == "missing":
            if not Path(self.config).is_file():
                raise ValueError(
                    f"Hyperparameters not found for {self.algo}-{self.env_name.gym_id}\n{missing_entry_hint(self.algo)}"
                )
            try:
                return super().read_hyperparameters()
            except ValueError as error:
                raise ValueError(f"{error}\n{missing_entry_hint(self.algo)}") from error
        return super().read_hyperparameters()

    def _read_scaled_hyperparameters(self) -> tuple[dict[str, Any], dict[str, Any]]:
        hyperparams, saved_hyperparams = self._read_entry()
        if self.scale is None:
            return hyperparams, saved_hyperparams
        reference_n_envs = None if "n_envs" in hyperparams else 1
        with warnings.catch_warnings(record=True) as caveats:
            warnings.simplefilter("always")
            scaled, report = scale_hyperparams_with_report(
                hyperparams,
                self.scale.n_envs,
                reference_n_envs=reference_n_envs,
                algo=self.algo,
                lr_rule=self.scale.lr_rule,
                scale_adam_betas=self.scale.scale_adam_betas,
                scale_aux_learning_rate=self.scale.scale_aux_learning_rate,
            )
        print(f"Rescaling the hyperparameters for n_envs={self.scale.n_envs} (batch size-invariance, sb3_ewma.scale):")
        for line in report:
            print(f"  {line}")
        for caveat in caveats:
            print(f"  warning: {caveat.message}")
        saved_hyperparams = OrderedDict([(key, scaled[key]) for key in sorted(scaled.keys())])
        return scaled, saved_hyperparams

    # under torchrun, rank 0 alone writes the run folder (config, monitor files, checkpoints, evaluations, model)
    def create_log_folder(self) -> None:
        if self.rank == 0:
            super().create_log_folder()

    def create_callbacks(self) -> None:
        if self.rank == 0:
            # save_freq and eval_freq count global steps: each step of rank 0 is world_size * n_envs of them
            with _patched(self, "n_envs", self.n_envs * self.world_size):
                super().create_callbacks()

    def create_envs(self, n_envs: int, eval_env: bool = False, no_log: bool = False) -> VecEnv:
        return super().create_envs(n_envs, eval_env=eval_env, no_log=no_log or self.rank != 0)

    def _save_config(self, saved_hyperparams: dict[str, Any]) -> None:
        if self.rank == 0:
            super()._save_config(saved_hyperparams)

    def save_trained_model(self, model: BaseAlgorithm) -> None:
        if self.rank == 0:
            super().save_trained_model(model)

    def _preprocess_normalization(self, hyperparams: dict[str, Any]) -> dict[str, Any]:
        explicit = _normalize_settings(hyperparams.get("normalize"))
        hyperparams = super()._preprocess_normalization(hyperparams)
        if "gamma" in explicit:
            self.normalize_kwargs["gamma"] = explicit["gamma"]
        return hyperparams

    def _preprocess_hyperparams(
        self, hyperparams: dict[str, Any]
    ) -> tuple[dict[str, Any], Callable | None, list[Any], Callable | None]:
        if isinstance(hyperparams.get("policy_kwargs"), str):
            namespace = {**vars(rl_zoo3.exp_manager), **POLICY_KWARGS_NAMESPACE}
            hyperparams["policy_kwargs"] = eval(hyperparams["policy_kwargs"], namespace)
        return super()._preprocess_hyperparams(hyperparams)


# ----------------------------------------------------------------------------------------------------------------------
# command lines


def add_scale_arguments(parser: argparse.ArgumentParser) -> None:
    """
    Add the flags of ``python -m sb3_ewma.train`` that rl-zoo3 has not to ``parser``: ``--scale-n-envs`` and its
    options as one argument group, ``--keep-freed-memory`` (on by default) as another.
    """
    group = parser.add_argument_group(
        "sb3-ewma (batch size-invariance)",
        "Rescale the hyperparameter entry (after --hyperparams overrides) from its n_envs to another number of "
        "environments with sb3_ewma.scale_hyperparams before training; the report is printed and config.yml holds "
        "the rescaled values. For ppo_ewma, ppg_ewma and ppg.",
    )
    group.add_argument("--scale-n-envs", type=int, default=None, metavar="N", help="target number of environments")
    group.add_argument(
        "--scale-lr-rule", choices=LR_RULES, default=None, help="step size rule (default: detected from the optimizer)"
    )
    group.add_argument("--scale-adam-betas", action="store_true", help="also raise Adam's betas to the power 1/c")
    group.add_argument("--scale-aux-learning-rate", action="store_true", help="PPG: also rescale aux_learning_rate")
    memory = parser.add_argument_group("sb3-ewma (CPU memory)")
    memory.add_argument(
        "--keep-freed-memory",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="glibc: keep freed memory for the next minibatch instead of returning it to the system "
        "(sb3_ewma.keep_freed_memory; fewer page faults, faster CPU training, the peak memory stays held)",
    )


def scale_options_from_args(args: argparse.Namespace) -> ScaleOptions | None:
    """
    The rescaling options of parsed arguments (see :func:`add_scale_arguments`).

    :return: the options, or None without ``--scale-n-envs`` (or for arguments parsed without these flags)
    :raises ValueError: ``--scale-n-envs`` below 1, or a ``--scale-*`` option without ``--scale-n-envs``
    """
    n_envs = getattr(args, "scale_n_envs", None)
    lr_rule = getattr(args, "scale_lr_rule", None)
    scale_adam_betas = bool(getattr(args, "scale_adam_betas", False))
    scale_aux_learning_rate = bool(getattr(args, "scale_aux_learning_rate", False))
    if n_envs is None:
        if lr_rule is not None or scale_adam_betas or scale_aux_learning_rate:
            raise ValueError("--scale-lr-rule, --scale-adam-betas and --scale-aux-learning-rate need --scale-n-envs")
        return None
    if n_envs < 1:
        raise ValueError(f"--scale-n-envs must be >= 1, got {n_envs}")
    return ScaleOptions(n_envs, lr_rule, scale_adam_betas, scale_aux_learning_rate)


class TrainArgumentParser(argparse.ArgumentParser):
    """
    The parser of ``rl_zoo3.train`` with :func:`add_scale_arguments`'s flags: ``-h`` prints one usage block with
    rl-zoo3's options and this package's, and parsing checks the ``--scale-*`` flags (an argparse error, before any
    environment is made).
    """

    _scale_arguments_added = False

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        # added last, so that -h lists them after rl-zoo3's options
        if not self._scale_arguments_added:
            add_scale_arguments(self)
            self._scale_arguments_added = True
            _set_num_threads_default(self)
        parsed = super().parse_args(args, namespace)
        try:
            scale_options_from_args(parsed)
        except ValueError as error:
            self.error(str(error))
        return parsed


NUM_THREADS_HELP = (
    "Number of threads for PyTorch: 0 (default) one thread, unless the model reads images on the CPU or "
    "OMP_NUM_THREADS is set; -1 torch's default (one per core); N > 0 that many"
)


def _set_num_threads_default(parser: argparse.ArgumentParser) -> None:
    """rl-zoo3's ``--num-threads`` with this package's default (:data:`sb3_ewma.common.threads.AUTO`)."""
    for action in parser._actions:
        if "--num-threads" in action.option_strings:
            action.default, action.help = threads.AUTO, NUM_THREADS_HELP


def _chooses_num_threads(argv: Sequence[str]) -> bool:
    """Whether the command line sets ``--num-threads`` (or the environment sets torch's threads)."""
    return threads.threads_set_by_environment() or any(arg.startswith("--num-threads") for arg in argv)


# rl_zoo3.train.train() builds its parser with `argparse.ArgumentParser()`: this module namespace gives it ours
_ARGPARSE_FOR_TRAIN = types.SimpleNamespace(**{**vars(argparse), "ArgumentParser": TrainArgumentParser})


@contextlib.contextmanager
def _patched(target: Any, name: str, value: Any) -> Iterator[None]:
    """Set ``target.name = value`` for the duration of the block."""
    original = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, original)


@contextlib.contextmanager
def _argv(prog: str, argv: Sequence[str]) -> Iterator[None]:
    original = sys.argv
    sys.argv = [prog, *argv]
    try:
        yield
    finally:
        sys.argv = original


def train(argv: Sequence[str], prog: str = "python -m sb3_ewma.train") -> None:
    """
    Run ``rl_zoo3.train.train()`` with :func:`register_zoo` done, this package's :class:`ExperimentManager` and its
    flags (:class:`TrainArgumentParser`).

    rl-zoo3 has no hook for either: ``train()`` looks both up in its module when it runs (``ExperimentManager`` and
    ``argparse.ArgumentParser``), so they are replaced there for the duration of the call, and restored.

    :param argv: the command line arguments (without the program name): rl-zoo3's and ``--scale-*``
    :param prog: the program name shown in messages
    """
    register_zoo()
    # under torchrun, ranks other than 0 print nothing (errors still reach stderr)
    with (
        _patched(rl_zoo3.train, "ExperimentManager", ExperimentManager),
        _patched(rl_zoo3.train, "argparse", _ARGPARSE_FOR_TRAIN),
        _argv(prog, argv),
        distributed.quiet_unless_rank0(),
        threads.restored_num_threads(),
    ):
        rl_zoo3.train.train()


def enjoy(argv: Sequence[str], prog: str = "python -m sb3_ewma.enjoy") -> None:
    """
    Run ``rl_zoo3.enjoy.enjoy()`` with :func:`register_zoo` done and Procgen ids built natively.

    :param argv: rl-zoo3's command line arguments (without the program name)
    :param prog: the program name shown in messages
    """
    register_zoo()
    # imported here: rl-zoo3's enjoy needs `requests`, which its training does not
    zoo_enjoy = _import_zoo("rl_zoo3.enjoy")
    with _patched(zoo_enjoy, "create_test_env", create_test_env), _argv(prog, argv), threads.restored_num_threads():
        if not _chooses_num_threads(argv):
            th.set_num_threads(1)  # one observation at a time: one thread (see sb3_ewma.common.threads)
        zoo_enjoy.enjoy()


def record_video(argv: Sequence[str], prog: str = "python -m sb3_ewma.record_video") -> None:
    """
    Run rl-zoo3's ``record_video`` script with :func:`register_zoo` done and Procgen ids built natively.

    rl-zoo3's ``record_video`` is a script (all of it under ``if __name__ == "__main__"``), so it runs with ``runpy``,
    as ``python -m rl_zoo3.record_video`` would; it is not imported before (that makes runpy warn). It reads
    ``create_test_env`` from ``rl_zoo3.utils`` when it runs, which is replaced there for the duration of the call.
    The video writer's ``imageio_ffmpeg`` is imported first without its ``pkg_resources`` deprecation warning.

    :param argv: rl-zoo3's command line arguments (without the program name)
    :param prog: the program name shown in messages
    """
    register_zoo()
    import_without_pkg_resources_warning("imageio_ffmpeg")
    with _patched(rl_zoo3.utils, "create_test_env", create_test_env), _argv(prog, argv), threads.restored_num_threads():
        if not _chooses_num_threads(argv):
            th.set_num_threads(1)  # one observation at a time: one thread (see sb3_ewma.common.threads)
        try:
            runpy.run_module("rl_zoo3.record_video", run_name="__main__", alter_sys=False)
        except ModuleNotFoundError as error:
            raise ImportError(f"{ZOO_INSTALL_MESSAGE} (missing module: {error.name})") from error


__all__ = [
    "HYPERPARAMS_DIR",
    "POLICY_KWARGS_NAMESPACE",
    "ZOO_ALGORITHMS",
    "ZOO_ALGOS",
    "ZOO_INSTALL_MESSAGE",
    "ExperimentManager",
    "ScaleOptions",
    "TrainArgumentParser",
    "add_scale_arguments",
    "create_test_env",
    "default_conf_file",
    "enjoy",
    "is_procgen_env_id",
    "make_procgen_vec_env",
    "record_video",
    "register_zoo",
    "scale_options_from_args",
    "train",
]
