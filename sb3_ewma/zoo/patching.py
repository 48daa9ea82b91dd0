"""Where rl-zoo3 has no extension point: a name replaced for the duration of one call, and restored."""

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any

_MISSING = object()


@contextlib.contextmanager
def patched(target: Any, name: str, value: Any, missing_ok: bool = False) -> Iterator[None]:
    """
    Set ``target.name = value`` for the duration of the block.

    :param target: the object (usually a module)
    :param name: the attribute's name
    :param value: its value in the block
    :param missing_ok: whether ``target`` may lack the attribute (it is then added, and removed after the block);
        by default a missing attribute raises ``AttributeError``
    """
    original = getattr(target, name, _MISSING) if missing_ok else getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        if original is _MISSING:
            delattr(target, name)
        else:
            setattr(target, name, original)


@contextlib.contextmanager
def patched_argv(prog: str, argv: Sequence[str]) -> Iterator[None]:
    original = sys.argv
    sys.argv = [prog, *argv]
    try:
        yield
    finally:
        sys.argv = original
