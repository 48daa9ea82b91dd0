"""
The ``main`` of the command-line entry points ``python -m sb3_ewma.<command>``, and :func:`run_command`, which runs them
as programs.
"""

import os
import sys
from collections.abc import Callable, Sequence
from typing import Protocol


class EntryPoint(Protocol):
    def __call__(self, argv: Sequence[str] | None = None) -> None: ...


def zoo_command(name: str) -> EntryPoint:
    """
    The ``main(argv=None)`` of ``python -m sb3_ewma.<name>``: runs ``sb3_ewma.zoo.<name>`` on ``argv`` (default:
    ``sys.argv[1:]``), importing rl-zoo3 only then.
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


TRACEBACK_VARIABLE = "SB3_EWMA_TRACEBACK"
"""Set (to anything but ``0`` or nothing), the commands show the whole traceback of an error instead of one line."""

USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, AssertionError, OSError, ImportError, TypeError)
"""
What a command reports in one line: the errors of what was given to it (a flag, a hyperparameter, a file, an environment
id, a missing extra, no network). Other exceptions keep their traceback.
"""

_NETWORK_ERROR_NAMES = ("ConnectError", "ConnectionError", "ConnectTimeout", "ConnectTimeoutError", "NameResolutionError")


def network_error(error: BaseException) -> BaseException | None:
    """The exception in ``error``'s chain that says the network could not be reached (httpx, requests, urllib3), or None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__name__ in _NETWORK_ERROR_NAMES or isinstance(current, ConnectionError):
            return current
        current = current.__cause__ or current.__context__
    return None


def error_line(error: BaseException) -> str:
    """What the one-line report of :func:`run_command` says of ``error``."""
    network = network_error(error)
    if network is not None:
        first_line = (str(network).strip().splitlines() or [type(network).__name__])[0]
        return f"cannot reach the network ({type(network).__name__}: {first_line}): check the connection, or the proxy"
    message = str(error).strip()
    if isinstance(error, (AssertionError, TypeError)) or not message:
        message = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return message


def run_command(
    main: Callable[[Sequence[str] | None], object], argv: Sequence[str] | None = None, prog: str | None = None
) -> None:
    """
    Run a command line entry point as a program: an error of :data:`USER_ERRORS` (or a network error) is printed as
    ``<prog>: error: <message>`` on stderr and the program exits with status 1; with :data:`TRACEBACK_VARIABLE` set, the
    error is raised with its traceback. Other exceptions keep their traceback.

    :param main: the entry point (``main(argv)``)
    :param argv: its arguments (default: ``sys.argv[1:]``)
    :param prog: the program name shown in the message (default: ``sys.argv[0]``'s)
    """
    try:
        main(argv)
    except Exception as error:
        if not isinstance(error, USER_ERRORS) and network_error(error) is None:
            raise
        if os.environ.get(TRACEBACK_VARIABLE, "") not in ("", "0"):
            raise
        name = prog or os.path.basename(sys.argv[0]) or "sb3_ewma"
        print(f"{name}: error: {error_line(error)}", file=sys.stderr)
        print(f"({TRACEBACK_VARIABLE}=1 shows the traceback)", file=sys.stderr)
        raise SystemExit(1) from None
