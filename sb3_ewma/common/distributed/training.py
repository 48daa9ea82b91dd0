"""The algorithm side of data-parallel training: :class:`DataParallelTraining` and the per-iteration diagnostics."""

import contextlib
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, cast

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback, CallbackList, ConvertCallback
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.type_aliases import MaybeCallback
from stable_baselines3.common.vec_env import VecEnv, unwrap_vec_normalize

from sb3_ewma.common.checks import caller_stacklevel
from sb3_ewma.common.distributed.collectives import DataParallelContext, RunningStatisticsPool
from sb3_ewma.common.distributed.process_group import RANK_LOCAL_SETTINGS


class DataParallelCallback(BaseCallback):
    """
    The first callback of a data-parallel ``learn``: starts ``VecNormalize`` statistics from rank 0's and, on other
    ranks (where it replaces the user's callbacks), keeps the episodes that end for rank 0's statistics.

    :param data_parallel: the model's data-parallel training
    """

    def __init__(self, data_parallel: "DataParallelTraining") -> None:
        super().__init__()
        self.data_parallel = data_parallel

    # the two methods it calls are for this callback only, not part of the interface SingleProcessTraining mirrors
    def _on_training_start(self) -> None:
        self.data_parallel._start_vec_normalize(self.model.get_env())

    def _on_step(self) -> bool:
        if self.data_parallel.rank != 0:
            self.data_parallel._record_episodes(self.locals["infos"], self.locals.get("dones"))
        return True


SCHEDULES = ("learning_rate", "lr_schedule", "clip_range", "clip_range_vf", "aux_learning_rate", "aux_lr_schedule")
"""Settings that may be schedules: the ranks compare their values at the start and the end of training."""


_NO_SETTING = object()


