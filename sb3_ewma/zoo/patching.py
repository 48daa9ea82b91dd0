"""
Where rl-zoo3 has no extension point: a name replaced for the duration of one call, and restored. Each call of
:func:`patched` or :func:`patched_argv` says in one comment why no public way exists.
"""

import argparse
import contextlib
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

_MISSING = object()


@contextlib.contextmanager
def patched(target: Any, name: str, value: Any, missing_ok: bool = False) -> Iterator[None]:
    """
    Set ``target.name = value`` for the duration of the block.

    :param target: the object (usually a module)
    :param name: the attribute's name
    :param value: its value in the block
    :param missing_ok: whether ``target`` may lack the attribute (it is then added, and removed after the block); else a
        missing attribute raises ``AttributeError``
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
    """Set ``sys.argv`` to ``[prog, *argv]`` for the duration of the block (for a script run with ``runpy``)."""
    original = sys.argv
    sys.argv = [prog, *argv]
    try:
        yield
    finally:
        sys.argv = original


def argparse_with_parser(make_parser: Callable[[], argparse.ArgumentParser]) -> types.SimpleNamespace:
    """The ``argparse`` module with ``ArgumentParser()`` returning ``make_parser()``, to patch into a module of rl-zoo3."""
    return types.SimpleNamespace(**{**vars(argparse), "ArgumentParser": make_parser})
