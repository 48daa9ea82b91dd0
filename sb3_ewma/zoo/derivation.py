"""
Hyperparameter entries for rl-zoo3 tasks that this package's files do not list, derived from rl-zoo3's tuned entry of
the parent algorithm (:data:`PARENT_ALGOS`) in the installed ``rl_zoo3`` package (see :ref:`rl_zoo`):

- every algorithm with an EWMA: :data:`DECOUPLED_SETTINGS` added, every other setting kept;
- ``ppo_mask_ewma``: also without gSDE, with :class:`~sb3_ewma.envs.action_masks.ActionMaskOrAllValid` as the last
  ``env_wrapper``;
- ``ppg`` and ``ppg_ewma``: the phase settings of :func:`ppg_phase_settings` and normalized rewards
  (:func:`ppg_reward_normalization`).

:func:`zoo_entry_for` chooses the entry: the package's own, else rl-zoo3's parent entry derived, else the package's
``default``, else rl-zoo3's parent ``default`` derived (as rl-zoo3 uses it).
"""

import copy
import importlib.resources
import inspect
import math
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rl_zoo3.exp_manager
import yaml
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

from sb3_ewma.algorithms import ALGORITHMS, packaged_hyperparams_file

PARENT_ALGOS: dict[str, str] = {
    "ppo_ewma": "ppo",
    "ppo_mask_ewma": "ppo",
    "ppg_ewma": "ppo",
    "ppg": "ppo",
    "ppo_lstm_ewma": "ppo_lstm",
}
"""The rl-zoo3 algorithm whose tuned entries each algorithm of this package derives its missing entries from."""

DECOUPLED_SETTINGS: dict[str, Any] = {"ewma_decay": "auto", "imp_samp_max": 100.0}
"""What the decoupled-objective rule adds to an entry of an algorithm with an EWMA."""

PPG_N_AUX_EPOCHS = 6
PPG_BETA_CLONE = 1.0
PPG_MAX_POLICY_ITERATIONS = 32
"""The paper's ``N_pi``: the most policy iterations per phase a derived entry gets."""
PPG_MIN_AUX_PHASES = 8
"""A derived PPG entry has fewer than ``N_pi = 32`` iterations per phase where the budget would give fewer aux phases."""
PPG_AUX_ROLLOUTS = 4
"""The paper's auxiliary minibatch: 4 whole rollouts of one environment (``4 * n_steps`` steps)."""

ACTION_MASK_WRAPPER = "sb3_ewma.envs.action_masks.ActionMaskOrAllValid"
"""The env wrapper a derived ``ppo_mask_ewma`` entry ends with (the environment's masks, else every action valid)."""
SDE_KEYS = ("use_sde", "sde_sample_freq")


def _parent_class(parent: str) -> type[OnPolicyAlgorithm]:
    if parent == "ppo_lstm":
        from sb3_contrib import RecurrentPPO

        return RecurrentPPO
    from stable_baselines3 import PPO

    return PPO


def parent_defaults(parent: str) -> dict[str, Any]:
    """The constructor defaults of rl-zoo3's ``parent`` algorithm (SB3's ``PPO`` or sb3-contrib's ``RecurrentPPO``)."""
    signature = inspect.signature(_parent_class(parent).__init__)
    return {name: param.default for name, param in signature.parameters.items() if param.default is not param.empty}


def zoo_hyperparams_file(parent: str) -> Path:
    """The path of rl-zoo3's ``hyperparams/<parent>.yml`` in the installed ``rl_zoo3`` package."""
    return Path(str(importlib.resources.files("rl_zoo3") / "hyperparams" / f"{parent}.yml"))


def _load(path: Path) -> dict[str, Any]:
    with open(path) as file:
        return yaml.safe_load(file) or {}


def zoo_entries(parent: str) -> dict[str, Any]:
    """Every entry of rl-zoo3's ``hyperparams/<parent>.yml``."""
    return _load(zoo_hyperparams_file(parent))


@dataclass
class Derivation:
    """
    A derived entry and what the derivation did.

    :param entry: the derived entry (an rl-zoo3 hyperparameter dict)
    :param added: the keys added, ``key: value``
    :param changed: the keys changed, ``key: old -> new``
    :param removed: the keys removed
    """

    entry: dict[str, Any]
    added: list[str]
    changed: list[str]
    removed: list[str]

    def summary(self) -> str:
        parts = [
            f"{label} {', '.join(items)}"
            for label, items in (("added", self.added), ("changed", self.changed), ("removed", self.removed))
            if items
        ]
        return "; ".join(parts) or "nothing changed"


