"""
Whether the machine can show a window, for the command-line scripts (``sb3_ewma.zoo``, ``sb3_ewma.plots``). Imports
nothing of the package, so that the entry points (:mod:`sb3_ewma._command`) and what they run can both use it.
"""

import contextlib
import os
import sys
from collections.abc import Iterator


def has_display() -> bool:
    """Whether a window can be shown: not on Linux without ``DISPLAY`` or ``WAYLAND_DISPLAY`` (a headless machine)."""
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


@contextlib.contextmanager
def headless_sdl() -> Iterator[None]:
    """
    On a machine without a display (:func:`has_display`), set ``SDL_VIDEODRIVER=dummy`` for the duration of the
    block, unless the user set it: pygame (the classic-control environments' ``rgb_array`` rendering) then draws
    off-screen instead of probing for a Wayland display, whose library prints "error: XDG_RUNTIME_DIR is invalid or
    not set in the environment." on a run that works. What the user set is never changed; the variable is removed
    again after the block.
    """
    if has_display() or "SDL_VIDEODRIVER" in os.environ:
        yield
        return
    os.environ["SDL_VIDEODRIVER"] = "dummy"
    try:
        yield
    finally:
        os.environ.pop("SDL_VIDEODRIVER", None)
