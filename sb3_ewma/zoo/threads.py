"""
Torch's CPU threads for the command-line entry points: one thread unless the model reads images on the CPU or the user
chose (``--num-threads``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``). These functions act only when an entry point calls
them. See :ref:`performance`.
"""

import contextlib
import os
from collections.abc import Iterator

import torch as th
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.preprocessing import is_image_space

# the environment variables that set torch's thread count when it starts
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
# --num-threads values: AUTO (the entry points' default), TORCH_DEFAULT (torch's own choice), or a count N > 0
AUTO, TORCH_DEFAULT = 0, -1


def threads_set_by_environment() -> bool:
    """Whether ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` is set (torch then follows it)."""
    return any(os.environ.get(name) for name in THREAD_VARIABLES)


def reads_images(observation_space: spaces.Space) -> bool:
    """Whether the observations are (or contain) images."""
    if isinstance(observation_space, spaces.Dict):
        return any(reads_images(space) for space in observation_space.spaces.values())
    return is_image_space(observation_space, check_channels=False)


def auto_num_threads(model: BaseAlgorithm) -> int | None:
    """
    The thread count of the ``AUTO`` rule for a built model: 1, or None (torch's default) when the model reads images on
    the CPU.
    """
    on_cpu = th.device(model.device).type == "cpu"
    return None if on_cpu and reads_images(model.observation_space) else 1


def apply_num_threads(num_threads: int, model: BaseAlgorithm) -> int | None:
    """
    Apply an entry point's ``--num-threads`` to a built model: ``AUTO`` sets :func:`auto_num_threads` unless
    ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` is set; other values are left to rl-zoo3 or torch.

    :return: the thread count set here, or None when left as it was
    """
    if num_threads != AUTO or threads_set_by_environment():
        return None
    count = auto_num_threads(model)
    if count is not None:
        th.set_num_threads(count)
    return count


@contextlib.contextmanager
def restored_num_threads() -> Iterator[None]:
    """Restore torch's thread count at the end of the block."""
    count = th.get_num_threads()
    try:
        yield
    finally:
        th.set_num_threads(count)
