"""
Data-parallel training on ``torch.distributed`` (several processes, GPUs or machines started by ``torchrun``).

Every rank runs the same script: it steps its own ``n_envs`` environments, and the ranks train ONE model, as one big
process would with ``world_size * n_envs`` environments. What keeps the ranks identical:

- initial parameters, optimizer states and the proximal EWMA: rank 0's, broadcast after the model is built and after
  every ``set_parameters`` (so after ``load``);
- gradients: averaged over the ranks (one all-reduce of one flat buffer) at every optimizer step of every phase,
  before gradient clipping, so every rank clips the same global gradient and takes the same step;
- advantage normalization moments (in ``"minibatch"`` mode those of every global minibatch of an epoch in one
  reduction), the ``target_kl`` decision, ``VecNormalize`` statistics and the decision to go on
  training (a callback of rank 0 that returns False), all global;
- the EWMA proximal policy then needs no communication of its own (every rank applies the same updates).

Rank 0 alone logs, saves, runs the callbacks (checkpoints, evaluation) and shows the progress bar; episode statistics
of all ranks, and the mean over the ranks of the losses and diagnostics ``train()`` recorded, are gathered on it once
per iteration (in the same collective). Collectives are issued only from the main thread, in ``train()``
and in :meth:`DataParallelMixin._synchronize_iteration` (once per iteration, after the rollout), never while the
environments are being stepped.
"""

import atexit
import os
import time
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, redirect_stdout
from typing import Any

import numpy as np
import torch as th
import torch.distributed as dist
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.save_util import recursive_getattr
from stable_baselines3.common.utils import get_device
from stable_baselines3.common.vec_env import VecEnv, VecNormalize, unwrap_vec_normalize

from sb3_ewma.common.checks import caller_stacklevel
from sb3_ewma.common.host import HostAlgorithm

SAME_SETTINGS_ADVICE = "give every rank the same n_envs, n_steps, batch_size and algorithm settings"
# torchrun's environment variables
_WORLD_SIZE, _RANK, _LOCAL_RANK = "WORLD_SIZE", "RANK", "LOCAL_RANK"
# settings that may (or must) differ between ranks, left out of the consistency check
RANK_LOCAL_SETTINGS = frozenset({"seed", "verbose", "tensorboard_log", "num_timesteps", "start_time", "trained_world_size"})


def check_distributed_argument(distributed: object) -> None:
    """``distributed`` must be ``None`` (automatic), ``True`` or ``False``."""
    if distributed is not None and not isinstance(distributed, bool):
        raise ValueError(f"distributed must be None (join when torchrun's WORLD_SIZE > 1), True or False, got {distributed!r}")


def _torchrun_world_size() -> int:
    return int(os.environ.get(_WORLD_SIZE, "1"))


def wants_data_parallel(distributed: bool | None) -> bool:
    """
    Whether an algorithm created with ``distributed`` trains data-parallel: ``False`` never; ``None`` (default) when a
    process group of more than one rank exists or torchrun's environment says ``WORLD_SIZE > 1``; ``True`` always
    (also with one rank), which needs torchrun's environment or an initialized process group.
    """
    check_distributed_argument(distributed)
    if distributed is False:
        return False
    initialized = dist.is_available() and dist.is_initialized()
    if distributed is None:
        return (initialized and dist.get_world_size() > 1) or _torchrun_world_size() > 1
    if not (initialized or (_RANK in os.environ and _WORLD_SIZE in os.environ)):
        raise ValueError(
            "distributed=True needs torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or an "
            "initialized torch.distributed process group: start the script with torchrun"
        )
    return True


def current_rank(distributed: bool | None = None) -> int:
    """This process's rank (0 when not data-parallel)."""
    if not wants_data_parallel(distributed):
        return 0
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get(_RANK, "0"))


def is_main_process(distributed: bool | None = None) -> bool:
    """True on rank 0 (and in a single process): the process that logs and writes files."""
    return current_rank(distributed) == 0


def data_parallel_device(device: th.device | str, distributed: bool | None) -> th.device | str:
    """The device of this rank: ``cuda:LOCAL_RANK`` when ``device`` resolves to CUDA without an index."""
    if not wants_data_parallel(distributed):
        return device
    resolved = get_device(device)
    if resolved.type == "cuda" and resolved.index is None:
        resolved = th.device("cuda", int(os.environ.get(_LOCAL_RANK, "0")))
    return resolved


