"""
Clear errors for a keyword argument, policy keyword or policy name that an algorithm does not take: they say which
class or option takes it, and suggest the nearest name. The other algorithms are those that
:mod:`sb3_ewma.algorithms` registers here (:func:`register_algorithms`).
"""

import difflib
import inspect
from collections.abc import Iterable, Mapping
from typing import Any

# options that no constructor takes, and where they are
_STALENESS = (
    "artificial staleness is an ablation: sb3_ewma.ablations.StalePPO_EWMA(...).set_staleness(staleness, mode) sets "
    "it (likewise StaleRecurrentPPO_EWMA and StaleMaskablePPO_EWMA; PPG_EWMA and PPG train on data one iteration "
    "stale with async_rollouts=True)"
)
_MOVED: dict[str, str] = {"staleness": _STALENESS, "staleness_mode": _STALENESS}

# the package's algorithm classes by name (a mapping that may import a class when looked up); set by register_algorithms
_algorithms: Mapping[str, type] = {}


def register_algorithms(algorithms: Mapping[str, type]) -> None:
    """Set the package's algorithms that the hints name (called by :mod:`sb3_ewma.algorithms`)."""
    global _algorithms
    _algorithms = algorithms


def _join(names: Iterable[str], conjunction: str = "and") -> str:
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {conjunction} {names[-1]}"


def constructor_keywords(algorithm: type) -> set[str] | None:
    """
    :param algorithm: an algorithm class
    :return: the names its constructor takes as keyword arguments, or None when it takes any (``**kwargs``)
    """
    parameters = inspect.signature(algorithm).parameters.values()
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters):
        return None
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {parameter.name for parameter in parameters if parameter.kind in named}


def takes_policy_keyword(policy_class: type, name: str) -> bool:
    """Whether a constructor of the policy class or of one of its bases names the keyword ``name``."""
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    for klass in policy_class.__mro__:
        init = vars(klass).get("__init__")
        if init is None or klass is object or name == "self":
            continue
        parameter = inspect.signature(init).parameters.get(name)
        if parameter is not None and parameter.kind in named:
            return True
    return False


def _other_algorithms(algorithm: type) -> list[type]:
    # only to explain an error: looking the classes up imports sb3-contrib's algorithms (slow)
    return [other for other in _algorithms.values() if other is not algorithm]


def _policies(algorithm: type) -> list[type]:
    return list(getattr(algorithm, "policy_aliases", {}).values())


def _policy_keyword_takers(algorithms: list[type], name: str) -> list[str]:
    """The names of the algorithms all of whose policies take the keyword ``name``."""
    return [
        algorithm.__name__
        for algorithm in algorithms
        if _policies(algorithm) and all(takes_policy_keyword(policy, name) for policy in _policies(algorithm))
    ]


def unknown_keyword_message(algorithm: type, name: str, value: Any, other_names: Iterable[str] = ()) -> str:
    """
    Why ``name`` is not an argument of ``algorithm``, and what to do (``policy_kwargs``, another algorithm, the nearest
    name).

    :param algorithm: the algorithm class
    :param name: the keyword argument it does not take
    :param value: the value given
    :param other_names: other valid names (rl-zoo3's entry keys), for the nearest name
    """
    class_name = algorithm.__name__
    message = f"{class_name} has no argument {name}={value!r}"
    policies = _policies(algorithm)
    if policies and all(takes_policy_keyword(policy, name) for policy in policies):
        return f"{message}: it is a keyword of its policy, pass policy_kwargs=dict({name}={value!r})"
    if name in _MOVED:
        return f"{message}: {_MOVED[name]}"
    others = _other_algorithms(algorithm)
    takers = [other.__name__ for other in others if name in (constructor_keywords(other) or ())]
    if takers:
        return f"{message}: it is an argument of {_join(takers)}"
    policy_takers = _policy_keyword_takers(others, name)
    if policy_takers:
        return (
            f"{message}, and its policies do not take it: it is a policy keyword of {_join(policy_takers)} "
            f"(policy_kwargs=dict({name}=...))"
        )
    close = difflib.get_close_matches(name, sorted({*(constructor_keywords(algorithm) or ()), *other_names}), n=1)
    return message + (f": did you mean {close[0]!r}?" if close else "")


def check_policy_keywords(algorithm: type, policy: Any, policy_kwargs: Any) -> None:
    """
    Raise a ``TypeError`` for a keyword of ``policy_kwargs`` that the algorithm's own policy does not take but a policy
    of another algorithm of this package does. Other keywords, and the user's policy classes, are left to the policy.
    """
    aliases = getattr(algorithm, "policy_aliases", {})
    policy_class = aliases.get(policy) if isinstance(policy, str) else policy
    if not isinstance(policy_kwargs, dict) or not isinstance(policy_class, type) or policy_class not in aliases.values():
        return
    for name, value in policy_kwargs.items():
        if takes_policy_keyword(policy_class, name):
            continue
        takers = _policy_keyword_takers(_other_algorithms(algorithm), name)
        if takers:
            policy_name = policy if isinstance(policy, str) else policy_class.__name__
            raise TypeError(
                f"{algorithm.__name__}'s policy {policy_name} has no keyword {name}={value!r} (in policy_kwargs): "
                f"only the policies of {_join(takers)} take it: remove it, or use {_join(takers, 'or')}"
            )


def unknown_policy_message(algorithm: type, policy_name: str) -> str:
    """SB3's "Policy X unknown", with the algorithm's policy names, the nearest one and the algorithms that have it."""
    aliases = list(getattr(algorithm, "policy_aliases", {}))
    message = f"Policy {policy_name} unknown for {algorithm.__name__}, whose policies are {_join(aliases)}"
    close = difflib.get_close_matches(str(policy_name), aliases, n=1, cutoff=0.5)
    if close:
        message += f": did you mean {close[0]!r}?"
    owners = [other.__name__ for other in _other_algorithms(algorithm) if policy_name in getattr(other, "policy_aliases", {})]
    if owners:
        message += f" ({policy_name} is a policy of {_join(owners)})"
    return message
