"""
What ``python -m sb3_ewma.train`` checks before rl-zoo3 creates the run folder: the entry's keys and values against the
algorithm's constructor, the algorithm against the environment, the command line's files and devices; and the removal of
the run folder of a start that failed.
"""

import contextlib
import glob
import numbers
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from sb3_ewma.common.checks import constructor_keywords, unknown_keyword_message
from sb3_ewma.common.rules import Rule, check_constructor_settings, check_hyperparameters, integer, number, optional
from sb3_ewma.scale.zoo_entry import ZOO_ENTRY_KEYS, read_hyperparameter_file, schedule_start
from sb3_ewma.zoo.derivation import ACTION_MASK_WRAPPER

SET_BY_COMMAND_LINE: dict[str, str] = {
    "env": "--env",
    "seed": "--seed",
    "verbose": "--verbose",
    "device": "--device",
    "tensorboard_log": "--tensorboard-log",
}
"""Constructor arguments that rl-zoo3 passes itself, from these flags: an entry cannot set them."""

ACTION_SPACES: tuple[type[spaces.Space], ...] = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
"""The action spaces of SB3's ``PPO`` (every algorithm of this package but the maskable one)."""

MASKABLE_ACTION_SPACES: tuple[type[spaces.Space], ...] = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
"""The action spaces of sb3-contrib's ``MaskablePPO``: discrete ones only."""


def check_entry_keys(algo: str, algorithm: type, hyperparams: dict[str, Any]) -> None:
    """
    Raise a ``ValueError`` for the first key of the constructor's hyperparameters that the constructor does not take, or
    that rl-zoo3 sets from a flag; the message names the class or option that takes it, or the nearest name.

    :param algo: the rl-zoo3 name (``--algo``)
    :param algorithm: its class
    :param hyperparams: the keyword arguments rl-zoo3 is about to pass to the constructor
    """
    known = constructor_keywords(algorithm)
    for key, value in hyperparams.items():
        if key in SET_BY_COMMAND_LINE:
            raise ValueError(
                f"hyperparameter {key}={value!r} (-params or the hyperparameter entry) for --algo {algo}: rl-zoo3 sets "
                f"{key} itself, from {SET_BY_COMMAND_LINE[key]}; remove it from the hyperparameters"
            )
        if known is not None and key not in known:
            message = unknown_keyword_message(algorithm, key, value, other_names=ZOO_ENTRY_KEYS)
            raise ValueError(
                f"-params or the hyperparameter entry of --algo {algo}: {message} (the keys are {algorithm.__name__}'s "
                "arguments and rl-zoo3's entry keys; nothing was written)"
            )


def _is_maskable(algorithm: type) -> bool:
    # a subclass of MaskablePPO has imported sb3_contrib: the others need not import it
    contrib = sys.modules.get("sb3_contrib")
    return contrib is not None and issubclass(algorithm, contrib.MaskablePPO)


def supported_action_spaces(algorithm: type) -> tuple[type[spaces.Space], ...]:
    """The action spaces that the algorithm's constructor accepts."""
    return MASKABLE_ACTION_SPACES if _is_maskable(algorithm) else ACTION_SPACES


