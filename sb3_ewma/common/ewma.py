"""Exponentially weighted moving averages: of network parameters (the proximal policy) and of advantage moments."""

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch as th
from torch import nn


def ewma_decay_from_center_of_mass(center_of_mass: float) -> float:
    """
    Decay ``beta = COM / (COM + 1)`` of an EWMA whose center of mass (mean age of its terms, in updates) is ``COM``.

    :param center_of_mass: mean age of the averaged terms, ``>= 0`` (0 means no averaging)
    :return: the decay, in ``[0, 1)``
    """
    if not np.isfinite(center_of_mass) or center_of_mass < 0:
        raise ValueError(f"center_of_mass must be a finite number >= 0, got {center_of_mass}")
    return float(center_of_mass) / (float(center_of_mass) + 1.0)


def center_of_mass_from_ewma_decay(decay: float) -> float:
    """
    Center of mass ``beta / (1 - beta) = 1 / (1 - beta) - 1`` of an EWMA with decay ``beta`` in ``[0, 1)``.

    :param decay: the decay ``beta``
    :return: the mean age of the averaged terms, in updates
    """
    check_decay("decay", decay)
    return float(decay) / (1.0 - float(decay))


def ewma_span_from_decay(decay: float) -> float:
    """Span (effective sample size) ``2 / (1 - d) - 1`` of an EWMA with decay ``d`` in ``[0, 1)``."""
    check_decay("decay", decay)
    return 2.0 / (1.0 - float(decay)) - 1.0


def ewma_decay_from_span(span: float) -> float:
    """Decay ``d = 1 - 2 / (span + 1)`` of an EWMA with the given span (``>= 1``; span 1 is decay 0)."""
    if not np.isfinite(span) or span < 1:
        raise ValueError(f"span must be a finite number >= 1, got {span}")
    return 1.0 - 2.0 / (float(span) + 1.0)


def check_decay(name: str, decay: float) -> None:
    """Raise a ``ValueError`` naming ``name`` unless ``decay`` is a number in ``[0, 1)``."""
    if isinstance(decay, bool) or not isinstance(decay, (int, float, np.floating, np.integer)) or not 0 <= decay < 1:
        raise ValueError(f"{name} must be a number in [0, 1), got {decay!r}")


