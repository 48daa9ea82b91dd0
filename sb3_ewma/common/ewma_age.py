"""
The age of the proximal EWMA when ``ewma_decay`` names a rule: its center of mass ``COM`` in policy optimizer steps,
from ``M`` minibatches per epoch and ``E`` policy epochs, is ``M`` (``"paper"``), ``E * M`` (``"max_age"``: PPO's
maximum age), ``E * M / 2`` (``"mean_age"``: PPO's mean age) or ``max(M, E * M / 2)`` (``"auto"``); the decay is
``COM / (COM + 1)``.

``"auto"`` is ``"mean_age"`` with several epochs because, of the three rules, it met SB3 PPO's returns on the most
rl-zoo3 tasks (the benchmarks page, "The EWMA's age with many epochs"), and ``"paper"`` with one, the value the paper
measured for PPG-EWMA.
"""

from sb3_ewma.common.ewma import ewma_decay_from_center_of_mass

EWMA_DECAY_AUTO = "auto"
"""The name that selects :data:`EWMA_DECAY_AUTO_RULE`."""

EWMA_AGE_RULES: tuple[str, ...] = ("paper", "max_age", "mean_age")
"""The named rules for the proximal EWMA's center of mass."""

EWMA_DECAY_AUTO_SEVERAL_EPOCHS = "mean_age"
"""The rule ``"auto"`` selects with several epochs (with one: ``"paper"``)."""

EWMA_DECAY_NAMES: tuple[str, ...] = (EWMA_DECAY_AUTO, *EWMA_AGE_RULES)
"""Every name ``ewma_decay`` accepts besides a number and ``None``."""


def ewma_age_rule(name: str, n_epochs: int) -> str:
    """
    :param name: one of :data:`EWMA_DECAY_NAMES`
    :param n_epochs: ``E``, the policy epochs per iteration (``"auto"`` depends on it)
    :return: the rule it selects (``"auto"``: :data:`EWMA_DECAY_AUTO_SEVERAL_EPOCHS` with ``E >= 2``, else ``"paper"``)
    """
    if name == EWMA_DECAY_AUTO:
        return EWMA_DECAY_AUTO_SEVERAL_EPOCHS if n_epochs >= 2 else "paper"
    if name not in EWMA_AGE_RULES:
        raise ValueError(f"ewma_decay must be a number in [0, 1), None or one of {EWMA_DECAY_NAMES}, got {name!r}")
    return name


def ewma_center_of_mass_by_rule(name: str, minibatches_per_epoch: int, n_epochs: int) -> float:
    """
    The proximal EWMA's center of mass, in policy optimizer steps, by a named rule.

    :param name: one of :data:`EWMA_DECAY_NAMES`
    :param minibatches_per_epoch: ``M``, the policy optimizer steps per epoch (``>= 1``)
    :param n_epochs: ``E``, the policy epochs per iteration (0 is read as 1)
    :return: ``M`` (``"paper"``), ``E * M`` (``"max_age"``), ``E * M / 2`` (``"mean_age"``) or
        ``max(M, E * M / 2)`` (``"auto"``)
    """
    if minibatches_per_epoch < 1:
        raise ValueError(f"minibatches_per_epoch must be >= 1, got {minibatches_per_epoch}")
    epochs = max(int(n_epochs), 1)
    rule = ewma_age_rule(name, epochs)
    if rule == "paper":
        return float(minibatches_per_epoch)
    if rule == "max_age":
        return float(epochs * minibatches_per_epoch)
    return epochs * minibatches_per_epoch / 2.0


def ewma_decay_by_rule(name: str, minibatches_per_epoch: int, n_epochs: int) -> float:
    """
    :return: the decay ``COM / (COM + 1)`` for :func:`ewma_center_of_mass_by_rule`'s center of mass
    """
    return ewma_decay_from_center_of_mass(ewma_center_of_mass_by_rule(name, minibatches_per_epoch, n_epochs))
