"""
Record a video of a trained agent with rl-zoo3:
``python -m sb3_ewma.record_video --algo ppo_ewma --env procgen-starpilot-easy -f logs/ -n 1000`` takes every flag
of ``python -m rl_zoo3.record_video`` and knows this package's algorithms and the
Procgen ids ``procgen-<game>-<easy|hard>`` (procgen renders 512 x 512 frames). Needs ``moviepy``.
"""

import sys
from collections.abc import Sequence

PROG = "python -m sb3_ewma.record_video"


def main(argv: Sequence[str] | None = None) -> None:
    """
    Command line entry point.

    :param argv: the arguments (default: ``sys.argv[1:]``)
    """
    from sb3_ewma import zoo

    zoo.record_video(sys.argv[1:] if argv is None else argv, prog=PROG)


if __name__ == "__main__":
    main()
