"""Advantage normalization: per minibatch (SB3's) or by EWMA moments over iterations (the paper's)."""

import math
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch as th

from sb3_ewma.common.decoupled.objective import mean_of
from sb3_ewma.common.ewma import EWMAMoments


class AdvantageNormalizer:
    """
    Advantage normalization: ``"minibatch"`` (SB3's, each minibatch by its own mean and std) or ``"ewma"`` (the whole
    iteration by EWMA moments over iterations, as in Hilton et al.).

    :param enabled: normalize at all (SB3's ``normalize_advantage``)
    :param mode: ``"minibatch"`` or ``"ewma"``
    :param decay: decay of the moments per iteration, for ``"ewma"``
    :param reducer: sums a tensor over processes (data-parallel training), so that the moments are global. Not saved.
    """

    def __init__(
        self,
        enabled: bool = True,
        mode: str = "minibatch",
        decay: float = 0.0,
        reducer: Callable[[th.Tensor], th.Tensor] | None = None,
    ) -> None:
        self.moments = EWMAMoments(decay)
        self.reducer = reducer
        self.configure(enabled, mode, decay)
        self.iteration_means: list[float | th.Tensor] = []
        self.iteration_stds: list[float | th.Tensor] = []
        self._epoch_moments: deque[tuple[float, float, float]] = deque()

    @property
    def pools_minibatches(self) -> bool:
        """Whether each minibatch is normalized by moments pooled over processes (``"minibatch"`` with a reducer)."""
        return self.reducer is not None and self.enabled and self.mode == "minibatch"

    def epoch(self, minibatches: Iterator[Any]) -> Iterator[Any]:
        """The minibatches of an epoch, as given; when pooling over processes, after :meth:`pool_epoch` of them all."""
        if not self.pools_minibatches:
            return minibatches
        epoch = list(minibatches)
        self.pool_epoch([minibatch.advantages for minibatch in epoch])
        return iter(epoch)

    def pool_epoch(self, minibatch_advantages: list[th.Tensor]) -> None:
        """
        Data-parallel ``"minibatch"`` mode: the moments of every global minibatch of an epoch in one reduction, which
        :meth:`minibatch` then uses in order.
        """
        assert self.reducer is not None
        pooled = [values for values in minibatch_advantages if len(values) > 1]  # as `minibatch` skips the others
        self._epoch_moments.clear()
        if not pooled:
            return
        sums = th.stack(
            [
                # on the advantages' device: read back once, after the reduction
                th.stack(
                    [
                        values.new_tensor(float(values.numel()), dtype=th.float64),
                        values.double().sum(),
                        values.double().square().sum(),
                    ]
                )
                for values in pooled
            ]
        )
        for n, total, total_sq in self.reducer(sums).cpu().tolist():
            mean = total / n
            self._epoch_moments.append((n, mean, max(total_sq / n - mean**2, 0.0)))

    def configure(self, enabled: bool, mode: str, decay: float) -> None:
        """Set the options, keeping the moments accumulated so far (e.g. after ``load`` with other settings)."""
        self.enabled = enabled
        self.mode = mode
        self.moments.decay = float(decay)

    def start_iteration(self, advantages: np.ndarray) -> np.ndarray:
        """Called once per iteration with all its advantages; returns them, normalized in ``"ewma"`` mode."""
        self.iteration_means, self.iteration_stds = [], []
        if not (self.enabled and self.mode == "ewma"):
            return advantages
        if self.reducer is None:
            self.moments.update(advantages)
        else:
            n, mean, var = self._pooled_moments(th.as_tensor(advantages))
            self.moments.update_from_moments(n, mean, var)
        self.iteration_means.append(self.moments.mean)
        self.iteration_stds.append(self.moments.std)
        return self.moments.normalize(advantages).astype(advantages.dtype, copy=False)

    def minibatch(self, advantages: th.Tensor) -> th.Tensor:
        """Normalize one minibatch (``"minibatch"`` mode only; otherwise returned as given)."""
        if not (self.enabled and self.mode == "minibatch") or len(advantages) <= 1:
            return advantages
        if self.reducer is None:
            mean, std = advantages.mean(), advantages.std()
        else:
            n, pooled_mean, var = self._epoch_moments.popleft() if self._epoch_moments else self._pooled_moments(advantages)
            mean = th.as_tensor(pooled_mean, dtype=advantages.dtype, device=advantages.device)
            std = th.as_tensor(math.sqrt(var * n / max(n - 1, 1)), dtype=advantages.dtype, device=advantages.device)
        self.iteration_means.append(mean.detach())
        self.iteration_stds.append(std.detach())
        return (advantages - mean) / (std + 1e-8)

    def _pooled_moments(self, values: th.Tensor) -> tuple[float, float, float]:
        """Size, mean and biased variance of the values of all processes (one reduction of three sums)."""
        assert self.reducer is not None
        values = values.detach().reshape(-1).to(th.float64)
        sums = self.reducer(
            th.stack([th.tensor(float(values.numel()), dtype=th.float64), values.sum().cpu(), (values**2).sum().cpu()])
        )
        n, total, total_sq = (float(x) for x in sums.cpu())
        mean = total / n
        return n, mean, max(total_sq / n - mean**2, 0.0)

    def __getstate__(self) -> dict[str, Any]:
        # the moments and options only: not the reducer (the running processes'), nor this iteration's logs
        return {"moments": self.moments, "enabled": self.enabled, "mode": self.mode}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # older files also hold the reducer, the pooled moments and the logs: not read
        self.__dict__.update(moments=state["moments"], enabled=state["enabled"], mode=state["mode"])
        self.reducer = None
        self.iteration_means, self.iteration_stds = [], []
        self._epoch_moments = deque()

    def stats(self) -> dict[str, np.float64]:
        """
        The mean and std that normalized the iteration's advantages (averaged over the minibatches), for the logger;
        cleared once read.
        """
        means, stds = self.iteration_means, self.iteration_stds
        self.iteration_means, self.iteration_stds = [], []
        if not means:
            return {}
        return {"advantage_mean": mean_of(means), "advantage_std": mean_of(stds)}
