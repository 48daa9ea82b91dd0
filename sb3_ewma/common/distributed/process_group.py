"""The process group of data-parallel training: joining it (from torchrun's environment), ranks and devices."""

import atexit
import math
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from datetime import timedelta
from typing import Any

import torch as th
import torch.distributed as dist
from stable_baselines3.common.utils import get_device

# documented names of torch.distributed, which its __init__ imports from torch._C without declaring them exports
from torch.distributed import PrefixStore, Store, TCPStore  # pyright: ignore[reportPrivateImportUsage]

SAME_SETTINGS_ADVICE = "give every rank the same n_envs, n_steps, batch_size and algorithm settings"
# torchrun's environment variables
_WORLD_SIZE, _RANK, _LOCAL_RANK, _LOCAL_WORLD_SIZE = "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"
# settings that may (or must) differ between ranks, left out of the consistency check
RANK_LOCAL_SETTINGS = frozenset({"seed", "verbose", "tensorboard_log", "num_timesteps", "start_time", "trained_world_size"})


def check_distributed_argument(distributed: object) -> None:
    """``distributed`` must be ``None`` (automatic), ``True`` or ``False``."""
    if distributed is not None and not isinstance(distributed, bool):
        raise ValueError(f"distributed must be None (join when torchrun's WORLD_SIZE > 1), True or False, got {distributed!r}")


def _torchrun_world_size() -> int:
    return int(os.environ.get(_WORLD_SIZE, "1"))


def wants_data_parallel(distributed: bool | None) -> bool:
    """
    Whether an algorithm created with ``distributed`` trains data-parallel: ``False`` never; ``None`` when a process
    group of several ranks exists or ``WORLD_SIZE > 1``; ``True`` always (needs torchrun or a process group).
    """
    check_distributed_argument(distributed)
    if distributed is False:
        return False
    initialized = dist.is_available() and dist.is_initialized()
    if distributed is None:
        return (initialized and dist.get_world_size() > 1) or _torchrun_world_size() > 1
    if not (initialized or (_RANK in os.environ and _WORLD_SIZE in os.environ)):
        raise ValueError(
            "distributed=True needs torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or an "
            "initialized torch.distributed process group: start the script with torchrun"
        )
    return True


def current_rank(distributed: bool | None = None) -> int:
    """This process's rank (0 when not data-parallel)."""
    if not wants_data_parallel(distributed):
        return 0
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get(_RANK, "0"))


def is_main_process(distributed: bool | None = None) -> bool:
    """True on rank 0 (and in a single process): the process that logs and writes files."""
    return current_rank(distributed) == 0


def local_world_size() -> int:
    """The number of ranks on this machine: ``LOCAL_WORLD_SIZE``, else the whole ``WORLD_SIZE``."""
    return int(os.environ.get(_LOCAL_WORLD_SIZE, os.environ.get(_WORLD_SIZE, "1")))


def data_parallel_device(device: th.device | str, distributed: bool | None) -> th.device | str:
    """
    The device of this rank: ``cuda:(LOCAL_RANK % device_count)`` when ``device`` resolves to CUDA without an index,
    ``device`` otherwise.
    """
    if not wants_data_parallel(distributed):
        return device
    resolved = get_device(device)
    if resolved.type == "cuda" and resolved.index is None:
        resolved = th.device("cuda", int(os.environ.get(_LOCAL_RANK, "0")) % max(th.cuda.device_count(), 1))
    return resolved


def ranks_share_a_gpu() -> bool:
    """Whether this machine has more ranks than GPUs, so that some ranks share a GPU (which nccl refuses)."""
    return local_world_size() > th.cuda.device_count()


def process_group_backend(device: th.device) -> str:
    """
    The backend of the process group for ranks on ``device``: nccl for CUDA with one GPU per rank, gloo otherwise
    (with a warning on rank 0 when ranks share a GPU).
    """
    if device.type != "cuda":
        return "gloo"
    if ranks_share_a_gpu():
        if int(os.environ.get(_RANK, "0")) == 0:
            warnings.warn(
                f"{local_world_size()} ranks share {th.cuda.device_count()} GPU(s) on this machine, which nccl does not "
                "support: the process group uses gloo (collectives through the CPU). Start at most one rank per GPU "
                "(torchrun --nproc-per-node) for nccl.",
                UserWarning,
                stacklevel=3,
            )
        return "gloo"
    return "nccl"


