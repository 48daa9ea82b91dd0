"""
The entry points ``python -m sb3_ewma.train`` / ``enjoy`` / ``record_video`` / ``record_training``: rl-zoo3's, run with
:func:`register_zoo` done and this package's names in place of rl-zoo3's for the duration of the call.
"""

import functools
import runpy
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

import rl_zoo3.train
import rl_zoo3.utils
import torch as th

from sb3_ewma._display import has_display, headless_sdl
from sb3_ewma._quiet import import_without_pkg_resources_warning
from sb3_ewma.common import distributed
from sb3_ewma.common.saved_files import check_saved_file
from sb3_ewma.zoo import threads
from sb3_ewma.zoo.arguments import (
    CheckedStoreDict,
    TrainArgumentParser,
    ZooArgumentParser,
    check_play_counts,
    chooses_num_threads,
)
from sb3_ewma.zoo.checks import latest_run_with_model
from sb3_ewma.zoo.experiment import ExperimentManager
from sb3_ewma.zoo.install import ZOO_INSTALL_MESSAGE, import_zoo
from sb3_ewma.zoo.patching import argparse_with_parser, patched, patched_argv
from sb3_ewma.zoo.procgen import create_test_env
from sb3_ewma.zoo.registry import register_zoo


def train(argv: Sequence[str], prog: str = "python -m sb3_ewma.train") -> None:
    """
    Run ``rl_zoo3.train.train()`` with :func:`register_zoo` done, this package's :class:`ExperimentManager` and
    :class:`TrainArgumentParser`.

    :param argv: the command line arguments (without the program name): rl-zoo3's and ``--scale-*``
    :param prog: the program name shown in messages
    """
    register_zoo()
    parser = functools.partial(TrainArgumentParser, prog=prog, argv=argv)
    # under torchrun, ranks other than 0 print nothing (errors still reach stderr)
    with (
        # rl_zoo3.train.train() takes no arguments: it names ExperimentManager and argparse.ArgumentParser at module level
        patched(rl_zoo3.train, "ExperimentManager", ExperimentManager),
        patched(rl_zoo3.train, "argparse", argparse_with_parser(parser)),
        distributed.quiet_unless_rank0(),
        threads.restored_num_threads(),
    ):
        rl_zoo3.train.train()


def checked_model_path(get_model_path: Callable[..., tuple[str, str, str]]) -> Callable[..., tuple[str, str, str]]:
    """
    rl-zoo3's ``get_model_path``, then the model file checked for the algorithm of ``--algo``
    (:func:`sb3_ewma.common.saved_files.check_saved_file`).
    """

    def model_path(exp_id: int, folder: str, algo: str, *args: Any, **kwargs: Any) -> tuple[str, str, str]:
        name_prefix, path, log_path = get_model_path(exp_id, folder, algo, *args, **kwargs)
        algorithm = rl_zoo3.utils.ALGOS.get(algo)
        if algorithm is not None:
            check_saved_file(algorithm, path)
        return name_prefix, path, log_path

    return model_path


def enjoy(argv: Sequence[str], prog: str = "python -m sb3_ewma.enjoy") -> None:
    """
    Run ``rl_zoo3.enjoy.enjoy()`` with :func:`register_zoo` done and Procgen ids built natively. Without ``--exp-id`` it
    plays the newest run that holds a model (:func:`~sb3_ewma.zoo.checks.latest_run_with_model`); without a display it
    plays as with ``--no-render``.

    :param argv: rl-zoo3's command line arguments (without the program name)
    :param prog: the program name shown in messages
    """
    register_zoo()
    check_play_counts(argv, prog)
    if not has_display() and "--no-render" not in argv:
        # rl-zoo3 would open a window (XDG errors) and play in real time
        print("No display (DISPLAY is not set): playing without rendering, as with --no-render")
        argv = [*argv, "--no-render"]
    # imported here: rl-zoo3's enjoy needs `requests`, which its training does not
    zoo_enjoy = import_zoo("rl_zoo3.enjoy")
    parser = functools.partial(ZooArgumentParser, prog=prog, argv=argv)
    with (
        # rl_zoo3.enjoy.enjoy() takes no arguments: it names argparse, create_test_env and get_model_path at module level
        patched(zoo_enjoy, "argparse", argparse_with_parser(parser)),
        patched(zoo_enjoy, "create_test_env", create_test_env),
        patched(zoo_enjoy, "get_model_path", checked_model_path(zoo_enjoy.get_model_path)),
        # rl_zoo3.utils.get_model_path finds the latest run with its module's get_latest_run_id, and has no parameter for it
        patched(rl_zoo3.utils, "get_latest_run_id", latest_run_with_model),
        threads.restored_num_threads(),
    ):
        if not chooses_num_threads(argv):
            th.set_num_threads(1)  # one observation at a time: one thread (see sb3_ewma.zoo.threads)
        zoo_enjoy.enjoy()


