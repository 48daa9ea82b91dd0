"""
Artificial staleness (Hilton, Cobbe & Schulman 2021, section 5.1 and figure 1): the data of an iteration is trained on
``staleness`` iterations after it was collected, to measure how each choice of the old policy copes with stale data::

    from sb3_ewma import PPO_EWMA
    from sb3_ewma.ablations import with_staleness

    model = with_staleness(PPO_EWMA("MlpPolicy", "CartPole-v1", ewma_decay=None), staleness=4, mode="behavior")
    model.learn(100_000)

The mechanics (the queue of stale rollouts, their advantages) are in :mod:`sb3_ewma.common.staleness`.
"""

from typing import Any, TypeVar

import numpy as np

from sb3_ewma.common.decoupled.options import uses_proximal_network
from sb3_ewma.maskable_ppo_ewma import MaskablePPO_EWMA
from sb3_ewma.ppo_ewma import PPO_EWMA
from sb3_ewma.recurrent_ppo_ewma import RecurrentPPO_EWMA

STALENESS_MODES = ("decoupled", "behavior", "proximal")
"""The old policies of the clipped objective with stale data, as the authors define them (see :func:`with_staleness`)."""

Model = TypeVar("Model", PPO_EWMA, RecurrentPPO_EWMA, MaskablePPO_EWMA)


def check_staleness(model: Any, staleness: Any, mode: Any) -> None:
    """Raise a ``ValueError`` naming what :func:`with_staleness` cannot do with these arguments (nothing is changed)."""
    if not isinstance(model, (PPO_EWMA, RecurrentPPO_EWMA, MaskablePPO_EWMA)):
        raise ValueError(
            "model must be a PPO_EWMA, RecurrentPPO_EWMA or MaskablePPO_EWMA, got "
            f"{type(model).__name__} (PPG_EWMA and PPG train on data one iteration stale with async_rollouts=True)"
        )
    if isinstance(staleness, bool) or not isinstance(staleness, (int, np.integer)) or staleness < 0:
        raise ValueError(f"staleness must be an integer >= 0 (iterations), got {staleness!r}")
    if mode not in STALENESS_MODES:
        raise ValueError(f"mode must be one of {STALENESS_MODES}, got {mode!r}")
    if staleness == 0:
        return
    if mode == "proximal" and not isinstance(model, PPO_EWMA):
        # the recent policy's log-probabilities on stored data need the rollout's LSTM states or action masks
        raise ValueError(
            "mode must be 'decoupled' or 'behavior' with staleness > 0 for RecurrentPPO_EWMA and "
            f"MaskablePPO_EWMA ('proximal' is PPO_EWMA's only), got {mode!r}"
        )
    if model.async_rollouts:
        raise ValueError(
            f"async_rollouts={model.rollout_collector!r} trains on data one iteration stale already: artificial "
            f"staleness needs a model with async_rollouts=False, got staleness={staleness}"
        )
    if model.ewma_decay is None and mode == "behavior" and model.kl_coef > 0 and model.kl_estimator == "exact":
        raise ValueError(
            "kl_estimator='exact' needs the proximal policy's distribution, which staleness_mode='behavior' with "
            "staleness > 0 and ewma_decay=None does not keep: use kl_estimator='sample'"
        )


def with_staleness(model: Model, staleness: int, mode: str = "decoupled") -> Model:
    """
    Make ``model`` train on the data of each iteration ``staleness`` iterations after it was collected (no training
    during the first ``staleness`` iterations of a model); returns the model. ``save`` and ``load`` keep the setting;
    ``staleness=0`` removes it.

    The advantages of stale data are computed when it is used, as the authors do: PPO_EWMA bootstraps them from the
    current value function (the values along the rollout stay those predicted at collection); RecurrentPPO_EWMA and
    MaskablePPO_EWMA keep those of the collection (anew, they would need the LSTM states at the rollout's end).

    :param model: a :class:`~sb3_ewma.PPO_EWMA`, :class:`~sb3_ewma.RecurrentPPO_EWMA` or
        :class:`~sb3_ewma.MaskablePPO_EWMA` (not with ``async_rollouts``, which trains on data one iteration stale)
    :param staleness: iterations between the collection of the data and the training on it
    :param mode: which policies the loss uses with stale data (at staleness 0 the three are the same loss), as the
        authors define them: ``"decoupled"`` (importance sampling with the behavior policy, clipping anchored at the
        recent policy, the policy at the start of the iteration), ``"behavior"`` (both with the behavior policy: PPO on
        stale data) or ``"proximal"`` (both with the recent policy; PPO_EWMA only). With an EWMA (``ewma_decay`` not
        None) the EWMA replaces only the clipping anchor, in every mode.
    """
    check_staleness(model, staleness, mode)
    model.staleness, model.staleness_mode = int(staleness), mode
    if "proximal" in vars(model):
        # a built model: the proximal policy may need a network of its own now (a snapshot), or no longer
        exact_kl = model._needs_distributions
        needs_network = uses_proximal_network(model.proximal_decay, model._rollout_staleness, mode, exact_kl)
        if needs_network != (model.proximal.network is not None):
            model.proximal = model._new_proximal_policy()
        model._stale_buffers.clear()
    return model