def check_env_spaces(
    algo: str,
    algorithm: type,
    env_id: str,
    env_kwargs: dict[str, Any] | None,
    env_wrapper: Callable[[gym.Env], gym.Env] | None,
    policy: Any,
) -> None:
    """
    Make one environment as rl-zoo3 will and raise a ``ValueError`` when the algorithm cannot train on it: an action
    space it does not act in, no action masks for a maskable algorithm, or Dict observations without a ``MultiInput``
    policy. An environment that cannot be made here is left to rl-zoo3.

    :param algo: the rl-zoo3 name (``--algo``)
    :param algorithm: its class
    :param env_id: the environment id
    :param env_kwargs: keyword arguments of ``gym.make``
    :param env_wrapper: the entry's ``env_wrapper`` (rl-zoo3's callable), or None
    :param policy: the entry's policy (a name or a class)
    """
    try:
        env = gym.make(env_id, **(env_kwargs or {}))
    except Exception:
        return
    try:
        supported = supported_action_spaces(algorithm)
        if not isinstance(env.action_space, supported):
            names = ", ".join(space.__name__ for space in supported)
            hint = (
                "MaskablePPO masks discrete actions only: for this task use ppo_ewma, ppg_ewma, ppg or ppo_lstm_ewma"
                if _is_maskable(algorithm)
                else "use an environment whose actions are one of these"
            )
            raise ValueError(
                f"--algo {algo} ({algorithm.__name__}) acts in {names} action spaces, and {env_id} has the action space "
                f"{env.action_space}: {hint}. Nothing was written."
            )
        if env_wrapper is not None:
            try:
                env = env_wrapper(env)
            except Exception:
                return  # the wrapper's own error comes when rl-zoo3 makes the environments
        if _is_maskable(algorithm) and not env.has_wrapper_attr("action_masks"):
            raise ValueError(
                f"--algo {algo} ({algorithm.__name__}) asks the environment for its action masks, and {env_id} (with the "
                f"entry's env_wrapper) has no action_masks() method: add env_wrapper: {ACTION_MASK_WRAPPER} to the entry "
                "(every action valid where the environment has no masks), or give the environment an action_masks() "
                "method (sb3-contrib's ActionMasker wrapper). Nothing was written."
            )
        multi_input = [name for name in getattr(algorithm, "policy_aliases", {}) if name.startswith("MultiInput")]
        if isinstance(env.observation_space, spaces.Dict) and isinstance(policy, str) and policy not in multi_input:
            raise ValueError(
                f"{env_id} has Dict observations, which need the policy {' or '.join(multi_input)}, and the entry's "
                f"policy is {policy!r}: set -params \"policy:'{multi_input[0]}'\" (or the entry's policy). Nothing was "
                "written."
            )
    finally:
        env.close()


def _is_unused_monitor_file(path: str) -> bool:
    """Whether ``path`` is a ``Monitor`` file without episodes."""
    if not path.endswith("monitor.csv"):
        return False
    with open(path) as file:
        lines = [line.strip() for _, line in zip(range(3), file)]  # at most one line past the header
    lines = [line for line in lines if line]
    return len(lines) <= 2 and all(line.startswith("#") or line == "r,l,t" for line in lines)


def missing_folders(path: str) -> tuple[str, ...]:
    """``path`` and the folders above it that do not exist, innermost first (empty if ``path`` exists)."""
    missing = []
    path = os.path.abspath(path)
    while not os.path.exists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return tuple(missing)


def _holds_a_link(path: str) -> bool:
    """Whether the folder ``path`` is or holds a symbolic link (a removal would reach what it points to)."""
    return os.path.islink(path) or any(
        os.path.islink(os.path.join(root, name)) for root, folders, files in os.walk(path) for name in (*folders, *files)
    )


def _remove_empty_parents(created_parents: tuple[str, ...]) -> None:
    """Remove the folders of ``created_parents`` (innermost first) while they are empty."""
    for parent in created_parents:
        try:
            os.rmdir(parent)
        except OSError:
            break  # not empty (another run's folder)


def remove_unused_run_folder(path: str, created_parents: tuple[str, ...] = (), written_files: tuple[str, ...] = ()) -> bool:
    """
    Remove the run folder ``path`` of a start that failed before training if it holds nothing but empty folders,
    ``Monitor`` files without episodes and ``written_files``; then the folders of ``created_parents`` left empty.

    :param path: the run folder, created by the failed start
    :param created_parents: folders above it that the failed start created, innermost first
    :param written_files: files that the failed start wrote in it, which may go with it
    :return: whether the run folder was removed
    """
    if not os.path.isdir(path) or _holds_a_link(path):
        return False
    removable = {os.path.abspath(file) for file in written_files}
    for root, _, files in os.walk(path):
        for name in files:
            file = os.path.join(root, name)
            if os.path.abspath(file) not in removable and not _is_unused_monitor_file(file):
                return False
    try:
        for root, folders, files in os.walk(path, topdown=False):
            for name in files:
                os.remove(os.path.join(root, name))
            for name in folders:
                os.rmdir(os.path.join(root, name))
        os.rmdir(path)
    except OSError:
        return False  # something was written meanwhile: it stays
    _remove_empty_parents(created_parents)
    return True