def record_video(argv: Sequence[str], prog: str = "python -m sb3_ewma.record_video") -> None:
    """
    Run rl-zoo3's ``record_video`` script (with ``runpy``, as ``python -m`` would) with :func:`register_zoo` done and
    Procgen ids built natively. As :func:`enjoy`, it takes the newest run that holds a model; without a display, pygame
    draws off-screen (:func:`sb3_ewma._display.headless_sdl`).

    :param argv: rl-zoo3's command line arguments (without the program name)
    :param prog: the program name shown in messages
    """
    register_zoo()
    check_play_counts(argv, prog, check_device=False)
    import_without_pkg_resources_warning("imageio_ffmpeg")
    with (
        # rl-zoo3's record_video is a script: it reads sys.argv and imports these names of rl_zoo3.utils when it runs
        patched(rl_zoo3.utils, "create_test_env", create_test_env),
        patched(rl_zoo3.utils, "StoreDict", CheckedStoreDict),
        patched(rl_zoo3.utils, "get_model_path", checked_model_path(rl_zoo3.utils.get_model_path)),
        # rl_zoo3.utils.get_model_path finds the latest run with its module's get_latest_run_id, and has no parameter for it
        patched(rl_zoo3.utils, "get_latest_run_id", latest_run_with_model),
        patched_argv(prog, argv),
        threads.restored_num_threads(),
        headless_sdl(),
    ):
        if not chooses_num_threads(argv):
            th.set_num_threads(1)  # one observation at a time: one thread (see sb3_ewma.zoo.threads)
        try:
            runpy.run_module("rl_zoo3.record_video", run_name="__main__", alter_sys=False)
        except ModuleNotFoundError as error:
            raise ImportError(f"{ZOO_INSTALL_MESSAGE} (missing module: {error.name})") from error


def recording_with_this_package(call: Callable[..., int]) -> Callable[..., int]:
    """``subprocess.call``, with rl-zoo3's ``python -m rl_zoo3.record_video`` run as this package's ``record_video``."""

    def call_record_video(args: Sequence[str], *rest: Any, **kwargs: Any) -> int:
        if list(args[:3]) == ["python", "-m", "rl_zoo3.record_video"]:
            # this interpreter (a virtualenv's "python" may not be first on PATH), and this package's algorithms
            args = [sys.executable, "-m", "sb3_ewma.record_video", *args[3:]]
        return call(args, *rest, **kwargs)

    return call_record_video


def record_training(argv: Sequence[str], prog: str = "python -m sb3_ewma.record_training") -> None:
    """
    Run rl-zoo3's ``record_training`` script (a video of the final model, the best one and every checkpoint of a run,
    each by ``record_video``, then joined into ``training.mp4`` by the ``ffmpeg`` program) with :func:`register_zoo`
    done, each video recorded by ``python -m sb3_ewma.record_video``. As rl-zoo3's, it empties the output folder
    (default: the run's ``videos``) first.

    :param argv: rl-zoo3's command line arguments (without the program name)
    :param prog: the program name shown in messages
    """
    register_zoo()
    if "-h" not in argv and "--help" not in argv and shutil.which("ffmpeg") is None:
        # rl-zoo3's script would record every video and then fail on the missing files of ffmpeg's steps
        raise OSError("record_training joins its videos with the ffmpeg program, which is not on PATH: install ffmpeg")
    check_play_counts(argv, prog, check_device=False)
    with (
        # rl-zoo3's record_training is a script: it reads sys.argv and records each video with `python -m
        # rl_zoo3.record_video`, whose process would not know this package's algorithms
        patched(subprocess, "call", recording_with_this_package(subprocess.call)),
        patched(rl_zoo3.utils, "get_latest_run_id", latest_run_with_model),
        patched_argv(prog, argv),
    ):
        try:
            runpy.run_module("rl_zoo3.record_training", run_name="__main__", alter_sys=False)
        except ModuleNotFoundError as error:
            raise ImportError(f"{ZOO_INSTALL_MESSAGE} (missing module: {error.name})") from error
