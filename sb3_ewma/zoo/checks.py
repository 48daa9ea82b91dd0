"""
What ``python -m sb3_ewma.train`` checks before it writes anything, for this package's algorithms: the keys of the
hyperparameter entry (after ``-params``) against the algorithm's constructor (:func:`check_entry_keys`), and the
algorithm against the environment's spaces and action masks (:func:`check_env_spaces`). rl-zoo3 creates the run folder
``<log-folder>/<algo>/<env>_<N>`` before it builds the model, so these mistakes would otherwise fail after it, leaving
an empty run folder that ``enjoy`` then picks; :func:`remove_unused_run_folder` removes such a folder when a start
fails anyway.
"""

import glob
import os
import sys
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from sb3_ewma.common.keywords import constructor_keywords, unknown_keyword_message
from sb3_ewma.scale.zoo_entry import ZOO_ENTRY_KEYS

SET_BY_COMMAND_LINE: dict[str, str] = {
    "env": "--env",
    "seed": "--seed",
    "verbose": "--verbose",
    "device": "--device",
    "tensorboard_log": "--tensorboard-log",
}
"""Constructor arguments that rl-zoo3 passes itself, from these flags: an entry cannot set them."""

ACTION_SPACES: tuple[type[spaces.Space], ...] = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
"""The action spaces of SB3's ``PPO`` (and of every algorithm of this package but the maskable one)."""

MASKABLE_ACTION_SPACES: tuple[type[spaces.Space], ...] = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
"""The action spaces of sb3-contrib's ``MaskablePPO``: discrete ones only."""

MASK_WRAPPER = "sb3_ewma.envs.action_masks.ActionMaskOrAllValid"


def check_entry_keys(algo: str, algorithm: type, hyperparams: dict[str, Any]) -> None:
    """
    Raise a ``ValueError`` for the first key of the hyperparameters that go to the algorithm's constructor (the entry
    after ``-params``, once rl-zoo3 has taken its own keys out) that the constructor does not take, or that rl-zoo3
    sets from a flag; the message says which class or option takes it, or the nearest name.

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
    """The action spaces that the algorithm's constructor accepts (its parent's ``supported_action_spaces``)."""
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
    Make one environment as rl-zoo3 will (``gym.make`` with ``--env-kwargs``, then the entry's ``env_wrapper``) and
    raise a ``ValueError`` when the algorithm cannot train on it: an action space the algorithm does not act in
    (continuous actions for ``ppo_mask_ewma``), no action masks for a maskable algorithm, Dict observations with a
    policy that is not a ``MultiInput`` one. An environment that cannot be made here is left to rl-zoo3 (its error
    comes when rl-zoo3 makes it).

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
                f"entry's env_wrapper) has no action_masks() method: add env_wrapper: {MASK_WRAPPER} to the entry "
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
    """Whether ``path`` is a ``Monitor`` file with its header lines only (no episode)."""
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


def remove_unused_run_folder(path: str, created_parents: tuple[str, ...] = (), written_files: tuple[str, ...] = ()) -> bool:
    """
    Remove the run folder ``path`` of a start that failed before training, if nothing in it is worth keeping: it may
    hold empty folders, ``Monitor`` files without episodes (what rl-zoo3 writes before the model is built) and the
    files of ``written_files`` (the configuration this start wrote); any other file keeps the folder untouched. Then
    the folders of ``created_parents`` that are left empty.

    :param path: the run folder, created by the failed start
    :param created_parents: folders above it that the failed start created (``<log-folder>/<algo>``, the log folder),
        innermost first
    :param written_files: files that the failed start wrote in it, which may go with it
    :return: whether the run folder was removed
    """
    if not os.path.isdir(path) or os.path.islink(path):
        return False
    removable = {os.path.abspath(file) for file in written_files}
    for root, folders, files in os.walk(path):
        if any(os.path.islink(os.path.join(root, name)) for name in (*folders, *files)):
            return False
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
    for parent in created_parents:
        try:
            os.rmdir(parent)
        except OSError:
            break  # not empty (another run's folder)
    return True


def check_async_rollouts_env(algo: str, env_id: str, is_procgen: bool, hyperparams: dict[str, Any], env_kwargs: Any) -> None:
    """
    Raise a ``ValueError`` for ``async_rollouts: 'process'`` (``-params`` or the entry) where it cannot work: on a
    platform that cannot fork, or with Procgen ids whose environments step in threads of their own (every
    ``num_threads`` but 0). The algorithm makes the same checks when it starts to learn
    (:func:`sb3_ewma.common.collection.process.check_forkable_env`), after rl-zoo3 has created the run folder and the
    environments; here they come first.

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
    """The run folders ``<log_path>/<env_name>_<N>`` of rl-zoo3 (as ``get_latest_run_id`` finds them), by ``N``."""
    runs = {}
    for path in glob.glob(os.path.join(glob.escape(log_path), f"{glob.escape(str(env_name))}_[0-9]*")):
        run_id = path.rsplit("_", 1)[-1]
        if path[: -len(run_id) - 1].endswith(str(env_name)) and run_id.isdigit() and os.path.isdir(path):
            runs[int(run_id)] = path
    return runs


def latest_run_with_model(log_path: str, env_name: Any) -> int:
    """
    rl-zoo3's ``get_latest_run_id`` for ``enjoy`` and ``record_video`` (``--exp-id 0``, the default): the newest run
    folder that holds a model (:func:`has_model`) rather than the newest one, so that a run that failed or is still
    training does not hide the one before it. The run folders passed over are printed. Without any run that has a
    model, the newest run (rl-zoo3's choice: its error then names the missing model); 0 without any run.

    :param log_path: ``<folder>/<algo>``
    :param env_name: the environment's name (rl-zoo3's ``EnvironmentName``, a ``str``)
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
