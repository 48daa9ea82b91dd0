"""
Where rl-zoo3 has no extension point: a name replaced for the duration of one call, and restored.

rl-zoo3 is extended through what it offers where it offers something (its registries,
:func:`~sb3_ewma.zoo.registry.register_zoo`; its ``ExperimentManager``, subclassed). Its command-line functions and
scripts take no arguments and look the names they use up in their modules when they run; each call of :func:`patched`
or :func:`patched_argv` says in one comment why no public way exists.
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
    """
    Set ``sys.argv`` to ``[prog, *argv]`` for the duration of the block: the command line of a script run with
    ``runpy``, which reads it from there as ``python -m`` would give it.
    """
    original = sys.argv
    sys.argv = [prog, *argv]
    try:
        yield
    finally:
        sys.argv = original


def argparse_with_parser(make_parser: Callable[[], argparse.ArgumentParser]) -> types.SimpleNamespace:
    """
    The ``argparse`` module with ``ArgumentParser()`` returning ``make_parser()``: in place of ``argparse`` in a
    module of rl-zoo3 whose function builds its parser with ``argparse.ArgumentParser()`` (with :func:`patched`).
    """
    return types.SimpleNamespace(**{**vars(argparse), "ArgumentParser": make_parser})
