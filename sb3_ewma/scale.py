"""
Batch size-invariance helper (Hilton, Cobbe & Schulman 2021, sections 3-4 and appendices B, D, E).

Rescales the hyperparameters of PPO-EWMA / PPG-EWMA tuned with ``reference_n_envs`` environments so that training with
``n_envs`` environments behaves the same as a function of the number of environment steps. With
``c = reference_n_envs / n_envs`` (both the optimization and the iteration batch size are divided by ``c``):

- Adam step size ``/ sqrt(c)`` (plain SGD learning rate ``/ c``);
- optionally Adam ``beta1``, ``beta2`` raised to the power ``1 / c``;
- ``batch_size / c`` (``n_steps`` unchanged: the same number of minibatches per epoch);
- center of mass of the proximal-policy EWMA ``* c``;
- span (in iterations) of the EWMA advantage moments ``* c``;
- PPG: ``n_policy_iterations * c`` (the phase batch size stays constant, so the auxiliary phase is unchanged).

The rules themselves are :mod:`sb3_ewma.common.batch_size_rules` (one pure function each); this module applies them to
hyperparameter dicts and rl-zoo3 entries: defaults of missing keys, numbers, rl-zoo3 schedule strings and schedules,
``policy_kwargs`` strings, the report and its caveats, and the command line.

Command line: ``python -m sb3_ewma.scale FILE ENTRY --n-envs N`` prints the rescaled rl-zoo3 entry;
``python -m sb3_ewma.scale --algo ppg_ewma --env procgen-starpilot-easy --n-envs 16`` reads the packaged file.
"""

import argparse
import ast
import copy
import difflib
import inspect
import math
import numbers
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from sb3_ewma.algorithms import ALGORITHMS, packaged_hyperparams_file
from sb3_ewma.common import batch_size_rules as rules
from sb3_ewma.common.ewma import (
    center_of_mass_from_ewma_decay,
    check_decay,
    ewma_decay_from_center_of_mass,
    ewma_decay_from_span,
    ewma_span_from_decay,
)
from sb3_ewma.common.ewma_age import ewma_age_rule, ewma_center_of_mass_by_rule
from sb3_ewma.common.policy_kwargs_source import PolicyKwargsSource, dotted_name

ALGOS = tuple(ALGORITHMS)
LR_RULES = ("sqrt", "linear")

# keys that only PPG takes: their presence makes ``algo`` default to "ppg_ewma"
PPG_KEYS = ("n_policy_iterations", "n_value_epochs", "n_aux_epochs", "aux_batch_size", "aux_learning_rate")
# optimizers (and their subclasses) whose step is normalized by a running RMS of the gradient: square-root rule
SQRT_RULE_OPTIMIZERS = ("Adam", "AdamW", "NAdam", "RAdam", "Adamax")
# plain stochastic gradient descent: linear rule
LINEAR_RULE_OPTIMIZERS = ("SGD",)
DEFAULT_OPTIMIZER = "Adam"  # SB3's ActorCriticPolicy default
DEFAULT_ADAM_BETAS = (0.9, 0.999)  # torch.optim.Adam default


@dataclass
class _Log:
    """What the rules changed (``lines``) and why the result may not be batch size-invariant (``caveats``)."""

    lines: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)


class ScaledSchedule:
    """
    A schedule (``progress_remaining -> value``, as SB3 takes for ``learning_rate``) multiplied by a constant.
    Picklable whenever the wrapped schedule is; scaling a ``ScaledSchedule`` again multiplies the factors.

    :param schedule: the original schedule
    :param factor: the multiplier
    """

    def __init__(self, schedule: Callable[[float], float], factor: float) -> None:
        self.schedule: Callable[[float], float] = schedule
        self.factor = float(factor)
        if isinstance(schedule, ScaledSchedule):
            self.schedule = schedule.schedule
            self.factor = self.factor * schedule.factor

    def __call__(self, progress_remaining: float) -> float:
        return self.factor * float(self.schedule(progress_remaining))

    def __repr__(self) -> str:
        return f"ScaledSchedule({self.schedule!r}, factor={self.factor!r})"


def scale_schedule(schedule: Callable[[float], float], factor: float) -> Callable[[float], float]:
    """
    Multiply a schedule by ``factor``: a ``ScaledSchedule``, or the original schedule itself when the factors
    combine to 1 (within float rounding).

    :param schedule: a callable ``progress_remaining -> value``
    :param factor: the multiplier
    :return: the scaled schedule
    """
    scaled = ScaledSchedule(schedule, factor)
    if math.isclose(scaled.factor, 1.0, rel_tol=1e-12, abs_tol=0.0):
        return scaled.schedule
    return scaled


def _signature_defaults(cls: type) -> dict[str, Any]:
    parameters = inspect.signature(cls).parameters.values()
    return {param.name: param.default for param in parameters if param.default is not inspect.Parameter.empty}


