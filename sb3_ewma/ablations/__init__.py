"""
The paper's ablations, beside the algorithms: settings that its experiments study and that training does not need.

- Artificial staleness (section 5.1): :class:`~sb3_ewma.ablations.staleness.StalePPO_EWMA`,
  :class:`~sb3_ewma.ablations.staleness.StaleRecurrentPPO_EWMA` and
  :class:`~sb3_ewma.ablations.staleness.StaleMaskablePPO_EWMA`, with ``set_staleness(staleness, mode)``.
"""

from sb3_ewma.ablations.staleness import (
    STALENESS_MODES,
    ArtificialStaleness,
    StaleMaskablePPO_EWMA,
    StalePPO_EWMA,
    StaleRecurrentPPO_EWMA,
)

__all__ = ["STALENESS_MODES", "ArtificialStaleness", "StaleMaskablePPO_EWMA", "StalePPO_EWMA", "StaleRecurrentPPO_EWMA"]
