"""
The command line of ``python -m sb3_ewma.train``: rl-zoo3's parser with this package's flags and checks
(:class:`TrainArgumentParser`), and the rescaling options they give (:class:`ScaleOptions`).
"""

import argparse
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar, overload

from rl_zoo3.utils import StoreDict

from sb3_ewma.common.checks import writable_folder_problem
from sb3_ewma.scale import ALGOS, LR_RULES
from sb3_ewma.zoo import threads
from sb3_ewma.zoo.checks import device_problem, env_package_problem

_N = TypeVar("_N")


COMPILE_STEP_FLAGS: dict[str, bool | str] = {"auto": "auto", "on": True, "off": False}
"""``--compile-step``'s choices and the ``compile_step`` each gives the model."""


def compile_step_from_args(args: argparse.Namespace) -> bool | str | None:
    """The model's ``compile_step`` that ``--compile-step`` asks for (None: not given)."""
    flag = getattr(args, "compile_step", None)
    return None if flag is None else COMPILE_STEP_FLAGS[flag]


@dataclass(frozen=True)
class ScaleOptions:
    """
    Options to rescale the hyperparameter entry for another number of environments, with
    :func:`sb3_ewma.scale_hyperparams`.

    :param n_envs: the target number of environments
    :param lr_rule: override the step size rule detected from the optimizer ("sqrt" or "linear")
    :param scale_adam_betas: also raise Adam's betas to the power ``1 / c``
    :param scale_aux_learning_rate: PPG: also rescale ``aux_learning_rate``
    """

    n_envs: int
    lr_rule: str | None = None
    scale_adam_betas: bool = False
    scale_aux_learning_rate: bool = False


def add_scale_arguments(parser: argparse.ArgumentParser) -> None:
    """
    Add this package's flags of ``python -m sb3_ewma.train`` to ``parser``: ``--scale-*``, ``--compile-step`` and
    ``--keep-freed-memory``.
    """
    group = parser.add_argument_group(
        "sb3-ewma (batch size-invariance)",
        "Rescale the hyperparameter entry (after --hyperparams overrides) from its n_envs to another number of "
        "environments with sb3_ewma.scale_hyperparams before training; the report is printed and config.yml holds "
        f"the rescaled values. For every algorithm of this package: {', '.join(ALGOS)}.",
    )
    group.add_argument("--scale-n-envs", type=int, default=None, metavar="N", help="target number of environments")
    group.add_argument(
        "--scale-lr-rule", choices=LR_RULES, default=None, help="step size rule (default: detected from the optimizer)"
    )
    group.add_argument("--scale-adam-betas", action="store_true", help="also raise Adam's betas to the power 1/c")
    group.add_argument("--scale-aux-learning-rate", action="store_true", help="PPG: also rescale aux_learning_rate")
    speed = parser.add_argument_group("sb3-ewma (speed)")
    speed.add_argument(
        "--compile-step",
        choices=tuple(COMPILE_STEP_FLAGS),
        default=None,
        help="compile each minibatch's loss and optimizer step, and the acting step, with torch.compile: on, off, or "
        "auto (the default: when the run plans enough steps to earn back the compilation); the model's compile_step",
    )
    memory = parser.add_argument_group("sb3-ewma (CPU memory)")
    memory.add_argument(
        "--keep-freed-memory",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="glibc: keep freed memory for the next minibatch instead of returning it to the system "
        "(sb3_ewma.allocator.keep_freed_memory; fewer page faults, faster CPU training, the peak memory stays held)",
    )


def scale_options_from_args(args: argparse.Namespace) -> ScaleOptions | None:
    """
    The rescaling options of parsed arguments (see :func:`add_scale_arguments`).

    :return: the options, or None without ``--scale-n-envs``
    :raises ValueError: ``--scale-n-envs`` below 1, or a ``--scale-*`` option without ``--scale-n-envs``
    """
    n_envs = getattr(args, "scale_n_envs", None)
    lr_rule = getattr(args, "scale_lr_rule", None)
    scale_adam_betas = bool(getattr(args, "scale_adam_betas", False))
    scale_aux_learning_rate = bool(getattr(args, "scale_aux_learning_rate", False))
    if n_envs is None:
        if lr_rule is not None or scale_adam_betas or scale_aux_learning_rate:
            raise ValueError("--scale-lr-rule, --scale-adam-betas and --scale-aux-learning-rate need --scale-n-envs")
        return None
    if n_envs < 1:
        raise ValueError(f"--scale-n-envs must be >= 1, got {n_envs}")
    return ScaleOptions(n_envs, lr_rule, scale_adam_betas, scale_aux_learning_rate)


