"""The command line ``python -m sb3_ewma.scale``: print a rescaled entry of an rl-zoo3 hyperparameter file."""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from sb3_ewma.algorithms import packaged_hyperparams_file
from sb3_ewma.scale.api import ALGOS, LR_RULES, scale_with_log
from sb3_ewma.scale.zoo_entry import dump_entry, read_hyperparameter_file


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sb3_ewma.scale",
        description="Rescale an rl-zoo3 hyperparameter entry of PPO-EWMA / PPG-EWMA for another number of environments "
        "(batch size-invariance, Hilton et al. 2021). The rescaled entry is printed as YAML on stdout, the report of "
        "what changed on stderr.",
    )
    parser.add_argument(
        "file",
        nargs="?",
        default=None,
        help="rl-zoo3 hyperparameter file, YAML or JSON (.json) (default: the packaged one of --algo)",
    )
    parser.add_argument("entry", nargs="?", default=None, help="entry of the file, e.g. CartPole-v1 (or --env)")
    parser.add_argument("--env", default=None, help="entry of the file: the environment id, e.g. procgen-starpilot-easy")
    parser.add_argument("--n-envs", type=int, required=True, help="target TOTAL number of environments (all processes)")
    parser.add_argument("--reference-n-envs", type=int, default=None, help="reference n_envs when the entry has none")
    parser.add_argument(
        "--algo",
        choices=ALGOS,
        default=None,
        help="algorithm; without FILE, its packaged hyperparams/<algo>.yml is read (default: the file name if it is one "
        "of the choices, e.g. ppg_ewma.yml, else inferred from keys)",
    )
    parser.add_argument("--lr-rule", choices=LR_RULES, default=None, help="override the optimizer's step size rule")
    parser.add_argument("--scale-adam-betas", action="store_true", help="raise Adam's betas to the power 1/c")
    parser.add_argument("--scale-aux-learning-rate", action="store_true", help="PPG: also rescale aux_learning_rate")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """
    Command line entry point: ``python -m sb3_ewma.scale FILE ENTRY --n-envs N [options]``, or
    ``python -m sb3_ewma.scale --algo ppg_ewma --env procgen-starpilot-easy --n-envs 16`` for this package's file.

    :param argv: the arguments (default: ``sys.argv[1:]``)
    :return: the exit status
    """
    parser = _parser()
    args = parser.parse_args(argv)
    if args.env is not None and args.entry is not None and args.env != args.entry:
        parser.error(f"the entry is given twice: {args.entry!r} and --env {args.env!r}")
    args.entry = args.env if args.env is not None else args.entry
    if args.file is None:
        if args.algo is None:
            parser.error("give a hyperparameter FILE, or --algo to read this package's hyperparams/<algo>.yml")
        args.file = str(packaged_hyperparams_file(args.algo))
        if not Path(args.file).is_file():  # ppo_mask_ewma: the command line derives its entries from rl-zoo3's
            parser.error(
                f"this package has no hyperparameter file for --algo {args.algo} (python -m sb3_ewma.train derives its "
                "entries from rl-zoo3's): give a hyperparameter FILE"
            )
    if args.entry is None:
        parser.error("give the entry (ENTRY after FILE, or --env)")
    try:
        content = read_hyperparameter_file(args.file)
    except (OSError, ValueError, yaml.YAMLError) as error:
        parser.exit(2, f"{parser.prog}: error: cannot read {args.file}: {error}\n")
    if not isinstance(content, dict):
        parser.exit(2, f"{parser.prog}: error: {args.file} is not an rl-zoo3 hyperparameter file (a mapping of entries)\n")
    if args.entry not in content:
        available = ", ".join(str(key) for key in content)
        parser.exit(2, f"{parser.prog}: error: no entry {args.entry!r} in {args.file}; available entries: {available}\n")
    hyperparams = content[args.entry]
    if not isinstance(hyperparams, dict):
        parser.exit(2, f"{parser.prog}: error: entry {args.entry!r} is not a mapping of hyperparameters\n")
    algo = args.algo
    if algo is None and Path(args.file).stem in ALGOS:
        algo = Path(args.file).stem
    try:
        scaled, log = scale_with_log(
            hyperparams,
            args.n_envs,
            args.reference_n_envs,
            algo,
            args.lr_rule,
            args.scale_adam_betas,
            args.scale_aux_learning_rate,
        )
    except ValueError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    sys.stdout.write(dump_entry(args.entry, scaled))
    lines = [f"{args.entry}:", *(f"  {line}" for line in log.lines), *(f"warning: {caveat}" for caveat in log.caveats)]
    sys.stderr.write("".join(f"{line}\n" for line in lines))
    return 0
