"""
Overlapped rollouts with the collector in a process of its own (``async_rollouts="process"``).

A child forked with ``os.fork`` (it inherits the environments and the model) steps the environments with a CPU copy
of the behavior policy, whose parameters the parent copies into shared memory at each hand-off, and sends each rollout
back through a pipe; the parent replays it to the callbacks. It needs ``fork`` (Linux, macOS) and environments that
step on the calling thread (:func:`check_forkable_env`). See :ref:`async_rollouts`.
"""

import contextlib
import faulthandler
import gc
import multiprocessing
import os
import pickle
import signal
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any, NoReturn

import numpy as np
import torch as th
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnv, VecNormalize, unwrap_vec_normalize

from sb3_ewma.common.collection.rollout import CollectingAlgorithm, tensors_to
from sb3_ewma.common.collection.thread import RolloutCollector, StepRecorder

POLL_INTERVAL_S = 1.0
"""How often the parent, waiting for a rollout, checks that the child is alive."""
STOP_TIMEOUT_S = 10.0
"""How long the parent waits for the child to exit before it terminates it."""
STALL_TIMEOUT_S = 120.0
"""How long the child may use no CPU time, while the parent waits for its rollout, before it is killed (Linux only)."""
STACK_DUMP_SIGNAL = signal.SIGUSR1
"""The signal on which the child prints the Python stack of its threads to its stderr (sent before killing it)."""
STACK_DUMP_WAIT_S = 1.0
"""How long the parent gives the stuck child to print its stack."""
RUNNING_STATISTICS = ("obs_rms", "ret_rms")
"""The ``VecNormalize`` attributes that the collector process updates and sends back."""


def check_process_collector() -> None:
    """Raise a ``ValueError`` when ``async_rollouts="process"`` cannot work here (a platform that cannot fork)."""
    if not hasattr(os, "fork") or "fork" not in multiprocessing.get_all_start_methods():
        raise ValueError(
            "async_rollouts='process' forks the collector, which this platform cannot do: use async_rollouts=True (a thread)"
        )


COLLECTOR_DEVICE = th.device("cpu")
"""Where the collector process's behavior policy acts (a forked process cannot use CUDA)."""


FORK_UNSAFE_ENV_MODULES = ("procgen", "gym3", "envpool", "sb3_ewma.envs.procgen")
"""Environments that step in threads of their own, which a forked process does not have: its first step hangs."""


def innermost_vec_env(env: VecEnv) -> VecEnv:
    """The ``VecEnv`` under every ``VecEnvWrapper`` (``VecNormalize``, ``VecMonitor``, ...)."""
    inner = getattr(env, "venv", None)
    while isinstance(inner, VecEnv):
        env = inner
        inner = getattr(env, "venv", None)
    return env


def check_forkable_env(env: VecEnv | None) -> None:
    """
    Raise a ``ValueError`` for ``async_rollouts="process"`` with an environment that steps in threads of its own
    (Procgen, gym3, EnvPool), which a forked child does not have.
    """
    if env is None:
        return
    inner = innermost_vec_env(env)
    module = type(inner).__module__
    # this package's Procgen environments step on the calling thread with procgen's num_threads=0
    single_threaded = getattr(inner, "procgen_kwargs", {}).get("num_threads", None) == 0
    if module.startswith(FORK_UNSAFE_ENV_MODULES) and not single_threaded:
        raise ValueError(
            f"async_rollouts='process' forks the environments, and {type(inner).__name__} ({module}) steps in threads "
            "that a forked process does not have: use async_rollouts=True (a collector thread; these environments "
            "release the GIL while they step, so a thread overlaps with training), or for Procgen num_threads=0"
        )


def buffer_arrays(buffer: RolloutBuffer) -> dict[str, Any]:
    """What a filled rollout buffer holds: its arrays (dicts of arrays for dict observations) and position."""
    arrays = {
        name: value
        for name, value in vars(buffer).items()
        if isinstance(value, np.ndarray)
        or (isinstance(value, dict) and value and all(isinstance(item, np.ndarray) for item in value.values()))
    }
    return {**arrays, "pos": buffer.pos, "full": buffer.full}


def vec_normalize_statistics(env: VecEnv) -> dict[str, Any] | None:
    """The running statistics of the ``VecNormalize`` in ``env`` (None without one)."""
    vec_normalize = unwrap_vec_normalize(env)
    if vec_normalize is None:
        return None
    # a VecNormalize without observation (or return) normalization has no obs_rms (ret_rms)
    return {name: value for name, value in vars(vec_normalize).items() if name in RUNNING_STATISTICS}


