"""
The options that every algorithm of this package adds to its parent's: their check (their rules are in
:data:`sb3_ewma.common.rules.RULES`) and what they resolve to (the EWMA decay).
"""

from typing import Any

from sb3_ewma.common.checks import check_hyperparameters
from sb3_ewma.common.ewma_age import ewma_decay_by_rule
from sb3_ewma.common.rules import RELATIONS, RULES


def check_decoupled_options(**options: Any) -> None:
    """Raise a ``ValueError`` naming the first decoupled option outside its allowed range (and the settings given)."""
    check_hyperparameters(options, RULES, RELATIONS)


def resolve_ewma_decay(ewma_decay: float | str | None, minibatches_per_epoch: int, n_epochs: int = 1) -> float | None:
    """
    The decay of the proximal-policy EWMA: ``None`` (no EWMA), the given number, or for a name (``"auto"``,
    ``"paper"``, ``"max_age"``, ``"mean_age"``) the decay of the center of mass that the rule gives for ``M`` =
    ``minibatches_per_epoch`` and ``E`` = ``n_epochs`` (:mod:`sb3_ewma.common.ewma_age`).
    """
    if ewma_decay is None:
        return None
    if isinstance(ewma_decay, str):
        return ewma_decay_by_rule(ewma_decay, minibatches_per_epoch, n_epochs)
    return float(ewma_decay)
