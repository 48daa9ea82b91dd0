"""rl-zoo3 is an optional dependency: the message that says how to install it, and the imports that need it."""

import importlib
import types

from sb3_ewma._install import install_hint

ZOO_INSTALL_MESSAGE = (
    "The rl-zoo3 integration of sb3-ewma needs rl-zoo3 (and sb3-contrib, optuna): install the extra with "
    f"{install_hint('zoo')}"
)

# the modules of rl-zoo3 that sb3_ewma.zoo uses when it is imported
ZOO_MODULES = ("rl_zoo3", "rl_zoo3.exp_manager", "rl_zoo3.hyperparams_opt", "rl_zoo3.train", "rl_zoo3.utils")


def import_zoo(name: str) -> types.ModuleType:
    """Import a module of rl-zoo3 (or one it needs), or raise an ``ImportError`` that says which extra to install."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ImportError(f"{ZOO_INSTALL_MESSAGE} (missing module: {error.name})") from error


def require_zoo() -> None:
    """Import :data:`ZOO_MODULES`, or raise an ``ImportError`` that says which extra to install."""
    for name in ZOO_MODULES:
        import_zoo(name)