def check_async_rollouts_env(algo: str, env_id: str, is_procgen: bool, hyperparams: dict[str, Any], env_kwargs: Any) -> None:
    """
    Raise a ``ValueError`` for ``async_rollouts: 'process'`` where it cannot work: on a platform that cannot fork, or
    with Procgen ids whose environments step in threads of their own (``num_threads`` other than 0). The algorithm
    checks the same when it learns, after the run folder exists.

    :param algo: the rl-zoo3 name (``--algo``)
    :param env_id: the environment id
    :param is_procgen: whether ``env_id`` is one of this package's Procgen ids
    :param hyperparams: the keyword arguments rl-zoo3 is about to pass to the constructor
    :param env_kwargs: ``--env-kwargs`` (a dict or None)
    """
    if hyperparams.get("async_rollouts") != "process":
        return
    from sb3_ewma.common.collection.process import check_process_collector

    check_process_collector()
    num_threads = dict(env_kwargs or {}).get("num_threads")
    if is_procgen and num_threads != 0:
        raise ValueError(
            f"async_rollouts='process' (-params or the hyperparameter entry of --algo {algo}) forks the environments, and "
            f"{env_id} steps in threads of procgen's (num_threads={num_threads!r}) that a forked process does not have: "
            "use -params async_rollouts:True (a collector thread, which overlaps with training as well: Procgen "
            "releases the GIL while it steps) or --env-kwargs num_threads:0. Nothing was written."
        )


MODEL_FILE_PATTERNS = ("{env_name}.zip", "best_model.zip", "rl_model_*_steps.zip")
"""The files of a run folder that ``enjoy`` and ``record_video`` load: the final model, the best one, checkpoints."""


def has_model(run_folder: str, env_name: str) -> bool:
    """Whether the run folder holds a model that ``enjoy`` can load (:data:`MODEL_FILE_PATTERNS`)."""
    return any(
        glob.glob(os.path.join(glob.escape(run_folder), pattern.format(env_name=env_name))) for pattern in MODEL_FILE_PATTERNS
    )


def run_folders(log_path: str, env_name: str) -> dict[int, str]:
    """The run folders ``<log_path>/<env_name>_<N>`` of rl-zoo3, by ``N``."""
    runs = {}
    for path in glob.glob(os.path.join(glob.escape(log_path), f"{glob.escape(str(env_name))}_[0-9]*")):
        run_id = path.rsplit("_", 1)[-1]
        if path[: -len(run_id) - 1].endswith(str(env_name)) and run_id.isdigit() and os.path.isdir(path):
            runs[int(run_id)] = path
    return runs


def latest_run_with_model(log_path: str, env_name: Any) -> int:
    """
    rl-zoo3's ``get_latest_run_id`` for ``enjoy`` and ``record_video``: the newest run folder that holds a model
    (:func:`has_model`), printing the newer ones passed over; else the newest run, and 0 without any run.

    :param log_path: ``<folder>/<algo>``
    :param env_name: the environment's name (rl-zoo3's ``EnvironmentName``)
    :return: the run's number ``N``
    """
    runs = run_folders(log_path, str(env_name))
    if not runs:
        return 0
    newest_first = sorted(runs, reverse=True)
    for position, run_id in enumerate(newest_first):
        if has_model(runs[run_id], str(env_name)):
            if position > 0:
                skipped = ", ".join(runs[skipped_id] for skipped_id in newest_first[:position])
                print(f"Skipped the newer run folder(s) without a model: {skipped} (--exp-id N chooses a run)")
            return run_id
    return newest_first[0]


