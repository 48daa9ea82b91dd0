"""
The options that every algorithm of this package adds to its parent's: their allowed values, their check
(:func:`check_decoupled_options`, called by each constructor before anything is built), and what they resolve to (the
EWMA decay, whether the proximal policy needs a network).
"""

from sb3_ewma.common.checks import check_number, warn_at_caller
from sb3_ewma.common.collection.overlap import check_async_rollouts
from sb3_ewma.common.distributed.process_group import check_distributed_argument
from sb3_ewma.common.ewma import check_decay
from sb3_ewma.common.ewma_age import EWMA_DECAY_NAMES, ewma_decay_by_rule
from sb3_ewma.common.minibatches import check_minibatch_sampling

KL_ESTIMATORS = ("sample", "exact")
ADVANTAGE_NORMALIZATIONS = ("minibatch", "ewma")


def check_ewma_decay(ewma_decay: float | str | None) -> None:
    """Raise a ``ValueError`` unless ``ewma_decay`` is None, a number in [0, 1) or a name of a rule."""
    if ewma_decay is not None and ewma_decay not in EWMA_DECAY_NAMES:
        if isinstance(ewma_decay, str):
            raise ValueError(f"ewma_decay must be a number in [0, 1), None or one of {EWMA_DECAY_NAMES}, got {ewma_decay!r}")
        check_decay("ewma_decay", ewma_decay)


def check_decoupled_options(
    *,
    ewma_decay: float | str | None,
    kl_coef: float,
    kl_estimator: str,
    imp_samp_max: float,
    normalize_advantage: bool,
    advantage_normalization: str,
    advantage_ewma_decay: float,
    minibatch_sampling: str,
    log_gradient_noise_scale: bool,
    distributed: bool | None,
    async_rollouts: bool | str,
    batch_size: int | None,
    n_steps: int,
    compile_step: bool | str = "auto",
) -> None:
    """
    Raise a ``ValueError`` naming the first decoupled option outside its allowed range, before anything is built (the
    parent's ``normalize_advantage``, ``batch_size`` and ``n_steps`` are those the options depend on).
    """
    check_ewma_decay(ewma_decay)
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
    check_minibatch_sampling("minibatch_sampling", minibatch_sampling, "batch_size", batch_size, n_steps)
    if not isinstance(log_gradient_noise_scale, bool):
        raise ValueError(f"log_gradient_noise_scale must be True or False, got {log_gradient_noise_scale!r}")
    check_distributed_argument(distributed)
    check_async_rollouts(async_rollouts)
    if compile_step is not True and compile_step is not False and compile_step != "auto":
        raise ValueError(f"compile_step must be True, False or 'auto', got {compile_step!r}")


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
