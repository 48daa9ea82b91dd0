"""The rules of PPG's own hyperparameters, beside those it shares with PPO (:data:`sb3_ewma.common.rules.RULES`)."""

from collections.abc import Mapping
from typing import Any

from sb3_ewma.common.checks import HyperparameterError
from sb3_ewma.common.minibatches import MINIBATCH_SAMPLINGS, check_minibatch_sampling
from sb3_ewma.common.rules import (
    RELATIONS,
    RULES,
    Rule,
    integer,
    number,
    one_of,
    optional,
    with_rules,
)
from sb3_ewma.ppg_ewma.policies import ARCHITECTURES

PPG_RULES = with_rules(
    RULES,
    Rule("n_epochs", "an integer >= 0", integer(0)),  # 0: value epochs only
    Rule("n_value_epochs", "an integer >= 0", integer(0)),
    Rule("n_policy_iterations", "an integer >= 1", integer(1)),
    Rule("n_aux_epochs", "an integer >= 0", integer(0)),
    Rule("beta_clone", "a finite number >= 0", number(0)),
    Rule("arch", f"one of {ARCHITECTURES}", one_of(ARCHITECTURES)),
    Rule(
        "aux_learning_rate",
        "None, a number >= 0 or a schedule",
        optional(lambda value: callable(value) or number(0)(value)),
        schedule=True,
    ),
    # as learning_rate=0
    Rule(
        "aux_learning_rate",
        "> 0",
        optional(lambda value: callable(value) or value > 0),
        warning="the auxiliary phase never changes the policy",
    ),
    Rule("aux_batch_size", "an integer >= 1", optional(integer(1))),
    Rule("aux_micro_batch_size", "an integer >= 1", optional(integer(1))),
    Rule("aux_optimizer_kwargs", "None or a dict", optional(lambda value: isinstance(value, dict))),
    Rule("aux_minibatch_sampling", f"one of {MINIBATCH_SAMPLINGS}", one_of(MINIBATCH_SAMPLINGS)),
)


def _aux_minibatch(settings: Mapping[str, Any]) -> int:
    return settings["batch_size"] if settings["aux_batch_size"] is None else settings["aux_batch_size"]


def _aux_minibatch_sampling_fits(settings: Mapping[str, Any]) -> None:
    sampling, minibatch = settings["aux_minibatch_sampling"], _aux_minibatch(settings)
    check_minibatch_sampling(
        "aux_minibatch_sampling", sampling, "aux_batch_size (default: batch_size)", minibatch, settings["n_steps"]
    )


def _arch_agrees(settings: Mapping[str, Any]) -> None:
    policy_kwargs, arch = settings["policy_kwargs"], settings["arch"]
    if isinstance(policy_kwargs, Mapping) and policy_kwargs.get("arch", arch) != arch:
        raise HyperparameterError(f"policy_kwargs['arch']={policy_kwargs['arch']!r} contradicts arch={arch!r}: use `arch`")


def _micro_batch_fits(settings: Mapping[str, Any]) -> None:
    micro_batch, minibatch = settings["aux_micro_batch_size"], _aux_minibatch(settings)
    if micro_batch is not None and micro_batch > minibatch:
        raise HyperparameterError(
            f"aux_micro_batch_size must not exceed aux_batch_size (default: batch_size) = {minibatch}, got {micro_batch}"
        )


PPG_RELATIONS = (*RELATIONS, _aux_minibatch_sampling_fits, _arch_agrees, _micro_batch_fits)


def aux_batch_size_problem(
    algorithm_name: str, n_policy_iterations: int, n_steps: int, n_envs: int, batch_size: int, aux_batch_size: int
) -> str | None:
    """
    Why ``aux_batch_size`` does not divide the auxiliary buffer, with the setting to change and a value that fits; None
    when it fits. ``algorithm_name`` is named in the advice for a saved model.
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
        # aux_batch_size defaults to batch_size, which exceeds the rollout: batch_size is the setting to change
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
