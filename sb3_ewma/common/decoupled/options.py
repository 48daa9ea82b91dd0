"""What the options that every algorithm of this package adds resolve to (the EWMA decay)."""

from sb3_ewma.common.ewma_age import ewma_decay_by_rule


def resolve_ewma_decay(ewma_decay: float | str | None, minibatches_per_epoch: int, n_epochs: int = 1) -> float | None:
    """
    The decay of the proximal-policy EWMA: ``None`` (no EWMA), the given number, or for a rule's name the decay that
    the rule gives for ``minibatches_per_epoch`` and ``n_epochs`` (:mod:`sb3_ewma.common.ewma_age`).
    """
    if ewma_decay is None:
        return None
    if isinstance(ewma_decay, str):
        return ewma_decay_by_rule(ewma_decay, minibatches_per_epoch, n_epochs)
    return float(ewma_decay)
