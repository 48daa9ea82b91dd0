"""Phasic Policy Gradient without the EWMA: :class:`PPG`."""

import inspect
import os
from typing import Any

from sb3_ewma.ppg_ewma.ppg_ewma import PPG_EWMA


class PPG(PPG_EWMA):
    """
    Phasic Policy Gradient (Cobbe et al. 2020, https://arxiv.org/abs/2009.04416): :class:`PPG_EWMA` with the EWMA
    turned off by default (``ewma_decay=None``: the proximal policy is the behavior policy, the policy phase is PPO's
    clipped objective). Takes the same arguments as :class:`PPG_EWMA`.

    :param args: ``policy`` and ``env``, as :class:`PPG_EWMA` takes them
    :param ewma_decay: ``None`` only (PPG has no EWMA; :class:`PPG_EWMA` has one)
    :param kwargs: keyword arguments of :class:`PPG_EWMA`
    """

    def __init__(self, *args: Any, ewma_decay: None = None, **kwargs: Any):
        if ewma_decay is not None:
            raise ValueError(
                f"PPG has no EWMA proximal policy: ewma_decay must be None, got {ewma_decay!r}. "
                "For PPG with an EWMA proximal policy use PPG_EWMA(..., ewma_decay=...)."
            )
        super().__init__(*args, ewma_decay=None, **kwargs)  # type: ignore[misc]

    # for `inspect.signature(PPG)` and `help(PPG)`: PPG_EWMA's parameters, with ewma_decay=None
    __init__.__signature__ = inspect.signature(PPG_EWMA.__init__).replace(  # type: ignore[attr-defined]
        parameters=[
            param.replace(default=None) if param.name == "ewma_decay" else param
            for param in inspect.signature(PPG_EWMA.__init__).parameters.values()
        ]
    )

    @classmethod
    def _check_saved_data(cls, data: dict[str, Any], path: Any) -> None:
        # plain JSON when it is a number or None; a schedule or "auto" would be a string or serialized
        ewma_decay = data.get("ewma_decay")
        if ewma_decay is not None:
            raise ValueError(
                f"{os.fspath(path)} was saved by PPG_EWMA (ewma_decay={ewma_decay!r}), not by PPG: load it with "
                "PPG_EWMA.load()"
            )