def _comparable(value: Any, schedule: bool = False) -> Any:
    """
    A setting as the ranks compare it, or ``_NO_SETTING`` (an environment, a buffer): numbers, strings and None as they
    are (numpy's as Python's), a schedule by its values at progress 1 and 0, a class or a function by its qualified
    name, containers item by item (an item of another kind by its type's name).
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if schedule and callable(value):
        schedule_of_progress = cast(Callable[[float], Any], value)
        try:
            return f"schedule {float(schedule_of_progress(1.0))!r} -> {float(schedule_of_progress(0.0))!r}"
        except Exception:  # not a schedule of the progress remaining: compared by name below
            pass
    if isinstance(value, type) or (callable(value) and hasattr(value, "__qualname__")):
        return f"{getattr(value, '__module__', '')}.{value.__qualname__}"
    if isinstance(value, (list, tuple, dict)):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        compared = {key: _comparable(item) for key, item in items}
        compared = {key: f"<{type(value[key]).__name__}>" if item is _NO_SETTING else item for key, item in compared.items()}
        return compared if isinstance(value, dict) else type(value)(compared.values())
    return _NO_SETTING


def data_parallel_settings(algorithm: OnPolicyAlgorithm) -> dict[str, Any]:
    """
    The settings every rank must share: the hyperparameters (:func:`_comparable`: schedules by their values, classes
    by name, ``policy_kwargs`` item by item), spaces and parameter shapes.
    """
    settings: dict[str, Any] = {
        "algorithm": type(algorithm).__name__,
        "observation_space": repr(algorithm.observation_space),
        "action_space": repr(algorithm.action_space),
        "policy parameters": [(name, tuple(p.shape)) for name, p in algorithm.policy.named_parameters()],
    }
    for key, value in vars(algorithm).items():
        if key.startswith("_") or key in RANK_LOCAL_SETTINGS:
            continue
        comparable = _comparable(value, schedule=key in SCHEDULES)
        if comparable is not _NO_SETTING:
            settings[key] = comparable
    return settings


class DataParallelTraining:
    """
    Data-parallel training of one algorithm over the ranks of the default process group: what the algorithm
    (``algorithm.data_parallel``) calls when it trains on several processes. On one process it holds a
    :class:`SingleProcessTraining`, with the same methods, which do nothing. See :ref:`distributed`.

    :param device: the model's device (the process group's backend follows it)
    """

    def __init__(self, device: th.device) -> None:
        self.context = DataParallelContext(device)
        self.pending_episodes: list[tuple[list[Any], list[Any]]] = []
        self.vec_normalize_pool = RunningStatisticsPool()
        self._gradient_hooks: list[Any] = []
        self._accumulating = False

    @property
    def world_size(self) -> int:
        return self.context.world_size

    @property
    def rank(self) -> int:
        return self.context.rank

    @property
    def advantage_reducer(self) -> Callable[[th.Tensor], th.Tensor]:
        """Sums a tensor over the ranks: the advantage moments are then those of every rank's advantages."""
        return self.context.all_reduce_sum

    def setup(self, settings: dict[str, Any], state_holders: dict[str, Any], policy: th.nn.Module) -> None:
        """
        At the end of ``_setup_model``: check that every rank has the same ``settings``
        (:func:`data_parallel_settings`), give every rank rank 0's state, and average the gradients of every backward
        pass through ``policy`` from then on.

        :param state_holders: the model's modules and optimizers by name (:meth:`broadcast_state`)
        """
        self.context.check_same_settings(settings)
        self.broadcast_state(state_holders)
        self._average_gradients_after_backward(policy)

    def _average_gradients_after_backward(self, policy: th.nn.Module) -> None:
        """
        Every backward pass through ``policy`` (outside :meth:`accumulating`) ends with its parameters' gradients
        averaged over the ranks in one all-reduce, queued by the first gradient accumulated, as DDP does.
        """
        for hook in self._gradient_hooks:
            hook.remove()
        parameters = [parameter for parameter in policy.parameters() if parameter.requires_grad]
        # the backward pass whose end the averaging is queued at (torch numbers them); a pass that raised never ran
        # its callback, and the next pass queues its own
        queued_for = -1

        def on_gradient(parameter: th.Tensor) -> None:
            nonlocal queued_for
            if self._accumulating:
                return
            graph_task = th._C._current_graph_task_id()
            if graph_task != queued_for:
                queued_for = graph_task
                # torch's autograd engine runs it once the pass is over (the public API has no such hook)
                th.autograd.Variable._execution_engine.queue_callback(  # type: ignore[attr-defined]
                    lambda: self.context.average_gradients(parameters)
                )

        self._gradient_hooks = [parameter.register_post_accumulate_grad_hook(on_gradient) for parameter in parameters]

    @contextlib.contextmanager
    def accumulating(self) -> Iterator[None]:
        """
        The backward passes inside leave their gradients on this rank (DDP's ``no_sync``): the accumulated gradient is
        averaged once, at the end of the first backward pass after the block.
        """
        self._accumulating = True
        try:
            yield
        finally:
            self._accumulating = False

    def broadcast_state(self, state_holders: dict[str, Any]) -> None:
        """Rank 0's state of each module and optimizer (the parameters, optimizer states, proximal EWMA) on every rank."""
        self.context.broadcast_state_dicts(state_holders)

    def start_learn(
        self,
        total_timesteps: int,
        starts_from: int,
        callback: MaybeCallback,
        progress_bar: bool,
        set_logger: Callable[[Logger], None],
    ) -> tuple[MaybeCallback, bool]:
        """
        At the start of ``learn``: check that the ranks agree on the budget; ranks other than 0 log nothing and run
        only a :class:`DataParallelCallback`, rank 0 runs it before the user's callbacks.

        :param starts_from: the ``num_timesteps`` the call starts from (0 when ``learn`` resets the count)
        :param set_logger: the model's ``set_logger``, given a logger with no output on ranks other than 0
        :return: this rank's callback and progress bar setting
        """
        # before anything is collected: a rank that would stop early would leave the others waiting (a count that
        # starts again from 0 is the same on every rank, whatever an earlier call stopped at)
        self.context.check_same_settings(
            {"total_timesteps (learn)": total_timesteps, "num_timesteps (start of learn)": starts_from},
            advice="call learn() with the same total_timesteps on every rank (and the same model state)",
        )
        if self.rank != 0:
            # a logger with no output; SB3 then creates no log folder on this rank
            set_logger(Logger(folder=None, output_formats=[]))
            return DataParallelCallback(self), False
        if callback is None:
            callbacks: list[BaseCallback] = []
        elif isinstance(callback, list):
            callbacks = callback
        else:
            callbacks = [callback if isinstance(callback, BaseCallback) else ConvertCallback(callback)]
        # first: its collectives run on every rank whatever the user's callbacks do
        return CallbackList([DataParallelCallback(self), *callbacks]), progress_bar

    def check_same_settings(self, settings: dict[str, Any], advice: str) -> None:
        """Raise the same ``ValueError`` on every rank when a setting differs between ranks."""
        self.context.check_same_settings(settings, advice=advice)

    def _start_vec_normalize(self, env: VecEnv | None) -> None:
        """After SB3's ``_setup_learn``: ``VecNormalize`` statistics start from rank 0's."""
        vec_normalize = unwrap_vec_normalize(env) if env is not None else None
        if vec_normalize is not None:
            self.vec_normalize_pool.start(vec_normalize, self.context)

    def _record_episodes(self, infos: list[dict[str, Any]], dones: np.ndarray | None) -> None:
        """The episodes ended and successes of a step, for rank 0's statistics at the next synchronization."""
        episodes = [info["episode"] for info in infos if info.get("episode") is not None]
        successes = [
            info["is_success"]
            for index, info in enumerate(infos)
            if info.get("is_success") is not None and (dones is None or dones[index])
        ]
        if episodes or successes:
            self.pending_episodes.append((episodes, successes))

    def synchronize_iteration(
        self,
        continue_training: bool,
        num_timesteps: int,
        logger: Logger,
        ep_info_buffer: deque | None,
        ep_success_buffer: deque | None,
        env: VecEnv | None,
    ) -> tuple[bool, int]:
        """
        Once per iteration, on the main thread, after the rollout and before ``train()``: agree on going on, gather
        the episode statistics (into rank 0's ``ep_info_buffer`` and ``ep_success_buffer``) and ``train()``
        diagnostics (into rank 0's ``logger``), and pool the statistics of ``env``'s ``VecNormalize``.

        :return: whether every rank goes on, and the ``num_timesteps`` every rank continues from: rank 0's (a rank-0
            callback that stops training stops rank 0 at its step, the others at the end of the rollout)
        """
        context = self.context
        diagnostics = training_diagnostics(logger.name_to_value)
        gathered = context.all_gather_objects((continue_training, self.pending_episodes, diagnostics, num_timesteps))
        self.pending_episodes = []
        if context.rank == 0:
            # set by SB3's _setup_learn, which ran before the first iteration
            assert ep_info_buffer is not None and ep_success_buffer is not None
            for rank, (_, pending, _, _) in enumerate(gathered):
                if rank == 0:
                    continue  # already in this rank's buffers
                for episodes, successes in pending:
                    ep_info_buffer.extend(episodes)
                    ep_success_buffer.extend(successes)
            # the last train()'s losses and diagnostics, not yet dumped: their mean over the ranks
            logger.name_to_value.update(mean_over_ranks([ranks_diagnostics for _, _, ranks_diagnostics, _ in gathered]))
        vec_normalize = unwrap_vec_normalize(env) if env is not None else None
        if vec_normalize is not None and vec_normalize.training:
            self.vec_normalize_pool.pool(vec_normalize, context)
        logger.record("time/communication_s", context.take_communication_time())
        logger.record("time/world_size", context.world_size)
        return all(flag for flag, _, _, _ in gathered), gathered[0][3]

    def seed_for_rank(self, seed: int | None, n_envs: int) -> int | None:
        """This rank's seed: ``seed + rank * n_envs``, so that the ranks' environments differ, reproducibly."""
        return None if seed is None else seed + self.rank * n_envs

    def mean_kl(self, approx_kl_div: float) -> float:
        """The approximate KL averaged over the ranks (for ``target_kl``)."""
        return self.context.mean_scalar(approx_kl_div)


