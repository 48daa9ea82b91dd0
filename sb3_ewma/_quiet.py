"""Quiet imports for the command-line scripts: a dependency that warns on import, although nothing of it that warns is used."""

import importlib.util
import sys
import warnings


def import_without_pkg_resources_warning(name: str) -> None:
    """
    Import the module ``name`` (if installed) without setuptools' ``pkg_resources`` deprecation warning
    (``imageio-ffmpeg<0.4``, pinned by procgen's gym3, warns so).
    """
    if name in sys.modules or importlib.util.find_spec(name) is None:
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)
        importlib.import_module(name)
