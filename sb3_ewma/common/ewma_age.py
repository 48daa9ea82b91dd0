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
- ``"auto"``: the default: ``"mean_age"`` with several epochs, ``"paper"`` with one (that is,
  ``COM = max(M, E * M / 2)``).

The decay is then ``beta = COM / (COM + 1)``.

``"auto"`` is ``"mean_age"`` with several epochs because, among the three rules, it met SB3 PPO's returns on the most
of rl-zoo3's tasks measured (the comparison, with its commands, is on the documentation's benchmarks page: "The EWMA's
age with many epochs"); no rule met them on all. This package's ``ppo_ewma`` entries for Swimmer-v4 and Ant-v4 set
``ewma_decay: max_age``, where ``"mean_age"`` fell short.

With one epoch the rules ``"paper"`` and ``"max_age"`` agree on ``M``, the value the paper measured for PPG-EWMA;
``"mean_age"`` would halve it, untested, so ``"auto"`` keeps ``M`` there. The Procgen entries of this package name
``"paper"`` explicitly (the paper's PPO-EWMA setting, 8 with 3 epochs of 8 minibatches).
"""

from sb3_ewma.common.ewma import ewma_decay_from_center_of_mass

EWMA_DECAY_AUTO = "auto"
"""The name that selects :data:`EWMA_DECAY_AUTO_RULE`."""

EWMA_AGE_RULES: tuple[str, ...] = ("paper", "max_age", "mean_age")
"""The named rules for the proximal EWMA's center of mass (see the module's docstring)."""

EWMA_DECAY_AUTO_SEVERAL_EPOCHS = "mean_age"
"""The rule ``"auto"`` selects with several epochs (with one: ``"paper"``); see the module's docstring."""

EWMA_DECAY_NAMES: tuple[str, ...] = (EWMA_DECAY_AUTO, *EWMA_AGE_RULES)
"""Every name ``ewma_decay`` accepts besides a number and ``None``."""


def ewma_age_rule(name: str, n_epochs: int) -> str:
    """
    :param name: one of :data:`EWMA_DECAY_NAMES`
    :param n_epochs: ``E``, the policy epochs per iteration (``"auto"`` depends on it)
    :return: the rule it selects: ``"auto"`` is :data:`EWMA_DECAY_AUTO_SEVERAL_EPOCHS` with ``E >= 2`` and
        ``"paper"`` with one epoch (or none)
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
    :param n_epochs: ``E``, the policy epochs per iteration (``>= 1``; 0 is read as 1: no epoch, no age to match)
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
