"""
The numeric format of the training step: ``train()``'s forward passes under ``torch.autocast`` and the convolutions'
weights in ``channels_last`` memory format, both off by default (float32, contiguous).
"""

import contextlib
from typing import Any

import torch as th
from torch import nn


def autocast(device_type: str, dtype: th.dtype | None) -> Any:
    """
    ``torch.autocast`` to ``dtype``, or no context for None: a disabled autocast would stay in a compiled graph and keep
    it out of torch's compilation cache.
    """
    return contextlib.nullcontext() if dtype is None else th.autocast(device_type=device_type, dtype=dtype)


class TrainingPrecision:
    """
    How an algorithm's ``train()`` computes its losses.

    :param autocast_dtype: the dtype of ``torch.autocast`` around the forward passes and the losses (``th.bfloat16``),
        or None (float32); the backward pass and the optimizer step run outside it, on float32 parameters
    :param channels_last: keep the 4-D weights (convolutions) in ``channels_last`` memory format
    """

    def __init__(self, autocast_dtype: th.dtype | None = None, channels_last: bool = False) -> None:
        if autocast_dtype not in (None, th.bfloat16, th.float16):
            raise ValueError(f"autocast_dtype must be None, torch.bfloat16 or torch.float16, got {autocast_dtype!r}")
        self.autocast_dtype = autocast_dtype
        self.channels_last = bool(channels_last)

    def __repr__(self) -> str:
        return f"TrainingPrecision(autocast_dtype={self.autocast_dtype}, channels_last={self.channels_last})"

    def forward(self, device: th.device) -> Any:
        """The context of the forward passes and losses on ``device``."""
        return autocast(th.device(device).type, self.autocast_dtype)

    def prepare(self, *modules: nn.Module | None) -> None:
        """Put the modules' weights in the memory format (in place: the optimizer keeps its parameters)."""
        if not self.channels_last:
            return
        for module in modules:
            for param in [] if module is None else module.parameters():
                if param.dim() == 4:  # as Module.to(memory_format=...): the same Parameter, its data re-laid
                    param.data = param.data.contiguous(memory_format=th.channels_last)


FLOAT32 = TrainingPrecision()
"""The default: float32, contiguous weights (SB3's)."""
