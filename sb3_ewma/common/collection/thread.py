"""
The collector of overlapped rollouts on a thread: :class:`RolloutCollector` collects one rollout at a time with a
snapshot of the policy's parameters, on a thread of its own or on the caller's (see
:mod:`sb3_ewma.common.collection.overlap` for which thread does what).
"""

import threading
import time
from typing import Any

import torch as th
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.vec_env import VecEnv

from sb3_ewma.common.collection.rollout import CollectingAlgorithm

COLLECTOR_STOP_TIMEOUT_S = 60.0
"""How long the main thread waits, after an exception, for the collector to stop at its next environment step."""


def parameter_tensors(module: th.nn.Module) -> list[th.Tensor]:
    """The parameters and buffers of a module, in a fixed order (the same for two modules of one structure)."""
    return [*module.parameters(), *module.buffers()]


@th.no_grad()
def copy_tensors(destinations: list[th.Tensor], sources: list[th.Tensor]) -> None:
    """
    Copy each source tensor into its destination: in one fused call when all are on one device, else one by one
    (a copy from a GPU into CPU memory returns once the values are there).
    """
    if all(destination.device == source.device for destination, source in zip(destinations, sources)):
        # torch's foreach ops (documented, beta) have no public name; the public copy_ is one call per tensor
        th._foreach_copy_(destinations, sources)  # pyright: ignore[reportPrivateImportUsage]
        return
    for destination, source in zip(destinations, sources):
        destination.copy_(source)


class _CollectorCallback(BaseCallback):
    """
    The user's callback as the collector sees it: ``on_step`` returns False once a stop is requested (the rollout
    ends at the next step), and ``on_rollout_end`` is left to the main thread, at the hand-off.
    """

    def __init__(self, callback: BaseCallback, stop: threading.Event) -> None:
        super().__init__()
        self.callback = callback
        self.stop = stop

    def update_locals(self, locals_: dict[str, Any]) -> None:
        self.callback.update_locals(locals_)

    def on_rollout_start(self) -> None:
        self.callback.on_rollout_start()

    def on_step(self) -> bool:
        return not self.stop.is_set() and self.callback.on_step()

    def on_rollout_end(self) -> None:
        """Called by the main thread at the hand-off instead (see :meth:`RolloutCollector.hand_off`)."""

    def _on_step(self) -> bool:
        return True


class RolloutCollector:
    """
    Collects rollouts for ``algorithm`` with a snapshot of its policy, on a thread of its own (:meth:`start`) or on
    the caller's (:meth:`collect`). One rollout at a time; :meth:`hand_off` waits for it and re-raises, on the
    caller's thread, any exception the collection raised (with its traceback).

    :param algorithm: the algorithm (a :class:`~sb3_ewma.common.decoupled.algorithm.DecoupledAlgorithm`) whose
        environment and state the rollouts advance
    :param callback: the ``learn`` call's callback
    :param acting_device: the device of the behavior policy (default: the algorithm's); the parameters are copied
        there from the algorithm's device at each snapshot
    """

    def __init__(
        self, algorithm: CollectingAlgorithm, callback: BaseCallback, acting_device: th.device | str | None = None
    ) -> None:
        self.algorithm = algorithm
        self.callback = callback
        self.stop_requested = threading.Event()
        self.collector_callback = _CollectorCallback(callback, self.stop_requested)
        self.acting_device = th.device(algorithm.device if acting_device is None else acting_device)
        with th.random.fork_rng(devices=[]):  # its random initialization, overwritten, must not advance the RNG
            self.behavior_policy: BasePolicy = algorithm._build_policy().to(self.acting_device)
        if hasattr(self.behavior_policy, "optimizer"):
            self.behavior_policy.optimizer = None  # type: ignore[assignment]  # never optimized: no reference kept
        self.behavior_policy.set_training_mode(False)
        self._behavior_tensors = parameter_tensors(self.behavior_policy)
        self._policy_tensors = parameter_tensors(algorithm.policy)
        self._thread: threading.Thread | None = None
        self._result: bool = False
        self._error: BaseException | None = None
        self.collection_seconds = 0.0  # of the last rollout, on whichever thread collected it
        self.wait_seconds = 0.0  # the main thread's wait for the last rollout at the hand-off

    @property
    def running(self) -> bool:
        return self._thread is not None

    def snapshot(self) -> None:
        """Copy the policy's current parameters into the behavior policy (across devices when they differ)."""
        copy_tensors(self._behavior_tensors, self._policy_tensors)

    def _collect(self, env: VecEnv, rollout_buffer: RolloutBuffer, policy: BasePolicy | None = None) -> None:
        """Collect one rollout acted by ``policy`` (default: the behavior policy), keeping its result or exception."""
        start = time.perf_counter()
        try:
            self._result = self.algorithm._collect_rollout_with(
                self.behavior_policy if policy is None else policy,
                env,
                self.collector_callback,
                rollout_buffer,
                self.algorithm.n_steps,
            )
        except BaseException as error:  # re-raised on the main thread by hand_off
            self._error = error
        self.collection_seconds = time.perf_counter() - start

    def collect(self, env: VecEnv, rollout_buffer: RolloutBuffer) -> bool:
        """Collect one rollout on the caller's thread with the current parameters; returns :meth:`hand_off`'s result."""
        self.snapshot()
        self._collect(env, rollout_buffer)
        return self.hand_off()

    def start(self, env: VecEnv, rollout_buffer: RolloutBuffer) -> None:
        """Snapshot the current parameters and start collecting one rollout into ``rollout_buffer`` on a thread."""
        assert self._thread is None, "one rollout at a time"
        self.snapshot()
        self._thread = threading.Thread(
            target=self._collect, args=(env, rollout_buffer), name="rollout-collector", daemon=True
        )
        self._thread.start()

    def hand_off(self) -> bool:
        """
        Wait for the rollout being collected (if any), re-raise its exception, then call the callbacks'
        ``on_rollout_end`` on this thread. Returns False if a callback stopped the rollout early (SB3's meaning: stop
        training), True otherwise.
        """
        start = time.perf_counter()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.wait_seconds = time.perf_counter() - start
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self._result:
            self.callback.on_rollout_end()
        return self._result

    def stop(self, timeout: float = COLLECTOR_STOP_TIMEOUT_S) -> None:
        """After an exception on the main thread: end the rollout at its next step and wait for the thread."""
        self.stop_requested.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def close(self) -> None:
        """At the end of ``learn``: nothing to release for a thread (it ended at its last hand-off)."""
