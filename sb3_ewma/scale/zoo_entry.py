"""
Hyperparameter values as rl-zoo3 entries write them (numbers, ``"lin_<value>"`` strings, schedules, ``policy_kwargs``
strings), the keys of an entry that are not constructor arguments, and the reading and writing of hyperparameter files.
"""

import ast
import inspect
import json
import math
import numbers
from collections.abc import Callable
from typing import Any, cast

import torch as th
import yaml

from sb3_ewma.common.ewma import check_decay
from sb3_ewma.scale import batch_size_rules
from sb3_ewma.scale.policy_kwargs_source import PolicyKwargsSource, dotted_name

# optimizers (and their subclasses) whose step is normalized by a running RMS of the gradient: square-root rule
SQRT_RULE_OPTIMIZERS = ("Adam", "AdamW", "NAdam", "RAdam", "Adamax")
# plain stochastic gradient descent: linear rule
LINEAR_RULE_OPTIMIZERS = ("SGD",)
DEFAULT_OPTIMIZER = "Adam"  # SB3's ActorCriticPolicy default
DEFAULT_ADAM_BETAS = (0.9, 0.999)  # torch.optim.Adam default


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


class ScaledSchedule:
    """
    A schedule (``progress_remaining -> value``) multiplied by a constant; scaling a ``ScaledSchedule`` again multiplies
    the factors.

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
    Multiply a schedule by ``factor``.

    :param schedule: a callable ``progress_remaining -> value``
    :param factor: the multiplier
    :return: a ``ScaledSchedule``, or ``schedule`` itself when the factors combine to 1
    """
    scaled = ScaledSchedule(schedule, factor)
    if math.isclose(scaled.factor, 1.0, rel_tol=1e-12, abs_tol=0.0):
        return scaled.schedule
    return scaled


# ----------------------------------------------------------------------------------------------------------------------
# policy_kwargs given as a string that rl-zoo3 evaluates, e.g. "dict(optimizer_class=th.optim.SGD, net_arch=[64, 64])"


def optimizer_names(policy_kwargs: Any) -> tuple[list[str], str]:
    """The optimizer's class names to match (most specific first) and its description for messages."""
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


def learning_rate_rule(policy_kwargs: Any, lr_rule: str | None) -> tuple[str, str, bool]:
    """``(rule, optimizer description, whether the optimizer is Adam-like, i.e. has betas)``."""
    names, description = optimizer_names(policy_kwargs)
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


def schedule_start(name: str, value: str) -> float:
    """The initial value of an rl-zoo3 schedule string (``"lin_2.5e-4"``), or a ``ValueError`` naming the setting."""
    parts = value.split("_")
    try:
        if len(parts) != 2:
            raise ValueError
        return float(parts[1])
    except ValueError:
        try:
            float(value)
        except ValueError:
            hint = ""
        else:  # YAML 1.1 reads 1e-3 (no dot in the mantissa) as a string, and so does rl-zoo3
            hint = f" (a YAML file reads {value} as a string: write {float(value)!r} or !!float {value})"
        raise ValueError(
            f"{name}: cannot read {value!r}; rl-zoo3 takes a number or a schedule string like 'lin_2.5e-4'{hint}"
        ) from None


def scale_rate(name: str, value: Any, factor: float) -> Any:
    """Multiply a learning rate given as a number, an rl-zoo3 ``"lin_<value>"`` string or a schedule."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, an rl-zoo3 'lin_<value>' string or a schedule, got {value!r}")
    if isinstance(value, numbers.Real):
        return float(value) * factor
    if isinstance(value, str):
        return f"{value.split('_')[0]}_{schedule_start(name, value) * factor!r}"
    if callable(value):
        # a callable learning rate is a schedule: progress remaining -> value (SB3's Schedule)
        return scale_schedule(cast(Callable[[float], float], value), factor)
    raise ValueError(f"{name} must be a number, an rl-zoo3 'lin_<value>' string or a schedule, got {value!r}")


def scaled_betas(betas: Any, c: float) -> tuple[float, float] | list[float]:
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise ValueError(f"policy_kwargs optimizer_kwargs betas must be a pair of numbers, got {betas!r}")
    for beta in betas:
        check_decay("Adam beta", beta)
    scaled = batch_size_rules.adam_betas((float(betas[0]), float(betas[1])), c)
    return list(scaled) if isinstance(betas, list) else scaled


SB3_ADAM_EPS = 1e-5
"""The ``eps`` SB3's policies give torch's Adam when ``optimizer_kwargs`` is None (an ``optimizer_kwargs`` written by the
helper keeps it)."""


def _is_torch_adam(optimizer_class: Any) -> bool:
    """Whether ``optimizer_class`` (a class, or its source text in a ``policy_kwargs`` string) is torch's Adam."""
    if isinstance(optimizer_class, str):
        return optimizer_class in ("th.optim.Adam", "torch.optim.Adam", "optim.Adam")
    return optimizer_class is th.optim.Adam