def rank_local_settings(distributed: bool | None, verbose: int, device: th.device | str) -> tuple[int, th.device | str]:
    """
    For an algorithm's constructor: the verbosity (0 on ranks other than 0, which print nothing) and the device
    (``cuda:LOCAL_RANK`` for CUDA) of this rank. Unchanged when not data-parallel.
    """
    check_distributed_argument(distributed)
    if not wants_data_parallel(distributed):
        return verbose, device
    return (verbose if current_rank(distributed) == 0 else 0), data_parallel_device(device, distributed)


def init_process_group(device: th.device) -> None:
    """Join (or create, from torchrun's environment) the default process group: nccl for CUDA, gloo otherwise."""
    if dist.is_initialized():
        return
    if not dist.is_available():
        raise RuntimeError("data-parallel training needs torch.distributed, which this build of PyTorch lacks")
    # torch._dynamo, first imported by the first optimizer, keeps a reference to a default process group that exists
    # at its import: destroy_process_group() then leaves the group's gloo threads running into the interpreter's
    # shutdown, where a thread that frees a collective's tensors aborts the process ("terminate called without an
    # active exception", about one exit in 15 on two ranks here). Imported first, it holds no reference.
    import torch._dynamo  # noqa: F401

    if device.type == "cuda":
        th.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group("gloo")
    # the group is ours, so is its cleanup: a script that never calls destroy_process_group() would otherwise exit
    # with the group alive (PyTorch warns about leaked resources then, and gloo's threads may abort the process)
    atexit.register(_destroy_process_group)


