"""
The rules of :mod:`sb3_ewma.scale.batch_size_rules` applied to a hyperparameter dict, one function per hyperparameter,
logging in a :class:`ScaleLog`.
"""

import copy
import math
import numbers
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, cast

from sb3_ewma.common.ewma import (
    center_of_mass_from_ewma_decay,
    check_decay,
    ewma_decay_from_center_of_mass,
    ewma_decay_from_span,
    ewma_span_from_decay,
)
from sb3_ewma.common.ewma_age import ewma_age_rule, ewma_center_of_mass_by_rule
from sb3_ewma.scale import batch_size_rules
from sb3_ewma.scale.zoo_entry import (
    default_betas,
    policy_optimizer_kwargs,
    scale_betas_in_string,
    scale_rate,
    scaled_betas,
)


@dataclass
class ScaleLog:
    """What the rules changed (``lines``) and why the result may not be batch size-invariant (``caveats``)."""

    lines: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)


def whole_number(name: str, value: Any) -> int:
    """``value`` as an int when it is an integral number >= 1 (YAML may give ``32.0``), else a ``ValueError``."""
    number = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else math.nan
    if not math.isfinite(number) or number != math.floor(number) or number < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    return int(number)


def format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(format_value(item) for item in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    if callable(value) and not isinstance(value, type):
        return f"schedule {value!r}"
    return repr(value) if isinstance(value, str) else str(value)


def pin_aux_optimizer_kwargs(scaled: dict[str, Any], log: ScaleLog) -> None:
    """
    PPG: an ``aux_optimizer_kwargs`` of ``None`` follows the policy's ``optimizer_kwargs``, whose betas are about to be
    rescaled: pin it to the reference ones to keep the auxiliary phase unchanged.
    """
    if scaled.get("aux_optimizer_kwargs") is not None:
        return
    policy_kwargs = scaled.get("policy_kwargs")
    reference = policy_optimizer_kwargs(policy_kwargs)
    if reference is None:
        log.caveats.append(
            f"aux_optimizer_kwargs=None follows the policy's optimizer_kwargs, whose betas are rescaled; those of "
            f"policy_kwargs {policy_kwargs!r} cannot be read: set aux_optimizer_kwargs explicitly to keep the auxiliary "
            "phase unchanged"
        )
        return
    scaled["aux_optimizer_kwargs"] = reference
    log.lines.append(
        f"aux_optimizer_kwargs: None -> {format_value(reference)} (the reference optimizer_kwargs: auxiliary phase "
        "unchanged)"
    )


def scale_betas(scaled: dict[str, Any], c: float, log: ScaleLog) -> None:
    policy_kwargs = scaled.get("policy_kwargs")
    if isinstance(policy_kwargs, str):
        scaled["policy_kwargs"], old, new = scale_betas_in_string(policy_kwargs, c)
    else:
        # what SB3's policy builds its optimizer with: an optimizer_kwargs written here keeps SB3's default eps
        optimizer_kwargs = cast(dict[str, Any], policy_optimizer_kwargs(policy_kwargs))
        old = optimizer_kwargs.get("betas", default_betas(policy_kwargs))
        new = scaled_betas(old, c)
        optimizer_kwargs["betas"] = new
        if policy_kwargs is None and "n_timesteps" in scaled:
            # an rl-zoo3 entry: write policy_kwargs the way rl-zoo3 files do, as a string it evals
            items = ", ".join(f"{key}={value!r}" for key, value in optimizer_kwargs.items())
            scaled["policy_kwargs"] = f"dict(optimizer_kwargs=dict({items}))"
        elif policy_kwargs is None:
            scaled["policy_kwargs"] = {"optimizer_kwargs": optimizer_kwargs}
        else:
            policy_kwargs["optimizer_kwargs"] = optimizer_kwargs
    log.lines.append(f"policy_kwargs optimizer betas: {format_value(tuple(old))} -> {format_value(tuple(new))} (** 1/c)")


def scale_learning_rates(
    scaled: dict[str, Any],
    defaults: dict[str, Any],
    c: Fraction,
    is_ppg: bool,
    lr_rule: str,
    description: str,
    scale_aux_learning_rate: bool,
    log: ScaleLog,
) -> None:
    # the rule as a factor, applied to numbers, rl-zoo3 schedule strings and schedules alike
    factor = (
        batch_size_rules.adam_step_size(1.0, float(c))
        if lr_rule == "sqrt"
        else batch_size_rules.sgd_learning_rate(1.0, float(c))
    )
    how = f"{description}: / sqrt(c)" if lr_rule == "sqrt" else f"{description}: / c"
    default_note = "" if "learning_rate" in scaled else " (default)"
    old = scaled.get("learning_rate", defaults["learning_rate"])
    scaled["learning_rate"] = scale_rate("learning_rate", old, factor)
    log.lines.append(f"learning_rate: {format_value(old)}{default_note} -> {format_value(scaled['learning_rate'])} ({how})")
    if not is_ppg:
        return
    aux_old = scaled.get("aux_learning_rate", defaults.get("aux_learning_rate"))
    if scale_aux_learning_rate:
        if aux_old is None:
            log.lines.append("aux_learning_rate: None (same as learning_rate) -> scaled with learning_rate")
        else:
            scaled["aux_learning_rate"] = scale_rate("aux_learning_rate", aux_old, factor)
            log.lines.append(
                f"aux_learning_rate: {format_value(aux_old)} -> {format_value(scaled['aux_learning_rate'])} ({how})"
            )
    elif aux_old is None and isinstance(old, str):
        log.caveats.append(
            f"aux_learning_rate=None follows learning_rate, which is rescaled; it cannot be pinned to the schedule "
            f"{old!r} (rl-zoo3 only parses schedule strings for learning_rate): set aux_learning_rate explicitly to "
            "keep the auxiliary phase unchanged"
        )
    elif aux_old is None:
        # None follows learning_rate: pin it to the reference step size to keep the auxiliary phase unchanged
        scaled["aux_learning_rate"] = copy.deepcopy(old)
        log.lines.append(
            f"aux_learning_rate: None -> {format_value(old)} (the reference learning_rate: auxiliary phase unchanged)"
        )


def scale_batch_size(
    scaled: dict[str, Any], defaults: dict[str, Any], c: Fraction, reference_n_envs: int, log: ScaleLog
) -> int:
    """Divide ``batch_size`` by ``c``; return the reference batch size (sb3-contrib's ``None``: the whole rollout)."""
    default_note = "" if "batch_size" in scaled else " (default)"
    given = scaled.get("batch_size", defaults["batch_size"])
    if given is None:
        # sb3-contrib's whole rollout, which shrinks by c itself: one minibatch per epoch, as in the reference
        log.lines.append(f"batch_size: None{default_note} (the whole rollout, / c with it; one minibatch per epoch)")
        return whole_number("n_steps", scaled.get("n_steps", defaults["n_steps"])) * reference_n_envs
    old = whole_number("batch_size", given)
    new = batch_size_rules.optimization_batch_size(old, c)
    if new.denominator != 1 or new < 1:
        raise ValueError(
            f"batch_size {old} / c = {old} * n_envs / reference_n_envs = {float(new):g} is not a whole number >= 1: "
            "choose n_envs so that it is (or change batch_size first)"
        )
    sampling = scaled.get("minibatch_sampling", defaults.get("minibatch_sampling", "steps"))
    n_steps = scaled.get("n_steps", defaults["n_steps"])
    if sampling == "rollouts" and isinstance(n_steps, numbers.Integral) and int(new) % n_steps and n_steps % int(new):
        raise ValueError(
            f"batch_size {old} / c = {int(new)} is neither a multiple nor a divisor of n_steps={n_steps}, which "
            "minibatch_sampling='rollouts' needs (whole rollouts, or contiguous pieces of one): choose n_envs so that "
            "it is"
        )
    scaled["batch_size"] = int(new)
    log.lines.append(f"batch_size: {old}{default_note} -> {int(new)} (/ c; minibatches per epoch unchanged)")
    return old


def scale_proximal_ewma(
    scaled: dict[str, Any],
    defaults: dict[str, Any],
    c: Fraction,
    reference_n_envs: int,
    reference_batch_size: int,
    log: ScaleLog,
) -> None:
    if "ewma_decay" not in defaults:  # PPG: no EWMA
        log.caveats.append(
            "no EWMA (PPG): the proximal policy is the behavior policy, whose age (in environment steps) shrinks with "
            "the iteration batch size; batch size-invariance needs the EWMA (PPG_EWMA)"
        )
        return
    default_note = "" if "ewma_decay" in scaled else " (default)"
    old = scaled.get("ewma_decay", defaults["ewma_decay"])
    if old is None:
        log.caveats.append(
            "ewma_decay=None: the proximal policy is the behavior policy, whose age (in environment steps) shrinks with "
            "the iteration batch size; batch size-invariance needs the EWMA (ewma_decay='auto' or a number)"
        )
        return
    if isinstance(old, str):
        n_steps = whole_number("n_steps", scaled.get("n_steps", defaults["n_steps"]))
        minibatches = math.ceil(Fraction(n_steps * reference_n_envs, reference_batch_size))
        n_epochs = whole_number("n_epochs", scaled.get("n_epochs", defaults.get("n_epochs", 1)))
        rule = ewma_age_rule(old, n_epochs)  # raises for an unknown name
        center_of_mass = ewma_center_of_mass_by_rule(rule, minibatches, n_epochs)
        formula = {"paper": "M", "max_age": "E x M", "mean_age": "E x M / 2"}[rule]
        named = f"'{old}' = '{rule}'" if old != rule else f"'{old}'"
        if "n_steps" not in scaled:
            log.caveats.append(
                f"n_steps is not in the settings: the EWMA's center of mass assumes the algorithm's default "
                f"n_steps={n_steps} (M = {minibatches} minibatches per epoch); pass n_steps if training uses another"
            )
        old_text = (
            f"{named}{default_note} (center of mass {center_of_mass:g} = {formula}, "
            f"M = {minibatches} minibatches per epoch, E = {n_epochs} epochs)"
        )
    else:
        check_decay("ewma_decay", old)
        center_of_mass = center_of_mass_from_ewma_decay(old)
        old_text = f"{format_value(float(old))}{default_note} (center of mass {center_of_mass:.6g})"
    new_center_of_mass = batch_size_rules.proximal_ewma_center_of_mass(center_of_mass, float(c))
    scaled["ewma_decay"] = ewma_decay_from_center_of_mass(new_center_of_mass)
    log.lines.append(
        f"ewma_decay: {old_text} -> {format_value(scaled['ewma_decay'])} (center of mass {new_center_of_mass:.6g} = * c)"
    )


def scale_advantage_ewma(scaled: dict[str, Any], defaults: dict[str, Any], c: Fraction, log: ScaleLog) -> None:
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
    new_span = batch_size_rules.advantage_moments_span(span, float(c))
    if new_span < 1:
        log.caveats.append(
            f"advantage_ewma_decay: the rescaled span {new_span:.6g} iterations is below 1 (the latest iteration alone): "
            "using decay 0, so the advantage moments come from more samples than with the reference settings"
        )
        new_span = 1.0
    scaled["advantage_ewma_decay"] = ewma_decay_from_span(new_span)
    log.lines.append(
        f"advantage_ewma_decay: {format_value(float(old))}{default_note} (span {span:.6g} iterations) -> "
        f"{format_value(scaled['advantage_ewma_decay'])} (span {new_span:.6g} = * c)"
    )


def scale_policy_iterations(scaled: dict[str, Any], defaults: dict[str, Any], c: Fraction, log: ScaleLog) -> None:
    default_note = "" if "n_policy_iterations" in scaled else " (default)"
    old = whole_number("n_policy_iterations", scaled.get("n_policy_iterations", defaults.get("n_policy_iterations", 32)))
    new = batch_size_rules.ppg_policy_iterations(old, c)
    if new.denominator != 1 or new < 1:
        raise ValueError(
            f"n_policy_iterations {old} * c = {old} * reference_n_envs / n_envs = {float(new):g} is not a whole number "
            ">= 1: choose n_envs so that it is"
        )
    scaled["n_policy_iterations"] = int(new)
    log.lines.append(f"n_policy_iterations: {old}{default_note} -> {int(new)} (* c; phase batch size unchanged)")
