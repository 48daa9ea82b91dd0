"""
The collector of overlapped rollouts on a thread: :class:`RolloutCollector` collects one rollout at a time with a
snapshot of the policy's parameters on a thread of its own, and replays it to the callbacks at the hand-off.
"""

import threading
import time
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.vec_env import VecEnv

from sb3_ewma.common.collection.rollout import CollectingAlgorithm
from sb3_ewma.common.policies import policy_copy

COLLECTOR_STOP_TIMEOUT_S = 60.0
"""How long the main thread waits, after an exception, for the collector to stop at its next environment step."""


def parameter_tensors(module: th.nn.Module) -> list[th.Tensor]:
    """The parameters and buffers of a module, in a fixed order (the same for two modules of one structure)."""
    return [*module.parameters(), *module.buffers()]


@th.no_grad()
def copy_tensors(destinations: list[th.Tensor], sources: list[th.Tensor]) -> None:
    """Copy each source tensor into its destination (in one fused call when all are on one device)."""
    if all(destination.device == source.device for destination, source in zip(destinations, sources)):
        # torch's foreach ops (documented, beta) have no public name; the public copy_ is one call per tensor
        th._foreach_copy_(destinations, sources)  # pyright: ignore[reportPrivateImportUsage]
        return
    for destination, source in zip(destinations, sources):
        destination.copy_(source)


class StepRecorder:
    """
    Stands in for the callbacks while a collector collects a rollout: records each step's ``infos``, ``dones`` and
    ``rewards`` for the replay, and the names of the loop's variables. ``stop``, once set, ends the rollout.
    """

    def __init__(self, stop: threading.Event | None = None) -> None:
        self.steps: list[tuple[list[dict[str, Any]], np.ndarray, np.ndarray]] = []
        self.names: set[str] = set()
        self.stop = stop
        self._locals: dict[str, Any] = {}

    def on_rollout_start(self) -> None:
        self.steps, self.names = [], set()

    def update_locals(self, locals_: dict[str, Any]) -> None:
        self._locals = locals_
        self.names.update(locals_)

    def on_step(self) -> bool:
        self.steps.append((self._locals["infos"], self._locals["dones"].copy(), self._locals["rewards"].copy()))
        return self.stop is None or not self.stop.is_set()

    def on_rollout_end(self) -> None:
        self._locals = {}


