"""
The options that every algorithm of this package adds to its parent's (:class:`DecoupledOptions`): their allowed
values, their check, and what they resolve to (the EWMA decay, whether the proximal policy
needs a network); and how a constructor hands its parent the parent's own arguments (:func:`parent_arguments`).
"""

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from sb3_ewma.common.checks import arguments_for, check_number, check_on_policy_hyperparams, warn_at_caller
from sb3_ewma.common.collection.overlap import check_async_rollouts
from sb3_ewma.common.distributed.process_group import check_distributed_argument, rank_local_settings
from sb3_ewma.common.ewma import check_decay
from sb3_ewma.common.ewma_age import EWMA_DECAY_NAMES, ewma_decay_by_rule
from sb3_ewma.common.minibatches import check_minibatch_sampling

KL_ESTIMATORS = ("sample", "exact")
ADVANTAGE_NORMALIZATIONS = ("minibatch", "ewma")


def check_decoupled_options(
    *,
    ewma_decay: float | str | None,
    kl_coef: float,
    kl_estimator: str,
    imp_samp_max: float,
    normalize_advantage: bool,
    advantage_normalization: str,
    advantage_ewma_decay: float,
) -> None:
    """
    Raise a ``ValueError`` naming the first decoupled option outside its allowed range (``normalize_advantage`` is the
    parent's).
    """
    if ewma_decay is not None and ewma_decay not in EWMA_DECAY_NAMES:
        if isinstance(ewma_decay, str):
            raise ValueError(f"ewma_decay must be a number in [0, 1), None or one of {EWMA_DECAY_NAMES}, got {ewma_decay!r}")
        check_decay("ewma_decay", ewma_decay)
    check_number("kl_coef", kl_coef, 0.0)
    if kl_estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {kl_estimator!r}")
    if not isinstance(imp_samp_max, (int, float)) or not (imp_samp_max == 0 or imp_samp_max > 1):
        raise ValueError(f"imp_samp_max must be 0 (no cap) or a number > 1, got {imp_samp_max!r}")
    if advantage_normalization not in ADVANTAGE_NORMALIZATIONS:
        raise ValueError(f"advantage_normalization must be one of {ADVANTAGE_NORMALIZATIONS}, got {advantage_normalization!r}")
    check_decay("advantage_ewma_decay", advantage_ewma_decay)
    if advantage_normalization == "minibatch" and advantage_ewma_decay != 0:
        warn_at_caller(
            f"advantage_ewma_decay={advantage_ewma_decay!r} has no effect with advantage_normalization='minibatch' "
            "(each minibatch's own statistics): set advantage_normalization='ewma' to use it"
        )
    if advantage_normalization == "ewma" and not normalize_advantage:
        raise ValueError("advantage_normalization='ewma' needs normalize_advantage=True")


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


def uses_proximal_network(ewma_decay: float | None, staleness: int, staleness_mode: str, exact_kl: bool = False) -> bool:
    """
    Whether the proximal policy needs a network of its own: an EWMA, or (EWMA off) a snapshot of the policy at the
    start of each iteration when the exact KL penalty needs its action distribution or when stale data is anchored at
    the recent policy (``"decoupled"``). Otherwise the proximal policy's log-probabilities are the rollout buffer's:
    the behavior policy's, or the recent policy's that replaced them (``"proximal"`` with stale data).
    """
    if ewma_decay is not None or exact_kl:
        return True
    return staleness > 0 and staleness_mode == "decoupled"


@dataclass(frozen=True)
class DecoupledOptions:
    """
    The options every algorithm of this package takes besides its parent's, with their defaults (their meaning is in
    each algorithm's docstring; the shared ``:param`` text in
    :data:`~sb3_ewma.common.decoupled.arguments.SHARED_ARGUMENTS_DOC`). Made by
    :meth:`from_arguments`, which checks them; the algorithm stores each as an attribute of the same name (SB3's
    convention for hyperparameters, which ``save`` and ``load`` keep).
    """

    ewma_decay: float | str | None = "auto"
    kl_coef: float = 0.0
    kl_estimator: str = "sample"
    imp_samp_max: float = 100.0
    advantage_normalization: str = "minibatch"
    advantage_ewma_decay: float = 0.0
    minibatch_sampling: str = "steps"
    log_gradient_noise_scale: bool = False
    distributed: bool | None = None
    async_rollouts: bool | str = False

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any], **hyperparameter_checks: Any) -> "DecoupledOptions":
        """
        The options among a constructor's arguments (bound by
        :func:`~sb3_ewma.common.decoupled.arguments.constructor_arguments`), after checking them and the parent's PPO
        hyperparameters among the same arguments: a ``ValueError`` names the first one out of range, before anything
        is built (no environment is created on bad input).

        :param arguments: the constructor's arguments by name (options it lacks keep their defaults)
        :param hyperparameter_checks: options of :func:`check_on_policy_hyperparams` (``batch_size_may_be_none``,
            ``min_n_epochs``)
        """
        check_on_policy_hyperparams(**arguments_for(check_on_policy_hyperparams, arguments), **hyperparameter_checks)
        options = cls(**{field.name: arguments[field.name] for field in fields(cls) if field.name in arguments})
        check_decoupled_options(**arguments_for(check_decoupled_options, {**arguments, **options.as_dict()}))
        batch_size, n_steps = arguments["batch_size"], arguments["n_steps"]
        check_minibatch_sampling("minibatch_sampling", options.minibatch_sampling, "batch_size", batch_size, n_steps)
        check_distributed_argument(options.distributed)
        check_async_rollouts(options.async_rollouts)
        return options

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parent_arguments(parent: type, arguments: Mapping[str, Any], **overrides: Any) -> dict[str, Any]:
    """
    The keyword arguments of ``parent``'s constructor, taken by name from a constructor's ``arguments`` (bound by
    :func:`~sb3_ewma.common.decoupled.arguments.constructor_arguments`), then ``overrides``: the model is not built
    yet (``_init_setup_model=False``: the algorithm builds it once its own options are set), and the verbosity and
    device are this rank's (:func:`rank_local_settings`).
    """
    keywords = arguments_for(parent, arguments)
    keywords["verbose"], keywords["device"] = rank_local_settings(
        arguments.get("distributed"), arguments["verbose"], arguments["device"]
    )
    return {**keywords, "_init_setup_model": False, **overrides}
