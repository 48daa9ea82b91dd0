"""
Share a trained agent on the Hugging Face Hub with rl-zoo3:
``python -m sb3_ewma.push_to_hub --algo ppo_ewma --env CartPole-v1 -f logs/ -orga <user or organization>`` takes every
flag of ``python -m rl_zoo3.push_to_hub`` and knows this package's algorithms and the Procgen ids
``procgen-<game>-<easy|hard>``; the model card names the algorithm and its paper (:func:`sb3_ewma.zoo.push_to_hub`).
Needs a Hub token with write access (``hf auth login``).
"""

import sys
from collections.abc import Sequence

PROG = "python -m sb3_ewma.push_to_hub"


def main(argv: Sequence[str] | None = None) -> None:
    """
    Command line entry point.

    :param argv: the arguments (default: ``sys.argv[1:]``)
    """
    from sb3_ewma import zoo

    zoo.push_to_hub(sys.argv[1:] if argv is None else argv, prog=PROG)


if __name__ == "__main__":
    main()