def rank_local_settings(distributed: bool | None, verbose: int, device: th.device | str) -> tuple[int, th.device | str]:
    """This rank's verbosity (0 on ranks other than 0) and device (:func:`data_parallel_device`), for a constructor."""
    check_distributed_argument(distributed)
    if not wants_data_parallel(distributed):
        return verbose, device
    return (verbose if current_rank(distributed) == 0 else 0), data_parallel_device(device, distributed)


def init_process_group(device: th.device) -> None:
    """Join (or create, from torchrun's environment) the default process group, with :func:`process_group_backend`."""
    if dist.is_initialized():
        return
    if not dist.is_available():
        raise RuntimeError("data-parallel training needs torch.distributed, which this build of PyTorch lacks")
    # torch._dynamo keeps a reference to a process group that exists at its import, which leaves gloo threads running
    # at shutdown (and may abort the process): imported before the group exists, it holds none
    import torch._dynamo  # noqa: F401

    backend = process_group_backend(device)
    if device.type == "cuda":
        th.cuda.set_device(device)
    # join through a store of our own first, so that a rank whose peers do not come says so
    store_arguments: dict[str, Any] = {}
    if all(name in os.environ for name in (_RANK, _WORLD_SIZE, _MASTER_ADDR, _MASTER_PORT)):
        rank, world_size = int(os.environ[_RANK]), int(os.environ[_WORLD_SIZE])
        store = rendezvous(rank, world_size, rendezvous_timeout())
        store_arguments = {"store": store, "rank": rank, "world_size": world_size}
    if backend == "nccl":
        dist.init_process_group("nccl", device_id=device, **store_arguments)
    else:
        dist.init_process_group("gloo", **store_arguments)
    # the group is ours, so is its cleanup (a script need not call destroy_process_group())
    atexit.register(_destroy_process_group)


_MASTER_ADDR, _MASTER_PORT = "MASTER_ADDR", "MASTER_PORT"
RENDEZVOUS_TIMEOUT_VARIABLE = "SB3_EWMA_RENDEZVOUS_TIMEOUT"
"""The environment variable that sets :func:`rendezvous_timeout`, in seconds."""
DEFAULT_RENDEZVOUS_TIMEOUT_S = 300.0
"""How long a rank waits for the other ranks of its job to join, by default."""
_JOINED_KEY = "sb3_ewma/joined/{rank}"


class RendezvousTimeoutError(TimeoutError):
    """The ranks of a torchrun job did not all join within :func:`rendezvous_timeout`."""


