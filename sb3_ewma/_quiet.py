"""
Quiet imports, for the command-line scripts: a dependency that warns on import, although nothing of it that warns is
used. Importing ``sb3_ewma`` redirects no stream and silences nothing: the legacy ``gym`` banner is removed at its
root by the ``procgen`` extra's ``gym-notices<0.1`` pin (the install page's "The legacy gym banner").
"""

import importlib.util
import sys
import warnings


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
