"""
What the algorithms take, as rules: a :class:`Rule` per parameter, applied by :func:`check_hyperparameters`. The
constructors' table is :data:`RULES` (with :data:`RELATIONS`, the checks of arguments together), ``learn``'s is
:data:`LEARN_RULES`. A bad value raises a ``ValueError`` naming the parameter, the value and what is allowed; a value
that SB3 trains with but that cannot train as asked gets a ``UserWarning`` at the caller's line instead.
"""

import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, TypeGuard

import numpy as np
import torch as th

from sb3_ewma.common.checks import (
    HyperparameterError,
    check_env_argument,
    check_observation_space,
    check_policy_kwargs,
    warn_at_caller,
    warn_cuda_unavailable,
)
from sb3_ewma.common.collection.overlap import check_async_rollouts
from sb3_ewma.common.distributed.process_group import check_distributed_argument
from sb3_ewma.common.ewma_age import EWMA_DECAY_NAMES
from sb3_ewma.common.finite import scheduled_value
from sb3_ewma.common.minibatches import MINIBATCH_SAMPLINGS, check_minibatch_sampling


def _is_integer(value: object) -> TypeGuard[numbers.Integral]:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    """A real number (``True`` too, which SB3 reads as 1), or a one-element tensor or array of one, as SB3 computes with."""
    if isinstance(value, np.ndarray):
        return value.size == 1 and value.dtype.kind in "biuf"
    if isinstance(value, th.Tensor):
        return value.numel() == 1 and not value.is_complex()
    return isinstance(value, numbers.Real)


def _is_number(value: object) -> TypeGuard[numbers.Real]:
    """A finite number (``True`` too, which SB3 reads as 1; a one-element tensor or array of one)."""
    return _is_real(value) and math.isfinite(float(value))  # type: ignore[arg-type]


class Rule(NamedTuple):
    """
    What one parameter allows: ``test(value)`` is true for the values allowed, ``allowed`` completes the sentence
    "<name> must be ..., got <value>". A rule applies where its parameter is given and ``when(settings)`` holds; a
    ``schedule`` rule also checks a schedule's first value (``"infinity"``: it may be ``math.inf``). A rule with a
    ``warning`` only warns: "<name>=<value> is not <allowed>: <warning>".
    """

    name: str
    allowed: str
    test: Callable[[Any], bool]
    when: Callable[[Mapping[str, Any]], bool] | None = None
    schedule: bool | str = False
    warning: str | None = None


def integer(minimum: int) -> Callable[[Any], bool]:
    """An integer ``>= minimum`` (``True`` too, which SB3 reads as 1; a string or ``1.0`` is not)."""
    return lambda value: isinstance(value, numbers.Integral) and int(value) >= minimum


def number(low: float, high: float = math.inf, low_open: bool = False) -> Callable[[Any], bool]:
    """A finite number in ``[low, high]`` (``(low, high]`` if ``low_open``)."""
    return lambda value: _is_number(value) and (low < float(value) if low_open else low <= float(value)) and value <= high


def decay(value: Any) -> bool:
    """A number in ``[0, 1)``."""
    return isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool) and bool(0 <= value < 1)


def one_of(choices: tuple[Any, ...]) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, str) and value in choices