def algorithm_defaults(algo: str) -> dict[str, Any]:
    """
    The constructor defaults used for hyperparameters missing from the settings: those of the algorithm class
    registered under ``algo`` in :data:`sb3_ewma.algorithms.ALGORITHMS` (``PPO_EWMA``, ``PPG_EWMA``, ``PPG``).

    :param algo: one of :data:`ALGOS`
    :return: a new dict of defaults
    """
    if algo not in ALGOS:
        raise ValueError(f"algo must be one of {ALGOS}, got {algo!r}")
    return _signature_defaults(ALGORITHMS[algo])


def _is_ppg(algo: str) -> bool:
    """Whether the algorithm has PPG's phases (``n_policy_iterations``)."""
    return "n_policy_iterations" in inspect.signature(ALGORITHMS[algo]).parameters


# keys of an rl-zoo3 entry that are not constructor arguments (rl_zoo3.exp_manager reads and removes them)
ZOO_ENTRY_KEYS = (
    "n_envs",
    "n_timesteps",
    "policy",
    "normalize",
    "normalize_kwargs",
    "env_wrapper",
    "vec_env_wrapper",
    "frame_stack",
    "callback",
    "env_kwargs",
    "monitor_kwargs",
)


def _check_keys(hyperparams: dict[str, Any], algo: str) -> None:
    """A ``ValueError`` for a key that is neither an argument of the algorithm nor an rl-zoo3 entry key."""
    known = {*inspect.signature(ALGORITHMS[algo]).parameters, *ZOO_ENTRY_KEYS} - {"self", "env", "_init_setup_model"}
    for key in hyperparams:
        if key not in known:
            close = difflib.get_close_matches(str(key), sorted(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"unknown hyperparameter {key!r} for {ALGORITHMS[algo].__name__}{hint}: the keys are the algorithm's "
                f"arguments and rl-zoo3's entry keys {ZOO_ENTRY_KEYS}"
            )


def _check_n_envs(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _whole_number(name: str, value: Any) -> int:
    """``value`` as an int when it is an integral number >= 1 (YAML may give ``32.0``), else a ``ValueError``."""
    number = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else math.nan
    if not math.isfinite(number) or number != math.floor(number) or number < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    return int(number)


def _resolve_algo(hyperparams: dict[str, Any], algo: str | None, log: _Log) -> str:
    if algo is not None:
        if algo not in ALGOS:
            raise ValueError(f"algo must be one of {ALGOS}, got {algo!r}")
        log.lines.append(f"algo: {algo}")
        return algo
    ppg_keys = [key for key in PPG_KEYS if key in hyperparams]
    inferred = "ppg_ewma" if ppg_keys else "ppo_ewma"
    reason = f"PPG keys {ppg_keys}" if ppg_keys else f"no PPG key among {list(PPG_KEYS)}"
    log.lines.append(f"algo: {inferred} (inferred: {reason}; pass algo= to choose)")
    return inferred


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(_fmt(item) for item in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    if callable(value) and not isinstance(value, type):
        return f"schedule {value!r}"
    return repr(value) if isinstance(value, str) else str(value)


# ----------------------------------------------------------------------------------------------------------------------
# policy_kwargs given as a string that rl-zoo3 evaluates, e.g. "dict(optimizer_class=th.optim.SGD, net_arch=[64, 64])"


def _optimizer_names(policy_kwargs: Any) -> tuple[list[str], str]:
    """
    Names to match against the known optimizers (the class and its base classes, most specific first), and a
    description of the optimizer for messages.
    """
    if policy_kwargs is None:
        return [DEFAULT_OPTIMIZER], f"{DEFAULT_OPTIMIZER} (default)"
    if isinstance(policy_kwargs, str):
        parsed = PolicyKwargsSource(policy_kwargs)
        items = PolicyKwargsSource.items(parsed.tree)
        if items is None:
            if "optimizer_class" in policy_kwargs:
                return [], f"unparsed policy_kwargs {policy_kwargs!r}"
            return [DEFAULT_OPTIMIZER], f"{DEFAULT_OPTIMIZER} (default)"
        if "optimizer_class" not in items:
            return [DEFAULT_OPTIMIZER], f"{DEFAULT_OPTIMIZER} (default)"
        name = dotted_name(items["optimizer_class"])
        return ([name] if name else []), (name or ast.unparse(items["optimizer_class"]))
    if isinstance(policy_kwargs, dict):
        optimizer_class = policy_kwargs.get("optimizer_class")
        if optimizer_class is None:
            return [DEFAULT_OPTIMIZER], f"{DEFAULT_OPTIMIZER} (default)"
        if isinstance(optimizer_class, str):
            name = optimizer_class.rsplit(".", 1)[-1]
            return [name], name
        if isinstance(optimizer_class, type):
            return [cls.__name__ for cls in optimizer_class.__mro__], optimizer_class.__name__
        return [], repr(optimizer_class)
    raise ValueError(f"policy_kwargs must be a dict, a string rl-zoo3 can eval or None, got {type(policy_kwargs).__name__}")


def _learning_rate_rule(policy_kwargs: Any, lr_rule: str | None) -> tuple[str, str, bool]:
    """``(rule, optimizer description, whether the optimizer is Adam-like, i.e. has betas)``."""
    names, description = _optimizer_names(policy_kwargs)
    detected = None
    for name in names:
        if name in SQRT_RULE_OPTIMIZERS:
            detected = "sqrt"
            break
        if name in LINEAR_RULE_OPTIMIZERS:
            detected = "linear"
            break
    if lr_rule is not None:
        return lr_rule, description, detected == "sqrt"
    if detected is None:
        raise ValueError(
            f"Unknown optimizer {description} in policy_kwargs: pass lr_rule='sqrt' (step normalized by a running RMS "
            "of the gradient, like Adam; the paper's rule) or lr_rule='linear' (plain SGD)"
        )
    return detected, description, detected == "sqrt"


# ----------------------------------------------------------------------------------------------------------------------
# individual rules


def _scale_rate(name: str, value: Any, factor: float) -> Any:
    """Multiply a learning rate given as a number, an rl-zoo3 ``"lin_<value>"`` string or a schedule."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, an rl-zoo3 'lin_<value>' string or a schedule, got {value!r}")
    if isinstance(value, numbers.Real):
        return float(value) * factor
    if isinstance(value, str):
        # rl-zoo3 reads "<prefix>_<initial value>" as a linear schedule from the initial value to 0
        parts = value.split("_")
        try:
            if len(parts) != 2:
                raise ValueError
            initial_value = float(parts[1])
        except ValueError:
            raise ValueError(
                f"{name}: cannot read {value!r}; rl-zoo3 takes a number or a schedule string like 'lin_2.5e-4'"
            ) from None
        return f"{parts[0]}_{initial_value * factor!r}"
    if callable(value):
        return scale_schedule(value, factor)
    raise ValueError(f"{name} must be a number, an rl-zoo3 'lin_<value>' string or a schedule, got {value!r}")


def _scaled_betas(betas: Any, c: float) -> tuple[float, float] | list[float]:
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise ValueError(f"policy_kwargs optimizer_kwargs betas must be a pair of numbers, got {betas!r}")
    for beta in betas:
        check_decay("Adam beta", beta)
    scaled = rules.adam_betas((float(betas[0]), float(betas[1])), c)
    return list(scaled) if isinstance(betas, list) else scaled


def _default_betas(policy_kwargs: Any) -> tuple[float, float]:
    optimizer_class = policy_kwargs.get("optimizer_class") if isinstance(policy_kwargs, dict) else None
    if isinstance(optimizer_class, type):
        try:
            parameter = inspect.signature(optimizer_class).parameters.get("betas")
        except (TypeError, ValueError):
            parameter = None
        if parameter is not None and isinstance(parameter.default, (tuple, list)):
            return (float(parameter.default[0]), float(parameter.default[1]))
    return DEFAULT_ADAM_BETAS


def _scale_betas_in_string(source: str, c: float) -> tuple[str, Any, Any]:
    parsed = PolicyKwargsSource(source)
    items = PolicyKwargsSource.items(parsed.tree)
    if items is None or parsed.tree is None:
        raise ValueError(f"scale_adam_betas: cannot edit policy_kwargs {source!r} (expected 'dict(...)' or '{{...}}')")
    if "optimizer_kwargs" not in items:
        old = DEFAULT_ADAM_BETAS
        new = _scaled_betas(old, c)
        value_text = f"dict(betas={new!r})" if isinstance(parsed.tree, ast.Call) else f"{{'betas': {new!r}}}"
        return parsed.add_item(parsed.tree, "optimizer_kwargs", value_text), old, new
    optimizer_kwargs = items["optimizer_kwargs"]
    optimizer_items = PolicyKwargsSource.items(optimizer_kwargs)
    if optimizer_items is None:
        raise ValueError(f"scale_adam_betas: cannot edit optimizer_kwargs in policy_kwargs {source!r}")
    if "betas" not in optimizer_items:
        old = DEFAULT_ADAM_BETAS
        new = _scaled_betas(old, c)
        return parsed.add_item(optimizer_kwargs, "betas", repr(new)), old, new
    try:
        old = ast.literal_eval(optimizer_items["betas"])
    except ValueError:
        raise ValueError(f"scale_adam_betas: betas in policy_kwargs {source!r} must be literal numbers") from None
    new = _scaled_betas(old, c)
    return parsed.replace(optimizer_items["betas"], repr(new)), old, new


def _scale_betas(scaled: dict[str, Any], c: float, log: _Log) -> None:
    policy_kwargs = scaled.get("policy_kwargs")
    if isinstance(policy_kwargs, str):
        scaled["policy_kwargs"], old, new = _scale_betas_in_string(policy_kwargs, c)
    else:
        if policy_kwargs is None:
            old = DEFAULT_ADAM_BETAS
            new = _scaled_betas(old, c)
            if "n_timesteps" in scaled:
                # an rl-zoo3 entry: write policy_kwargs the way rl-zoo3 files do, as a string it evals
                scaled["policy_kwargs"] = f"dict(optimizer_kwargs=dict(betas={new!r}))"
            else:
                scaled["policy_kwargs"] = {"optimizer_kwargs": {"betas": new}}
        else:
            optimizer_kwargs = policy_kwargs.get("optimizer_kwargs")
            optimizer_kwargs = {} if optimizer_kwargs is None else optimizer_kwargs
            old = optimizer_kwargs.get("betas", _default_betas(policy_kwargs))
            new = _scaled_betas(old, c)
            optimizer_kwargs["betas"] = new
            policy_kwargs["optimizer_kwargs"] = optimizer_kwargs
    log.lines.append(f"policy_kwargs optimizer betas: {_fmt(tuple(old))} -> {_fmt(tuple(new))} (** 1/c)")


def _has_explicit_betas(policy_kwargs: Any) -> bool:
    if isinstance(policy_kwargs, dict):
        optimizer_kwargs = policy_kwargs.get("optimizer_kwargs")
        return isinstance(optimizer_kwargs, dict) and "betas" in optimizer_kwargs
    if isinstance(policy_kwargs, str):
        items = PolicyKwargsSource.items(PolicyKwargsSource(policy_kwargs).tree)
        optimizer_items = PolicyKwargsSource.items(items.get("optimizer_kwargs")) if items else None
        return optimizer_items is not None and "betas" in optimizer_items
    return False


def _scale_learning_rates(
    scaled: dict[str, Any],
    defaults: dict[str, Any],
    c: Fraction,
    is_ppg: bool,
    lr_rule: str,
    description: str,
    scale_aux_learning_rate: bool,
    log: _Log,
) -> None:
    # the rule as a factor, applied to numbers, rl-zoo3 schedule strings and schedules alike
    factor = rules.adam_step_size(1.0, float(c)) if lr_rule == "sqrt" else rules.sgd_learning_rate(1.0, float(c))
    how = f"{description}: / sqrt(c)" if lr_rule == "sqrt" else f"{description}: / c"
    default_note = "" if "learning_rate" in scaled else " (default)"
    old = scaled.get("learning_rate", defaults["learning_rate"])
    scaled["learning_rate"] = _scale_rate("learning_rate", old, factor)
    log.lines.append(f"learning_rate: {_fmt(old)}{default_note} -> {_fmt(scaled['learning_rate'])} ({how})")
    if not is_ppg:
        return
    aux_old = scaled.get("aux_learning_rate", defaults.get("aux_learning_rate"))
    if scale_aux_learning_rate:
        if aux_old is None:
            log.lines.append("aux_learning_rate: None (same as learning_rate) -> scaled with learning_rate")
        else:
            scaled["aux_learning_rate"] = _scale_rate("aux_learning_rate", aux_old, factor)
            log.lines.append(f"aux_learning_rate: {_fmt(aux_old)} -> {_fmt(scaled['aux_learning_rate'])} ({how})")
    elif aux_old is None and isinstance(old, str):
        log.caveats.append(
            f"aux_learning_rate=None follows learning_rate, which is rescaled; it cannot be pinned to the schedule "
            f"{old!r} (rl-zoo3 only parses schedule strings for learning_rate): set aux_learning_rate explicitly to "
            "keep the auxiliary phase unchanged"
        )
    elif aux_old is None:
        # None follows learning_rate: pin it to the reference step size to keep the auxiliary phase unchanged
        scaled["aux_learning_rate"] = copy.deepcopy(old)
        log.lines.append(f"aux_learning_rate: None -> {_fmt(old)} (the reference learning_rate: auxiliary phase unchanged)")


def _scale_batch_size(scaled: dict[str, Any], defaults: dict[str, Any], c: Fraction, log: _Log) -> int:
    """Divide ``batch_size`` by ``c``; return the reference batch size."""
    default_note = "" if "batch_size" in scaled else " (default)"
    old = _whole_number("batch_size", scaled.get("batch_size", defaults["batch_size"]))
    new = rules.optimization_batch_size(old, c)
    if new.denominator != 1 or new < 1:
        raise ValueError(
            f"batch_size {old} / c = {old} * n_envs / reference_n_envs = {float(new):g} is not a whole number >= 1: "
            "choose n_envs so that it is (or change batch_size first)"
        )
    scaled["batch_size"] = int(new)
    log.lines.append(f"batch_size: {old}{default_note} -> {int(new)} (/ c; minibatches per epoch unchanged)")
    return old


def _scale_proximal_ewma(
    scaled: dict[str, Any],
    defaults: dict[str, Any],
    c: Fraction,
    reference_n_envs: int,
    reference_batch_size: int,
    log: _Log,
) -> None:
    default_note = "" if "ewma_decay" in scaled else " (default)"
    old = scaled.get("ewma_decay", defaults.get("ewma_decay", "auto"))
    if old is None:
        log.caveats.append(
            "ewma_decay=None: the proximal policy is the behavior policy, whose age (in environment steps) shrinks with "
            "the iteration batch size; batch size-invariance needs the EWMA (ewma_decay='auto' or a number)"
        )
        return
    if isinstance(old, str):
        n_steps = _whole_number("n_steps", scaled.get("n_steps", defaults["n_steps"]))
        minibatches = math.ceil(Fraction(n_steps * reference_n_envs, reference_batch_size))
        n_epochs = _whole_number("n_epochs", scaled.get("n_epochs", defaults.get("n_epochs", 1)))
        rule = ewma_age_rule(old, n_epochs)  # raises for an unknown name
        center_of_mass = ewma_center_of_mass_by_rule(rule, minibatches, n_epochs)
        formula = {"paper": "M", "max_age": "E x M", "mean_age": "E x M / 2"}[rule]
        named = f"'{old}' = '{rule}'" if old != rule else f"'{old}'"
        old_text = (
            f"{named}{default_note} (center of mass {center_of_mass:g} = {formula}, "
            f"M = {minibatches} minibatches per epoch, E = {n_epochs} epochs)"
        )
    else:
        check_decay("ewma_decay", old)
        center_of_mass = center_of_mass_from_ewma_decay(old)
        old_text = f"{_fmt(float(old))}{default_note} (center of mass {center_of_mass:.6g})"
    new_center_of_mass = rules.proximal_ewma_center_of_mass(center_of_mass, float(c))
    scaled["ewma_decay"] = ewma_decay_from_center_of_mass(new_center_of_mass)
    log.lines.append(f"ewma_decay: {old_text} -> {_fmt(scaled['ewma_decay'])} (center of mass {new_center_of_mass:.6g} = * c)")


def _scale_advantage_ewma(scaled: dict[str, Any], defaults: dict[str, Any], c: Fraction, log: _Log) -> None:
    normalization = scaled.get("advantage_normalization", defaults.get("advantage_normalization", "minibatch"))
    if normalization != "ewma":
        if scaled.get("normalize_advantage", defaults.get("normalize_advantage", True)):
            log.caveats.append(
                f"advantage_normalization={normalization!r}: the advantage statistics of each minibatch come from "
                "batch_size samples, which is divided by c; batch size-invariance needs advantage_normalization='ewma' "
                "(its span is then rescaled)"
            )
        return
    default_note = "" if "advantage_ewma_decay" in scaled else " (default)"
    old = scaled.get("advantage_ewma_decay", defaults.get("advantage_ewma_decay", 0.0))
    check_decay("advantage_ewma_decay", old)
    span = ewma_span_from_decay(old)
    new_span = rules.advantage_moments_span(span, float(c))
    if new_span < 1:
        log.caveats.append(
            f"advantage_ewma_decay: the rescaled span {new_span:.6g} iterations is below 1 (the latest iteration alone): "
            "using decay 0, so the advantage moments come from more samples than with the reference settings"
        )
        new_span = 1.0
    scaled["advantage_ewma_decay"] = ewma_decay_from_span(new_span)
    log.lines.append(
        f"advantage_ewma_decay: {_fmt(float(old))}{default_note} (span {span:.6g} iterations) -> "
        f"{_fmt(scaled['advantage_ewma_decay'])} (span {new_span:.6g} = * c)"
    )


def _scale_policy_iterations(scaled: dict[str, Any], defaults: dict[str, Any], c: Fraction, log: _Log) -> None:
    default_note = "" if "n_policy_iterations" in scaled else " (default)"
    old = _whole_number("n_policy_iterations", scaled.get("n_policy_iterations", defaults.get("n_policy_iterations", 32)))
    new = rules.ppg_policy_iterations(old, c)
    if new.denominator != 1 or new < 1:
        raise ValueError(
            f"n_policy_iterations {old} * c = {old} * reference_n_envs / n_envs = {float(new):g} is not a whole number "
            ">= 1: choose n_envs so that it is"
        )
    scaled["n_policy_iterations"] = int(new)
    log.lines.append(f"n_policy_iterations: {old}{default_note} -> {int(new)} (* c; phase batch size unchanged)")


# ----------------------------------------------------------------------------------------------------------------------
# public API


def _scale(
    hyperparams: dict[str, Any],
    n_envs: int,
    reference_n_envs: int | None,
    algo: str | None,
    lr_rule: str | None,
    scale_adam_betas: bool,
    scale_aux_learning_rate: bool,
) -> tuple[dict[str, Any], _Log]:
    n_envs = _check_n_envs("n_envs", n_envs)
    if "n_envs" in hyperparams:
        reference = _check_n_envs("the reference n_envs (hyperparams['n_envs'])", hyperparams["n_envs"])
        if reference_n_envs is not None and _check_n_envs("reference_n_envs", reference_n_envs) != reference:
            raise ValueError(f"reference_n_envs={reference_n_envs} differs from hyperparams['n_envs']={hyperparams['n_envs']}")
    elif reference_n_envs is not None:
        reference = _check_n_envs("reference_n_envs", reference_n_envs)
    else:
        raise ValueError(
            "The reference number of environments is unknown: the settings have no 'n_envs' key and reference_n_envs "
            "was not given (rl-zoo3 uses n_envs=1 when the key is absent)"
        )
    if lr_rule is not None and lr_rule not in LR_RULES:
        raise ValueError(f"lr_rule must be None (detect from the optimizer) or one of {LR_RULES}, got {lr_rule!r}")
    log = _Log()
    algo = _resolve_algo(hyperparams, algo, log)
    _check_keys(hyperparams, algo)
    is_ppg = _is_ppg(algo)

    scaled = copy.deepcopy(hyperparams)
    scaled["n_envs"] = n_envs
    c = Fraction(reference, n_envs)
    log.lines.append(f"n_envs: {reference} -> {n_envs} (c = reference / target = {float(c):.6g})")
    if c == 1:
        log.lines.append("c = 1: nothing else to rescale")
        return scaled, log

    defaults = algorithm_defaults(algo)
    rule, description, adam_like = _learning_rate_rule(scaled.get("policy_kwargs"), lr_rule)
    if scale_adam_betas and not adam_like and not _has_explicit_betas(scaled.get("policy_kwargs")):
        raise ValueError(f"scale_adam_betas=True needs an Adam-type optimizer (with betas), got {description}")

    # the rules that may raise come first, those that may only warn last
    reference_batch_size = _scale_batch_size(scaled, defaults, c, log)
    if is_ppg:
        _scale_policy_iterations(scaled, defaults, c, log)
        if scaled.get("aux_batch_size") is None:
            # PPG's default auxiliary minibatch is batch_size, which just changed: keep the reference one
            scaled["aux_batch_size"] = reference_batch_size
            log.lines.append(
                f"aux_batch_size: None -> {reference_batch_size} (the reference batch_size: auxiliary phase unchanged)"
            )
    if scale_adam_betas:
        _scale_betas(scaled, float(c), log)
    _scale_learning_rates(scaled, defaults, c, is_ppg, rule, description, scale_aux_learning_rate, log)
    _scale_proximal_ewma(scaled, defaults, c, reference, reference_batch_size, log)
    _scale_advantage_ewma(scaled, defaults, c, log)
    if is_ppg:
        changed = (
            "n_aux_epochs, aux_batch_size; aux_learning_rate rescaled as asked"
            if scale_aux_learning_rate
            else "n_aux_epochs, aux_batch_size, aux_learning_rate"
        )
        log.lines.append(
            f"auxiliary phase unchanged ({changed}): its buffer n_policy_iterations * n_envs * n_steps is constant"
        )

    n_epochs = scaled.get("n_epochs", defaults.get("n_epochs", 1))
    if n_epochs != 1:
        log.caveats.append(
            f"n_epochs={n_epochs}{'' if 'n_epochs' in scaled else ' (default)'}: batch size-invariance needs 1 policy "
            "epoch; with several epochs the rescaled settings will not reproduce the reference behavior"
        )
    return scaled, log


def scale_hyperparams_with_report(
    hyperparams: dict[str, Any],
    n_envs: int,
    *,
    reference_n_envs: int | None = None,
    algo: str | None = None,
    lr_rule: str | None = None,
    scale_adam_betas: bool = False,
    scale_aux_learning_rate: bool = False,
) -> tuple[dict[str, Any], list[str]]:
    """
    Same as :func:`scale_hyperparams` (same parameters and warnings), also returning the report: one line per
    rescaled hyperparameter, ``"name: old -> new (rule)"``.

    :return: ``(rescaled settings, report lines)``
    """
    scaled, log = _scale(hyperparams, n_envs, reference_n_envs, algo, lr_rule, scale_adam_betas, scale_aux_learning_rate)
    for caveat in log.caveats:
        warnings.warn(caveat, UserWarning, stacklevel=2)
    return scaled, log.lines


def scale_hyperparams(
    hyperparams: dict[str, Any],
    n_envs: int,
    *,
    reference_n_envs: int | None = None,
    algo: str | None = None,
    lr_rule: str | None = None,
    scale_adam_betas: bool = False,
    scale_aux_learning_rate: bool = False,
) -> dict[str, Any]:
    """
    Rescale PPO-EWMA / PPG-EWMA hyperparameters tuned with ``reference_n_envs`` environments for ``n_envs``
    environments, following the batch size-invariance rules of Hilton, Cobbe & Schulman (2021). With
    ``c = reference_n_envs / n_envs`` (``c > 1``: fewer environments, ``c < 1``: more):

    - ``learning_rate`` (a number, an rl-zoo3 ``"lin_<value>"`` string or a schedule) ``/ sqrt(c)`` for Adam-type
      optimizers (the default), ``/ c`` for ``SGD``; detected from ``policy_kwargs["optimizer_class"]`` (a dict or an
      rl-zoo3 string); any other optimizer needs ``lr_rule``;
    - ``batch_size / c`` (must stay a whole number); ``n_steps`` unchanged, so the iteration batch size
      ``n_steps * n_envs`` is divided by ``c`` and the number of minibatches per epoch is unchanged;
    - ``ewma_decay``: center of mass ``beta / (1 - beta)`` ``* c``; a rule's name (``"auto"``, ``"paper"``, ``"max_age"``,
      ``"mean_age"``; absent means the algorithm's default ``"auto"``) is resolved to its reference center of mass
      (:mod:`sb3_ewma.common.ewma_age`, with ``M = ceil(n_steps * reference_n_envs / batch_size)`` and ``E = n_epochs``)
      and written as an explicit decay; ``None`` stays ``None`` (with a warning: no EWMA, no invariance);
    - ``advantage_ewma_decay`` when ``advantage_normalization == "ewma"``: span ``2 / (1 - d) - 1`` iterations ``* c``
      (a span below 1 is clamped to 1, with a warning);
    - PPG: ``n_policy_iterations * c`` (must stay a whole number). The auxiliary phase is left unchanged, as in the
      paper: ``n_aux_epochs``, ``aux_batch_size`` and ``aux_learning_rate`` keep their values (an ``aux_learning_rate``
      of ``None``, meaning "same as learning_rate", is pinned to the reference ``learning_rate``; that is not possible
      for an rl-zoo3 ``"lin_<value>"`` string, which rl-zoo3 parses for ``learning_rate`` only: it then stays ``None``,
      with a warning), unless ``scale_aux_learning_rate=True``;
    - optionally (``scale_adam_betas=True``) Adam's ``betas ** (1 / c)``, written into
      ``policy_kwargs["optimizer_kwargs"]`` (a dict stays a dict, a string stays a string rl-zoo3 can eval);
    - ``n_envs`` is set to the target (added if absent: pop it before passing constructor kwargs to the algorithm,
      it sizes the ``VecEnv``); ``n_timesteps`` and every other setting (``n_steps``, ``clip_range``,
      ``max_grad_norm``, ``normalize``, ``policy``, ...) pass through unchanged.

    Hyperparameters needed by a rule but absent from ``hyperparams`` take the algorithm's defaults
    (see :func:`algorithm_defaults`) and are written explicitly. With ``c = 1`` the settings are returned unchanged.
    A ``UserWarning`` is issued when the rescaled settings cannot be batch size-invariant: ``n_epochs > 1`` (the
    invariance needs one policy epoch; SB3 PPO's default is 10), per-minibatch advantage normalization, or no EWMA.

    :param hyperparams: one algorithm's settings, an rl-zoo3 entry or constructor kwargs, with the reference number of
        environments in ``n_envs`` (or given as ``reference_n_envs``). It is not modified.
    :param n_envs: the target TOTAL number of environments, across all processes: for data-parallel training with
        ``k`` workers of ``m`` environments each, pass ``k * m`` (and likewise count every worker's environments in the
        reference ``n_envs``)
    :param reference_n_envs: the number of environments the settings were tuned with, when ``hyperparams`` has no
        ``n_envs`` key (if both are given they must agree)
    :param algo: ``"ppo_ewma"``, ``"ppg_ewma"``, ``"ppg"`` (plain PPG: its ``ewma_decay`` default may be ``None``),
        ``"ppo_lstm_ewma"`` (RecurrentPPO_EWMA) or ``"ppo_mask_ewma"`` (MaskablePPO_EWMA);
        by default ``"ppg_ewma"`` if a PPG-only key (``n_policy_iterations``, ``n_value_epochs``, ``n_aux_epochs``,
        ``aux_batch_size``, ``aux_learning_rate``) is present, else ``"ppo_ewma"``
    :param lr_rule: ``"sqrt"`` or ``"linear"`` to override the rule detected from the optimizer (required for an
        optimizer other than Adam, AdamW, NAdam, RAdam, Adamax and SGD, or their subclasses)
    :param scale_adam_betas: also raise Adam's ``beta1`` and ``beta2`` to the power ``1 / c`` (paper appendix E; small
        effect). A new ``policy_kwargs`` is written as an rl-zoo3 string when the settings have ``n_timesteps``,
        otherwise as a dict.
    :param scale_aux_learning_rate: PPG: also rescale ``aux_learning_rate`` with the same rule
    :return: the rescaled settings, a deep copy (same mapping type and key order; keys added at the end)
    """
    scaled, log = _scale(hyperparams, n_envs, reference_n_envs, algo, lr_rule, scale_adam_betas, scale_aux_learning_rate)
    for caveat in log.caveats:
        warnings.warn(caveat, UserWarning, stacklevel=2)
    return scaled


# ----------------------------------------------------------------------------------------------------------------------
# command line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sb3_ewma.scale",
        description="Rescale an rl-zoo3 hyperparameter entry of PPO-EWMA / PPG-EWMA for another number of environments "
        "(batch size-invariance, Hilton et al. 2021). The rescaled entry is printed as YAML on stdout, the report of "
        "what changed on stderr.",
    )
    parser.add_argument(
        "file", nargs="?", default=None, help="rl-zoo3 hyperparameter YAML file (default: the packaged one of --algo)"
    )
    parser.add_argument("entry", nargs="?", default=None, help="entry of the file, e.g. CartPole-v1 (or --env)")
    parser.add_argument("--env", default=None, help="entry of the file: the environment id, e.g. procgen-starpilot-easy")
    parser.add_argument("--n-envs", type=int, required=True, help="target TOTAL number of environments (all processes)")
    parser.add_argument("--reference-n-envs", type=int, default=None, help="reference n_envs when the entry has none")
    parser.add_argument(
        "--algo",
        choices=ALGOS,
        default=None,
        help="algorithm; without FILE, its packaged hyperparams/<algo>.yml is read (default: the file name if it is one "
        "of the choices, e.g. ppg_ewma.yml, else inferred from keys)",
    )
    parser.add_argument("--lr-rule", choices=LR_RULES, default=None, help="override the optimizer's step size rule")
    parser.add_argument("--scale-adam-betas", action="store_true", help="raise Adam's betas to the power 1/c")
    parser.add_argument("--scale-aux-learning-rate", action="store_true", help="PPG: also rescale aux_learning_rate")
    return parser


class _Dumper(yaml.SafeDumper):
    """Keeps the keys in their order."""


def _represent_dict(dumper: yaml.SafeDumper, data: dict) -> yaml.Node:
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items())


_Dumper.add_multi_representer(dict, _represent_dict)


def dump_entry(entry: str, hyperparams: dict[str, Any]) -> str:
    """
    The YAML text of ``{entry: hyperparams}`` in the layout of rl-zoo3 files, keys in their order.

    :param entry: the entry name
    :param hyperparams: its settings (YAML-representable values)
    :return: the YAML document
    """
    return yaml.dump({entry: dict(hyperparams)}, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=4096)


def main(argv: Sequence[str] | None = None) -> int:
    """
    Command line entry point: ``python -m sb3_ewma.scale FILE ENTRY --n-envs N [options]``, or with this package's
    hyperparameter file of an algorithm, ``python -m sb3_ewma.scale --algo ppg_ewma --env procgen-starpilot-easy
    --n-envs 16``.

    :param argv: the arguments (default: ``sys.argv[1:]``)
    :return: the exit status
    """
    parser = _parser()
    args = parser.parse_args(argv)
    if args.env is not None and args.entry is not None and args.env != args.entry:
        parser.error(f"the entry is given twice: {args.entry!r} and --env {args.env!r}")
    args.entry = args.env if args.env is not None else args.entry
    if args.file is None:
        if args.algo is None:
            parser.error("give a hyperparameter FILE, or --algo to read this package's hyperparams/<algo>.yml")
        args.file = str(packaged_hyperparams_file(args.algo))
    if args.entry is None:
        parser.error("give the entry (ENTRY after FILE, or --env)")
    try:
        with open(args.file) as file:
            content = yaml.safe_load(file)
    except (OSError, yaml.YAMLError) as error:
        parser.exit(2, f"{parser.prog}: error: cannot read {args.file}: {error}\n")
    if not isinstance(content, dict):
        parser.exit(2, f"{parser.prog}: error: {args.file} is not an rl-zoo3 hyperparameter file (a mapping of entries)\n")
    if args.entry not in content:
        available = ", ".join(str(key) for key in content)
        parser.exit(2, f"{parser.prog}: error: no entry {args.entry!r} in {args.file}; available entries: {available}\n")
    hyperparams = content[args.entry]
    if not isinstance(hyperparams, dict):
        parser.exit(2, f"{parser.prog}: error: entry {args.entry!r} is not a mapping of hyperparameters\n")
    algo = args.algo
    if algo is None and Path(args.file).stem in ALGOS:
        algo = Path(args.file).stem
    try:
        scaled, log = _scale(
            hyperparams,
            args.n_envs,
            args.reference_n_envs,
            algo,
            args.lr_rule,
            args.scale_adam_betas,
            args.scale_aux_learning_rate,
        )
    except ValueError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    sys.stdout.write(dump_entry(args.entry, scaled))
    lines = [f"{args.entry}:", *(f"  {line}" for line in log.lines), *(f"warning: {caveat}" for caveat in log.caveats)]
    sys.stderr.write("".join(f"{line}\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