class ZooArgumentParser(argparse.ArgumentParser):
    """
    The parser that an rl-zoo3 function builds with ``argparse.ArgumentParser()`` (see
    :func:`sb3_ewma.zoo.patching.argparse_with_parser`): it parses ``argv`` instead of ``sys.argv``, and rl-zoo3's
    ``StoreDict`` options are :class:`CheckedStoreDict`.

    :param argv: the command line arguments (without the program name); None: ``sys.argv[1:]``
    """

    def __init__(self, *args: Any, argv: Sequence[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.argv = None if argv is None else list(argv)
        # argparse looks each `action=` up in its registry first: rl-zoo3's StoreDict gets ours
        self.register("action", StoreDict, CheckedStoreDict)

    # argparse.ArgumentParser.parse_known_args's overloads (typeshed's); parse_args goes through it
    @overload
    def parse_known_args(
        self, args: Iterable[str] | None = None, namespace: None = None
    ) -> tuple[argparse.Namespace, list[str]]: ...
    @overload
    def parse_known_args(self, args: Iterable[str] | None, namespace: _N) -> tuple[_N, list[str]]: ...
    @overload
    def parse_known_args(self, *, namespace: _N) -> tuple[_N, list[str]]: ...

    def parse_known_args(self, args: Iterable[str] | None = None, namespace: Any = None) -> tuple[Any, list[str]]:
        return super().parse_known_args(self.argv if args is None else args, namespace)


class TrainArgumentParser(ZooArgumentParser):
    """
    :class:`ZooArgumentParser` for ``rl_zoo3.train`` with :func:`add_scale_arguments`'s flags in the same usage block,
    and the checks of the command line (an argparse error, before any environment is made).
    """

    _scale_arguments_added = False

    # argparse.ArgumentParser.parse_args's overloads (typeshed's)
    @overload
    def parse_args(self, args: Iterable[str] | None = None, namespace: None = None) -> argparse.Namespace: ...
    @overload
    def parse_args(self, args: Iterable[str] | None, namespace: _N) -> _N: ...
    @overload
    def parse_args(self, *, namespace: _N) -> _N: ...

    def parse_args(self, args: Iterable[str] | None = None, namespace: Any = None) -> Any:
        # added last, so that -h lists them after rl-zoo3's options
        if not self._scale_arguments_added:
            add_scale_arguments(self)
            self._scale_arguments_added = True
            _set_num_threads_default(self)
            _set_eval_freq_help(self)
        parsed = super().parse_args(args, namespace)
        try:
            scale_options_from_args(parsed)
            check_train_counts(parsed)
            check_device_argument(parsed)
            check_storage_argument(parsed)
            check_log_folder_argument(parsed)
            check_env_argument(parsed)
        except ValueError as error:
            self.error(str(error))
        num_threads = getattr(parsed, "num_threads", threads.AUTO)
        if num_threads < threads.TORCH_DEFAULT:
            self.error(f"argument --num-threads: must be {NUM_THREADS_CHOICES}, got {num_threads}")
        return parsed

    def error(self, message: str) -> NoReturn:
        """argparse's error (status 2), with one usage line instead of rl-zoo3's 40."""
        self.exit(2, f"usage: {self.prog} [flags] (-h lists them)\n{self.prog}: error: {message}\n")


# rl-zoo3's counts: flag -> (its attribute, what it allows, the values it allows besides integers >= 1); -n's values
# <= 0 are the entry's budget, as rl-zoo3 reads them (check_train_counts warns of 0 and below -1)
TRAIN_COUNTS: dict[str, tuple[str, str, tuple[int | None, ...]]] = {
    "--n-trials": ("n_trials", "a number of trials >= 1", ()),
    "--max-total-trials": ("max_total_trials", "a number of trials >= 1, or left out (--n-trials per worker)", (None,)),
    "--n-jobs": ("n_jobs", "a number of parallel jobs >= 1, or -1 (one per CPU, as Optuna reads it)", (-1,)),
    "--n-evaluations": (
        "n_evaluations",
        "a number of evaluations >= 1, or left out (one per 100,000 steps)",
        (None,),
    ),
    "--eval-episodes": ("eval_episodes", "a number of episodes >= 1 (--eval-freq -1 turns evaluation off)", ()),
    "--n-eval-envs": ("n_eval_envs", "a number of environments >= 1 (--eval-freq -1 turns evaluation off)", ()),
    "--log-interval": (
        "log_interval",
        "a number of iterations >= 1, -1 (the default: the algorithm's) or -2 and below (no logging)",
        (-1,),
    ),
}
"""The counts of ``python -m rl_zoo3.train`` that :func:`check_train_counts` checks."""


def check_train_counts(args: argparse.Namespace) -> None:
    """
    Raise a ``ValueError`` for a count of rl-zoo3's command line that cannot work (:data:`TRAIN_COUNTS`), as the command
    line is parsed, before any run folder exists. Flags that ``args`` lacks are skipped.

    :param args: the parsed arguments of rl-zoo3's ``train``
    """
    n_timesteps = getattr(args, "n_timesteps", -1)
    if n_timesteps <= 0 and n_timesteps != -1:
        warnings.warn(
            f"-n {n_timesteps}: rl-zoo3 reads a budget of 0 or less as the hyperparameter entry's n_timesteps, which "
            "this run trains (-1, the default, says so)",
            UserWarning,
            stacklevel=2,
        )
    # counts of what is off are not read: evaluation (--eval-freq 0 or less), the hyperparameter search (no -optimize)
    unused = set()
    if getattr(args, "eval_freq", 1) <= 0:
        unused |= {"eval_episodes", "n_eval_envs"}
    if not getattr(args, "optimize_hyperparameters", True):
        unused |= {"n_trials", "max_total_trials", "n_jobs", "n_evaluations"}
    for flag, (name, allowed, also_allowed) in TRAIN_COUNTS.items():
        if not hasattr(args, name) or name in unused:
            continue
        value = getattr(args, name)
        if value in also_allowed or (name == "log_interval" and value is not None and value < -1):
            continue
        if value is None or value < 1:
            raise ValueError(f"argument {flag}: must be {allowed}, got {value}")


def check_device_argument(args: argparse.Namespace) -> None:
    """
    Raise a ``ValueError`` for a ``--device`` that this machine cannot train on
    (:func:`sb3_ewma.zoo.checks.device_problem`). Arguments without ``device`` are skipped.
    """
    problem = device_problem(getattr(args, "device", None))
    if problem is not None:
        raise ValueError(f"argument --device: {problem}")


def check_log_folder_argument(args: argparse.Namespace) -> None:
    """
    Raise a ``ValueError`` for a ``-f/--log-folder`` that cannot be written. Arguments without ``log_folder`` are
    skipped.
    """
    folder = getattr(args, "log_folder", None)
    problem = None if not isinstance(folder, str) else writable_folder_problem(folder)
    if problem is not None:
        raise ValueError(f"argument -f/--log-folder: {folder!r} cannot be written: {problem}")


def check_env_argument(args: argparse.Namespace) -> None:
    """
    Raise a ``ValueError`` for an ``--env`` that needs a package this machine lacks
    (:func:`sb3_ewma.zoo.checks.env_package_problem`), after importing the modules of ``--gym-packages`` as rl-zoo3
    does (one that does not exist is named). Arguments without ``env`` are skipped.
    """
    import importlib

    env_id = getattr(args, "env", None)
    if not isinstance(env_id, str):
        return
    for module in getattr(args, "gym_packages", None) or ():
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as error:
            if error.name is not None and module.startswith(error.name):  # the module named, not one it imports
                raise ValueError(
                    f"argument --gym-packages: no module named {module!r} (install the package that provides it, or "
                    "check the name: rl-zoo3 imports each one to register its environments)"
                ) from None
            return  # rl-zoo3 reports it as it imports the module
        except Exception:
            return
    problem = env_package_problem(env_id)
    if problem is not None:
        raise ValueError(f"argument --env: {problem}")


EVAL_FREQ_HELP = (
    "Evaluate the agent every n steps (any value <= 0, e.g. -1, turns evaluation off: rl-zoo3 evaluates only for "
    "values > 0). During hyperparameter optimization n-evaluations is used instead"
)


SAVE_FREQ_HELP = (
    "Save a checkpoint every n steps (any value <= 0, e.g. -1, the default, saves none: rl-zoo3 saves checkpoints only "
    "for values > 0)"
)


def _set_eval_freq_help(parser: argparse.ArgumentParser) -> None:
    """rl-zoo3's ``--eval-freq`` and ``--save-freq`` help, saying that any value <= 0 turns them off."""
    for action in parser._actions:
        if "--eval-freq" in action.option_strings:
            action.help = EVAL_FREQ_HELP
        if "--save-freq" in action.option_strings:
            action.help = SAVE_FREQ_HELP


def check_storage_argument(args: argparse.Namespace) -> None:
    """
    Raise a ``ValueError`` for an ``-optimize`` ``--storage`` that Optuna cannot open: neither a path ending in ``.log``
    nor a database URL. Arguments without it pass.
    """
    storage = getattr(args, "storage", None)
    if storage is not None and not storage.endswith(".log") and "://" not in storage:
        raise ValueError(
            f"argument --storage: {storage!r} is neither a journal file (a path ending in .log) nor a database URL "
            "(sqlite:///study.db, postgresql://user@host/db)"
        )


def check_output_folder(args: argparse.Namespace) -> None:
    """
    Raise a ``ValueError`` for a ``record_video`` ``-o/--output-folder`` that cannot be written. Arguments without it
    pass.
    """
    from sb3_ewma.common.checks import writable_folder_problem

    folder = getattr(args, "output_folder", None)
    problem = writable_folder_problem(folder) if folder else None
    if problem is not None:
        raise ValueError(f"argument -o/--output-folder: {folder!r} cannot be written: {problem}")


def check_play_counts(argv: Sequence[str], prog: str, check_device: bool = True) -> None:
    """
    ``enjoy`` / ``record_video``: exit with an argparse error (status 2) for ``-n`` or ``--n-envs`` below 1, or a
    ``--device`` this machine lacks (an output folder that cannot be written for ``record_video``,
    ``check_device=False``), before rl-zoo3 loads anything. Values that are not integers are left to rl-zoo3's parser.
    """
    parser = argparse.ArgumentParser(prog=prog, add_help=False, allow_abbrev=False)
    parser.add_argument("-n", "--n-timesteps", type=int, default=1)
    parser.add_argument("--n-envs", type=int, default=1)
    parser.add_argument("--device", default="auto")
    parser.add_argument("-o", "--output-folder", default=None)
    try:
        known, _ = parser.parse_known_args(list(argv))
    except SystemExit:
        return  # rl-zoo3's parser says what is wrong
    try:
        if check_device:
            check_device_argument(known)
        else:
            check_output_folder(known)
    except ValueError as error:
        parser.exit(2, f"{prog}: error: {error}\n")
    for flag, value, what in (
        ("-n/--n-timesteps", known.n_timesteps, "steps to play"),
        ("--n-envs", known.n_envs, "environments"),
    ):
        if value < 1:
            parser.exit(2, f"{prog}: error: argument {flag}: must be a number of {what} >= 1, got {value}\n")


NUM_THREADS_CHOICES = (
    "0 (the default: one thread, or torch's default when the model reads images on the CPU; torch follows "
    "OMP_NUM_THREADS or MKL_NUM_THREADS instead when either is set), -1 (torch's default, one thread per core) or a "
    "thread count N > 0"
)
NUM_THREADS_HELP = f"Number of threads for PyTorch: {NUM_THREADS_CHOICES}"


def _set_num_threads_default(parser: argparse.ArgumentParser) -> None:
    """rl-zoo3's ``--num-threads`` with this package's default (:data:`sb3_ewma.zoo.threads.AUTO`)."""
    for action in parser._actions:
        if "--num-threads" in action.option_strings:
            action.default, action.help = threads.AUTO, NUM_THREADS_HELP


def chooses_num_threads(argv: Sequence[str]) -> bool:
    """Whether the command line sets ``--num-threads`` (or the environment sets torch's threads)."""
    return threads.threads_set_by_environment() or any(arg.startswith("--num-threads") for arg in argv)


class CheckedStoreDict(StoreDict):
    """
    rl-zoo3's ``StoreDict`` (``-params``, ``--env-kwargs``, ``--eval-env-kwargs``: ``key:value`` pairs evaluated as
    Python), with an argparse error that names a pair that is not one, or whose value is not Python, and says how to
    write it.
    """

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: Any = None
    ) -> None:
        option = option_string or "/".join(self.option_strings)
        for pair in values if isinstance(values, (list, tuple)) else [values]:
            message = store_dict_pair_error(option, pair, self._evaluates)
            if message is not None:
                raise argparse.ArgumentError(self, message)
        super().__call__(parser, namespace, values, option_string)

    def _evaluates(self, pair: str) -> BaseException | None:
        """rl-zoo3's evaluation of one pair, alone: the exception it raises, or None."""
        try:
            super().__call__(argparse.ArgumentParser(add_help=False), argparse.Namespace(), [pair])
        except Exception as error:  # eval's errors: NameError, SyntaxError, TypeError, ...
            return error
        return None


def store_dict_pair_error(option: str, pair: str, evaluate: Callable[[str], BaseException | None]) -> str | None:
    """
    What is wrong with one ``key:value`` pair of rl-zoo3's ``StoreDict`` options, or None.

    :param option: the flag, as the message names it
    :param pair: the pair as given on the command line
    :param evaluate: evaluates the pair as rl-zoo3 does, returning the exception it raised (or None)
    """
    key, colon, value = pair.partition(":")
    if not colon or not key:
        return (
            f"{pair!r} is not a key:value pair: write {option} key:value, e.g. {option} learning_rate:0.001 "
            "(the value is read as Python)"
        )
    error = evaluate(pair)
    if error is None:
        return None
    if not value.strip():
        return f"{pair!r} has no value after the ':': write {option} {key}:VALUE, e.g. {key}:0.001"
    quoted = '"' + f"{key}:'{value}'" + '"'
    return (
        f"{pair!r}: the value {value!r} is read as Python and gives {type(error).__name__}: {error}. A string needs "
        f"quotes of its own inside the shell's: {option} {quoted}; numbers, True/False/None, lists and dict(...) "
        "are written as in Python"
    )