def rendezvous_timeout() -> float:
    """
    How long (seconds) a rank waits for the other ranks of its job: ``SB3_EWMA_RENDEZVOUS_TIMEOUT``, by default
    :data:`DEFAULT_RENDEZVOUS_TIMEOUT_S`.

    :raise ValueError: the variable is not a positive number
    """
    text = os.environ.get(RENDEZVOUS_TIMEOUT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_RENDEZVOUS_TIMEOUT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(
            f"{RENDEZVOUS_TIMEOUT_VARIABLE}={text!r}: must be a number of seconds > 0 (how long a rank waits for the other "
            f"ranks of its job to join; default {DEFAULT_RENDEZVOUS_TIMEOUT_S:g})"
        )
    return seconds


def _rendezvous_advice(timeout: float) -> str:
    return (
        f"Start every rank of the job (torchrun starts them all: torchrun --nproc-per-node N, and on each machine of a "
        f"multi-node job), with the same MASTER_ADDR and MASTER_PORT; {RENDEZVOUS_TIMEOUT_VARIABLE} sets how long a rank "
        f"waits ({timeout:g} s now)"
    )


def rendezvous(rank: int, world_size: int, timeout: float) -> Store:
    """
    The store of torchrun's environment (``MASTER_ADDR``, ``MASTER_PORT``), as torch's ``env://`` rendezvous makes it,
    then a roll call: each rank waits at most ``timeout`` seconds for the others, else raises
    :class:`RendezvousTimeoutError` naming the ranks missing and the address.

    :param rank: this process's rank (``RANK``)
    :param world_size: the number of ranks (``WORLD_SIZE``)
    :param timeout: seconds
    :return: the store, for ``torch.distributed.init_process_group(store=...)``
    """
    host, port = os.environ[_MASTER_ADDR], int(os.environ[_MASTER_PORT])
    address = f"{host}:{port}"
    wait = timedelta(seconds=timeout)
    try:
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True):
            # torchrun's agent hosts the store (torch.distributed.rendezvous._create_c10d_store does the same)
            attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
            store: Store = PrefixStore(f"/worker/attempt_{attempt}", TCPStore(host, port, world_size, False, timeout=wait))
        else:
            store = TCPStore(host, port, world_size, rank == 0, timeout=wait, wait_for_workers=False, multi_tenant=True)
    except (RuntimeError, OSError) as error:
        if rank == 0:
            raise
        raise RendezvousTimeoutError(
            f"rank {rank} of {world_size}: no rendezvous at {address} within {timeout:g} s (rank 0 hosts it, and has "
            f"not started, or the address is not this job's): missing rank 0 at least. {_rendezvous_advice(timeout)}. "
            f"({type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''})"
        ) from None
    keys = [_JOINED_KEY.format(rank=other) for other in range(world_size)]
    store.set(keys[rank], "1")
    try:
        store.wait(keys, wait)
    except (RuntimeError, OSError):
        try:
            missing = [other for other in range(world_size) if not store.check([keys[other]])]
        except (RuntimeError, OSError):
            missing = []
        names = ", ".join(str(other) for other in missing) if missing else "unknown (the rendezvous host went away)"
        raise RendezvousTimeoutError(
            f"rank {rank} of {world_size}: rank(s) {names} did not join the rendezvous at {address} within {timeout:g} "
            f"s. {_rendezvous_advice(timeout)}."
        ) from None
    # the store serves the process group from now on, with torch's own timeout for its collectives' setup
    store.set_timeout(dist.default_pg_timeout)
    return store


def _destroy_process_group() -> None:
    """At exit: destroy the default process group that :func:`init_process_group` created, if it still exists."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def join_torchrun(device: th.device | str = "auto") -> tuple[int, int]:
    """
    Under torchrun (``WORLD_SIZE > 1``), join (or create) the default process group now, so that a script can agree
    on things before building its model.

    :param device: the model's device: it picks this rank's GPU and the backend (:func:`process_group_backend`)
    :return: this process's rank and the world size ((0, 1) without torchrun)
    """
    if not wants_data_parallel(None):
        return 0, 1
    init_process_group(th.device(data_parallel_device(device, None)))
    return dist.get_rank(), dist.get_world_size()


def broadcast_from_rank0(value: Any) -> Any:
    """Rank 0's ``value`` (picklable) on every rank; ``value`` itself without a process group of several ranks."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


# per-rank hyperparameters that count samples (the global value is world_size times the per-rank one)
PER_RANK_SAMPLE_COUNTS = ("n_envs", "batch_size", "aux_batch_size")


def per_rank_hyperparams(hyperparams: dict[str, Any], world_size: int) -> dict[str, Any]:
    """
    Split a hyperparameter entry written for one process into the entry of each of ``world_size`` ranks that together
    behave like it: ``n_envs``, ``batch_size`` and ``aux_batch_size`` divided by ``world_size``.

    :raise ValueError: when one of them is not divisible by ``world_size``
    """
    split = dict(hyperparams)
    for key in PER_RANK_SAMPLE_COUNTS:
        if key not in split or split[key] is None:
            continue
        value = int(split[key])
        if value % world_size != 0:
            raise ValueError(
                f"{key}={value} (for all ranks together) must be divisible by the world size {world_size}: choose a total "
                f"number of environments (--scale-n-envs) that makes {', '.join(PER_RANK_SAMPLE_COUNTS)} divisible"
            )
        split[key] = value // world_size
    if split.get("aux_micro_batch_size") is not None and "aux_batch_size" in split:
        split["aux_micro_batch_size"] = min(int(split["aux_micro_batch_size"]), int(split["aux_batch_size"]))
    return split


@contextmanager
def quiet_unless_rank0() -> Iterator[None]:
    """Under torchrun, send the standard output of ranks other than 0 to nowhere for the duration of the block."""
    if current_rank() == 0:
        yield
        return
    with open(os.devnull, "w") as devnull, redirect_stdout(devnull):
        yield
