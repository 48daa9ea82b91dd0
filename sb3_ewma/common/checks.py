"""
Checks of the settings that every algorithm of the package shares with SB3's ``PPO`` and of ``learn``'s arguments:
each bad value raises a ``ValueError`` that names the parameter, the value and what is allowed, before anything is
built or stepped. Settings that are legal but almost surely a mistake give a ``UserWarning`` at the caller's line.
"""

import inspect
import math
import numbers
import os
import sys
import warnings
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any, TypeGuard

import numpy as np
import stable_baselines3

# frames in these folders are the library's, not the user's (for the warnings' stacklevel)
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_LIBRARY_DIRS = (_PACKAGE_DIR, os.path.dirname(os.path.abspath(stable_baselines3.__file__)) + os.sep)


def _library_dirs() -> tuple[str, ...]:
    contrib_file = getattr(sys.modules.get("sb3_contrib"), "__file__", None)
    if contrib_file is None:
        return _LIBRARY_DIRS
    return (*_LIBRARY_DIRS, os.path.dirname(os.path.abspath(contrib_file)) + os.sep)


def caller_stacklevel() -> int:
    """
    The ``stacklevel`` that makes ``warnings.warn``, called by the function that calls this one, point at the first
    frame outside sb3_ewma, Stable-Baselines3 and sb3-contrib: the user's line.
    """
    library_dirs = _library_dirs()
    frame: FrameType | None = sys._getframe(1)  # the function that calls warnings.warn: stacklevel 1
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(library_dirs):
        frame = frame.f_back
        level += 1
    return level


def warn_at_caller(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` pointing at the user's line (see :func:`caller_stacklevel`)."""
    warnings.warn(message, category, stacklevel=caller_stacklevel())


class HyperparameterError(ValueError, AssertionError):
    """
    A setting outside its allowed range. A ``ValueError``, and an ``AssertionError`` too: SB3 asserts some of these
    settings itself (``batch_size``, ``n_steps``, ``clip_range_vf``), so code written for SB3's errors keeps working.
    """


def _is_integer(value: object) -> TypeGuard[numbers.Integral]:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[numbers.Real]:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value))


def check_integer(name: str, value: object, minimum: int) -> None:
    """Raise a ``ValueError`` unless ``value`` is an integer ``>= minimum`` (``bool`` and strings are refused)."""
    if not _is_integer(value) or value < minimum:
        raise HyperparameterError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_number(name: str, value: object, low: float, high: float = math.inf, *, low_open: bool = False) -> None:
    """Raise a ``ValueError`` unless ``value`` is a finite number in ``[low, high]`` (``(low, high]`` if ``low_open``)."""
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}]" if high != math.inf else f"{'>' if low_open else '>='} {low:g}"
    if not _is_number(value):
        raise HyperparameterError(
            f"{name} must be a finite number {'in ' if high != math.inf else ''}{interval}, got {value!r}"
        )
    number = float(value)
    if number < low or number > high or (low_open and number == low):
        raise HyperparameterError(
            f"{name} must be a finite number {'in ' if high != math.inf else ''}{interval}, got {value!r}"
        )


def check_schedule(name: str, value: object, *, allow_none: bool = False, positive: bool = True) -> None:
    """A number (``> 0`` if ``positive``, else ``>= 0``) or a schedule (a callable of the progress remaining)."""
    if (value is None and allow_none) or callable(value):
        return
    if not _is_number(value) or (float(value) <= 0 if positive else float(value) < 0):
        allowed = ("None, " if allow_none else "") + f"a number {'> 0' if positive else '>= 0'} or a schedule"
        raise HyperparameterError(f"{name} must be {allowed} (a function of the progress remaining), got {value!r}")


def check_on_policy_hyperparams(
    *,
    learning_rate: Any,
    n_steps: Any,
    batch_size: Any,
    n_epochs: Any,
    gamma: Any,
    gae_lambda: Any,
    normalize_advantage: Any,
    clip_range: Any,
    clip_range_vf: Any,
    ent_coef: Any,
    vf_coef: Any,
    max_grad_norm: Any,
    target_kl: Any,
    stats_window_size: Any,
    kl_coef: Any,
    seed: Any = None,
    batch_size_may_be_none: bool = False,
    min_n_epochs: int = 1,
) -> None:
    """
    Raise a ``ValueError`` naming the first of SB3 PPO's settings outside its allowed range, and warn when nothing
    limits the policy update (``clip_range=None`` with ``kl_coef=0``).

    :param batch_size_may_be_none: sb3-contrib's algorithms take ``batch_size=None`` (the whole rollout)
    :param min_n_epochs: the fewest policy epochs allowed (PPG: 0, value epochs only)
    """
    check_schedule("learning_rate", learning_rate)
    check_integer("n_steps", n_steps, 1)
    if batch_size is not None or not batch_size_may_be_none:
        # as SB3: normalizing the advantages of a minibatch of 1 sample gives NaN (its standard deviation)
        check_integer("batch_size", batch_size, 2 if normalize_advantage else 1)
    check_integer("n_epochs", n_epochs, min_n_epochs)
    check_number("gamma", gamma, 0.0, 1.0)
    check_number("gae_lambda", gae_lambda, 0.0, 1.0)
    if not isinstance(normalize_advantage, (bool, np.bool_)):
        raise HyperparameterError(f"normalize_advantage must be True or False, got {normalize_advantage!r}")
    if seed is not None:
        check_integer("seed", seed, 0)
    if not (clip_range is None or callable(clip_range) or (_is_number(clip_range) and 0 < float(clip_range) < 1)):
        raise HyperparameterError(
            f"clip_range must be None (no clipping), a schedule or a number in (0, 1), got {clip_range!r}"
        )
    check_schedule("clip_range_vf", clip_range_vf, allow_none=True)
    if not _is_number(ent_coef):
        raise HyperparameterError(f"ent_coef must be a finite number, got {ent_coef!r}")
    check_number("vf_coef", vf_coef, 0.0)
    if not (isinstance(max_grad_norm, numbers.Real) and not isinstance(max_grad_norm, bool) and float(max_grad_norm) > 0):
        raise HyperparameterError(f"max_grad_norm must be a number > 0 (math.inf: no clipping), got {max_grad_norm!r}")
    if target_kl is not None:
        check_number("target_kl", target_kl, 0.0, low_open=True)
    check_integer("stats_window_size", stats_window_size, 1)
    if clip_range is None and _is_number(kl_coef) and float(kl_coef) == 0:
        warn_at_caller(
            "clip_range=None and kl_coef=0: nothing limits how far the policy moves from the proximal policy in an "
            "update (the proximal policy is unused). Set clip_range (e.g. 0.2) or kl_coef > 0 (e.g. 1.0)."
        )


def check_learn_arguments(total_timesteps: Any, log_interval: Any) -> None:
    """``learn``'s ``total_timesteps`` (a whole number >= 0; ``1e5`` is accepted) and ``log_interval`` (>= 1 or None)."""
    if not (_is_integer(total_timesteps) or (_is_number(total_timesteps) and float(total_timesteps).is_integer())):
        raise HyperparameterError(f"total_timesteps must be a whole number >= 0, got {total_timesteps!r}")
    if float(total_timesteps) < 0:
        raise HyperparameterError(f"total_timesteps must be a whole number >= 0, got {total_timesteps!r}")
    if log_interval is not None:
        check_integer("log_interval", log_interval, 1)


def arguments_for(function: Callable[..., Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``arguments`` (a constructor's arguments by name) that ``function`` takes by name."""
    return {name: arguments[name] for name in inspect.signature(function).parameters if name in arguments}
