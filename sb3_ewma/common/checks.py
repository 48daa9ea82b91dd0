"""
The checks of arguments that a rule (:mod:`sb3_ewma.common.rules`) cannot say, made before anything is built or
stepped (``env`` and its spaces, ``policy_kwargs``, callbacks, folders, action masks, devices), and their errors.
A bad value raises a ``ValueError`` naming the argument, the value and what is allowed. A keyword argument, policy
keyword or policy name that an algorithm does not take gets an error that says which class or option takes it and the
nearest name; the other algorithms are those that :mod:`sb3_ewma.algorithms` registers here
(:func:`register_algorithms`).
"""

import difflib
import inspect
import numbers
import os
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from types import FrameType
from typing import Any

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
    """The ``stacklevel`` that makes the caller's ``warnings.warn`` point at the user's line (outside sb3_ewma and SB3)."""
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
    """A setting outside its allowed range; also an ``AssertionError``, as SB3 asserts some of these settings."""


class UnsupportedSpaceError(HyperparameterError, NotImplementedError):
    """An observation space that no policy takes; also a ``NotImplementedError``, as SB3 raises for these spaces."""


class MissingEnvironmentError(ValueError, AssertionError):
    """``learn`` of a model without an environment; also an ``AssertionError``, as SB3 asserts one."""


def check_has_env(env: object, class_name: str) -> None:
    """Before ``learn`` writes anything: a model loaded without ``env`` has none to learn from (SB3 asserts it bare)."""
    if env is None:
        raise MissingEnvironmentError(
            f"{class_name} has no environment to learn from (a model loaded without env=): pass one to "
            f"{class_name}.load(path, env=...) or call model.set_env(env) before learn()"
        )


class NonFiniteError(ValueError):
    """A NaN or an infinity where training needs a finite number (:mod:`sb3_ewma.common.finite`)."""


NET_ARCH_FORMS = (
    "a list of layer sizes for both networks (net_arch=[64, 64]), dict(pi=[...], vf=[...]) for separate ones, [] or None "
    "(or SB3's deprecated [dict(pi=[...], vf=[...])])"
)
POLICY_CLASS_KEYWORDS = {
    "activation_fn": "torch.nn.Tanh (nn.Tanh in an rl-zoo3 policy_kwargs string)",
    "optimizer_class": "torch.optim.Adam",
    "features_extractor_class": "stable_baselines3.common.torch_layers.NatureCNN",
}
"""Keywords of SB3's policies that take a class."""


def check_env_argument(env: object, init_setup_model: bool = True) -> None:
    """``env``: a gymnasium environment, a ``VecEnv`` or a registered id; ``None`` only without ``_init_setup_model``."""
    import gymnasium
    from stable_baselines3.common.vec_env import VecEnv

    if isinstance(env, (str, gymnasium.Env, VecEnv)):
        return
    if env is None:
        if not init_setup_model:
            return
        raise HyperparameterError(
            "env must be an environment to train on: a gymnasium environment, a VecEnv or a registered id "
            "('CartPole-v1'), got None (to only load a model, use Algorithm.load(path); to give the environment "
            "later, Algorithm.load(path, env=...) or model.set_env(env))"
        )
    if all(hasattr(env, name) for name in ("observation_space", "action_space", "step", "reset")):
        return  # an environment of another API (the old gym's): SB3 converts it itself
    raise HyperparameterError(f"env must be a gymnasium environment, a VecEnv or a registered id ('CartPole-v1'), got {env!r}")


def _is_layer_sizes(value: object) -> bool:
    # a sequence (a list, a tuple, a range, a 1-d array) that SB3 iterates; a layer of 0 units is accepted, as SB3
    # (torch builds an empty layer)
    if isinstance(value, np.ndarray):
        sizes: list[Any] = list(value) if value.ndim == 1 else [None]
    elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        sizes = list(value)
    else:
        return False
    return all(isinstance(size, numbers.Integral) and not isinstance(size, bool) and int(size) >= 0 for size in sizes)


