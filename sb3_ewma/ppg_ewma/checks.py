"""The checks of PPG_EWMA's hyperparameters that are PPG's own, made before anything is built."""

import math
from typing import Any

import numpy as np
from stable_baselines3.common.type_aliases import Schedule

from sb3_ewma.common.minibatches import check_minibatch_sampling
from sb3_ewma.ppg_ewma.policies import check_arch


def _check_count(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _is_positive_number(value: object) -> bool:
    """A finite real number > 0 (not a bool)."""
    return not isinstance(value, bool) and isinstance(value, (int, float, np.number)) and bool(0 < value < math.inf)


def check_ppg_hyperparams(
    *,
    n_steps: int,
    batch_size: int,
    n_epochs: int,
    n_value_epochs: int,
    normalize_advantage: bool,
    n_policy_iterations: int,
    n_aux_epochs: int,
    beta_clone: float,
    arch: str,
    aux_learning_rate: float | Schedule | None,
    aux_batch_size: int | None,
    aux_micro_batch_size: int | None,
    aux_optimizer_kwargs: dict[str, Any] | None,
    minibatch_sampling: str,
    aux_minibatch_sampling: str,
    policy_kwargs: dict[str, Any] | None,
) -> None:
    """
    Raise a ``ValueError`` naming the first PPG hyperparameter outside its allowed range: the minibatch sampling of
    both phases, ``aux_optimizer_kwargs``, then the counts, ``beta_clone``, ``arch`` and the auxiliary phase's sizes.
    (The hyperparameters PPG shares with PPO are checked by :func:`sb3_ewma.common.checks.check_on_policy_hyperparams`.)
    """
    check_minibatch_sampling("minibatch_sampling", minibatch_sampling, "batch_size", batch_size, n_steps)
    check_minibatch_sampling(
        "aux_minibatch_sampling",
        aux_minibatch_sampling,
        "aux_batch_size (default: batch_size)",
        batch_size if aux_batch_size is None else aux_batch_size,
        n_steps,
    )
    if aux_optimizer_kwargs is not None and not isinstance(aux_optimizer_kwargs, dict):
        raise ValueError(f"aux_optimizer_kwargs must be None or a dict, got {aux_optimizer_kwargs!r}")
    _check_count("n_steps", n_steps, 1)
    _check_count("batch_size", batch_size, 2 if normalize_advantage else 1)
    _check_count("n_epochs", n_epochs, 0)
    _check_count("n_value_epochs", n_value_epochs, 0)
    _check_count("n_policy_iterations", n_policy_iterations, 1)
    _check_count("n_aux_epochs", n_aux_epochs, 0)
    if not (_is_positive_number(beta_clone) or beta_clone == 0):
        raise ValueError(f"beta_clone must be a finite number >= 0, got {beta_clone!r}")
    check_arch(arch)
    if policy_kwargs is not None and policy_kwargs.get("arch", arch) != arch:
        raise ValueError(f"policy_kwargs['arch']={policy_kwargs['arch']!r} contradicts arch={arch!r}: use `arch`")
    if not (aux_learning_rate is None or callable(aux_learning_rate) or _is_positive_number(aux_learning_rate)):
        raise ValueError(f"aux_learning_rate must be None, a schedule or a number > 0, got {aux_learning_rate!r}")
    if aux_batch_size is not None:
        _check_count("aux_batch_size", aux_batch_size, 1)
    if aux_micro_batch_size is not None:
        _check_count("aux_micro_batch_size", aux_micro_batch_size, 1)
        minibatch = batch_size if aux_batch_size is None else aux_batch_size
        if aux_micro_batch_size > minibatch:
            raise ValueError(
                f"aux_micro_batch_size must not exceed aux_batch_size (default: batch_size) = {minibatch}, "
                f"got {aux_micro_batch_size}"
            )
