"""This package's rl-zoo3 ``ExperimentManager``."""

import os
import tempfile
import warnings
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, cast

import rl_zoo3.exp_manager
import torch as th
import yaml
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.vec_env import VecEnv
from torch import nn

from sb3_ewma.allocator import keep_freed_memory
from sb3_ewma.common import distributed
from sb3_ewma.common.torch_layers import ImpalaCNN
from sb3_ewma.scale import scale_hyperparams_with_report
from sb3_ewma.scale.zoo_entry import read_hyperparameter_file
from sb3_ewma.zoo import threads
from sb3_ewma.zoo.arguments import ScaleOptions, compile_step_from_args, scale_options_from_args
from sb3_ewma.zoo.checks import (
    check_async_rollouts_env,
    check_entry_counts,
    check_entry_keys,
    check_entry_schedules,
    check_entry_values,
    check_env_spaces,
    check_hyperparameter_file,
    evaluate_policy_kwargs,
    is_non_finite_error,
    missing_folders,
    named_entry_imports,
    non_finite_message,
    remove_run_folder_without_model,
    remove_unused_run_folder,
    yaml_error_message,
)
from sb3_ewma.zoo.derivation import (
    PARENT_ALGOS,
    EntryChoice,
    missing_entry_hint,
    normalize_settings,
    ppg_sizes_with_overrides,
    zoo_entries,
    zoo_entry_for,
)
from sb3_ewma.zoo.patching import patched
from sb3_ewma.zoo.procgen import is_procgen_env_id, make_procgen_vec_env
from sb3_ewma.zoo.registry import ZOO_ALGORITHMS, ZOO_ALGOS, default_conf_file

CONFIG_FILES = ("config.yml", "args.yml", "command.txt")
"""What rl-zoo3 writes in ``<run>/<env>/`` once the model is built (``_save_config``), before training."""

POLICY_KWARGS_NAMESPACE: dict[str, Any] = {"ImpalaCNN": ImpalaCNN, "nn": nn, "th": th}
"""Names available to ``policy_kwargs`` strings, besides those rl-zoo3 provides."""