def _is_sb3_net_arch(net_arch: object) -> bool:
    """What SB3's ``ActorCriticPolicy`` builds from: see :func:`check_policy_kwargs`."""
    if net_arch is None or _is_layer_sizes(net_arch):
        return True
    if isinstance(net_arch, list) and net_arch and isinstance(net_arch[0], Mapping):
        net_arch = net_arch[0]  # SB3's deprecated form: it warns and builds from the first entry
    # SB3 reads the "pi" and "vf" entries (a missing one: no layers) and ignores the others, as PPG's policies do
    return isinstance(net_arch, Mapping) and all(_is_layer_sizes(net_arch[key]) for key in ("pi", "vf") if key in net_arch)


def check_policy_kwargs(policy_kwargs: object) -> None:
    """
    ``policy_kwargs``: ``None`` or a dict of the policy's keyword arguments, whose ``net_arch`` (when given) is one of
    the forms SB3's policies build (:data:`NET_ARCH_FORMS`) and whose class keywords are classes.
    """
    if policy_kwargs is None:
        return
    if not isinstance(policy_kwargs, Mapping):
        raise HyperparameterError(
            f"policy_kwargs must be None or a dict of the policy's keyword arguments (dict(net_arch=[64, 64])), got "
            f"{policy_kwargs!r}"
        )
    if "net_arch" in policy_kwargs and not _is_sb3_net_arch(policy_kwargs["net_arch"]):
        raise HyperparameterError(f"policy_kwargs net_arch must be {NET_ARCH_FORMS}, got {policy_kwargs['net_arch']!r}")
    for key, example in POLICY_CLASS_KEYWORDS.items():
        if key in policy_kwargs and not callable(policy_kwargs[key]):
            raise HyperparameterError(f"policy_kwargs {key} must be a class, such as {example}, got {policy_kwargs[key]!r}")
    optimizer_kwargs = policy_kwargs.get("optimizer_kwargs")
    if isinstance(optimizer_kwargs, Mapping) and "lr" in optimizer_kwargs:
        # the policy passes lr itself: the optimizer would get it twice
        raise HyperparameterError(
            f"policy_kwargs optimizer_kwargs must not hold lr (got lr={optimizer_kwargs['lr']!r}): the optimizer's step "
            "size is the algorithm's learning_rate argument (a number or a schedule)"
        )


def check_observation_space(observation_space: object) -> None:
    """
    An observation space that SB3 can store: not ``Text``, ``Graph`` or ``Sequence`` (alone, or inside a ``Dict`` or
    ``Tuple``). ``None`` passes.
    """
    from gymnasium import spaces

    shapeless = (spaces.Text, spaces.Graph, spaces.Sequence)
    if isinstance(observation_space, shapeless) or (
        isinstance(observation_space, spaces.Tuple) and any(isinstance(space, shapeless) for space in observation_space)
    ):
        raise UnsupportedSpaceError(
            f"the observation space {observation_space} ({type(observation_space).__name__}) is one no policy takes: the "
            "policies take Box, Discrete, MultiDiscrete, MultiBinary, or a Dict of these (with a MultiInput policy); "
            "convert the observations with a gymnasium ObservationWrapper"
        )
    if isinstance(observation_space, spaces.Dict):
        entries = [
            f"{key!r}: {type(space).__name__}" for key, space in observation_space.items() if isinstance(space, shapeless)
        ]
        if entries:
            raise UnsupportedSpaceError(
                f"the observation space {observation_space} has entries no policy takes ({', '.join(entries)}): a "
                f"Dict's entries must be Box, Discrete, MultiDiscrete or MultiBinary (flatten or wrap the others)"
            )


