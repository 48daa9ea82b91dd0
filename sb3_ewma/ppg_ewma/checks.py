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


def aux_batch_size_problem(
    algorithm_name: str, n_policy_iterations: int, n_steps: int, n_envs: int, batch_size: int, aux_batch_size: int
) -> str | None:
    """
    Why ``aux_batch_size`` does not fit the auxiliary buffer of ``n_policy_iterations * n_steps * n_envs`` steps (it
    must divide it), with the setting to change and a value that fits; None when it fits.

    :param algorithm_name: the class, named in the advice for a saved model
    """
    aux_size = n_policy_iterations * n_steps * n_envs
    if aux_batch_size <= aux_size and aux_size % aux_batch_size == 0:
        return None
    # the largest that fits, in whole rollouts of one environment when the given one was
    whole_rollouts = aux_batch_size % n_steps == 0
    fitting = [
        size
        for size in range(min(aux_batch_size, aux_size), 0, -1)
        if aux_size % size == 0 and (size % n_steps == 0 or not whole_rollouts)
    ]
    rollout_size = n_steps * n_envs
    if aux_batch_size == batch_size and batch_size > rollout_size:
        # the auxiliary minibatch is batch_size's default, and batch_size itself exceeds the rollout: that is the
        # setting to change (the policy phase trains on the whole rollout as one truncated minibatch)
        return (
            f"batch_size={batch_size} is larger than the rollout of n_steps * n_envs = {n_steps} *"
            f" {n_envs} = {rollout_size} steps, and the auxiliary phase's minibatch aux_batch_size defaults to"
            f" it but must divide the auxiliary buffer of n_policy_iterations * n_steps * n_envs ="
            f" {n_policy_iterations} * {n_steps} * {n_envs} = {aux_size} steps: pass a batch_size"
            f" that divides the rollout (batch_size={rollout_size} or a divisor of it), or more n_steps, or"
            f" aux_batch_size (e.g. aux_batch_size={fitting[0]})"
        )
    return (
        f"aux_batch_size (default: batch_size) must divide the auxiliary buffer of n_policy_iterations * n_steps"
        f" * n_envs = {n_policy_iterations} * {n_steps} * {n_envs} = {aux_size} steps,"
        f" got {aux_batch_size}: pass e.g. aux_batch_size={fitting[0]} (to the constructor, or to"
        f" {algorithm_name}.load(path, env, aux_batch_size={fitting[0]}) for a saved model)"
    )
