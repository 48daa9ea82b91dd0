"""
Download an agent from the Hugging Face Hub with rl-zoo3:
``python -m sb3_ewma.load_from_hub --algo ppo_ewma --env CartPole-v1 -orga <user or organization> -f logs/`` takes
every flag of ``python -m rl_zoo3.load_from_hub`` and knows this package's algorithms; the agent lands in the log
folder as a run of ``train``, for ``python -m sb3_ewma.enjoy`` (:func:`sb3_ewma.zoo.load_from_hub`). As rl-zoo3's, it
downloads only where the environment sets ``TRUST_REMOTE_CODE=True``: the files are loaded with ``pickle``.
"""

import sys
from collections.abc import Sequence

PROG = "python -m sb3_ewma.load_from_hub"


def main(argv: Sequence[str] | None = None) -> None:
    """
    Command line entry point.

    :param argv: the arguments (default: ``sys.argv[1:]``)
    """
    from sb3_ewma import zoo

    zoo.load_from_hub(sys.argv[1:] if argv is None else argv, prog=PROG)


if __name__ == "__main__":
    main()