class RolloutCollector:
    """
    Collects the rollouts of a ``learn`` call: the first on the caller's thread with the callbacks (:meth:`collect`),
    the others with a snapshot of the policy on a thread of their own (:meth:`start`), replayed to the callbacks and
    counters by :meth:`hand_off`. One rollout at a time.

    :param algorithm: the algorithm whose environment and state the rollouts advance
    :param callback: the ``learn`` call's callback
    :param acting_device: the device of the behavior policy (default: the algorithm's)
    """

    def __init__(
        self, algorithm: CollectingAlgorithm, callback: BaseCallback, acting_device: th.device | str | None = None
    ) -> None:
        self.algorithm = algorithm
        self.callback = callback
        self.stop_requested = threading.Event()
        self.acting_device = th.device(algorithm.device if acting_device is None else acting_device)
        self.behavior_policy: BasePolicy = policy_copy(algorithm.policy).to(self.acting_device)
        self._behavior_tensors = parameter_tensors(self.behavior_policy)
        self._policy_tensors = parameter_tensors(algorithm.policy)
        self._thread: threading.Thread | None = None
        self._env: VecEnv | None = None
        self._rollout_buffer: RolloutBuffer | None = None  # being collected into
        self._recorder = StepRecorder(self.stop_requested)
        self._error: BaseException | None = None
        self.collection_failed = False  # the last background collection raised (the environments left mid-rollout)
        self.collection_seconds = 0.0  # of the last rollout, on whichever thread collected it
        self.wait_seconds = 0.0  # the caller's wait for the last rollout at the hand-off

    @property
    def running(self) -> bool:
        return self._thread is not None

    def snapshot(self) -> None:
        """Copy the policy's current parameters into the behavior policy (across devices when they differ)."""
        copy_tensors(self._behavior_tensors, self._policy_tensors)

    def collect(self, env: VecEnv, rollout_buffer: RolloutBuffer) -> bool:
        """
        Collect the first rollout of a ``learn`` call on the caller's thread, acted by the policy itself, callbacks
        included.

        :return: False if a callback stopped it
        """
        start = time.perf_counter()
        algorithm = self.algorithm
        result = algorithm._collect_rollout_with(algorithm.policy, env, self.callback, rollout_buffer, algorithm.n_steps)
        self.collection_seconds, self.wait_seconds = time.perf_counter() - start, 0.0
        return result

    def _collect_recorded(self, env: VecEnv, rollout_buffer: RolloutBuffer) -> None:
        """The collector thread: one rollout by the behavior policy, its steps recorded, its exception kept."""
        start = time.perf_counter()
        try:
            self.algorithm._collect_rollout_with(
                self.behavior_policy, env, self._recorder, rollout_buffer, self.algorithm.n_steps, published=False
            )
        except BaseException as error:  # re-raised on the caller's thread by hand_off
            self._error = error
        self.collection_seconds = time.perf_counter() - start

    def start(self, env: VecEnv, rollout_buffer: RolloutBuffer) -> None:
        """Snapshot the current parameters and start collecting one rollout into ``rollout_buffer`` on a thread."""
        assert self._thread is None, "one rollout at a time"
        self.snapshot()
        self._env, self._rollout_buffer = env, rollout_buffer
        self._thread = threading.Thread(
            target=self._collect_recorded, args=(env, rollout_buffer), name="rollout-collector", daemon=True
        )
        self._thread.start()

    def hand_off(self) -> bool:
        """
        Wait for the rollout being collected, re-raise its exception, then replay it to the callbacks and the counters
        on this thread.

        :return: False if a callback returned False (stop training)
        """
        start = time.perf_counter()
        assert self._thread is not None, "hand_off follows start"
        self._thread.join()
        self._thread = None
        self.wait_seconds = time.perf_counter() - start
        if self._error is not None:
            error, self._error = self._error, None
            self.collection_failed = True
            raise error
        return self._replay(self._recorder.steps, self._recorder.names, self._rollout_buffer)

    def _replay(
        self, steps: list[tuple[list[dict[str, Any]], np.ndarray, np.ndarray]], names: set[str], rollout_buffer: Any
    ) -> bool:
        """
        What the rollout loop does with the callbacks and the counters, for a rollout collected elsewhere. The loop's
        arguments are given as the loop had them (MaskablePPO's ``use_masking`` too); its other variables (``names``),
        not recorded, are None in ``locals`` (else they would keep earlier values).
        """
        algorithm, callback = self.algorithm, self.callback
        loop: dict[str, Any] = {name: None for name in names}
        loop.update(self=algorithm, env=self._env, callback=callback, rollout_buffer=rollout_buffer)
        loop.update(n_rollout_steps=algorithm.n_steps, **algorithm._rollout_loop_kwargs())
        callback.on_rollout_start()
        for n_steps, (infos, dones, rewards) in enumerate(steps):
            algorithm.num_timesteps += algorithm._timesteps_per_env_step
            callback.update_locals({**loop, "infos": infos, "dones": dones, "rewards": rewards, "n_steps": n_steps})
            if not callback.on_step():
                return False
            algorithm._update_info_buffer(infos, dones)
        callback.update_locals({"n_steps": len(steps)})  # as the loop's last update, before on_rollout_end
        callback.on_rollout_end()
        return True

    def stop(self, timeout: float = COLLECTOR_STOP_TIMEOUT_S) -> None:
        """After an exception on the caller's thread: end the rollout at its next step and wait for the thread."""
        self.stop_requested.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def close(self) -> None:
        """At the end of ``learn``: nothing to release for a thread (it ended at its last hand-off)."""
