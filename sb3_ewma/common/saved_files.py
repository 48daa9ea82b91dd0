"""
Checks of a saved zip file before ``load`` builds anything: which algorithm saved it (from its policy class's module),
so that a file of another algorithm gets an error naming both, and whether the file is whole (:func:`check_saved_zip`).
"""

import io
import json
import numbers
import os
import warnings
import zipfile
import zlib
from collections.abc import Iterable
from typing import Any

import torch as th
from stable_baselines3.common.save_util import json_to_data

# the module of a saved policy class -> the algorithms that save such files (how an error message names them)
POLICY_MODULE_ALGORITHMS = {
    "sb3_ewma.ppo_ewma.policies": "PPO_EWMA",
    "sb3_ewma.ppg_ewma.policies": "PPG_EWMA or PPG",
    "stable_baselines3.common.policies": "SB3's PPO or A2C",
    "sb3_contrib.common.recurrent.policies": "RecurrentPPO_EWMA or sb3-contrib's RecurrentPPO",
    "sb3_contrib.common.maskable.policies": "MaskablePPO_EWMA or sb3-contrib's MaskablePPO",
    "stable_baselines3.dqn.policies": "SB3's DQN",
    "stable_baselines3.sac.policies": "SB3's SAC",
    "stable_baselines3.td3.policies": "SB3's TD3 or DDPG",
    "sb3_contrib.qrdqn.policies": "sb3-contrib's QRDQN",
    "sb3_contrib.tqc.policies": "sb3-contrib's TQC",
    "sb3_contrib.crossq.policies": "sb3-contrib's CrossQ",
    "sb3_contrib.ars.policies": "sb3-contrib's ARS",
}

# the module of a saved policy class -> the ``load`` that opens such files (how an error message says what to do)
POLICY_MODULE_LOADERS = {
    "sb3_ewma.ppo_ewma.policies": "sb3_ewma.PPO_EWMA.load",
    "sb3_ewma.ppg_ewma.policies": "sb3_ewma.PPG_EWMA.load (or sb3_ewma.PPG.load), whose to_sb3() gives SB3's PPO",
    "stable_baselines3.common.policies": "stable_baselines3.PPO.load (or A2C.load), or sb3_ewma.PPO_EWMA.load",
    "sb3_contrib.common.recurrent.policies": "sb3_ewma.RecurrentPPO_EWMA.load (or sb3_contrib.RecurrentPPO.load)",
    "sb3_contrib.common.maskable.policies": "sb3_ewma.MaskablePPO_EWMA.load (or sb3_contrib.MaskablePPO.load)",
    "stable_baselines3.dqn.policies": "stable_baselines3.DQN.load",
    "stable_baselines3.sac.policies": "stable_baselines3.SAC.load",
    "stable_baselines3.td3.policies": "stable_baselines3.TD3.load (or DDPG.load)",
    "sb3_contrib.qrdqn.policies": "sb3_contrib.QRDQN.load",
    "sb3_contrib.tqc.policies": "sb3_contrib.TQC.load",
    "sb3_contrib.crossq.policies": "sb3_contrib.CrossQ.load",
    "sb3_contrib.ars.policies": "sb3_contrib.ARS.load",
}

POLICY_PARAMETERS = "policy.pth"
"""The member of a saved zip with the policy's parameters (SB3's ``save``): ``load`` cannot do without it."""


