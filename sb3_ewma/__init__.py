"""PPO-EWMA and PPG-EWMA (Hilton, Cobbe & Schulman, *Batch size-invariance for policy optimization*) for Stable-Baselines3."""

from typing import TYPE_CHECKING, Any

# the registry of the package's algorithms (it imports none of them), from which their errors name one another
from sb3_ewma import algorithms  # noqa: F401
from sb3_ewma.common.ewma import (
    center_of_mass_from_ewma_decay,
    ewma_decay_from_center_of_mass,
    ewma_decay_from_span,
    ewma_span_from_decay,
)
from sb3_ewma.ppg_ewma import PPG, PPG_EWMA
from sb3_ewma.ppo_ewma import PPO_EWMA

if TYPE_CHECKING:
    # what type checkers see of the names that __getattr__ imports on first use
    from sb3_ewma.maskable_ppo_ewma import MaskablePPO_EWMA
    from sb3_ewma.recurrent_ppo_ewma import RecurrentPPO_EWMA
    from sb3_ewma.scale import scale_hyperparams, scale_hyperparams_with_report


def __getattr__(name: str) -> Any:
    # imported on first use, so that `python -m sb3_ewma.scale` does not find the module already imported
    if name in ("scale_hyperparams", "scale_hyperparams_with_report"):
        from sb3_ewma import scale

        return getattr(scale, name)
    # sb3-contrib's PPO variants: imported on first use too (importing sb3_contrib is slow, and noisy where the
    # legacy `gym` package is installed)
    if name == "RecurrentPPO_EWMA":
        from sb3_ewma.recurrent_ppo_ewma import RecurrentPPO_EWMA

        return RecurrentPPO_EWMA
    if name == "MaskablePPO_EWMA":
        from sb3_ewma.maskable_ppo_ewma import MaskablePPO_EWMA

        return MaskablePPO_EWMA
    raise AttributeError(f"module 'sb3_ewma' has no attribute {name!r}")


del TYPE_CHECKING, Any  # only for the annotations: the package's namespace holds what it offers (see __dir__)


def _read_version() -> str:
    import os

    with open(os.path.join(os.path.dirname(__file__), "version.txt")) as file:
        return file.read().strip()


__version__ = _read_version()
del _read_version

__all__ = [
    "PPG",
    "PPG_EWMA",
    "PPO_EWMA",
    "MaskablePPO_EWMA",
    "RecurrentPPO_EWMA",
    "__version__",
    "center_of_mass_from_ewma_decay",
    "ewma_decay_from_center_of_mass",
    "ewma_decay_from_span",
    "ewma_span_from_decay",
    "scale_hyperparams",
    "scale_hyperparams_with_report",
]


def __dir__() -> list[str]:
    # what the package offers, the lazily imported names included (not the modules imported along the way)
    return sorted(__all__)