def _destroy_process_group() -> None:
    """At exit: destroy the default process group that :func:`init_process_group` created, if it still exists."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _to_cpu(value: Any) -> Any:
    """A copy of a (nested) state dict with its tensors on the CPU (so that no rank unpickles onto another's GPU)."""
    if isinstance(value, th.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {key: _to_cpu(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(item) for item in value)
    return value


class DataParallelContext:
    """
    The collectives of data-parallel training on the default process group, timed.

    :param device: this rank's device (tensors of the nccl backend travel on it)
    """

    def __init__(self, device: th.device) -> None:
        init_process_group(device)
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.backend = str(dist.get_backend())
        # nccl moves CUDA tensors only (of this rank's GPU, also when the policy is on the CPU); gloo, CPU tensors
        self.comm_device = th.device("cuda", th.cuda.current_device()) if self.backend == "nccl" else th.device("cpu")
        self.communication_time = 0.0  # seconds in collectives since the last `take_communication_time`
        self.total_communication_time = 0.0

    @contextmanager
    def _timed(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            self.communication_time += elapsed
            self.total_communication_time += elapsed

    def take_communication_time(self) -> float:
        """Seconds spent in collectives since the previous call."""
        elapsed, self.communication_time = self.communication_time, 0.0
        return elapsed

    def all_reduce_sum(self, tensor: th.Tensor) -> th.Tensor:
        """The element-wise sum over the ranks (a new tensor on ``tensor``'s device)."""
        with self._timed():
            buffer = tensor.detach().to(self.comm_device, copy=True)
            dist.all_reduce(buffer, op=dist.ReduceOp.SUM)
            return buffer.to(tensor.device)

    def mean_scalar(self, value: float) -> float:
        """The mean of a number over the ranks."""
        return float(self.all_reduce_sum(th.tensor([float(value)], dtype=th.float64))[0]) / self.world_size

    def average_gradients(self, parameters: Iterable[th.nn.Parameter]) -> None:
        """Replace every ``.grad`` by its mean over the ranks: one all-reduce of one flat buffer."""
        grads = [param.grad for param in parameters if param.grad is not None]
        if not grads:
            return
        with self._timed():
            flat = th.cat([grad.reshape(-1) for grad in grads]).to(self.comm_device)
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            flat = flat.to(grads[0].device).div_(self.world_size)
            offset = 0
            for grad in grads:
                grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
                offset += grad.numel()

    def all_gather_objects(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (picklable), in rank order."""
        gathered: list[Any] = [None] * self.world_size
        with self._timed():
            dist.all_gather_object(gathered, value)
        return gathered

    def broadcast_object(self, value: Any) -> Any:
        """Rank 0's ``value`` (picklable) on every rank."""
        holder = [value if self.rank == 0 else None]
        with self._timed():
            dist.broadcast_object_list(holder, src=0)
        return holder[0]

    def broadcast_state_dicts(self, holders: dict[str, Any]) -> None:
        """Load rank 0's state dict of each object (modules, optimizers) into the same object on every rank."""
        states = self.broadcast_object({name: _to_cpu(holder.state_dict()) for name, holder in holders.items()})
        if self.rank != 0:
            for name, holder in holders.items():
                holder.load_state_dict(states[name])

    def check_same_settings(
        self,
        settings: dict[str, Any],
        advice: str = "give every rank the same n_envs, n_steps, batch_size and algorithm settings",
    ) -> None:
        """Raise the same ``ValueError`` on every rank, naming the first setting whose value differs between ranks."""
        all_settings = self.all_gather_objects(settings)
        for key in sorted(set().union(*all_settings)):
            values = [repr(ranks_settings[key]) if key in ranks_settings else "(not set)" for ranks_settings in all_settings]
            if len(set(values)) > 1:
                by_rank = ", ".join(f"rank {rank}: {value}" for rank, value in enumerate(values))
                raise ValueError(
                    f"data-parallel training needs the same settings on every rank, but {key} differs ({by_rank}): {advice}"
                )


class RunningStatisticsPool:
    """
    Pools ``VecNormalize`` running statistics over the ranks, count-weighted and exact: each rank contributes the
    samples it added since the previous pooling (its statistics minus the last pooled ones), so the pooled statistics
    are those of one process that saw every rank's data.
    """

    def __init__(self) -> None:
        self.pooled: dict[str, tuple[np.ndarray, np.ndarray, float]] = {}

    @staticmethod
    def statistics(vec_normalize: VecNormalize) -> dict[str, RunningMeanStd]:
        """The running statistics of a ``VecNormalize``, by name (observation keys for dict spaces, and returns)."""
        found: dict[str, RunningMeanStd] = {}
        if vec_normalize.norm_obs:
            if isinstance(vec_normalize.obs_rms, dict):
                found.update({f"obs/{key}": rms for key, rms in vec_normalize.obs_rms.items()})
            else:
                found["obs"] = vec_normalize.obs_rms
        if vec_normalize.norm_reward:
            found["ret"] = vec_normalize.ret_rms
        return found

    def _remember(self, statistics: dict[str, RunningMeanStd]) -> None:
        self.pooled = {
            name: (np.array(rms.mean, dtype=np.float64), np.array(rms.var, dtype=np.float64), float(rms.count))
            for name, rms in statistics.items()
        }

    def start(self, vec_normalize: VecNormalize, context: DataParallelContext) -> None:
        """Give every rank rank 0's statistics (at the start of ``learn``) and remember them as pooled."""
        statistics = self.statistics(vec_normalize)
        states = context.broadcast_object({name: (rms.mean, rms.var, rms.count) for name, rms in statistics.items()})
        for name, rms in statistics.items():
            rms.mean, rms.var, rms.count = (np.array(states[name][0]), np.array(states[name][1]), float(states[name][2]))
        self._remember(statistics)

    def pool(self, vec_normalize: VecNormalize, context: DataParallelContext) -> None:
        """Replace every rank's statistics by the pooled ones (a collective: call it on every rank)."""
        statistics = self.statistics(vec_normalize)
        if set(statistics) != set(self.pooled):
            raise RuntimeError("VecNormalize's statistics changed since the start of learn(): call learn() again")
        sums = []
        for name, rms in statistics.items():
            mean0, var0, count0 = self.pooled[name]
            mean, var, count = np.asarray(rms.mean, np.float64), np.asarray(rms.var, np.float64), float(rms.count)
            new_count = max(count - count0, 0.0)
            new_sum = count * mean - count0 * mean0 if new_count > 0 else np.zeros_like(mean)
            new_sumsq = count * (var + mean**2) - count0 * (var0 + mean0**2) if new_count > 0 else np.zeros_like(mean)
            sums.append(np.concatenate([[new_count], new_sum.reshape(-1), new_sumsq.reshape(-1)]))
        total = context.all_reduce_sum(th.as_tensor(np.concatenate(sums))).numpy()
        offset = 0
        for name, rms in statistics.items():
            mean0, var0, count0 = self.pooled[name]
            size = mean0.size
            new_count = total[offset]
            new_sum = total[offset + 1 : offset + 1 + size].reshape(mean0.shape)
            new_sumsq = total[offset + 1 + size : offset + 1 + 2 * size].reshape(mean0.shape)
            offset += 1 + 2 * size
            count = count0 + new_count
            mean = (count0 * mean0 + new_sum) / count
            var = np.maximum((count0 * (var0 + mean0**2) + new_sumsq) / count - mean**2, 0.0)
            rms.mean, rms.var, rms.count = mean, var, float(count)
        self._remember(statistics)


class _NoCallback(BaseCallback):
    """What runs in place of the user's callbacks on ranks other than 0."""

    def _on_step(self) -> bool:
        return True


class DataParallelMixin(HostAlgorithm):
    """
    Mixed into PPO_EWMA and PPG_EWMA (first in the bases): data-parallel training when ``self.distributed`` asks for
    it (see :func:`wants_data_parallel`). Without it, every method does what the algorithm alone does.

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
        vec_normalize = unwrap_vec_normalize(self.env) if context is not None else None  # type: ignore[arg-type]
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
        vec_normalize = unwrap_vec_normalize(self.env)  # type: ignore[arg-type]
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
        super()._apply_gradients(optimizer)  # type: ignore[misc]

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


def join_torchrun(device: th.device | str = "auto") -> tuple[int, int]:
    """
    Under torchrun (``WORLD_SIZE > 1``), join (or create) the default process group now, with the backend of
    ``device`` (nccl for CUDA, gloo otherwise), so that a script can agree on things before building its model.

    :return: this process's rank and the world size ((0, 1) without torchrun)
    """
    if not wants_data_parallel(None):
        return 0, 1
    init_process_group(th.device(data_parallel_device(device, None)))
    return dist.get_rank(), dist.get_world_size()


def broadcast_from_rank0(value: Any) -> Any:
    """Rank 0's ``value`` (picklable) on every rank; ``value`` itself without a process group of several ranks."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


# per-rank hyperparameters that count samples (the global value is world_size times the per-rank one)
PER_RANK_SAMPLE_COUNTS = ("n_envs", "batch_size", "aux_batch_size")


def per_rank_hyperparams(hyperparams: dict[str, Any], world_size: int) -> dict[str, Any]:
    """
    Split a hyperparameter entry written for one process of ``n_envs`` environments into the entry of each of
    ``world_size`` ranks that together behave like it: ``n_envs``, ``batch_size`` and ``aux_batch_size`` divided by
    ``world_size`` (the number of minibatches per epoch, hence every other hyperparameter, is unchanged).

    :raise ValueError: when one of them is not divisible by ``world_size``
    """
    split = dict(hyperparams)
    for key in PER_RANK_SAMPLE_COUNTS:
        if key not in split or split[key] is None:
            continue
        value = int(split[key])
        if value % world_size != 0:
            raise ValueError(
                f"{key}={value} (for all ranks together) must be divisible by the world size {world_size}: choose a total "
                f"number of environments (--scale-n-envs) that makes {', '.join(PER_RANK_SAMPLE_COUNTS)} divisible"
            )
        split[key] = value // world_size
    if split.get("aux_micro_batch_size") is not None and "aux_batch_size" in split:
        split["aux_micro_batch_size"] = min(int(split["aux_micro_batch_size"]), int(split["aux_batch_size"]))
    return split


def zoo_hyperparams_per_rank(
    hyperparams: dict[str, Any], saved_hyperparams: dict[str, Any], world_size: int, scaled: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """
    rl-zoo3 under torchrun: the hyperparameters each rank trains with, and a note on what that means for c.

    :param scaled: whether the entry was rescaled (``--scale-n-envs N``) for ``N`` environments in total, which are
        then split over the ranks (:func:`per_rank_hyperparams`); otherwise the entry is per rank, as written
    """
    n_envs = int(hyperparams.get("n_envs", 1))
    if scaled:
        hyperparams = per_rank_hyperparams(hyperparams, world_size)
        saved_hyperparams = type(saved_hyperparams)(per_rank_hyperparams(dict(saved_hyperparams), world_size).items())
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


@contextmanager
def quiet_unless_rank0() -> Iterator[None]:
    """Under torchrun, send the standard output of ranks other than 0 to nowhere for the duration of the block."""
    if current_rank() == 0:
        yield
        return
    with open(os.devnull, "w") as devnull, redirect_stdout(devnull):
        yield
