"""The checks of PPG_EWMA's hyperparameters that are PPG's own, made before anything is built."""

from typing import Any

from stable_baselines3.common.type_aliases import Schedule

from sb3_ewma.common.checks import check_integer, check_number, check_schedule
from sb3_ewma.common.minibatches import check_minibatch_sampling
from sb3_ewma.ppg_ewma.policies import check_arch


def check_ppg_hyperparams(
    *,
    n_steps: int,
    batch_size: int,
    n_value_epochs: int,
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
    (The hyperparameters PPG shares with PPO, ``n_steps``, ``batch_size`` and ``n_epochs`` among them, are checked
    before, by :func:`sb3_ewma.common.checks.check_on_policy_hyperparams`.)
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
    check_integer("n_value_epochs", n_value_epochs, 0)
    check_integer("n_policy_iterations", n_policy_iterations, 1)
    check_integer("n_aux_epochs", n_aux_epochs, 0)
    check_number("beta_clone", beta_clone, 0.0)
    check_arch(arch)
    if policy_kwargs is not None and policy_kwargs.get("arch", arch) != arch:
        raise ValueError(f"policy_kwargs['arch']={policy_kwargs['arch']!r} contradicts arch={arch!r}: use `arch`")
    check_schedule("aux_learning_rate", aux_learning_rate, allow_none=True)
    if aux_batch_size is not None:
        check_integer("aux_batch_size", aux_batch_size, 1)
    if aux_micro_batch_size is not None:
        check_integer("aux_micro_batch_size", aux_micro_batch_size, 1)
        minibatch = batch_size if aux_batch_size is None else aux_batch_size
        if aux_micro_batch_size > minibatch:
            raise ValueError(
                f"aux_micro_batch_size must not exceed aux_batch_size (default: batch_size) = {minibatch}, "
                f"got {aux_micro_batch_size}"
            )