class SingleProcessTraining:
    """What a model that trains on one process holds in place of :class:`DataParallelTraining`: the same methods, no-ops."""

    world_size = 1
    rank = 0
    advantage_reducer = None

    def setup(self, settings: dict[str, Any], state_holders: dict[str, Any], policy: th.nn.Module) -> None:
        """Nothing to agree on."""

    def broadcast_state(self, state_holders: dict[str, Any]) -> None:
        """Nothing to send."""

    def accumulating(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def start_learn(
        self,
        total_timesteps: int,
        starts_from: int,
        callback: MaybeCallback,
        progress_bar: bool,
        set_logger: Callable[[Logger], None],
    ) -> tuple[MaybeCallback, bool]:
        return callback, progress_bar

    def check_same_settings(self, settings: dict[str, Any], advice: str) -> None:
        """One process agrees with itself."""

    def synchronize_iteration(
        self,
        continue_training: bool,
        num_timesteps: int,
        logger: Logger,
        ep_info_buffer: deque | None,
        ep_success_buffer: deque | None,
        env: VecEnv | None,
    ) -> tuple[bool, int]:
        return continue_training, num_timesteps

    def seed_for_rank(self, seed: int | None, n_envs: int) -> int | None:
        return seed

    def mean_kl(self, approx_kl_div: float) -> float:
        return approx_kl_div


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
    The mean over the ranks of each diagnostic that every rank recorded and that differs between ranks; values equal
    on all ranks are left out, so they keep their type.
    """
    common = set(diagnostics[0]).intersection(*diagnostics[1:])
    return {
        key: float(np.mean([ranks[key] for ranks in diagnostics]))
        for key in sorted(common)
        if len({ranks[key] for ranks in diagnostics}) > 1
    }


def previous_world_size_change(trained_world_size: int | None, world_size: int) -> tuple[int, int] | None:
    """
    ``(trained_world_size, world_size)`` when a loaded model, trained on ``trained_world_size`` ranks (None: unknown),
    continues on another number of ranks; else None.
    """
    if trained_world_size is None or trained_world_size == world_size:
        return None
    return trained_world_size, world_size


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
