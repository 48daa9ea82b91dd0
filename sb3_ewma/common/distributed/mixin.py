"""The algorithm side of data-parallel training: :class:`DataParallelMixin` and the per-iteration diagnostics."""

import warnings
from typing import Any, Protocol, cast

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.save_util import recursive_getattr
from stable_baselines3.common.vec_env import VecEnv, unwrap_vec_normalize

from sb3_ewma.common.checks import caller_stacklevel
from sb3_ewma.common.distributed.collectives import DataParallelContext, RunningStatisticsPool
from sb3_ewma.common.distributed.process_group import RANK_LOCAL_SETTINGS, wants_data_parallel
from sb3_ewma.common.host import HostAlgorithm


class _GradientStep(Protocol):
    """What this mixin's ``super()`` provides inside ``train()``: the training core's clipped optimizer step."""

    def _apply_gradients(self, optimizer: th.optim.Optimizer) -> None: ...


class _NoCallback(BaseCallback):
    """What runs in place of the user's callbacks on ranks other than 0."""

    def _on_step(self) -> bool:
        return True


class DataParallelMixin(HostAlgorithm):
    """
    Mixed into every algorithm of this package (first in the bases): data-parallel training when ``self.distributed``
    asks for it (see :func:`wants_data_parallel`). Without it, every method does what the algorithm alone does.

    Hooks for the algorithms' ``train()``: :meth:`_global_kl` (the ``target_kl`` decision uses the KL averaged over
    the ranks); ``_apply_gradients`` (gradients averaged before the clip). Once per iteration, after the rollout
    and before ``train()``: :meth:`_synchronize_iteration` (the continue decision, episode statistics, VecNormalize).
    """

    distributed: bool | None
    n_envs: int
    advantage_normalizer: Any
    ep_info_buffer: Any
    ep_success_buffer: Any
    logger: Logger

    @property
    def _data_parallel_context(self) -> DataParallelContext | None:
        # joined in `set_random_seed` (at the start of `_setup_model`, before the policy is built)
        return self.__dict__.get("_data_parallel")

    @property
    def world_size(self) -> int:
        """Number of processes training this model (1 when not data-parallel)."""
        context = self._data_parallel_context
        return 1 if context is None else context.world_size

    @property
    def rank(self) -> int:
        """This process's rank (0 when not data-parallel); rank 0 logs and saves."""
        context = self._data_parallel_context
        return 0 if context is None else context.rank

    @property
    def _timesteps_per_env_step(self) -> int:
        # num_timesteps counts the environment steps of all ranks
        return self.n_envs * self.world_size

    def _excluded_save_params(self) -> list[str]:
        excluded = ["_data_parallel", "_pending_episodes", "_vec_normalize_pool", "_world_size_change", "distributed"]
        return [*super()._excluded_save_params(), *excluded]

    # ------------------------------------------------------------------------------------------------------------------
    # setup: process group, seeds, consistency check, rank 0's state

    def _join_data_parallel(self) -> DataParallelContext | None:
        """Join the process group when ``self.distributed`` asks for it (once); the context, or None."""
        if "_data_parallel" not in self.__dict__:
            self._pending_episodes: list[tuple[list[Any], list[Any]]] = []
            self._vec_normalize_pool = RunningStatisticsPool()
            wanted = wants_data_parallel(getattr(self, "distributed", None))
            self.__dict__["_data_parallel"] = DataParallelContext(self.device) if wanted else None
        return self._data_parallel_context

    def _setup_data_parallel(self) -> None:
        """
        At the end of ``_setup_model`` (also when loading): check that every rank has the same settings, give every
        rank rank 0's parameters, optimizer states and proximal EWMA, pool the advantage moments, and warn when a
        loaded model continues at another world size.
        """
        context = self._join_data_parallel()
        previous_world_size = self.__dict__.get("trained_world_size")  # set by `load`
        if previous_world_size is not None and previous_world_size != self.world_size:
            # warned about when training continues (`learn`), not on a load for prediction
            self._world_size_change = (previous_world_size, self.world_size)
        self.trained_world_size = self.world_size
        if context is None:
            return
        context.check_same_settings(self._data_parallel_settings())
        self._broadcast_state()
        self.advantage_normalizer.reducer = context.all_reduce_sum

    def set_random_seed(self, seed: int | None = None) -> None:
        """Seed as SB3 does, with ``seed + rank * n_envs`` on each rank: distinct, reproducible environments."""
        self._join_data_parallel()
        if seed is not None:
            seed = seed + self.rank * self.n_envs
        super().set_random_seed(seed)

    def _data_parallel_settings(self) -> dict[str, Any]:
        """The settings every rank must share: the plain-valued hyperparameters, spaces and parameter shapes."""
        settings: dict[str, Any] = {
            "algorithm": type(self).__name__,
            "observation_space": repr(self.observation_space),
            "action_space": repr(self.action_space),
            "policy parameters": [(name, tuple(p.shape)) for name, p in self.policy.named_parameters()],
        }
        for key, value in vars(self).items():
            plain = value is None or isinstance(value, (bool, int, float, str))
            if not key.startswith("_") and key not in RANK_LOCAL_SETTINGS and plain:
                settings[key] = value
        return settings

    def _broadcast_state(self) -> None:
        """Rank 0's parameters, optimizer states and proximal EWMA on every rank."""
        context = self._data_parallel_context
        if context is None:
            return
        names, _ = self._get_torch_save_params()
        context.broadcast_state_dicts({name: recursive_getattr(self, name) for name in names})

    def set_parameters(self, load_path_or_dict: Any, exact_match: bool = True, device: th.device | str = "auto") -> None:
        super().set_parameters(load_path_or_dict, exact_match=exact_match, device=device)
        # whatever each rank loaded, they continue from rank 0's
        self._broadcast_state()

    # ------------------------------------------------------------------------------------------------------------------
    # rank 0 alone logs, saves and runs the callbacks

    def _setup_learn(self, total_timesteps: int, callback: Any = None, *args: Any, **kwargs: Any) -> Any:
        context = self._data_parallel_context
        world_size_change: tuple[int, int] | None = self.__dict__.pop("_world_size_change", None)
        if world_size_change is not None and self.rank == 0:
            previous_world_size, world_size = world_size_change
            warn_world_size_change(previous_world_size, world_size, self.n_envs)
        if context is not None:
            # before anything is collected: a rank that would stop early would leave the others waiting
            context.check_same_settings(
                {"total_timesteps (learn)": total_timesteps, "num_timesteps (start of learn)": self.num_timesteps},
                advice="call learn() with the same total_timesteps on every rank (and the same model state)",
            )
        if context is not None and context.rank != 0:
            # a logger with no output; SB3 then creates no log folder on this rank
            self.set_logger(Logger(folder=None, output_formats=[]))
        result = super()._setup_learn(total_timesteps, callback, *args, **kwargs)
        vec_normalize = unwrap_vec_normalize(self.env) if context is not None and self.env is not None else None
        if context is not None and vec_normalize is not None:
            self._vec_normalize_pool.start(vec_normalize, context)
        return result

    def _init_callback(self, callback: Any, progress_bar: bool = False) -> BaseCallback:
        if self.rank != 0:
            # no checkpoints, evaluations or progress bar here: rank 0's callbacks decide whether training goes on
            callback, progress_bar = _NoCallback(), False
        return super()._init_callback(callback, progress_bar)

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save as SB3 does, on rank 0 only (the ranks hold the same model); a no-op on the other ranks."""
        if self.rank == 0:
            super().save(*args, **kwargs)

    # ------------------------------------------------------------------------------------------------------------------
    # once per iteration, after the rollout

    def _update_info_buffer(self, infos: list[dict[str, Any]], dones: np.ndarray | None = None) -> None:
        super()._update_info_buffer(infos, dones)
        if self._data_parallel_context is None:
            return
        episodes = [info["episode"] for info in infos if info.get("episode") is not None]
        successes = [
            info["is_success"]
            for index, info in enumerate(infos)
            if info.get("is_success") is not None and (dones is None or dones[index])
        ]
        if episodes or successes:
            self._pending_episodes.append((episodes, successes))

    def collect_rollouts(self, env: VecEnv, callback: BaseCallback, rollout_buffer: Any, n_rollout_steps: int) -> bool:
        continue_training = super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps)
        return self._synchronize_iteration(continue_training)

    def _synchronize_iteration(self, continue_training: bool) -> bool:
        """
        Once per iteration, on the main thread, after the rollout (the environments idle) and before ``train()``:
        the decision to go on (training stops on every rank when a callback of rank 0 stopped its rollout: the
        decision is synchronized here, once per iteration, not at every step, so a stopped rank 0 waits for the
        others' rollouts to end), rank 0 gathers the episode statistics of all ranks, and ``VecNormalize``
        statistics are pooled. Returns the global decision (the argument when not data-parallel).
        """
        context = self._data_parallel_context
        if context is None:
            return continue_training
        diagnostics = training_diagnostics(self.logger.name_to_value)
        gathered = context.all_gather_objects((continue_training, self._pending_episodes, diagnostics))
        self._pending_episodes = []
        if context.rank == 0:
            for rank, (_, pending, _) in enumerate(gathered):
                if rank == 0:
                    continue  # already in this rank's buffers
                for episodes, successes in pending:
                    self.ep_info_buffer.extend(episodes)
                    self.ep_success_buffer.extend(successes)
            # the last train()'s losses and diagnostics, not yet dumped: their mean over the ranks
            self.logger.name_to_value.update(mean_over_ranks([ranks_diagnostics for _, _, ranks_diagnostics in gathered]))
        vec_normalize = unwrap_vec_normalize(self.env) if self.env is not None else None
        if vec_normalize is not None and vec_normalize.training:
            self._vec_normalize_pool.pool(vec_normalize, context)
        self.logger.record("time/communication_s", context.take_communication_time())
        self.logger.record("time/world_size", context.world_size)
        return all(flag for flag, _, _ in gathered)

    # ------------------------------------------------------------------------------------------------------------------
    # inside train()

    def _apply_gradients(self, optimizer: th.optim.Optimizer) -> None:
        context = self._data_parallel_context
        if context is not None:
            context.average_gradients(param for group in optimizer.param_groups for param in group["params"])
        # the training core's (DecoupledAlgorithmMixin, after this mixin in every algorithm's bases)
        cast(_GradientStep, super())._apply_gradients(optimizer)

    def _global_kl(self, approx_kl_div: th.Tensor) -> float:
        """The approximate KL averaged over the ranks, so that every rank stops at the same minibatch (``target_kl``)."""
        kl = approx_kl_div.item()
        context = self._data_parallel_context
        return kl if context is None else context.mean_scalar(kl)


DIAGNOSTIC_PREFIXES = ("train/", "aux/")
"""The logger keys of ``train()`` (policy phase, and PPG's auxiliary phase) that are averaged over the ranks."""


def training_diagnostics(name_to_value: dict[str, Any]) -> dict[str, float]:
    """The numbers recorded by ``train()`` and not dumped yet (``train/...``, ``aux/...``), from a logger's values."""
    return {
        key: float(value)
        for key, value in name_to_value.items()
        if key.startswith(DIAGNOSTIC_PREFIXES) and isinstance(value, (int, float, np.integer, np.floating))
    }


def mean_over_ranks(diagnostics: list[dict[str, float]]) -> dict[str, float]:
    """
    The mean over the ranks of each diagnostic that every rank recorded and that differs between ranks (losses,
    clip fractions, explained variance: each rank's own data). Values equal on all ranks (learning rate, update
    count, the gradient noise scale of the averaged gradients) are left out, so they keep their type.
    """
    common = set(diagnostics[0]).intersection(*diagnostics[1:])
    return {
        key: float(np.mean([ranks[key] for ranks in diagnostics]))
        for key in sorted(common)
        if len({ranks[key] for ranks in diagnostics}) > 1
    }


def warn_world_size_change(previous_world_size: int, world_size: int, n_envs: int) -> None:
    """Loading a model at another world size with the same per-rank settings changes the total number of envs."""
    warnings.warn(
        f"this model was trained on {previous_world_size} rank(s) and continues on {world_size}: with n_envs={n_envs} "
        f"per rank the total number of environments goes from {previous_world_size * n_envs} to {world_size * n_envs}, "
        "which changes c (batch size-invariance). To keep the training dynamics, rescale the hyperparameters for the "
        f"new total: sb3_ewma.scale_hyperparams(..., n_envs={world_size * n_envs}) or "
        f"python -m sb3_ewma.scale --n-envs {world_size * n_envs}",
        UserWarning,
        stacklevel=caller_stacklevel(),
    )


# ----------------------------------------------------------------------------------------------------------------------
# helpers for scripts (rl-zoo3's train script): before any model exists
