"""The collectives of data-parallel training (from the main thread only) and the pooling of ``VecNormalize`` statistics."""

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch as th
import torch.distributed as dist
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecNormalize

from sb3_ewma.common.distributed.process_group import SAME_SETTINGS_ADVICE, init_process_group
from sb3_ewma.common.saved_files import state_on_cpu


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
        states = self.broadcast_object({name: state_on_cpu(holder.state_dict()) for name, holder in holders.items()})
        if self.rank != 0:
            for name, holder in holders.items():
                holder.load_state_dict(states[name])

    def check_same_settings(
        self,
        settings: dict[str, Any],
        advice: str = SAME_SETTINGS_ADVICE,
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
    Pools ``VecNormalize`` running statistics over the ranks, count-weighted: each rank contributes the samples it added
    since the previous pooling, so the result is that of one process that saw every rank's data.
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
