"""Whether the machine can show a window, for the command-line scripts. Imports nothing of the package."""

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
    Without a display (:func:`has_display`), set ``SDL_VIDEODRIVER=dummy`` for the duration of the block unless the user
    set it, so that pygame draws off-screen without the "XDG_RUNTIME_DIR is invalid or not set" line.
    """
    if has_display() or "SDL_VIDEODRIVER" in os.environ:
        yield
        return
    os.environ["SDL_VIDEODRIVER"] = "dummy"
    try:
        yield
    finally:
        os.environ.pop("SDL_VIDEODRIVER", None)