def check_callback(callback: object) -> None:
    """
    ``learn``'s ``callback``: ``None``, a ``BaseCallback``, a function ``(locals, globals) -> bool`` or a list of these;
    a ``BaseCallback`` class, which SB3 takes as such a function (each call makes a new callback), is warned about.
    """
    from stable_baselines3.common.callbacks import BaseCallback

    items = callback if isinstance(callback, list) else [callback]
    for item in items:
        if item is None and not isinstance(callback, list):
            return
        if isinstance(item, type) and issubclass(item, BaseCallback):
            warn_at_caller(
                f"callback={item.__name__} is the class: SB3 calls it at each step as a function callback(locals, "
                f"globals), which builds a new {item.__name__} from those dicts instead of running one (or fails); pass "
                f"an instance, {item.__name__}(...)"
            )
        elif not (isinstance(item, BaseCallback) or callable(item)):
            raise HyperparameterError(
                f"callback must be None, a BaseCallback (EvalCallback(eval_env), CheckpointCallback(...)), a function "
                f"callback(locals, globals) -> bool or a list of these, got {item!r}"
            )


def writable_folder_problem(folder: str) -> str | None:
    """Why files cannot be written in ``folder`` (made if missing, as SB3 makes it), or None."""
    path = os.path.abspath(folder)
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"{existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None


def check_save_folders(callback: object, tensorboard_log: object) -> None:
    """
    The folders that ``learn`` writes in, checked before training: ``tensorboard_log`` and the save and log paths of
    SB3's ``CheckpointCallback`` and ``EvalCallback`` (and their subclasses'), also inside a ``CallbackList`` or run by
    an event callback (a user's callback's attributes of those names may mean anything).
    """
    from stable_baselines3.common.callbacks import CallbackList, CheckpointCallback, EvalCallback

    folders: list[tuple[str, object]] = [("tensorboard_log", tensorboard_log)]
    pending = list(callback) if isinstance(callback, list) else [callback]
    seen: set[int] = set()
    while pending:
        item = pending.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, CallbackList):
            pending.extend(item.callbacks)
            continue
        # EventCallback's child (EvalCallback's callback_after_eval) and EvalCallback's callback_on_new_best
        children = (getattr(item, "callback", None), getattr(item, "callback_on_new_best", None))
        pending.extend(child for child in children if child is not None)
        if not isinstance(item, (CheckpointCallback, EvalCallback)):
            continue  # the folders of SB3's callbacks; a user's callback's attributes may mean anything
        name = type(item).__name__
        for attribute in ("save_path", "best_model_save_path"):
            folders.append((f"{name}'s {attribute}", getattr(item, attribute, None)))
        log_path = getattr(item, "log_path", None)  # EvalCallback's: the file evaluations.npz in that folder
        folders.append((f"{name}'s log_path", os.path.dirname(log_path) if isinstance(log_path, str) else None))
    if tensorboard_log is not None and not isinstance(tensorboard_log, (str, os.PathLike)):
        raise HyperparameterError(f"tensorboard_log must be None or a folder's path, got {tensorboard_log!r}")
    for name, folder in folders:
        if isinstance(folder, (str, os.PathLike)) and str(folder):
            problem = writable_folder_problem(os.fspath(folder))
            if problem is not None:
                raise HyperparameterError(f"{name}={os.fspath(folder)!r} cannot be written: {problem}; nothing was trained")


def action_mask_length(action_space: object) -> int | None:
    """The number of mask entries per observation for ``action_space`` (sb3-contrib's maskable distributions)."""
    from gymnasium import spaces

    if isinstance(action_space, spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, spaces.MultiDiscrete):
        return int(np.sum(action_space.nvec))
    if isinstance(action_space, spaces.MultiBinary):
        return 2 * int(np.prod(action_space.shape))
    return None