def policy_optimizer_kwargs(policy_kwargs: Any) -> dict[str, Any] | None:
    """
    The ``optimizer_kwargs`` SB3's policy builds its optimizer with, for a ``policy_kwargs`` dict (or None): the given
    ones, or for none SB3's default (``eps=1e-5`` for torch's Adam); None where a string cannot be read.
    """
    if isinstance(policy_kwargs, str):
        items = PolicyKwargsSource.items(PolicyKwargsSource(policy_kwargs).tree)
        if items is None:
            return None
        if "optimizer_kwargs" in items:
            optimizer_items = PolicyKwargsSource.items(items["optimizer_kwargs"])  # dict(...) or {...}
            try:
                return None if optimizer_items is None else {k: ast.literal_eval(v) for k, v in optimizer_items.items()}
            except ValueError:  # not literal values
                return None
        optimizer_class = ast.unparse(items["optimizer_class"]) if "optimizer_class" in items else th.optim.Adam
        return {"eps": SB3_ADAM_EPS} if _is_torch_adam(optimizer_class) else {}
    policy_kwargs = policy_kwargs or {}
    if policy_kwargs.get("optimizer_kwargs") is not None:
        return dict(policy_kwargs["optimizer_kwargs"])
    return {"eps": SB3_ADAM_EPS} if _is_torch_adam(policy_kwargs.get("optimizer_class", th.optim.Adam)) else {}


def default_betas(policy_kwargs: Any) -> tuple[float, float]:
    optimizer_class = policy_kwargs.get("optimizer_class") if isinstance(policy_kwargs, dict) else None
    if isinstance(optimizer_class, type):
        try:
            parameter = inspect.signature(optimizer_class).parameters.get("betas")
        except (TypeError, ValueError):
            parameter = None
        if parameter is not None and isinstance(parameter.default, (tuple, list)):
            return (float(parameter.default[0]), float(parameter.default[1]))
    return DEFAULT_ADAM_BETAS


def scale_betas_in_string(source: str, c: float) -> tuple[str, Any, Any]:
    parsed = PolicyKwargsSource(source)
    items = PolicyKwargsSource.items(parsed.tree)
    if items is None or parsed.tree is None:
        raise ValueError(f"scale_adam_betas: cannot edit policy_kwargs {source!r} (expected 'dict(...)' or '{{...}}')")
    if "optimizer_kwargs" not in items:
        old = DEFAULT_ADAM_BETAS
        new = scaled_betas(old, c)
        # with SB3's default eps for torch's Adam, which an optimizer_kwargs given would otherwise drop
        eps = policy_optimizer_kwargs(source) or {}
        if isinstance(parsed.tree, ast.Call):
            value_text = "dict(" + "".join(f"{key}={value!r}, " for key, value in eps.items()) + f"betas={new!r})"
        else:
            value_text = "{" + "".join(f"{key!r}: {value!r}, " for key, value in eps.items()) + f"'betas': {new!r}}}"
        return parsed.add_item(parsed.tree, "optimizer_kwargs", value_text), old, new
    optimizer_kwargs = items["optimizer_kwargs"]
    optimizer_items = PolicyKwargsSource.items(optimizer_kwargs)
    if optimizer_items is None:
        raise ValueError(f"scale_adam_betas: cannot edit optimizer_kwargs in policy_kwargs {source!r}")
    if "betas" not in optimizer_items:
        old = DEFAULT_ADAM_BETAS
        new = scaled_betas(old, c)
        return parsed.add_item(optimizer_kwargs, "betas", repr(new)), old, new
    try:
        old = ast.literal_eval(optimizer_items["betas"])
    except ValueError:
        raise ValueError(f"scale_adam_betas: betas in policy_kwargs {source!r} must be literal numbers") from None
    new = scaled_betas(old, c)
    return parsed.replace(optimizer_items["betas"], repr(new)), old, new


def has_explicit_betas(policy_kwargs: Any) -> bool:
    if isinstance(policy_kwargs, dict):
        optimizer_kwargs = policy_kwargs.get("optimizer_kwargs")
        return isinstance(optimizer_kwargs, dict) and "betas" in optimizer_kwargs
    if isinstance(policy_kwargs, str):
        items = PolicyKwargsSource.items(PolicyKwargsSource(policy_kwargs).tree)
        optimizer_items = PolicyKwargsSource.items(items.get("optimizer_kwargs")) if items else None
        return optimizer_items is not None and "betas" in optimizer_items
    return False


# ----------------------------------------------------------------------------------------------------------------------
# files


def read_hyperparameter_file(path: str) -> Any:
    """
    The content of an rl-zoo3 hyperparameter file: JSON for a name ending in ``.json``, YAML otherwise.

    :raises OSError: the file cannot be read
    :raises ValueError: not JSON
    :raises yaml.YAMLError: not YAML
    """
    with open(path) as file:
        return json.load(file) if path.endswith(".json") else yaml.safe_load(file)


class _Dumper(yaml.SafeDumper):
    """Keeps the keys in their order."""


def _represent_dict(dumper: yaml.SafeDumper, data: dict) -> yaml.Node:
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items())


_Dumper.add_multi_representer(dict, _represent_dict)


def dump_entry(entry: str, hyperparams: dict[str, Any]) -> str:
    """
    The YAML text of ``{entry: hyperparams}`` in the layout of rl-zoo3 files, keys in their order.

    :param entry: the entry name
    :param hyperparams: its settings
    :return: the YAML document
    """
    return yaml.dump({entry: dict(hyperparams)}, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=4096)