def set_vec_normalize_statistics(env: VecEnv, statistics: dict[str, Any] | None) -> None:
    vec_normalize: VecNormalize | None = unwrap_vec_normalize(env)
    if vec_normalize is not None and statistics is not None:
        for name, value in statistics.items():
            setattr(vec_normalize, name, value)


def cpu_seconds(pid: int) -> float | None:
    """The CPU time a process has used so far (user and system), from ``/proc``; None where there is no ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            fields = file.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime and stime, in clock ticks


class CollectorError(Exception):
    """The traceback, as text, of an exception raised in the collector process (chained to the exception itself)."""


def _collector_main(
    collector: "ProcessRolloutCollector", env: VecEnv, buffer: RolloutBuffer, connection: Connection, collect_garbage: bool
) -> None:
    """
    The child: collect one rollout per go-ahead until told to stop (or the parent goes away). ``collect_garbage``:
    whether the parent had the garbage collector on (it forks with it off).
    """
    # never collect the objects inherited from the parent: a finalizer of the parent's garbage may wait on threads of
    # the parent that this process does not have (the parent forked with the collector off until this line)
    gc.freeze()
    if collect_garbage:
        gc.enable()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it then stops this process
    faulthandler.register(STACK_DUMP_SIGNAL, all_threads=True)  # where it hangs, printed before the watchdog kills it
    th.set_num_threads(1)  # one core for the collection; the parent trains on the others
    algorithm = collector.algorithm  # this process's copy
    recorder = StepRecorder()
    while True:
        try:
            command, statistics = connection.recv()
        except EOFError:
            return
        if command != "collect":
            return
        start = time.perf_counter()
        try:
            set_vec_normalize_statistics(env, statistics)
            # the recorder is a BaseCallback by duck typing
            algorithm._collect_rollout_with(collector.behavior_policy, env, recorder, buffer, algorithm.n_steps)
            result = {
                "buffer": buffer_arrays(buffer),
                "steps": recorder.steps,
                "names": recorder.names,
                # _last_obs, _last_episode_starts (and a recurrent policy's _last_lstm_states)
                "collection_state": {name: getattr(algorithm, name) for name in algorithm._collection_state_names},
                "vec_normalize": vec_normalize_statistics(env),
                "seconds": time.perf_counter() - start,
            }
            connection.send(("rollout", result))
        except BaseException as error:  # sent to the parent, which raises it
            text = traceback.format_exc()
            try:
                # an exception that pickles but cannot be rebuilt from its args (a constructor of two parameters) would
                # fail in the parent's recv: tried here
                pickle.loads(pickle.dumps(error))
                connection.send(("error", (error, text)))
            except Exception:  # the exception does not pickle, or not back: its type and message
                connection.send(("error", (RuntimeError(f"{type(error).__name__}: {error}"), text)))
            return


class ProcessRolloutCollector(RolloutCollector):
    """
    :class:`RolloutCollector` with :meth:`start` / :meth:`hand_off` in a forked child process, forked at the first
    :meth:`start` and ended in :meth:`close`; :meth:`collect` (the first rollout of a ``learn`` call) runs here.
    """

    def __init__(self, algorithm: CollectingAlgorithm, callback: BaseCallback) -> None:
        check_process_collector()
        check_forkable_env(algorithm.env)
        super().__init__(algorithm, callback, acting_device=COLLECTOR_DEVICE)
        # the snapshot, written here in place, read by the child
        self.behavior_policy.share_memory()
        self.pid: int | None = None  # the child's
        self._exit_status: int | None = None
        self._connection: Connection | None = None
        self._env: VecEnv | None = None
        self._buffer: RolloutBuffer | None = None

    @property
    def running(self) -> bool:
        return self._buffer is not None

    def _fork(self, env: VecEnv) -> None:
        """
        Fork the child, which collects into its own rollout buffer until told to stop. The state carried from rollout
        to rollout (LSTM states) goes to the CPU first: the child must not touch CUDA.
        """
        for name in self.algorithm._collection_state_names:
            setattr(self.algorithm, name, tensors_to(getattr(self.algorithm, name), COLLECTOR_DEVICE))
        parent_connection, child_connection = multiprocessing.Pipe()
        buffer = self.algorithm._make_rollout_buffer()
        # no garbage collection in the child before it freezes the parent's objects (see _collector_main)
        collect_garbage = gc.isenabled()
        gc.disable()
        try:
            pid = os.fork()
        except BaseException:
            if collect_garbage:
                gc.enable()
            raise
        if pid == 0:  # the child: never returns into the caller's code
            status = 1
            try:
                parent_connection.close()
                _collector_main(self, env, buffer, child_connection, collect_garbage)
                status = 0
            finally:
                os._exit(status)
        if collect_garbage:
            gc.enable()
        child_connection.close()
        self.pid, self._exit_status, self._connection, self._env = pid, None, parent_connection, env

    def _child_exited(self) -> bool:
        """Whether the child has exited (reaping it); its exit status is then in ``_exit_status``."""
        if self.pid is None or self._exit_status is not None:
            return True
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid == 0:
            return False
        self._exit_status = os.waitstatus_to_exitcode(status)
        return True

    def start(self, env: VecEnv, rollout_buffer: RolloutBuffer) -> None:
        assert self._buffer is None, "one rollout at a time"
        self.snapshot()
        if self.pid is None:
            self._fork(env)
        assert self._connection is not None
        try:
            self._connection.send(("collect", vec_normalize_statistics(env)))
        except OSError:  # BrokenPipeError, ConnectionResetError: the child is gone
            self._raise_child_died()
        self._buffer = rollout_buffer

    def _raise_child_died(self) -> NoReturn:
        """Raise the error of a child that died (killed, or crashed outside its error reporting)."""
        wait_for_exit = time.monotonic() + STOP_TIMEOUT_S
        while not self._child_exited() and time.monotonic() < wait_for_exit:
            time.sleep(0.05)
        raise RuntimeError(f"the rollout collector process died (exit status {self._exit_status})") from None

    def _receive(self) -> tuple[str, Any]:
        assert self._connection is not None and self.pid is not None
        used, progress = cpu_seconds(self.pid), time.monotonic()
        while not self._connection.poll(POLL_INTERVAL_S):
            if self._child_exited():
                raise RuntimeError(f"the rollout collector process died (exit status {self._exit_status})")
            now, latest = time.monotonic(), cpu_seconds(self.pid)
            if latest != used:
                used, progress = latest, now
            elif latest is not None and now - progress > STALL_TIMEOUT_S:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, STACK_DUMP_SIGNAL)  # its Python stack on stderr
                    time.sleep(STACK_DUMP_WAIT_S)
                self.stop()
                raise RuntimeError(
                    f"the rollout collector process used no CPU time for {STALL_TIMEOUT_S:.0f} s without sending its "
                    "rollout and was killed (where it waited: its stack, printed on stderr before): an environment "
                    "that steps in threads of its own waits forever in a forked process; use async_rollouts=True (a "
                    "collector thread)"
                )
        try:
            return self._connection.recv()
        except (EOFError, OSError):
            self._raise_child_died()

    def hand_off(self) -> bool:
        """
        Wait for the child's rollout (re-raising its exception), put it into the buffer given to :meth:`start` and
        replay it to the callbacks on this thread.

        :return: False if a callback returned False (stop training)
        """
        assert self._buffer is not None, "hand_off follows start"
        start = time.perf_counter()
        buffer, self._buffer = self._buffer, None
        try:
            kind, payload = self._receive()
            if kind == "error":
                error, text = payload
                raise error from CollectorError(f"in the rollout collector process:\n{text}")
        except BaseException:
            self.collection_failed = True
            raise
        self.wait_seconds = time.perf_counter() - start
        algorithm = self.algorithm
        vars(buffer).update(payload["buffer"])
        buffer.generator_ready = False
        for name, value in payload["collection_state"].items():
            setattr(algorithm, name, value)
        assert self._env is not None
        set_vec_normalize_statistics(self._env, payload["vec_normalize"])
        self.collection_seconds = payload["seconds"]
        return self._replay(payload["steps"], payload["names"], buffer)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """After an exception here: end the child now (killed at once if it is collecting)."""
        collecting, self._buffer = self._buffer is not None, None
        self.close(0.0 if collecting else timeout)

    def close(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Tell the child to exit and wait for it (kill it if it does not); this process owns the env again."""
        if self.pid is None:
            return
        assert self._connection is not None
        with contextlib.suppress(OSError):  # the child may be gone already
            self._connection.send(("stop", None))
        self._connection.close()
        deadline = time.monotonic() + timeout
        while not self._child_exited() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self._child_exited():
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        self.pid, self._connection = None, None
        # the environments advanced in the child: this process's copies are as they were at the fork
        self.algorithm._last_obs = None