def check_action_masks(action_masks: object, action_space: object, n_observations: int | None = None) -> None:
    """
    ``predict``'s ``action_masks`` for ``MaskablePPO_EWMA``: shape ``(length,)`` or ``(n_observations, length)``, with
    one entry per action for each observation (``Discrete(n)``: n; ``MultiDiscrete``: ``sum(nvec)``;
    ``MultiBinary(n)``: 2n). ``None`` (no masking) passes.

    :param action_masks: the masks given to ``predict``
    :param action_space: the model's action space
    :param n_observations: the number of observations given to ``predict`` (None: not checked)
    """
    if action_masks is None:
        return
    length = action_mask_length(action_space)
    if length is None:
        return
    masks = np.asarray(action_masks)
    if masks.dtype == object or masks.size == 0 or masks.size % length != 0:
        raise HyperparameterError(
            f"action_masks of shape {masks.shape} for the action space {action_space}: each observation needs {length} "
            f"mask entries (one per action), so action_masks must have shape ({length},) or (n_observations, {length})"
        )
    rows = masks.size // length
    if n_observations is not None and rows != n_observations:
        raise HyperparameterError(
            f"action_masks of shape {masks.shape} hold masks for {rows} observation(s), and predict was given "
            f"{n_observations}: give one row of {length} entries per observation, shape ({n_observations}, {length})"
        )


def check_episode_starts(episode_start: object, n_observations: int | None) -> None:
    """
    ``predict``'s ``episode_start`` for ``RecurrentPPO_EWMA``: one flag per observation. ``None`` passes, as does an
    unknown ``n_observations``.

    :param episode_start: the flags given to ``predict``
    :param n_observations: the number of observations given to ``predict`` (:func:`count_observations`)
    """
    if episode_start is None or n_observations is None:
        return
    flags = np.asarray(episode_start)
    if flags.size != n_observations:
        raise HyperparameterError(
            f"episode_start of shape {flags.shape} for {n_observations} observation(s): give one flag per observation "
            f"(shape ({n_observations},), True where an episode starts), or None"
        )


def count_observations(observation: object, observation_space: object) -> int | None:
    """The number of observations given to ``predict`` (1 for a single one), or None when they do not fit the space."""
    from gymnasium import spaces
    from stable_baselines3.common.preprocessing import is_image_space
    from stable_baselines3.common.utils import is_vectorized_observation

    try:
        if isinstance(observation_space, spaces.Dict) and isinstance(observation, dict):
            key = next(iter(observation_space.spaces))
            single = observation_space.spaces[key]
            value = np.asarray(observation[key])
        else:
            single, value = observation_space, np.asarray(observation)  # type: ignore[assignment]
        if isinstance(single, spaces.Box) and is_image_space(single) and value.shape[-3:] != single.shape:
            return None  # channels last against channels first: predict transposes, and reports a mismatch
        if not is_vectorized_observation(value, single):  # type: ignore[arg-type]
            return 1
        return int(value.shape[0]) if value.ndim > 0 else 1
    except (ValueError, TypeError, StopIteration):
        return None


def check_device_name(device: object) -> Any:
    """
    ``device``: ``"auto"``, a torch device name (``"cpu"``, ``"cuda:1"``) or a ``torch.device``; a name that is not
    a torch device raises a ``ValueError``. Other types are SB3's to take or refuse.

    :return: the parsed ``torch.device``, or None for ``"auto"`` and other types
    """
    import torch as th

    try:
        return th.device(device) if isinstance(device, (str, th.device)) and device != "auto" else None
    except (RuntimeError, ValueError):
        raise HyperparameterError(
            f"device must be 'auto', 'cpu', 'cuda', 'cuda:N' or another torch device ('mps', 'xpu'), got {device!r}"
        ) from None


_CUDA_FALLBACK_WARNED = False


def warn_cuda_unavailable(device: object) -> None:
    """
    Warn once per process, at the user's line, when ``device`` names CUDA and no CUDA GPU is available (SB3 then
    trains on the CPU silently). A name that is not a torch device raises (:func:`check_device_name`).
    """
    global _CUDA_FALLBACK_WARNED
    import torch as th

    asked = check_device_name(device)
    if _CUDA_FALLBACK_WARNED or asked is None or asked.type != "cuda" or th.cuda.is_available():
        return
    _CUDA_FALLBACK_WARNED = True
    warn_at_caller(f"device={device!r}: no CUDA GPU is available here, so the model trains on the CPU (SB3's fallback)")


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
