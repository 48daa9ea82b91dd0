"""
Quiet imports of dependencies that print or warn on import, although nothing of them that warns is used.

Imported first by ``sb3_ewma`` (see its ``__init__``), this module imports the legacy ``gym`` package, when it is
installed, without the deprecation banner that its ``gym_notices`` dependency prints to stderr on import.

Who imports gym: nothing in this package. ``procgen`` (procgen-mirror, the ``procgen`` extra) depends on ``gym`` and
imports it, and Stable-Baselines3 imports it whenever it is installed (``stable_baselines3.common.vec_env.patch_gym``,
to convert old gym environments), so every command would print the banner though no gym environment is used. The
banner is the only output of ``gym``'s import; anything else written to stderr during it is passed through.
"""

import contextlib
import importlib.util
import io
import sys
import warnings

_BANNER_START = "Gym has been unmaintained"


def import_gym_quietly() -> None:
    """Import ``gym`` (if installed and not imported yet) with its deprecation banner removed from stderr."""
    if "gym" in sys.modules or importlib.util.find_spec("gym") is None:
        return
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            importlib.import_module("gym")
    except ImportError:
        return  # a broken gym: SB3 and procgen report it themselves when they import it
    finally:
        output = captured.getvalue()
        if output and not output.startswith(_BANNER_START):
            sys.stderr.write(output)


def import_without_pkg_resources_warning(name: str) -> None:
    """
    Import the module ``name`` (if installed) without the ``pkg_resources`` deprecation warning of setuptools. Used for
    ``imageio_ffmpeg``: gym3 (a dependency of procgen) pins ``imageio-ffmpeg<0.4``, whose import uses ``pkg_resources``;
    moviepy imports it when a video is recorded.
    """
    if name in sys.modules or importlib.util.find_spec(name) is None:
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)
        importlib.import_module(name)


import_gym_quietly()