def zoo_hyperparams_per_rank(
    hyperparams: dict[str, Any], saved_hyperparams: dict[str, Any], world_size: int, scaled: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """
    rl-zoo3 under torchrun: the hyperparameters each rank trains with, printing what that means for ``c``.

    :param scaled: whether the entry was rescaled (``--scale-n-envs N``) for ``N`` environments in total, then split
        over the ranks (:func:`sb3_ewma.common.distributed.per_rank_hyperparams`); otherwise the entry is per rank
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
            f"total, with hyperparameters written for {n_envs}: c = reference / target = {n_envs} / {world_size * n_envs} = "
            f"{1 / world_size:g} (batch size-invariance, as the rescaling report defines c). To train as "
            f"the entry does with {n_envs} environments in total, add --scale-n-envs {n_envs}; to rescale it for all "
            f"{world_size * n_envs}, add --scale-n-envs {world_size * n_envs}"
        )
    return hyperparams, saved_hyperparams


class _ZooVecEnvClass(Protocol):
    """
    rl-zoo3's experiment manager as far as ``vec_env_class`` goes: typed as a ``VecEnv`` class, only called as SB3's
    ``make_vec_env`` calls ``vec_env_cls``, so any callable returning a ``VecEnv`` will do.
    """

    vec_env_class: Callable[..., VecEnv]


class ExperimentManager(rl_zoo3.exp_manager.ExperimentManager):
    """
    rl-zoo3's experiment manager (same arguments), with this package's defaults (see :ref:`rl_zoo`):

    - without ``config`` (``-conf``), the algorithms of :data:`ZOO_ALGOS` read ``sb3_ewma/hyperparams/<algo>.yml``, or
      an entry derived from rl-zoo3's (:mod:`sb3_ewma.zoo.derivation`);
    - ``policy_kwargs`` strings are evaluated with :data:`POLICY_KWARGS_NAMESPACE` in scope;
    - a ``gamma`` written in the ``normalize`` setting is kept (rl-zoo3 replaces it by the algorithm's);
    - with ``scale``, the entry (after ``-params``) is rescaled to ``scale.n_envs`` environments;
    - the entry is checked before the run folder is created (:mod:`sb3_ewma.zoo.checks`), and a start that fails removes
      the run folder it left unused;
    - for Procgen ids the environments are one native :class:`~sb3_ewma.envs.ProcgenVecEnv` and evaluations use
      stochastic actions.

    :param scale: rescaling options, or None: those of the ``--scale-*`` flags in ``args``
    """

    def __init__(
        self, args: Any, algo: str, env_id: str, *manager_args: Any, scale: ScaleOptions | None = None, **kwargs: Any
    ) -> None:
        # without -conf: this package's entry, or one derived from rl-zoo3's parent entry (sb3_ewma.zoo.derivation)
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
        self.compile_step = compile_step_from_args(args)
        if self.compile_step is not None and algo not in ZOO_ALGOS:
            raise ValueError(f"--compile-step sets the compile_step of {ZOO_ALGOS}, not of {algo!r}")
        self.is_procgen = is_procgen_env_id(env_id)
        if self.is_procgen:
            named = sorted(set(self.env_kwargs) & {"env_name", "distribution_mode"})
            if named:
                # the run's name and hyperparameter entry are the id's: another game or mode would train under them
                raise ValueError(
                    f"--env-kwargs {named[0]}={self.env_kwargs[named[0]]!r}: a Procgen run's game and mode are those of "
                    f"--env {env_id} (procgen-<game>-<easy|hard>, whose entry this run takes): pass that id instead"
                )
            cast(_ZooVecEnvClass, self).vec_env_class = make_procgen_vec_env
            self.vec_env_kwargs = {}
            self.deterministic_eval = False

    def setup_experiment(self) -> tuple[BaseAlgorithm, dict[str, Any]] | None:
        """
        rl-zoo3's, then torch's thread count for the model (:mod:`sb3_ewma.zoo.threads`); a failed start removes the
        unused run folder.
        """
        # the run folder and the folders above it that rl-zoo3 will create
        self._created_folders = missing_folders(self.save_path)
        try:
            result = super().setup_experiment()
        except BaseException:
            self._remove_unused_run_folder()
            raise
        if result is not None:
            count = threads.apply_num_threads(getattr(self.args, "num_threads", threads.TORCH_DEFAULT), result[0])
            if count is not None and self.verbose > 0:
                print(f"Using {count} torch thread (--num-threads N to choose, -1 for torch's default)")
        return result

    def hyperparameters_optimization(self) -> None:
        """rl-zoo3's; a failed start removes the unused run folder."""
        try:
            super().hyperparameters_optimization()
        except BaseException:
            self._remove_unused_run_folder()
            raise

    def learn(self, model: BaseAlgorithm) -> None:
        """
        rl-zoo3's; a failure before the first step removes the unused run folder, and NaN or infinity in training
        becomes a one-line ``ValueError`` (:meth:`_non_finite_report`).
        """
        try:
            super().learn(model)
        except BaseException as error:
            if is_non_finite_error(error):
                raise ValueError(self._non_finite_report(error, model.num_timesteps)) from error
            if model.num_timesteps == 0:
                written = tuple(os.path.join(self.params_path, name) for name in CONFIG_FILES)
                self._remove_unused_run_folder(written_files=written)
            raise

    def _non_finite_report(self, error: BaseException, num_timesteps: int) -> str:
        """Remove the run folder this start created unless it holds a model (rank 0), and say so in one line."""
        report = non_finite_message(error, num_timesteps)
        created: tuple[str, ...] = getattr(self, "_created_folders", ())
        if self.rank != 0 or not created:
            return report
        if remove_run_folder_without_model(created[0], str(self.env_name), created_parents=created[1:]):
            return f"{report}. The run folder {created[0]} was removed (no model had been saved in it)."
        return f"{report}. The run folder {created[0]} keeps the models saved before."

    def _remove_unused_run_folder(self, written_files: tuple[str, ...] = ()) -> None:
        created: tuple[str, ...] = getattr(self, "_created_folders", ())
        if self.rank == 0 and created:
            remove_unused_run_folder(created[0], created_parents=created[1:], written_files=written_files)

    def read_hyperparameters(self) -> tuple[dict[str, Any], dict[str, Any]]:
        hyperparams, saved_hyperparams = self._read_scaled_hyperparameters()
        if self.world_size > 1:
            hyperparams, saved_hyperparams = zoo_hyperparams_per_rank(
                hyperparams, saved_hyperparams, self.world_size, scaled=self.scale is not None
            )
        if "n_timesteps" not in hyperparams:
            # an entry without it, -n given (check_entry_counts): rl-zoo3 takes the key out of every entry (KeyError)
            hyperparams["n_timesteps"] = self.n_timesteps
        return hyperparams, saved_hyperparams

    def _read_entry(self) -> tuple[dict[str, Any], dict[str, Any]]:
        if self.config is not None and (self.entry_choice is None or self.entry_choice.source != "derived"):
            check_hyperparameter_file(str(self.config))
        try:
            return self._read_entry_unchecked()
        except yaml.YAMLError as error:
            raise ValueError(yaml_error_message(str(self.config), error)) from error

    def _read_entry_unchecked(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """
        rl-zoo3's reading of the entry, from the derived entry or a JSON file where there is one; a missing entry gets
        rl-zoo3's error plus :func:`~sb3_ewma.zoo.derivation.missing_entry_hint`.
        """
        choice = self.entry_choice
        if choice is not None and choice.source == "derived":
            assert choice.derivation is not None
            print(choice.message(self.algo, self.env_name.gym_id))
            entry = choice.derivation.entry
            if self.algo in ("ppg", "ppg_ewma") and self.custom_hyperparams:
                # the phase sizes follow -params' n_envs, n_steps, batch_size, n_timesteps, as the derivation does
                assert choice.key is not None
                parent = PARENT_ALGOS[self.algo]
                sizes = ppg_sizes_with_overrides(zoo_entries(parent)[choice.key], self.custom_hyperparams, parent)
                changed = [
                    f"{key}: {entry.get(key)!r} -> {value!r}" for key, value in sizes.items() if entry.get(key) != value
                ]
                if changed:
                    print(f"sb3-ewma: the phase sizes follow -params: {', '.join(changed)}")
                entry = {**entry, **sizes}
            return self._read_entry_from({self.env_name.gym_id: entry}, "sb3_ewma_derived_")
        if self.config is not None and str(self.config).endswith(".json") and Path(self.config).is_file():
            # rl-zoo3 reads YAML files, Python files and modules: a JSON file is read here, as sb3_ewma.scale reads it
            print(f"Reading {self.config} as JSON (rl-zoo3 reads it from a YAML copy)")
            content = read_hyperparameter_file(str(self.config))
            try:
                return self._read_entry_from(content, "sb3_ewma_json_")
            except ValueError as error:
                if not str(error).startswith("Hyperparameters not found"):
                    raise
                # rl-zoo3's message names the copy
                raise ValueError(
                    f"Hyperparameters not found for {self.algo}-{self.env_name.gym_id} in {self.config}"
                ) from None
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

    def _read_entry_from(self, content: dict[str, Any], prefix: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """rl-zoo3's reading of the entry from ``content`` (a hyperparameter file's mapping), through a YAML copy."""
        with tempfile.TemporaryDirectory(prefix=prefix) as folder:
            path = Path(folder) / f"{self.algo}.yml"
            path.write_text(yaml.safe_dump(content, sort_keys=True))
            # rl-zoo3's read_hyperparameters() takes no file: it reads self.config
            with patched(self, "config", str(path)):
                return super().read_hyperparameters()

    def _read_scaled_hyperparameters(self) -> tuple[dict[str, Any], dict[str, Any]]:
        hyperparams, saved_hyperparams = self._read_entry()
        # any algorithm's: before --scale-n-envs divides by n_envs
        check_entry_counts(self.algo, hyperparams, n_timesteps_flag=self.n_timesteps)
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
        if self.rank == 0 and self.eval_freq <= 0 and self.eval_freq != -1 and not self.optimize_hyperparameters:
            # rl-zoo3 evaluates only for eval_freq > 0, without a word for the others: -1 is its documented "off"
            print(f"No evaluation: --eval-freq {self.eval_freq} turns it off (as any value <= 0 does; -1 by convention)")
        if self.rank == 0 and self.save_freq <= 0 and self.save_freq != -1:
            # the same for checkpoints (rl-zoo3: save_freq > 0)
            print(f"No checkpoints: --save-freq {self.save_freq} turns them off (as any value <= 0 does; -1 by convention)")
        if self.rank == 0:
            # save_freq and eval_freq count global steps: each step of rank 0 is world_size * n_envs of them;
            # rl-zoo3's create_callbacks() takes no count: it divides them by self.n_envs
            with patched(self, "n_envs", self.n_envs * self.world_size):
                super().create_callbacks()

    def create_envs(self, n_envs: int, eval_env: bool = False, no_log: bool = False) -> VecEnv:
        try:
            return super().create_envs(n_envs, eval_env=eval_env, no_log=no_log or self.rank != 0)
        except TypeError as error:
            kwargs = self.eval_env_kwargs if eval_env else self.env_kwargs
            if not kwargs or "unexpected keyword argument" not in str(error):
                raise
            # the environment's constructor refused one of them: say where they come from
            flag = eval_env and self._eval_env_kwargs_args is not None
            source = "--eval-env-kwargs" if flag else "--env-kwargs (or the entry's env_kwargs)"
            raise ValueError(f"{source} {kwargs}: {error}") from error

    def _save_config(self, saved_hyperparams: dict[str, Any]) -> None:
        if self.rank == 0:
            super()._save_config(saved_hyperparams)

    def save_trained_model(self, model: BaseAlgorithm) -> None:
        if self.rank == 0:
            super().save_trained_model(model)

    def _preprocess_normalization(self, hyperparams: dict[str, Any]) -> dict[str, Any]:
        explicit = normalize_settings(hyperparams.get("normalize")) or {}
        hyperparams = super()._preprocess_normalization(hyperparams)
        if "gamma" in explicit:
            self.normalize_kwargs["gamma"] = explicit["gamma"]
        return hyperparams

    def _preprocess_hyperparams(
        self, hyperparams: dict[str, Any]
    ) -> tuple[dict[str, Any], Callable | None, list[Any], Callable | None]:
        if self.compile_step is not None:
            hyperparams["compile_step"] = self.compile_step  # --compile-step: over the entry's
        if isinstance(hyperparams.get("policy_kwargs"), str):
            hyperparams["policy_kwargs"] = evaluate_policy_kwargs(
                self.algo, hyperparams["policy_kwargs"], {**vars(rl_zoo3.exp_manager), **POLICY_KWARGS_NAMESPACE}
            )
        # the values rl-zoo3 is about to turn into schedules, checked as numbers (check_entry_values)
        raw_schedules = check_entry_schedules(self.algo, hyperparams)
        with named_entry_imports(self.algo, hyperparams):
            result = super()._preprocess_hyperparams(hyperparams)
        if self.algo in ZOO_ALGOS:
            # before rl-zoo3 creates the run folder (sb3_ewma.zoo.checks)
            algorithm = ZOO_ALGORITHMS[self.algo]
            constructor_kwargs, env_wrapper = result[0], result[1]
            scale_n_envs = self.scale.n_envs if self.scale is not None else None
            check_entry_keys(self.algo, algorithm, constructor_kwargs)
            check_async_rollouts_env(
                self.algo, self.env_name.gym_id, self.is_procgen, constructor_kwargs, getattr(self, "env_kwargs", None)
            )
            if not self.is_procgen:  # Procgen: 15 discrete actions, image observations
                env_id = self.env_name.gym_id
                policy = constructor_kwargs.get("policy")
                check_env_spaces(self.algo, algorithm, env_id, self.env_kwargs, env_wrapper, policy)
            # last: an algorithm that cannot act in the environment is the first thing to say
            check_entry_values(self.algo, algorithm, constructor_kwargs, raw_schedules, scale_n_envs)
        return result
