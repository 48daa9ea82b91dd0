"""The ``main`` of the command-line entry points ``python -m sb3_ewma.<command>`` (rl-zoo3's scripts)."""

import sys
from collections.abc import Sequence
from typing import Protocol


class EntryPoint(Protocol):
    def __call__(self, argv: Sequence[str] | None = None) -> None: ...


def zoo_command(name: str) -> EntryPoint:
    """
    The ``main(argv=None)`` of ``python -m sb3_ewma.<name>``: runs ``sb3_ewma.zoo.<name>`` on ``argv`` (default:
    ``sys.argv[1:]``). rl-zoo3 is imported when ``main`` is called, not when the entry point's module is.
    """
    prog = f"python -m sb3_ewma.{name}"

    def main(argv: Sequence[str] | None = None) -> None:
        """
        Command line entry point.

        :param argv: the arguments (default: ``sys.argv[1:]``)
        """
        from sb3_ewma import zoo

        getattr(zoo, name)(sys.argv[1:] if argv is None else argv, prog=prog)

    main.__qualname__ = main.__name__ = "main"
    main.__module__ = f"sb3_ewma.{name}"
    return main
