"""
Which algorithm saved a zip file, read before ``load`` builds anything, so that a file of another algorithm gets an
error naming both algorithms instead of SB3's "Key aux_optimizer is an invalid object name".

SB3's zip stores no algorithm name; the policy class's module (written as plain JSON in the file's ``data``) tells
the family of algorithms that saved it.
"""

import io
import json
import os
import zipfile
from typing import Any

from stable_baselines3.common.save_util import json_to_data

# the module of a saved policy class -> the algorithms that save such files (how an error message names them)
POLICY_MODULE_ALGORITHMS = {
    "sb3_ewma.ppo_ewma.policies": "PPO_EWMA",
    "sb3_ewma.ppg_ewma.policies": "PPG_EWMA or PPG",
    "stable_baselines3.common.policies": "SB3's PPO or A2C",
    "sb3_contrib.common.recurrent.policies": "RecurrentPPO_EWMA or sb3-contrib's RecurrentPPO",
    "sb3_contrib.common.maskable.policies": "MaskablePPO_EWMA or sb3-contrib's MaskablePPO",
}


def read_saved_data(path: Any) -> dict[str, Any] | None:
    """
    The JSON of a saved model's ``data`` (values stay serialized), or None when ``path`` is not a readable zip
    (``load`` then reports it as SB3 does). A path without a suffix gets ``.zip``, as in SB3.
    """
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


def read_saved_value(path: Any, key: str) -> Any:
    """One entry of a saved model's ``data``, deserialized as SB3 does (None when absent or unreadable)."""
    data = read_saved_data(path)
    if data is None or key not in data:
        return None
    return json_to_data(json.dumps({key: data[key]}))[key]


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
    Raise a ``ValueError`` naming both algorithms when ``path`` was saved by an algorithm whose files
    ``algorithm_name.load`` cannot open: the saved policy class comes from a module of this package, SB3 or
    sb3-contrib that is not in ``loadable_policy_modules``. A user's own policy class (another module) passes.

    :return: the file's ``data`` JSON (values serialized), or None when it could not be read
    """
    check_saved_file_exists(path)
    data = read_saved_data(path)
    if data is None:
        return None
    module = saved_policy_module(data)
    if module in POLICY_MODULE_ALGORITHMS and module not in loadable_policy_modules:
        raise ValueError(
            f"{os.fspath(path)} was saved by {POLICY_MODULE_ALGORITHMS[module]}, not by {algorithm_name} "
            f"(its policy class comes from {module}): load it with that algorithm's load()"
        )
    return data