class ParameterEWMA(nn.Module):
    """
    Bias-corrected exponentially weighted moving average of a network's parameters (Hilton et al. 2021, appendix A).
    After ``k`` updates with the source's parameters ``theta_1 .. theta_k`` (``theta_0``: at construction or ``reset``)::

        average = sum_i beta^(k - i) theta_i / sum_i beta^(k - i)

    computed with a weight ``w`` that starts at 1: ``w' = 1 + beta w``; ``average = theta / w' + (beta w / w') average``.

    ``self.average`` receives no gradients; its averaged parameters, its buffers (copied from the source, not averaged)
    and ``w`` are in this module's ``state_dict``. Unlike ``torch.optim.swa_utils.AveragedModel``, it is bias-corrected,
    can average a subset of the parameters (``include``), does not deep-copy the module and can be reset.

    :param source: the network being trained
    :param average: a network of the same structure that will hold the average (it is overwritten with ``source``)
    :param decay: the decay ``beta`` in ``[0, 1)``; 0 makes the average a copy of the latest parameters
    :param include: which parameters (by name) are averaged, the others left as they are (default: all)
    """

    def __init__(
        self,
        source: nn.Module,
        average: nn.Module,
        decay: float,
        include: Callable[[str], bool] | None = None,
    ) -> None:
        super().__init__()
        check_decay("decay", decay)
        self.decay = float(decay)
        self.average = average
        self.average.requires_grad_(False)
        names = [name for name, _ in source.named_parameters() if include is None or include(name)]
        source_params = dict(source.named_parameters())
        average_params = dict(self.average.named_parameters())
        missing = [name for name in names if name not in average_params]
        if missing:
            raise ValueError(f"`average` does not have the parameters {missing} of `source`")
        # plain lists: the source is not registered as a submodule, so it is neither saved nor moved here
        self._source_params: list[th.Tensor] = [source_params[name] for name in names]
        self._average_params: list[th.Tensor] = [average_params[name] for name in names]
        self._source_buffers = [buffer for _, buffer in source.named_buffers()]
        self._average_buffers = [buffer for _, buffer in self.average.named_buffers()]
        self.averaged_names = names
        self.unaveraged_names = [name for name, _ in self.average.named_parameters() if name not in set(names)]
        self.register_state_dict_post_hook(_without_unaveraged_parameters)
        self.register_load_state_dict_pre_hook(_with_unaveraged_parameters)
        self.weight = 1.0
        self.n_updates = 0
        self.reset()

    @th.no_grad()
    def reset(self) -> None:
        """Restart the average from the current source parameters (``average = theta``, ``w = 1``)."""
        # torch's foreach ops (documented, beta) have no public name; the public copy_ / lerp_ are one call per tensor
        th._foreach_copy_(self._average_params, self._source_params)  # pyright: ignore[reportPrivateImportUsage]
        self._copy_buffers()
        self.weight = 1.0
        self.n_updates = 0

    @th.no_grad()
    def update(self) -> None:
        """Fold the current source parameters into the average (call after every optimizer step)."""
        # average + (theta - average) / w'  ==  theta / w' + (beta w / w') average (foreach: see reset)
        average, source = self._average_params, self._source_params
        th._foreach_lerp_(average, source, self.next_fraction)  # pyright: ignore[reportPrivateImportUsage]
        self.advance()

    @property
    def next_fraction(self) -> float:
        """How far the next update moves the average toward the source parameters, ``1 / w'``."""
        return 1.0 / (1.0 + self.decay * self.weight)

    @property
    def averaged_pairs(self) -> tuple[list[th.Tensor], list[th.Tensor]]:
        """The averaged parameters and the source parameters they follow, in the same order."""
        return self._average_params, self._source_params

    def advance(self) -> None:
        """The rest of an update once the averaged parameters moved by :attr:`next_fraction`: buffers, weight and count."""
        self._copy_buffers()
        self.weight = 1.0 + self.decay * self.weight
        self.n_updates += 1

    def _copy_buffers(self) -> None:
        for average_buffer, source_buffer in zip(self._average_buffers, self._source_buffers):
            average_buffer.copy_(source_buffer)

    @property
    def center_of_mass(self) -> float:
        """Mean age (in updates) of the parameters in the average, ``sum_i (k-i) beta^(k-i) / sum_i beta^(k-i)``."""
        if self.decay == 0.0:
            return 0.0
        k = self.n_updates
        ages = np.arange(k + 1, dtype=np.float64)
        weights = self.decay**ages
        return float((ages * weights).sum() / weights.sum())

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.average(*args, **kwargs)

    def state_dict_from_source(self, source_state: dict[str, th.Tensor]) -> dict[str, Any]:
        """The state dict of an average restarted (``w = 1``) from a ``state_dict`` of the source network."""
        state: dict[str, Any] = {f"average.{name}": value for name, value in source_state.items()}
        state["_extra_state"] = self._extra_state_tensor(1.0, 0)  # the key torch uses for get_extra_state()
        return state

    @property
    def state_device(self) -> th.device:
        """The extra state tensor's device: the averaged parameters', or the CPU for a device without float64 (MPS)."""
        device = next((tensor.device for tensor in self._average_params), th.device("cpu"))
        return th.device("cpu") if device.type == "mps" else device

    def _extra_state_tensor(self, weight: float, n_updates: int) -> th.Tensor:
        # a tensor, not a dict: SB3 (and its tests) treat every entry of a saved state dict as a tensor
        return th.tensor([weight, float(n_updates)], dtype=th.float64, device=self.state_device)

    def get_extra_state(self) -> th.Tensor:
        """``[w, n_updates]`` as a float64 tensor on the device of the average (:attr:`state_device`)."""
        return self._extra_state_tensor(self.weight, self.n_updates)

    def set_extra_state(self, state: th.Tensor | dict[str, float]) -> None:
        if isinstance(state, dict):  # files saved before the state became a tensor
            self.weight, self.n_updates = float(state["weight"]), int(state["n_updates"])
            return
        weight, n_updates = state.detach().cpu().tolist()
        self.weight, self.n_updates = float(weight), round(n_updates)

    def _apply(self, fn: Callable[[th.Tensor], th.Tensor], *args: Any, **kwargs: Any) -> "ParameterEWMA":
        # `.to(device)` may replace the tensors of `average`: refresh the cached lists afterwards
        result = super()._apply(fn, *args, **kwargs)
        average_params = dict(self.average.named_parameters())
        self._average_params = [average_params[name] for name in self.averaged_names]
        self._average_buffers = [buffer for _, buffer in self.average.named_buffers()]
        return result


