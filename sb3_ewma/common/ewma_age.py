"""
The age of the proximal EWMA when ``ewma_decay`` names a rule instead of a number.

The EWMA's center of mass (``COM = beta / (1 - beta)``, its mean age in policy optimizer steps) follows from the
iteration's shape: ``M`` minibatches per epoch (``ceil(n_steps * n_envs / batch_size)``) and ``E`` policy epochs
(``n_epochs``). The rules, by name:

- ``"paper"``: ``COM = M``. The value Hilton, Cobbe & Schulman used for PPO-EWMA and PPG-EWMA (8, with 8 minibatches
  per epoch, for PPO with 3 epochs as for PPG with 1), not re-tuned; 2 and 32 were no better on Procgen.
- ``"max_age"``: ``COM = E * M``. The paper's stated reason for its value, "the number of minibatches per policy phase
  iteration ... so that the maximum age of the proximal policy is the same" as PPO's (whose proximal policy, the
  behavior policy, is ``E * M`` steps old at the last minibatch). Equal to ``"paper"`` with one epoch.
- ``"mean_age"``: ``COM = E * M / 2``. The same mean age as PPO's proximal policy over an iteration (which ages from 0
  to ``E * M`` steps).
- ``"auto"``: the default, one of the above (:data:`EWMA_DECAY_AUTO_RULE`).

The decay is then ``beta = COM / (COM + 1)``.
"""

from sb3_ewma.common.ewma import ewma_decay_from_center_of_mass

EWMA_DECAY_AUTO = "auto"
"""The name that selects :data:`EWMA_DECAY_AUTO_RULE`."""

EWMA_AGE_RULES: tuple[str, ...] = ("paper", "max_age", "mean_age")
"""The named rules for the proximal EWMA's center of mass (see the module's docstring)."""

EWMA_DECAY_AUTO_RULE = "paper"
"""
What ``ewma_decay="auto"`` means: the paper's setting, center of mass = minibatches per epoch. Kept until a
measurement on rl-zoo3's many-epoch entries (``benchmarks.learning.zoo_table --experiment ewma_age``) shows another rule
learning at least as well; the figures so far are in ``benchmarks/results/zoo_table/ewma_age/benchmark.md``.
"""

EWMA_DECAY_NAMES: tuple[str, ...] = (EWMA_DECAY_AUTO, *EWMA_AGE_RULES)
"""Every name ``ewma_decay`` accepts besides a number and ``None``."""


def ewma_age_rule(name: str) -> str:
    """
    :param name: one of :data:`EWMA_DECAY_NAMES`
    :return: the rule it selects (``"auto"`` resolved to :data:`EWMA_DECAY_AUTO_RULE`)
    """
    if name == EWMA_DECAY_AUTO:
        return EWMA_DECAY_AUTO_RULE
    if name not in EWMA_AGE_RULES:
        raise ValueError(f"ewma_decay must be a number in [0, 1), None or one of {EWMA_DECAY_NAMES}, got {name!r}")
    return name


def ewma_center_of_mass_by_rule(name: str, minibatches_per_epoch: int, n_epochs: int) -> float:
    """
    The proximal EWMA's center of mass, in policy optimizer steps, by a named rule.

    :param name: one of :data:`EWMA_DECAY_NAMES`
    :param minibatches_per_epoch: ``M``, the policy optimizer steps per epoch (``>= 1``)
    :param n_epochs: ``E``, the policy epochs per iteration (``>= 1``; 0 is read as 1: no epoch, no age to match)
    :return: ``M`` (``"paper"``), ``E * M`` (``"max_age"``) or ``E * M / 2`` (``"mean_age"``)
    """
    if minibatches_per_epoch < 1:
        raise ValueError(f"minibatches_per_epoch must be >= 1, got {minibatches_per_epoch}")
    rule = ewma_age_rule(name)
    epochs = max(int(n_epochs), 1)
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