ENV_PACKAGES: tuple[tuple[str, str, str], ...] = (
    (r"^(MiniGrid|BabyAI)-", "minigrid", "pip install minigrid"),
    (r"^ALE/|NoFrameskip-v\d+$", "ale_py", 'pip install "gymnasium[atari]"'),
    (
        r"^(highway|merge|roundabout|parking|intersection|racetrack|u-turn|two-way|lane-keeping|exit)-",
        "highway_env",
        "pip install highway-env",
    ),
    (r"^Panda", "panda_gym", "pip install panda-gym"),
    (r"BulletEnv-v\d+$", "pybullet_envs_gymnasium", "pip install pybullet_envs_gymnasium"),
)
"""
Environment ids that a package registers when rl-zoo3 imports it: the ids' pattern, the package's module, how to install
it.
"""


def env_package_problem(env_id: str) -> str | None:
    """
    Why ``--env`` cannot be made for want of a package, or None: an id of :data:`ENV_PACKAGES` whose package is not
    installed, or a registered id whose module needs a package that is not installed (gymnasium's
    ``DependencyNotInstalled``). Only the id's module is imported; other ids and errors are left to rl-zoo3.
    """
    import importlib.util
    import re

    from gymnasium.envs.registration import load_env_creator

    spec = gym.envs.registry.get(env_id)
    if spec is None:
        for pattern, module, install in ENV_PACKAGES:
            if re.search(pattern, env_id) and importlib.util.find_spec(module) is None:
                return f"{env_id} is an environment of the {module} package, which is not installed: {install}"
        return None
    if not isinstance(spec.entry_point, str):
        return None
    try:
        load_env_creator(spec.entry_point)
    except gym.error.DependencyNotInstalled as error:
        return f"{env_id} cannot be made: {error}"
    except ModuleNotFoundError as error:
        return f"{env_id} cannot be made: its module needs {error.name}, which is not installed"
    except Exception:
        return None
    return None


SCHEDULE_KEYS = ("learning_rate", "clip_range", "clip_range_vf")
"""The entry's keys that rl-zoo3 turns into schedules; :func:`check_entry_values` checks their numbers."""


def entry_origin(algo: str, scale_n_envs: int | None = None) -> str:
    """Where the hyperparameters of a message come from: ``-params`` or the entry (rescaled by ``--scale-n-envs``)."""
    rescaled = f", rescaled by --scale-n-envs {scale_n_envs}" if scale_n_envs is not None else ""
    return f"-params or the hyperparameter entry of --algo {algo}{rescaled}"