def _without_unaveraged_parameters(module: ParameterEWMA, state_dict: dict[str, Any], prefix: str, _: Any) -> None:
    # the parameters the average does not follow are never read: not saved
    for name in module.unaveraged_names:
        state_dict.pop(f"{prefix}average.{name}", None)


def _with_unaveraged_parameters(module: ParameterEWMA, state_dict: dict[str, Any], prefix: str, *_: Any) -> None:
    # a state without them (or with them: older files) loads with strict=True, as SB3's set_parameters loads it
    parameters = dict(module.average.named_parameters())
    for name in module.unaveraged_names:
        state_dict.setdefault(f"{prefix}average.{name}", parameters[name].detach())


class EWMAMoments:
    """
    Mean and variance of a stream of batches, from exponentially weighted sums with decay ``d`` per batch (the authors'
    advantage normalization, Hilton et al. 2021 section 4). With ``d = 0``: the latest batch's moments.

    :param decay: ``d`` in ``[0, 1)``
    """

    def __init__(self, decay: float = 0.0) -> None:
        check_decay("decay", decay)
        self.decay = float(decay)
        self.weight = 0.0  # sum of weights
        self.weight_sq = 0.0  # sum of squared per-sample weights (for the effective sample size)
        self.weighted_sum = 0.0
        self.weighted_sumsq = 0.0

    def update(self, values: Iterable[float] | np.ndarray) -> None:
        """Fold a batch of values in."""
        batch = np.asarray(values, dtype=np.float64).reshape(-1)
        if batch.size == 0:
            return
        self.update_from_moments(batch.size, batch.mean(), batch.var())

    def update_from_moments(self, n: float, mean: float, var: float) -> None:
        """Fold in a batch given by its size, mean and (biased) variance (e.g. pooled over several processes)."""
        if n <= 0:
            return
        self.weight = self.decay * self.weight + n
        self.weight_sq = self.decay**2 * self.weight_sq + n
        self.weighted_sum = self.decay * self.weighted_sum + mean * n
        self.weighted_sumsq = self.decay * self.weighted_sumsq + n * var + n * mean**2

    @property
    def mean(self) -> float:
        return self.weighted_sum / self.weight if self.weight > 0 else 0.0

    @property
    def var(self) -> float:
        if self.weight <= 0:
            return 1.0
        return max((self.weighted_sumsq - self.weighted_sum**2 / self.weight) / self.weight, 0.0)

    @property
    def std(self) -> float:
        return float(np.sqrt(self.var))

    @property
    def effective_sample_size(self) -> float:
        """``(sum w)^2 / sum w^2``, in samples."""
        return self.weight**2 / self.weight_sq if self.weight_sq > 0 else 0.0

    def normalize(self, values: np.ndarray, eps: float = 1e-8) -> np.ndarray:
        """``(values - mean) / (std + eps)`` with the current moments."""
        return (values - self.mean) / (self.std + eps)