def ppg_phase_settings(entry: dict[str, Any], parent: str = "ppo") -> dict[str, Any]:
    """
    The PPG phase settings of a PPO entry, with ``E = n_epochs``, ``B = n_steps * n_envs`` and ``T = n_timesteps``
    (missing keys at the parent's defaults): ``n_epochs = n_value_epochs = max(1, round(sqrt(E)))`` (the auxiliary phase
    reuses the data), ``batch_size = min(batch_size, B)``, ``n_policy_iterations = min(32, max(1, T // (8 * B)))``,
    ``n_aux_epochs = 6``, ``beta_clone = 1.0`` and ``aux_batch_size = min(4 * n_steps, N_pi * B)``.

    :param entry: an rl-zoo3 PPO entry
    :param parent: the algorithm whose defaults fill missing keys
    :return: the settings
    """
    defaults = parent_defaults(parent)
    n_epochs = int(entry.get("n_epochs", defaults["n_epochs"]))
    n_steps = int(entry.get("n_steps", defaults["n_steps"]))
    n_envs = int(entry.get("n_envs", 1))
    batch_size = int(entry.get("batch_size", defaults["batch_size"]))
    n_timesteps = int(float(entry.get("n_timesteps", 0)))
    iteration = n_steps * n_envs
    policy_epochs = max(1, round(math.sqrt(n_epochs)))
    n_policy_iterations = min(PPG_MAX_POLICY_ITERATIONS, max(1, n_timesteps // (PPG_MIN_AUX_PHASES * iteration)))
    return {
        "n_epochs": policy_epochs,
        "n_value_epochs": policy_epochs,
        "batch_size": min(batch_size, iteration),
        "n_policy_iterations": n_policy_iterations,
        "n_aux_epochs": PPG_N_AUX_EPOCHS,
        "beta_clone": PPG_BETA_CLONE,
        "aux_batch_size": min(PPG_AUX_ROLLOUTS * n_steps, n_policy_iterations * iteration),
    }


PPG_SIZE_KEYS = ("n_envs", "n_steps", "batch_size", "n_timesteps")
"""The settings of an entry that a derived PPG entry's sizes (:data:`PPG_SIZED_SETTINGS`) follow."""
PPG_SIZED_SETTINGS = ("batch_size", "n_policy_iterations", "aux_batch_size")


def ppg_sizes_with_overrides(entry: dict[str, Any], overrides: dict[str, Any], parent: str = "ppo") -> dict[str, Any]:
    """
    The sizes of :func:`ppg_phase_settings` for a parent ``entry`` whose :data:`PPG_SIZE_KEYS` the command line's
    ``-params`` (``overrides``) change, but those that ``overrides`` sets itself (its other values stay the user's).
    """
    given = {key: overrides[key] for key in PPG_SIZE_KEYS if key in overrides}
    if not given or not all(isinstance(value, numbers.Real) and not isinstance(value, bool) for value in given.values()):
        return {}  # nothing to follow, or a value the entry's checks refuse in a sentence of their own
    settings = ppg_phase_settings({**entry, **given}, parent)
    return {key: settings[key] for key in PPG_SIZED_SETTINGS if key not in overrides}


NORMALIZE_ALLOWED = "normalize must be a bool, a dict or a 'dict(...)' string"


def normalize_settings(normalize: Any) -> dict[str, Any] | None:
    """
    rl-zoo3's ``normalize`` setting as ``VecNormalize`` keyword arguments, read as rl-zoo3 reads it: ``None`` for no
    normalization, ``{}`` for ``True``, else the dict written.

    :raises ValueError: for a setting that is neither a bool nor a dict, nor a string that evaluates to one
    """
    if isinstance(normalize, str):
        try:
            normalize = eval(normalize, vars(rl_zoo3.exp_manager).copy())
        except Exception as error:
            raise ValueError(f"{NORMALIZE_ALLOWED}, got {normalize!r}: {error}") from error
    if normalize is None or normalize is False:
        return None
    if normalize is True or isinstance(normalize, numbers.Number):  # a number: its truth value, as rl-zoo3 reads it
        return {} if normalize else None
    if isinstance(normalize, dict):
        return dict(normalize)
    raise ValueError(f"{NORMALIZE_ALLOWED}, got {normalize!r}")


def ppg_reward_normalization(entry: dict[str, Any]) -> str | None:
    """
    The ``normalize`` setting of a PPG entry derived from ``entry``: rewards normalized, as in the paper's runs (with
    raw returns of magnitude 100, the auxiliary value loss outweighs the cloning term).

    :param entry: an rl-zoo3 PPO entry
    :return: ``None`` where the entry already normalizes rewards; else the entry's setting with ``norm_reward=True``, as
        an rl-zoo3 ``"dict(...)"`` string
    """
    kwargs = normalize_settings(entry.get("normalize"))
    if kwargs is None:
        kwargs = {"norm_obs": False}
    elif kwargs.get("norm_reward", True):
        return None
    kwargs["norm_reward"] = True
    return "dict(" + ", ".join(f"{key}={value!r}" for key, value in kwargs.items()) + ")"


def _with_mask_wrapper(env_wrapper: Any) -> list[Any]:
    """rl-zoo3's ``env_wrapper`` setting (absent, a name, a list) with the action-mask wrapper last."""
    if env_wrapper is None:
        wrappers: list[Any] = []
    elif isinstance(env_wrapper, list):
        wrappers = list(env_wrapper)
    else:
        wrappers = [env_wrapper]
    return [*wrappers, ACTION_MASK_WRAPPER]


def derive(algo: str, entry: dict[str, Any]) -> Derivation:
    """
    Derive ``algo``'s entry from an rl-zoo3 entry of its parent algorithm (:data:`PARENT_ALGOS`).

    :param algo: one of :data:`PARENT_ALGOS`
    :param entry: the parent's entry (not modified)
    :return: the derived entry and what changed
    """
    if algo not in PARENT_ALGOS:
        raise ValueError(f"algo must be one of {tuple(PARENT_ALGOS)}, got {algo!r}")
    derived = copy.deepcopy(dict(entry))
    added: list[str] = []
    changed: list[str] = []
    removed: list[str] = []

    def put(key: str, value: Any) -> None:
        if key not in derived:
            added.append(f"{key}: {value!r}")
        elif derived[key] != value:
            changed.append(f"{key}: {derived[key]!r} -> {value!r}")
        derived[key] = value

    if algo in ("ppg", "ppg_ewma"):
        for key, value in ppg_phase_settings(entry, PARENT_ALGOS[algo]).items():
            put(key, value)
        normalize = ppg_reward_normalization(entry)
        if normalize is not None:
            put("normalize", normalize)
    if algo != "ppg":
        for key, value in DECOUPLED_SETTINGS.items():
            put(key, value)
    if algo == "ppo_mask_ewma":
        for key in SDE_KEYS:
            if key in derived:
                removed.append(key)
                del derived[key]
        put("env_wrapper", _with_mask_wrapper(derived.get("env_wrapper")))
    return Derivation(derived, added, changed, removed)


@dataclass
class EntryChoice:
    """
    Where an algorithm's entry for an environment comes from.

    :param source: ``"package"``, ``"derived"`` or ``"missing"``
    :param path: the file the entry is read (or derived) from
    :param key: the entry's key in that file (the env id, ``atari`` or ``default``)
    :param derivation: the derived entry, for ``"derived"``
    """

    source: str
    path: Path | None = None
    key: str | None = None
    derivation: Derivation | None = None

    def message(self, algo: str, env_id: str) -> str:
        """The one line printed for a derived entry."""
        assert self.derivation is not None and self.path is not None
        return (
            f"sb3-ewma: no {algo} entry for {env_id} in this package; derived from rl-zoo3's "
            f"{self.path.name} entry '{self.key}' (sb3_ewma.zoo.derivation): {self.derivation.summary()}"
        )


def zoo_entry_for(algo: str, env_id: str, is_atari: bool = False) -> EntryChoice:
    """
    Choose ``algo``'s entry for ``env_id``: the package's entry for the environment (or ``atari``), else rl-zoo3's
    parent entry for it (or ``atari``) derived, else the package's ``default``, else rl-zoo3's parent ``default``
    derived, else ``"missing"``.

    :param algo: one of this package's algorithms
    :param env_id: the gymnasium id
    :param is_atari: whether rl-zoo3's ``atari`` entries apply
    """
    if algo not in ALGORITHMS:
        raise ValueError(f"algo must be one of {tuple(ALGORITHMS)}, got {algo!r}")
    keys = [env_id, "atari"] if is_atari else [env_id]
    package_file = packaged_hyperparams_file(algo)
    package = _load(package_file) if package_file.is_file() else {}
    for key in keys:
        if key in package:
            return EntryChoice("package", package_file, key)
    parent = PARENT_ALGOS.get(algo)
    parent_file = None if parent is None else zoo_hyperparams_file(parent)
    entries = {} if parent_file is None else _load(parent_file)
    for key in keys:
        if key in entries:
            return EntryChoice("derived", parent_file, key, derive(algo, entries[key]))
    if "default" in package:
        return EntryChoice("package", package_file, "default")
    if "default" in entries:
        # rl-zoo3's own choice for an environment its file does not list ("Using 'default' hyperparameters")
        return EntryChoice("derived", parent_file, "default", derive(algo, entries["default"]))
    return EntryChoice("missing")


def missing_entry_hint(algo: str) -> str:
    """The line added to rl-zoo3's "Hyperparameters not found" error."""
    parent = PARENT_ALGOS.get(algo, "ppo")
    package = f"this package's {algo}.yml nor " if packaged_hyperparams_file(algo).is_file() else ""
    return (
        f"Neither {package}rl-zoo3's {parent}.yml has an entry for this environment (nor a 'default' one): pass a "
        f"hyperparameter file with -conf FILE.yml holding an entry named after the env id (a copy of a similar "
        f"entry of rl-zoo3's {parent}.yml, with n_timesteps and policy); -params key:value then changes its settings."
    )