def state_on_cpu(state: Any) -> Any:
    """A state dict (nested dicts and lists) with its tensors detached, on the CPU (to save, or to send to other ranks)."""
    if isinstance(state, th.Tensor):
        return state.detach().cpu()
    if isinstance(state, dict):
        return {name: state_on_cpu(value) for name, value in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(state_on_cpu(value) for value in state)
    return state


def saved_model_name(path: Any) -> str:
    """How a message names what ``load`` was given: the file's path, or "the saved model" for a stream."""
    return os.fspath(path) if isinstance(path, (str, os.PathLike)) else "the saved model"


def read_saved_data(path: Any) -> dict[str, Any] | None:
    """The JSON of a saved model's ``data`` (values serialized), or None when ``path`` is not a readable zip."""
    if isinstance(path, io.BufferedIOBase) or not isinstance(path, (str, os.PathLike)):
        return None
    path = os.fspath(path)
    if not os.path.exists(path) and os.path.exists(f"{path}.zip"):
        path = f"{path}.zip"
    try:
        with zipfile.ZipFile(path) as archive:
            if "data" not in archive.namelist():
                return None
            return json.loads(archive.read("data").decode())
    except (OSError, zipfile.BadZipFile, ValueError):
        return None


def read_saved_values(path: Any, keys: Iterable[str]) -> dict[str, Any]:
    """
    The entries ``keys`` of a saved model's ``data``, of a path or a stream (rewound after), deserialized as SB3 does;
    absent or unreadable ones are left out.
    """
    data: dict[str, Any] | None = None
    if isinstance(path, io.BufferedIOBase) and (path.closed or not path.seekable()):
        data = None  # SB3's load_from_zip_file says what is wrong with it
    elif isinstance(path, io.BufferedIOBase):
        position = path.tell()
        try:
            with zipfile.ZipFile(path) as archive:
                data = json.loads(archive.read("data").decode()) if "data" in archive.namelist() else None
        except (OSError, zipfile.BadZipFile, ValueError):
            data = None
        finally:
            path.seek(position)
    else:
        data = read_saved_data(path)
    wanted = {key: data[key] for key in keys if key in data} if data else {}
    return json_to_data(json.dumps(wanted)) if wanted else {}


def saved_policy_module(data: dict[str, Any]) -> str | None:
    """The module of the saved policy class (as SB3's JSON records it), or None."""
    policy_class = data.get("policy_class")
    if isinstance(policy_class, dict) and isinstance(policy_class.get("__module__"), str):
        return policy_class["__module__"]
    return None


def check_saved_file_exists(path: Any) -> None:
    """A ``FileNotFoundError`` naming both paths SB3 would try (``path`` and ``path.zip``) when neither exists."""
    if isinstance(path, (str, os.PathLike)):
        path = os.fspath(path)
        if not os.path.exists(path) and not os.path.exists(f"{path}.zip"):
            raise FileNotFoundError(f"no saved model at {path}" + ("" if path.endswith(".zip") else f" nor {path}.zip"))


def check_saved_algorithm(algorithm_name: str, loadable_policy_modules: tuple[str, ...], path: Any) -> dict[str, Any] | None:
    """
    Raise a ``ValueError`` naming both algorithms when the saved policy class comes from a module of this package, SB3
    or sb3-contrib that is not in ``loadable_policy_modules`` (a user's own policy class passes).

    :param algorithm_name: the class whose ``load`` opens the file (named in the error)
    :param loadable_policy_modules: the modules of the policy classes that class opens
    :param path: the saved file
    :return: the file's ``data`` JSON (values serialized), or None when it could not be read
    """
    check_saved_file_exists(path)
    check_saved_zip(path)
    data = read_saved_data(path)
    if data is None:
        return None
    module = saved_policy_module(data)
    if module in POLICY_MODULE_ALGORITHMS and module not in loadable_policy_modules:
        raise ValueError(
            f"{os.fspath(path)} was saved by {POLICY_MODULE_ALGORITHMS[module]}, not by {algorithm_name} "
            f"(its policy class comes from {module}): load it with {POLICY_MODULE_LOADERS[module]}"
        )
    return data


def _zip_path(path: Any) -> str | None:
    """The file SB3's ``load`` opens for ``path`` (``path``, or ``path.zip``), or None for a buffer or a missing file."""
    if isinstance(path, io.BufferedIOBase) or not isinstance(path, (str, os.PathLike)):
        return None
    path = os.fspath(path)
    if not os.path.exists(path) and os.path.exists(f"{path}.zip"):
        path = f"{path}.zip"
    return path if os.path.isfile(path) else None


# the first bytes of a file of torch.save's format before torch 1.6 (its pickle protocol 2)
LEGACY_TORCH_SAVE = b"\x80\x02"


def saved_zip_problem(path: Any) -> str | None:
    """
    What is wrong with a saved model's zip (not a zip, a damaged member, no or garbled ``data`` or ``policy.pth``), as
    one phrase, or None when it is whole or ``path`` is a buffer or no file.
    """
    file = _zip_path(path)
    if file is None:
        return None
    try:
        with zipfile.ZipFile(file) as archive:
            names = archive.namelist()
            # the members SB3's load reads (the others, such as _stable_baselines3_version, it leaves alone), read
            # through in chunks: a checksum that does not match, or deflated bytes that do not inflate
            for name in names:
                if name == "data" or name.endswith(".pth"):
                    try:
                        with archive.open(name) as member:
                            while member.read(1 << 20):
                                pass
                    except (zipfile.BadZipFile, zlib.error):
                        return f"its member {name!r} is damaged (its bytes do not match its checksum)"
            if "data" not in names and any(name.endswith("data.pkl") for name in names):
                # the archive zipfile found is a member's own (torch.save's zip inside the cut file)
                return "it is truncated: what remains of it ends inside a member that torch.save wrote, a zip of its own"
            if "data" not in names:
                return "it has no 'data' member (the model's settings): it is not a model saved by Stable-Baselines3"
            try:
                json.loads(archive.read("data").decode())
            except (UnicodeDecodeError, json.JSONDecodeError) as error:
                return f"its 'data' member (the model's settings, JSON) is garbled: {error}"
            if POLICY_PARAMETERS not in names:
                return f"it has no {POLICY_PARAMETERS!r} member (the policy's parameters): the file is incomplete"
            parameters = archive.read(POLICY_PARAMETERS)
    except zipfile.BadZipFile as error:
        return f"it is not a zip archive ({error}): the file is truncated, or not a saved model"
    except NotImplementedError as error:  # zipfile's answer to a compression method it has no decoder for
        return f"it is compressed with a method this Python cannot read ({error}): save it again with SB3's save"
    except (OSError, EOFError, zipfile.LargeZipFile) as error:
        return f"it cannot be read as a zip archive ({type(error).__name__}: {error})"
    if parameters.startswith(LEGACY_TORCH_SAVE):
        return None  # torch.save's format before torch 1.6 (a pickle), which torch.load and SB3 still read
    try:
        with zipfile.ZipFile(io.BytesIO(parameters)) as torch_file:
            if not any(name.endswith("/data.pkl") or name == "data.pkl" for name in torch_file.namelist()):
                raise zipfile.BadZipFile("no data.pkl")
    except (zipfile.BadZipFile, EOFError, OSError):
        return f"its {POLICY_PARAMETERS!r} member (the policy's parameters) is garbled: it is not a file of torch.save"
    return None


def check_saved_zip(path: Any) -> None:
    """Raise a ``ValueError`` naming the file and what is wrong with it (:func:`saved_zip_problem`)."""
    problem = saved_zip_problem(path)
    if problem is not None:
        raise ValueError(f"cannot load {_zip_path(path)}: {problem}")


def check_saved_file(algorithm: type, path: Any) -> dict[str, Any] | None:
    """
    Before ``algorithm.load(path)`` builds anything: raise a ``FileNotFoundError`` when there is no file, and a
    ``ValueError`` when it is truncated or garbled or was saved by an algorithm that ``algorithm`` cannot load (whose
    policy modules are those of its ``policy_aliases`` and ``loadable_parent_policy_modules``).

    :param algorithm: the class whose ``load`` is about to open the file
    :param path: the file (a path; a buffer is not checked)
    :return: the file's ``data`` JSON (values serialized), or None when it could not be read
    """
    own_modules = tuple(policy.__module__ for policy in getattr(algorithm, "policy_aliases", {}).values())
    parent_modules = tuple(getattr(algorithm, "loadable_parent_policy_modules", ()))
    return check_saved_algorithm(algorithm.__name__, (*own_modules, *parent_modules), path)


# the saved settings that other hyperparameters' checks depend on (saved as the constructor takes them)
_SETTINGS_CHECKED_TOGETHER = (
    "n_steps",
    "batch_size",
    "n_epochs",
    "normalize_advantage",
    "advantage_normalization",
    "advantage_ewma_decay",
    "minibatch_sampling",
    "kl_coef",
    "aux_batch_size",
    "aux_micro_batch_size",
    "aux_minibatch_sampling",
    "n_policy_iterations",
)
# what load sets itself (SB3's arguments of load), not a hyperparameter to check
_LOAD_OWN_ARGUMENTS = ("policy", "env", "device", "verbose", "_init_setup_model")


def _checked_by_the_constructor(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings ``load`` sets that the constructor's checks apply to: not load's own arguments, nor ``batch_size=1``
    (SB3's load takes it, which its constructor refuses with normalized advantages: its train(), and this package's,
    leaves a minibatch of one sample unnormalized; and 1 divides every rollout size)."""
    one = settings.get("batch_size")
    unchecked = isinstance(one, numbers.Integral) and not isinstance(one, bool) and one == 1
    return {
        name: value
        for name, value in settings.items()
        if name not in _LOAD_OWN_ARGUMENTS and not (unchecked and name == "batch_size")
    }


def check_load_keywords(
    algorithm: type, keywords: dict[str, Any], saved: dict[str, Any] | None, custom_objects: dict[str, Any] | None = None
) -> None:
    """
    Check the keyword arguments of ``load`` that change a hyperparameter as the constructor checks a new model's,
    against the saved settings, before anything is loaded (SB3 sets them unchecked). A keyword that is neither a
    constructor argument nor saved (a misspelt setting) gets a warning at the caller's line. The hyperparameters that
    ``custom_objects`` replaces in the file (SB3's ``load`` takes them unchecked too) are refused as the constructor
    refuses them; they get no advice (rl-zoo3's ``enjoy`` replaces ``learning_rate`` by 0 for every model it loads).

    :param algorithm: the class whose ``load`` it is
    :param keywords: ``load``'s ``**kwargs``
    :param saved: the file's ``data``, or None
    :param custom_objects: ``load``'s ``custom_objects``
    """
    import inspect

    from sb3_ewma.common.checks import HyperparameterError, unknown_keyword_message, warn_at_caller
    from sb3_ewma.common.rules import check_constructor_settings

    parameters = inspect.signature(algorithm).parameters
    policy = next(iter(getattr(algorithm, "policy_aliases", {"MlpPolicy": None})))
    replaced = _checked_by_the_constructor(
        {name: value for name, value in (custom_objects or {}).items() if name in parameters and name not in keywords}
    )
    if replaced:
        saved_settings = {name: saved[name] for name in _SETTINGS_CHECKED_TOGETHER if saved is not None and name in saved}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                check_constructor_settings(algorithm, policy, {"verbose": 0, **saved_settings, **replaced})
        except HyperparameterError as error:
            raise HyperparameterError(f"load(..., custom_objects=...): {error}") from None
        saved = {**(saved or {}), **replaced}
    for name, value in keywords.items():
        # SB3's load sets any keyword as an attribute: one that no setting or saved entry has is most likely misspelt
        if name not in parameters and not name.startswith("_") and (saved is None or name not in saved):
            if not hasattr(algorithm, name):
                message = unknown_keyword_message(algorithm, name, value).rstrip(".")
                warn_at_caller(
                    f"load(..., {name}={value!r}): {message}{' ' if message.endswith('?') else '. '}SB3's load sets it "
                    "as an attribute of the model, which nothing reads"
                )
    given = _checked_by_the_constructor({name: value for name, value in keywords.items() if name in parameters})
    # the saved settings that the given ones are checked against (batch_size against n_steps, ...)
    context = {
        name: saved[name]
        for name in _SETTINGS_CHECKED_TOGETHER
        if saved is not None and name in saved and name in parameters and name not in given
    }
    if not given:
        return
    check_constructor_settings(algorithm, policy, {"verbose": 0, **context, **given})
