"""Where rl-zoo3 has no extension point: a name replaced for the duration of one call, and restored."""

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any


@contextlib.contextmanager
def patched(target: Any, name: str, value: Any) -> Iterator[None]:
    """Set ``target.name = value`` for the duration of the block."""
    original = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, original)


@contextlib.contextmanager
def patched_argv(prog: str, argv: Sequence[str]) -> Iterator[None]:
    original = sys.argv
    sys.argv = [prog, *argv]
    try:
        yield
    finally:
        sys.argv = original