def optional(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """``None``, or a value that ``test`` allows."""
    return lambda value: value is None or test(value)


def with_rules(base: tuple[Rule, ...], *rules: Rule) -> tuple[Rule, ...]:
    """``base`` with the rules of each parameter of ``rules`` replaced by these (in their place), the others appended."""
    replaced = {rule.name for rule in rules}
    merged: list[Rule] = []
    for rule in base:
        if rule.name not in replaced:
            merged.append(rule)
        elif rule.name not in {kept.name for kept in merged}:
            merged.extend(new for new in rules if new.name == rule.name)
    return (*merged, *(rule for rule in rules if rule.name not in {old.name for old in base}))


def check_hyperparameters(
    settings: Mapping[str, Any],
    rules: Iterable[Rule],
    relations: Iterable[Callable[[Mapping[str, Any]], None]] = (),
) -> None:
    """
    Raise a ``HyperparameterError`` naming the first setting that its rule refuses (or warn, for a rule with a
    ``warning``), then apply the ``relations``. Parameters that ``settings`` lacks are not checked.
    """
    for rule in rules:
        if rule.name not in settings or (rule.when is not None and not rule.when(settings)):
            continue
        value = settings[rule.name]
        if not rule.test(value) and rule.warning is not None:
            warn_at_caller(f"{rule.name}={value!r} is not {rule.allowed}: {rule.warning}")
        elif not rule.test(value):
            raise HyperparameterError(f"{rule.name} must be {rule.allowed}, got {value!r}")
        if rule.schedule and callable(value):
            scheduled_value(rule.name, value, 1.0, infinity_allowed=rule.schedule == "infinity")
    for relation in relations:
        relation(settings)


def step_budget(total_timesteps: Any) -> float:
    """``learn``'s budget as a float (an integer too large for one: an infinity); a ``TypeError`` or ``ValueError``
    for what is no number."""
    if isinstance(total_timesteps, (str, bytes)):
        raise TypeError("a string is no budget")
    try:
        return float(total_timesteps)
    except OverflowError:
        return math.inf if total_timesteps > 0 else -math.inf


def _step_count(value: object) -> bool:
    """What SB3's loop compares ``num_timesteps`` with: a number (numpy's, a one-element tensor's), not a string."""
    try:
        step_budget(value)
    except (TypeError, ValueError):
        return False
    return True


def trains(total_timesteps: object) -> bool:
    """Whether ``learn(total_timesteps)`` trains: SB3's loop runs while ``num_timesteps`` is below a budget above 0."""
    return _step_count(total_timesteps) and step_budget(total_timesteps) > 0


def _trains(settings: Mapping[str, Any]) -> bool:
    return trains(settings["total_timesteps"])


LEARN_RULES = (
    # SB3 trains while num_timesteps is below it: 1e5 and 100.5 train, 0 or less (or NaN) trains nothing, infinity until a
    # callback stops training
    Rule("total_timesteps", "a number of environment steps", _step_count),
    # SB3 logs when iteration % log_interval == 0: 0 divides by zero at the first log (of a call that trains)
    Rule(
        "log_interval",
        "None (no logs) or a number other than 0 (log when the iteration count is a multiple of it; SB3 reads -n as n)",
        optional(lambda value: isinstance(value, numbers.Real) and value != 0),
        when=_trains,
    ),
)


def check_learn_arguments(total_timesteps: Any, log_interval: Any) -> None:
    """``learn``'s ``total_timesteps`` and ``log_interval`` (:data:`LEARN_RULES`)."""
    check_hyperparameters({"total_timesteps": total_timesteps, "log_interval": log_interval}, LEARN_RULES)


def _is_policy(policy: object) -> bool:
    from stable_baselines3.common.policies import BasePolicy

    if isinstance(policy, type):
        return issubclass(policy, BasePolicy)
    # a name, or a function that builds the policy (SB3 calls policy_class(...) on what it is given)
    return isinstance(policy, str) or callable(policy)


# The constructors' arguments that SB3 passes on unchecked, and what the policies, learn and predict take.
ARGUMENT_RULES = (
    Rule(
        "policy",
        "a policy's name ('MlpPolicy', 'CnnPolicy', 'MultiInputPolicy', ...), a policy class (a subclass of "
        "stable_baselines3's BasePolicy) or a function that builds one",
        _is_policy,
    ),
    # True and False read as 1 and 0, as in SB3
    Rule(
        "verbose",
        "a number: 0 or less (no output), 1 (info) or 2 (debug)",
        lambda value: isinstance(value, np.bool_) or _is_real(value),
    ),
)


def check_constructor_settings(algorithm: type, policy: object, settings: Mapping[str, Any]) -> None:
    """
    The checks that ``algorithm``'s constructor makes of ``settings``, and nothing else: the constructor is called with
    ``env=None, _init_setup_model=False``, and with ``distributed=False`` and ``device="cpu"`` unless ``settings``
    gives them (no process group, no GPU).

    :param algorithm: the algorithm's class
    :param policy: the policy its constructor is given (a name or a class)
    :param settings: keyword arguments of its constructor
    """
    import inspect

    parameters = inspect.signature(algorithm).parameters
    quiet = {name: value for name, value in (("distributed", False), ("device", "cpu")) if name in parameters}
    algorithm(policy, None, _init_setup_model=False, **{**quiet, **settings})


KL_ESTIMATORS = ("sample", "exact")
ADVANTAGE_NORMALIZATIONS = ("minibatch", "ewma")


def _normalizes(settings: Mapping[str, Any]) -> bool:
    return bool(settings.get("normalize_advantage", True))


def _real(value: Any) -> bool:
    """A number, infinite too, but not NaN (``True`` too, which SB3 reads as 1)."""
    return isinstance(value, numbers.Real) and not math.isnan(value)


def _at_least(low: float) -> Callable[[Any], bool]:
    return lambda value: value >= low


def _above(low: float) -> Callable[[Any], bool]:
    return lambda value: callable(value) or value > low


# A value that SB3's PPO trains with is taken, as SB3 takes it (never refuse what the parent accepts); a rule with a
# warning says why the value cannot train as asked
RULES: tuple[Rule, ...] = (
    Rule("learning_rate", "a number >= 0 or a schedule", lambda value: callable(value) or number(0)(value), schedule=True),
    Rule("learning_rate", "> 0", _above(0), warning="the policy never changes"),
    # not True: SB3's buffer takes no bool as a size
    Rule("n_steps", "an integer >= 1", lambda value: _is_integer(value) and int(value) >= 1),
    # as SB3: normalizing the advantages of a minibatch of 1 sample gives NaN (its standard deviation)
    Rule("batch_size", "an integer >= 2", integer(2), when=_normalizes),
    Rule("batch_size", "an integer >= 1", integer(1)),
    Rule("n_epochs", "an integer >= 1", integer(1)),
    Rule("gamma", "a finite number", number(-math.inf)),
    Rule("gamma", "in [0, 1]", number(0, 1), warning="it is no discount (the returns grow without bound or alternate)"),
    Rule("gae_lambda", "a finite number", number(-math.inf)),
    Rule("gae_lambda", "in [0, 1]", number(0, 1), warning="it is no GAE weight (the advantages grow or alternate)"),
    # any value: SB3 reads its truth value
    Rule("seed", "an integer >= 0", optional(integer(0))),
    Rule(
        "clip_range",
        "None (no clipping), a schedule or a number (math.inf: no clipping)",
        optional(lambda value: callable(value) or _real(value)),
    ),
    Rule(
        "clip_range",
        "> 0",
        optional(_above(0)),
        warning="no update may move the policy (the clipped objective has no gradient there; SB3's PPO clamps the "
        "ratio into an empty interval instead)",
    ),
    Rule(
        "clip_range_vf",
        "None, a number > 0 (math.inf: no clipping) or a schedule (a function of the progress remaining)",
        optional(lambda value: callable(value) or (_real(value) and value > 0)),
        schedule="infinity",
    ),
    Rule("ent_coef", "a finite number", number(-math.inf)),
    Rule("vf_coef", "a finite number", number(-math.inf)),
    Rule("vf_coef", ">= 0", _at_least(0), warning="the value loss is maximized"),
    Rule("max_grad_norm", "a number (math.inf: no clipping)", lambda value: _real(value) and value > -math.inf),
    Rule("max_grad_norm", "> 0", _above(0), warning="every gradient is scaled to zero or reversed"),
    Rule(
        "target_kl",
        "None or a number",
        optional(lambda value: isinstance(value, numbers.Real)),
    ),
    Rule(
        "target_kl",
        "None or a number >= 0",
        optional(lambda value: math.isnan(value) or value >= 0),
        warning="the early stop (approx_kl > 1.5 * target_kl) then comes at the first minibatch",
    ),
    Rule(
        "target_kl",
        "None or a number >= 0",
        optional(lambda value: not math.isnan(value)),
        warning="the early stop (approx_kl > 1.5 * target_kl) never comes, as with None",
    ),
    Rule("stats_window_size", "an integer >= 0", integer(0)),
    *ARGUMENT_RULES,
    # the decoupled options
    Rule(
        "ewma_decay",
        f"a number in [0, 1), None or one of {EWMA_DECAY_NAMES}",
        lambda value: not isinstance(value, str) or value in EWMA_DECAY_NAMES,
    ),
    Rule("ewma_decay", "a number in [0, 1)", lambda value: value is None or isinstance(value, str) or decay(value)),
    Rule("kl_coef", "a finite number >= 0", number(0)),
    Rule("kl_estimator", f"one of {KL_ESTIMATORS}", one_of(KL_ESTIMATORS)),
    Rule(
        "imp_samp_max",
        "0 (no cap) or a number > 1",
        lambda value: isinstance(value, (int, float)) and (value == 0 or value > 1),
    ),
    Rule("advantage_normalization", f"one of {ADVANTAGE_NORMALIZATIONS}", one_of(ADVANTAGE_NORMALIZATIONS)),
    Rule("advantage_ewma_decay", "a number in [0, 1)", decay),
    Rule("minibatch_sampling", f"one of {MINIBATCH_SAMPLINGS}", one_of(MINIBATCH_SAMPLINGS)),
    Rule("log_gradient_noise_scale", "True or False", lambda value: isinstance(value, bool)),
    Rule("compile_step", "True, False or 'auto'", lambda value: isinstance(value, bool) or value == "auto"),
)
"""The rules of every algorithm's constructor arguments (a rule whose argument a constructor lacks is not applied)."""

# sb3-contrib's algorithms take batch_size=None: one minibatch of the whole rollout
CONTRIB_RULES = with_rules(
    RULES,
    Rule("batch_size", "an integer >= 2", optional(integer(2)), when=_normalizes),
    Rule("batch_size", "an integer >= 1", optional(integer(1))),
)


def _minibatch_sampling_fits(settings: Mapping[str, Any]) -> None:
    if {"minibatch_sampling", "batch_size", "n_steps"} <= settings.keys():
        check_minibatch_sampling(
            "minibatch_sampling", settings["minibatch_sampling"], "batch_size", settings["batch_size"], settings["n_steps"]
        )


def _ewma_normalization_normalizes(settings: Mapping[str, Any]) -> None:
    if settings.get("advantage_normalization") == "ewma" and not _normalizes(settings):
        raise HyperparameterError("advantage_normalization='ewma' needs normalize_advantage=True")


def _checked_by_their_owners(settings: Mapping[str, Any]) -> None:
    # the options of data-parallel training and overlapped rollouts: their modules say what they allow
    for name, check in (("distributed", check_distributed_argument), ("async_rollouts", check_async_rollouts)):
        if name in settings:
            check(settings[name])


def _warn_unlimited_update(settings: Mapping[str, Any]) -> None:
    if "clip_range" in settings and settings["clip_range"] in (None, math.inf) and number(0, 0)(settings.get("kl_coef")):
        warn_at_caller(
            f"clip_range={settings['clip_range']} and kl_coef=0: nothing limits how far the policy moves from the proximal "
            "policy in an update (the proximal policy is unused). Set clip_range (e.g. 0.2) or kl_coef > 0 (e.g. 1.0)."
        )


def _warn_unused_advantage_decay(settings: Mapping[str, Any]) -> None:
    decay_given = settings.get("advantage_ewma_decay", 0)
    if settings.get("advantage_normalization") == "minibatch" and decay_given != 0:
        warn_at_caller(
            f"advantage_ewma_decay={decay_given!r} has no effect with advantage_normalization='minibatch' "
            "(each minibatch's own statistics): set advantage_normalization='ewma' to use it"
        )


RELATIONS: tuple[Callable[[Mapping[str, Any]], None], ...] = (
    _minibatch_sampling_fits,
    _ewma_normalization_normalizes,
    _checked_by_their_owners,
    _warn_unlimited_update,
    _warn_unused_advantage_decay,
)
"""The checks of arguments together (each raises or warns itself), after the rules."""


def check_arguments(
    arguments: Mapping[str, Any],
    rules: tuple[Rule, ...] = RULES,
    relations: tuple[Callable[[Mapping[str, Any]], None], ...] = RELATIONS,
) -> None:
    """
    A constructor's checks, before anything is built: its arguments (``locals()`` at its first line) against
    ``rules`` and ``relations``, then ``env``, its observation space, ``policy_kwargs`` and ``device``.
    """
    check_hyperparameters(arguments, rules, relations)
    env = arguments["env"]
    check_env_argument(env, arguments.get("_init_setup_model", True))
    if env is not None and not isinstance(env, str):
        check_observation_space(getattr(env, "observation_space", None))
    check_policy_kwargs(arguments.get("policy_kwargs"))
    warn_cuda_unavailable(arguments.get("device", "auto"))
