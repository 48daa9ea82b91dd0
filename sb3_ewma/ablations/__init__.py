"""
The paper's ablations, beside the algorithms: settings that its experiments study and that training does not need.

- :func:`~sb3_ewma.ablations.staleness.with_staleness`: artificial staleness (section 5.1).
"""

from sb3_ewma.ablations.staleness import STALENESS_MODES, with_staleness

__all__ = ["STALENESS_MODES", "with_staleness"]
