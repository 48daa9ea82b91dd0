"""
The gradient noise scale ``B_simple = tr(Sigma) / |G|^2`` of McCandlish et al. 2018 (https://arxiv.org/abs/1812.06162,
appendix A.1), estimated from an epoch's ``k`` minibatch gradients (``B_small`` samples each) and their mean
(``B_big = k * B_small``), each estimate smoothed by a bias-corrected EMA (:ref:`gradient-noise-scale`).
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch as th


@dataclass
class NoiseScaleEstimate:
    """The smoothed estimates after an epoch: ``|G|^2``, ``tr(Sigma)`` and their ratio (None while ``|G|^2 <= 0``)."""

    gradient_sq_norm: float
    noise_trace: float

    @property
    def noise_scale(self) -> float | None:
        return self.noise_trace / self.gradient_sq_norm if self.gradient_sq_norm > 0 else None


def noise_scale_terms(mean_sq_norm: float, sq_norm_of_mean: float, small: float, big: float) -> tuple[float, float]:
    """
    McCandlish et al.'s unbiased estimates ``(|G|^2, tr(Sigma))`` from ``|G_small|^2`` (mean squared norm of the
    gradients of ``small`` samples) and ``|G_big|^2`` (squared norm of a gradient of ``big > small`` samples).
    """
    if not big > small > 0:
        raise ValueError(f"need batch sizes big > small > 0, got small={small}, big={big}")
    gradient_sq_norm = (big * sq_norm_of_mean - small * mean_sq_norm) / (big - small)
    noise_trace = (mean_sq_norm - sq_norm_of_mean) / (1.0 / small - 1.0 / big)
    return gradient_sq_norm, noise_trace


@dataclass
class _BiasCorrectedEMA:
    decay: float
    value: float = 0.0
    weight: float = 0.0

    def update(self, sample: float) -> float:
        self.value = self.decay * self.value + (1.0 - self.decay) * sample
        self.weight = self.decay * self.weight + (1.0 - self.decay)
        return self.value / self.weight


@dataclass
class GradientNoiseScale:
    """
    Accumulates the minibatch gradients of an epoch (:meth:`observe`) and, after every ``steps_per_epoch``-th one,
    updates the smoothed estimates.

    :param batch_size: samples per minibatch (``B_small``)
    :param steps_per_epoch: minibatches per epoch (``k >= 2``; ``B_big = k * batch_size``)
    :param decay: decay of the EMAs, per epoch
    """

    batch_size: int
    steps_per_epoch: int
    decay: float = 0.95
    latest: NoiseScaleEstimate | None = None
    _gradient_sq_norm: _BiasCorrectedEMA = field(init=False)
    _noise_trace: _BiasCorrectedEMA = field(init=False)
    _sum: list[th.Tensor] = field(default_factory=list, init=False)
    _sq_norms: list[th.Tensor] = field(default_factory=list, init=False)
    _epoch_tag: object = field(default=None, init=False)

    def __post_init__(self) -> None:
        if not 0 <= self.decay < 1:
            raise ValueError(f"decay must be in [0, 1), got {self.decay}")
        self._gradient_sq_norm = _BiasCorrectedEMA(self.decay)
        self._noise_trace = _BiasCorrectedEMA(self.decay)

    @property
    def enabled(self) -> bool:
        """An epoch of a single minibatch has nothing to compare its gradient with."""
        return self.steps_per_epoch >= 2 and self.batch_size >= 1

    @th.no_grad()
    def observe(self, gradients: Sequence[th.Tensor], tag: object = None) -> NoiseScaleEstimate | None:
        """
        Add one minibatch gradient (the parameters' ``.grad``, in a fixed order); a new ``tag`` (iteration) drops an
        unfinished epoch. Returns the smoothed estimate when this gradient completes an epoch, else None.
        """
        if not self.enabled or not gradients:
            return None
        if tag != self._epoch_tag:
            self._sum, self._sq_norms, self._epoch_tag = [], [], tag
        # torch's foreach ops have no public name; the public add_ / vector_norm are one call per tensor
        if not self._sum:
            self._sum = [gradient.detach().clone() for gradient in gradients]
        else:
            th._foreach_add_(self._sum, list(gradients))  # pyright: ignore[reportPrivateImportUsage]
        norms = th._foreach_norm(list(gradients))  # pyright: ignore[reportPrivateImportUsage]
        self._sq_norms.append(th.stack(norms).square().sum())
        if len(self._sq_norms) < self.steps_per_epoch:
            return None
        count = len(self._sq_norms)
        mean_sq_norm = float(th.stack(self._sq_norms).mean())
        norms_of_sum = th._foreach_norm(self._sum)  # pyright: ignore[reportPrivateImportUsage]
        sq_norm_of_mean = float(th.stack(norms_of_sum).square().sum()) / count**2
        self._sum, self._sq_norms = [], []
        gradient_sq_norm, noise_trace = noise_scale_terms(
            mean_sq_norm, sq_norm_of_mean, self.batch_size, self.batch_size * count
        )
        self.latest = NoiseScaleEstimate(
            self._gradient_sq_norm.update(gradient_sq_norm), self._noise_trace.update(noise_trace)
        )
        return self.latest

    def observe_optimizer(self, optimizer: th.optim.Optimizer, tag: object = None) -> NoiseScaleEstimate | None:
        """
        :meth:`observe` the gradient of ``optimizer``'s parameters (None counts as zeros), after ``backward()`` and
        before clipping; under data-parallel training, once averaged over the ranks (``batch_size``: the global one).
        """
        gradients = [
            param.grad if param.grad is not None else th.zeros_like(param)
            for group in optimizer.param_groups
            for param in group["params"]
        ]
        return self.observe(gradients, tag)
