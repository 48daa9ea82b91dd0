"""
The paper's ablations, beside the algorithms: artificial staleness (section 5.1), :class:`StalePPO_EWMA`,
:class:`StaleRecurrentPPO_EWMA` and :class:`StaleMaskablePPO_EWMA` with ``set_staleness(staleness, mode)``.
"""

from sb3_ewma.ablations.staleness import (
    STALENESS_MODES,
    ArtificialStaleness,
    StaleMaskablePPO_EWMA,
    StalePPO_EWMA,
    StaleRecurrentPPO_EWMA,
)

__all__ = ["STALENESS_MODES", "ArtificialStaleness", "StaleMaskablePPO_EWMA", "StalePPO_EWMA", "StaleRecurrentPPO_EWMA"]
