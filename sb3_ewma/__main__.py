"""
``python -m sb3_ewma <command> [flags]`` and the console command ``sb3-ewma <command> [flags]``: the entry points
``train``, ``enjoy``, ``record_video``, ``record_training``, ``push_to_hub``, ``load_from_hub`` (rl-zoo3's,
:mod:`sb3_ewma.zoo`), ``scale`` (:mod:`sb3_ewma.scale.cli`) and ``plots`` (:mod:`sb3_ewma.plots`), each as
``python -m sb3_ewma.<command>``. A command may be written with ``-`` for ``_`` (``record-video``). ``--version``
prints the package's version.
"""

import importlib
import sys
from collections.abc import Sequence

from sb3_ewma._command import run_command

COMMANDS: dict[str, str] = {
    "train": "train a model with rl-zoo3 (python -m rl_zoo3.train's flags, --scale-n-envs)",
    "enjoy": "play a trained model (rl-zoo3's enjoy; --no-render on a machine without a display)",
    "record_video": "record a video of a trained model (rl-zoo3's record_video)",
    "record_training": "record videos of a run's checkpoints and join them (rl-zoo3's record_training; needs ffmpeg)",
    "push_to_hub": "evaluate a trained model and upload it to the Hugging Face Hub (rl-zoo3's push_to_hub)",
    "load_from_hub": "download a model from the Hugging Face Hub into the log folder (rl-zoo3's load_from_hub)",
    "scale": "rescale a hyperparameter entry for another number of environments (batch size-invariance)",
    "plots": "plot the training curves of runs (rl-zoo3's plot_train, also for short runs)",
}
"""The commands, each the ``main`` of the module ``sb3_ewma.<command>``."""
ZOO_COMMANDS = ("train", "enjoy", "record_video", "record_training", "push_to_hub", "load_from_hub")
"""The commands of :mod:`sb3_ewma.zoo` (rl-zoo3's scripts)."""


def usage(prog: str = "sb3-ewma") -> str:
    """The usage text: the commands and what they do."""
    width = max(len(name) for name in COMMANDS)
    lines = [
        f"usage: {prog} <command> [flags]   ({prog} <command> -h lists the command's flags)",
        f"       {prog} --version",
        "",
        "commands:",
    ]
    lines += [f"  {name.ljust(width)}  {summary}" for name, summary in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, prog: str = "sb3-ewma") -> None:
    """
    Run ``<command>`` of ``argv`` (default: ``sys.argv[1:]``) on the rest of ``argv``, with one-line errors
    (:func:`sb3_ewma._command.run_command`). Without a command, or with ``-h``, print the commands; with
    ``--version`` (or ``-V``), the version (``sb3-ewma 0.2.0``).

    :param argv: the command and its flags
    :param prog: the program name shown in messages
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(prog))
        if not argv:
            raise SystemExit(2)
        return
    if argv[0] in ("--version", "-V"):
        from sb3_ewma import __version__

        print(f"sb3-ewma {__version__}")
        return
    name = argv[0].replace("-", "_")
    if name not in COMMANDS:
        print(usage(prog), file=sys.stderr)
        raise SystemExit(f"{prog}: error: unknown command {argv[0]!r}: choose one of {', '.join(COMMANDS)}")
    command_prog = f"{prog} {argv[0]}"
    if name == "scale":
        # its own exit status (0, or argparse's 2)
        status = importlib.import_module("sb3_ewma.scale.cli").main(argv[1:])
        if status:
            raise SystemExit(status)
        return
    if name in ZOO_COMMANDS:

        def entry_point(arguments: Sequence[str] | None) -> None:
            zoo = importlib.import_module("sb3_ewma.zoo")  # rl-zoo3 imported when the command runs
            getattr(zoo, name)(list(arguments or []), prog=command_prog)

    else:
        entry_point = importlib.import_module(f"sb3_ewma.{name}").main
    run_command(entry_point, argv[1:], prog=command_prog)


def console_main() -> None:
    """The console command ``sb3-ewma``."""
    main(prog="sb3-ewma")


if __name__ == "__main__":
    main(prog="python -m sb3_ewma")