def _is_step_count(value: Any) -> bool:
    try:
        int(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return not isinstance(value, bool)


ENTRY_RULES = (
    # rl-zoo3 passes it to make_vec_env: 0 fails with DummyVecEnv's IndexError after the run folder exists
    Rule("n_envs", "an integer >= 1", integer(1)),
    # SB3's VecFrameStack asserts it without a message
    Rule("frame_stack", "an integer >= 1", optional(integer(1))),
    # what learn gets without -n (rl-zoo3 reads it with int(): 1e5 is its usual form, '256' works too; 0 or less trains
    # nothing)
    Rule("n_timesteps", "a number of steps (rl-zoo3 reads it with int())", _is_step_count),
)
"""The rules of the entry's own counts (rl-zoo3's keys, not the constructor's)."""


def check_entry_counts(
    algo: str, hyperparams: dict[str, Any], scale_n_envs: int | None = None, n_timesteps_flag: int = -1
) -> None:
    """
    Raise a ``ValueError`` for an entry's count (after ``-params``) outside :data:`ENTRY_RULES`, or an entry without
    ``n_timesteps`` and without ``-n``.

    :param n_timesteps_flag: ``-n``: above 0 it replaces the entry's ``n_timesteps``, which is then not checked
    """
    counts = {key: value for key, value in hyperparams.items() if key != "n_timesteps" or n_timesteps_flag <= 0}
    try:
        check_hyperparameters(counts, ENTRY_RULES)
    except ValueError as error:
        raise ValueError(f"{error} ({entry_origin(algo, scale_n_envs)}; nothing was written)") from None
    if "n_timesteps" not in hyperparams and n_timesteps_flag <= 0:
        raise ValueError(
            f"the hyperparameter entry of --algo {algo} has no n_timesteps, the number of steps to train: add it to the "
            "entry, or give -n; nothing was written"
        )


def check_entry_schedules(algo: str, hyperparams: dict[str, Any]) -> dict[str, Any]:
    """
    The values of :data:`SCHEDULE_KEYS` in the entry; a schedule string that rl-zoo3 cannot read (``"lin_abc"``) raises
    a ``ValueError`` naming the key.

    :return: the values of :data:`SCHEDULE_KEYS` as the entry has them (``raw_schedules`` of :func:`check_entry_values`)
    """
    raw_schedules = {key: hyperparams[key] for key in SCHEDULE_KEYS if key in hyperparams}
    for key, value in raw_schedules.items():
        if isinstance(value, str):
            try:
                schedule_start(key, value)
            except ValueError as error:
                raise ValueError(f"{error} ({entry_origin(algo)}; nothing was written)") from None
    return raw_schedules


def evaluate_policy_kwargs(algo: str, text: str, namespace: dict[str, Any]) -> Any:
    """
    An entry's ``policy_kwargs`` string evaluated as Python in ``namespace``, as rl-zoo3 does, or a ``ValueError`` that
    names it.

    :param namespace: the names the string may use (``nn``, ``th``, ``ImpalaCNN``, ...)
    """
    try:
        return eval(text, namespace)
    except Exception as error:
        raise ValueError(
            f"policy_kwargs {text!r} ({entry_origin(algo)}) is read as Python and gives {type(error).__name__}: {error}; "
            'write it as Python, with names of torch as nn and th: "dict(net_arch=[64, 64], activation_fn=nn.Tanh)". '
            "Nothing was written."
        ) from None


IMPORTED_ENTRY_KEYS = ("env_wrapper", "vec_env_wrapper", "callback")
"""The entry's keys whose values rl-zoo3 imports (``"module.Class"``, or lists and dicts of them)."""


@contextlib.contextmanager
def named_entry_imports(algo: str, hyperparams: dict[str, Any]) -> Iterator[None]:
    """
    Within it, a failed import of the entry's :data:`IMPORTED_ENTRY_KEYS` by rl-zoo3 raises a ``ValueError`` that names
    the keys and their values.
    """
    try:
        yield
    except (ImportError, AttributeError) as error:
        given = {key: hyperparams[key] for key in IMPORTED_ENTRY_KEYS if key in hyperparams}
        if not given:
            raise
        named = ", ".join(f"{key}: {value!r}" for key, value in given.items())
        raise ValueError(
            f"{error} ({named}, {entry_origin(algo)}: rl-zoo3 imports each value as 'module.Class' from the modules "
            "Python finds; nothing was written)"
        ) from error


def check_entry_values(
    algo: str,
    algorithm: type,
    constructor_kwargs: dict[str, Any],
    raw_schedules: dict[str, Any],
    scale_n_envs: int | None = None,
) -> None:
    """
    Run the algorithm's constructor checks (``env=None, _init_setup_model=False``) on the hyperparameters that rl-zoo3
    is about to pass, before the run folder exists, so that the command line refuses what a script refuses, with the
    same message and where the values came from. The :data:`SCHEDULE_KEYS` are checked as the numbers the entry had (a
    ``"lin_<value>"`` string as its initial value), and their constructor warnings are repeated. An entry without a
    ``policy`` is a ``ValueError``.

    :param constructor_kwargs: the keyword arguments rl-zoo3 is about to pass to the constructor, with its ``policy``
    :param raw_schedules: the values of :data:`SCHEDULE_KEYS` as the entry had them, before rl-zoo3 made schedules
    :raises ValueError: a setting the constructor refuses (a ``TypeError`` stays one)
    """
    import warnings

    if "policy" not in constructor_kwargs:
        # the constructor's TypeError would say "missing 1 required positional argument: 'policy'"
        policies = ", ".join(getattr(algorithm, "policy_aliases", {})) or "MlpPolicy"
        raise ValueError(
            f"the hyperparameter entry of --algo {algo} has no policy: add one ({policies}) to the entry, or "
            f"-params \"policy:'{next(iter(getattr(algorithm, 'policy_aliases', {'MlpPolicy': None})))}'\"; nothing was "
            "written"
        )
    kwargs = dict(constructor_kwargs)
    schedule_strings = []
    for key, value in raw_schedules.items():
        if isinstance(value, str):
            value = schedule_start(key, value)
            schedule_strings.append(key)
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            kwargs[key] = value
    policy = kwargs.pop("policy")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_constructor_settings(algorithm, policy, kwargs)
    except (ValueError, AssertionError, TypeError) as error:
        message = str(error).strip() or type(error).__name__
        for key in schedule_strings:
            if message.startswith(f"{key} "):
                message += f" (the start of {key} {raw_schedules[key]!r}, an rl-zoo3 linear schedule)"
        # a TypeError stays one (a policy keyword of another algorithm's policy, say): its message says what it is
        error_type = TypeError if isinstance(error, TypeError) else ValueError
        raise error_type(f"{message} ({entry_origin(algo, scale_n_envs)}; nothing was written)") from error
    # rl-zoo3 leaves a negative number as it is: the real call sees it and warns itself
    made_schedules = [key for key in raw_schedules if isinstance(raw_schedules[key], str) or number(0)(raw_schedules[key])]
    for warning in caught:
        if str(warning.message).startswith(tuple(f"{key}=" for key in made_schedules)):
            warnings.warn(f"{warning.message} ({entry_origin(algo, scale_n_envs)})", UserWarning, stacklevel=2)


DEVICE_TYPES_CHECKED = {"mps": "torch.backends.mps.is_available()", "xpu": "torch.xpu.is_available()"}
"""Device types whose absence :func:`device_problem` reports, with the call that says whether one is present."""


def _device_available(device_type: str) -> bool:
    import torch as th

    if device_type == "mps":
        backend = getattr(th.backends, "mps", None)
        return bool(backend is not None and backend.is_available())
    module = getattr(th, device_type, None)
    return bool(module is not None and module.is_available())


def available_devices() -> str:
    """The values of ``--device`` that work on this machine, for a message."""
    import torch as th

    names = ["auto", "cpu"]
    if th.cuda.is_available():
        count = th.cuda.device_count()
        names += ["cuda", f"cuda:0 to cuda:{count - 1}" if count > 1 else "cuda:0"]
    names += [device_type for device_type in DEVICE_TYPES_CHECKED if _device_available(device_type)]
    return ", ".join(names)


def device_problem(device: Any) -> str | None:
    """
    What is wrong with ``--device`` on this machine, or None: not a torch device, a device type this machine lacks, or a
    CUDA index past the GPUs present. ``cuda`` without a GPU is SB3's fallback to the CPU, no problem.
    """
    import torch as th

    if device is None or (isinstance(device, str) and device == "auto"):
        return None
    try:
        parsed = th.device(device)
    except (RuntimeError, TypeError, ValueError):
        return f"{device!r} is not a device: use {available_devices()}"
    if parsed.type == "cuda":
        if th.cuda.is_available() and parsed.index is not None and parsed.index >= th.cuda.device_count():
            return f"{device!r}: this machine has {th.cuda.device_count()} CUDA GPU(s); use {available_devices()}"
        return None
    if parsed.type in DEVICE_TYPES_CHECKED and not _device_available(parsed.type):
        return (
            f"{device!r} is not available on this machine ({DEVICE_TYPES_CHECKED[parsed.type]} is False): use "
            f"{available_devices()}"
        )
    return None


HYPERPARAMETER_FILE_FORMS = (
    "a YAML file (.yml, .yaml), a JSON file (.json), a Python file (.py) that defines hyperparams, or the dotted name "
    "of a Python module that does (package.module)"
)
"""What ``-conf`` reads: rl-zoo3's forms, and JSON (:func:`sb3_ewma.scale.zoo_entry.read_hyperparameter_file`)."""


def check_hyperparameter_file(path: str) -> None:
    """
    Raise a ``ValueError`` for a ``-conf`` file that cannot be read: none of the :data:`HYPERPARAMETER_FILE_FORMS`, not
    valid YAML or JSON, or content that is not a mapping of environment ids to entries. A missing file, a Python file or
    a module is left to rl-zoo3.
    """
    import json

    import yaml

    if not os.path.isfile(path) or path.endswith(".py"):
        return
    if not path.endswith((".yml", ".yaml", ".json")):
        if not os.path.splitext(path)[1]:
            return  # a file without an extension: perhaps also the name of a module
        raise ValueError(f"-conf {path}: the hyperparameters are read from {HYPERPARAMETER_FILE_FORMS}. Nothing was written.")
    try:
        content = read_hyperparameter_file(path)
    except yaml.YAMLError as error:
        raise ValueError(yaml_error_message(path, error)) from error
    except json.JSONDecodeError as error:
        raise ValueError(
            f"the hyperparameter file {path} is not valid JSON, line {error.lineno}, column {error.colno}: {error.msg}. "
            "Nothing was written."
        ) from error
    if not isinstance(content, dict):
        raise ValueError(
            f"the hyperparameter file {path} holds a {type(content).__name__}, not a mapping of environment ids to "
            "entries: write 'CartPole-v1:' and under it the entry's 'key: value' lines, indented. Nothing was written."
        )


def yaml_error_message(path: str, error: Exception) -> str:
    """
    One sentence for a hyperparameter file that PyYAML cannot read: the file, the line and column and what is wrong
    there.
    """
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = " ".join(str(getattr(error, "problem", None) or error).split())
    message = f"the hyperparameter file {path} is not valid YAML{where}: {problem}"
    if "'\\t'" in problem or "\\t" in problem:
        message += " (YAML indents with spaces, not tabs: replace the tabs)"
    return f"{message}. Nothing was written."


def is_non_finite_error(error: BaseException) -> bool:
    """
    Whether ``error`` says that training met NaN or infinity: the package's ``NonFiniteError``, or torch's "found
    invalid values" for a distribution's parameters.
    """
    if any(cls.__name__ == "NonFiniteError" for cls in type(error).__mro__):
        return True
    return isinstance(error, ValueError) and "found invalid values" in str(error)


def non_finite_message(error: BaseException, num_timesteps: int) -> str:
    """One line for a non-finite error of training (:func:`is_non_finite_error`), at ``num_timesteps`` steps."""
    if any(cls.__name__ == "NonFiniteError" for cls in type(error).__mro__):
        return " ".join(str(error).split())
    first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    parameter = first_line.split(" (")[0].removeprefix("Expected parameter ").strip()
    return (
        f"training stopped at step {num_timesteps}: the policy's {parameter} became NaN or infinite (torch found invalid "
        "values in them); a NaN or infinite observation or reward from the environment, or a learning rate too large, "
        "makes the weights non-finite"
    )


def remove_run_folder_without_model(path: str, env_name: str, created_parents: tuple[str, ...] = ()) -> bool:
    """
    Remove the run folder ``path``, created by this start, after training failed on non-finite values, unless it holds a
    model (:func:`has_model`) or a link; then the folders of ``created_parents`` left empty.

    :param env_name: the environment's name (the model files' names)
    :param created_parents: folders above it that this start created, innermost first
    :return: whether the run folder was removed
    """
    import shutil

    if not os.path.isdir(path) or _holds_a_link(path) or has_model(path, env_name):
        return False
    try:
        shutil.rmtree(path)
    except OSError:
        return False
    _remove_empty_parents(created_parents)
    return True
