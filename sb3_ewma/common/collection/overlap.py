"""
Overlapped (asynchronous) rollouts: the next rollout is collected by a collector (a thread, or a forked process), with
a snapshot of the parameters, while the model trains on the previous one (one iteration of staleness). They plug into
SB3's own ``learn`` loop at its ``collect_rollouts`` (:class:`OverlappedRollouts`). See :ref:`async_rollouts`.
"""

import numpy as np
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnv

from sb3_ewma.common.collection.process import ProcessRolloutCollector, check_forkable_env, check_process_collector
from sb3_ewma.common.collection.rollout import CollectingAlgorithm
from sb3_ewma.common.collection.thread import RolloutCollector


def check_async_rollouts(async_rollouts: object) -> None:
    """Raise a ``ValueError`` for an ``async_rollouts`` that is not off, a collector thread or a collector process."""
    if not (isinstance(async_rollouts, (bool, np.bool_)) or async_rollouts in ("thread", "process")):
        raise ValueError(
            "async_rollouts must be False, True (a collector thread), 'thread' or 'process' (a collector process), "
            f"got {async_rollouts!r}"
        )


def rollout_collector_kind(async_rollouts: object) -> str | None:
    """``"thread"``, ``"process"`` or ``None`` (no overlap) for a valid ``async_rollouts``."""
    if not async_rollouts:
        return None
    return "process" if async_rollouts == "process" else "thread"


def rollout_settings(async_rollouts: bool | str, env: VecEnv | None) -> tuple[bool, str]:
    """
    For an algorithm's constructor: ``(async_rollouts, rollout_collector)``, a bool and ``"thread"`` or ``"process"``,
    after checking that a collector process can fork here and copy ``env``.
    """
    kind = rollout_collector_kind(async_rollouts)
    if kind == "process":
        check_process_collector()
        check_forkable_env(env)
    return kind is not None, kind or "thread"


class OverlappedRollouts:
    """
    The rollouts of an algorithm with ``async_rollouts``, as its ``collect_rollouts`` gets them in SB3's ``learn``
    loop: :meth:`collect` hands off the rollout collected during the last ``train()``, :meth:`start_next` starts the
    next one, :meth:`end` ends the collector when ``learn`` ends.

    :param kind: ``"thread"`` or ``"process"`` (:func:`rollout_settings`)
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.collector: RolloutCollector | None = None
        self._buffers: tuple[RolloutBuffer, RolloutBuffer] | None = None  # trained on, being collected into

    def collect(self, algorithm: CollectingAlgorithm, env: VecEnv, callback: BaseCallback) -> tuple[bool, RolloutBuffer]:
        """
        The rollout to train on next: the one collected in the background, replayed to the callbacks (at the first call
        of a ``learn`` call, one collected now into ``algorithm.rollout_buffer``), and the collection times logged.

        :return: False if a callback stopped training, and the buffer that holds the rollout
        """
        if self.collector is None:
            self.collector = self._new_collector(algorithm, callback)
            self._buffers = (algorithm.rollout_buffer, algorithm._make_rollout_buffer())
            continue_training = self.collector.collect(env, algorithm.rollout_buffer)
        else:
            assert self._buffers is not None
            self._buffers = (self._buffers[1], self._buffers[0])
            continue_training = self.collector.hand_off()
        algorithm.logger.record("time/collection_s", self.collector.collection_seconds)
        algorithm.logger.record("time/collection_wait_s", self.collector.wait_seconds)
        return continue_training, self._buffers[0]

    def _new_collector(self, algorithm: CollectingAlgorithm, callback: BaseCallback) -> RolloutCollector:
        if self.kind == "process":
            return ProcessRolloutCollector(algorithm, callback)
        return RolloutCollector(algorithm, callback)

    def start_next(self, env: VecEnv) -> None:
        """Start collecting the next rollout (with a snapshot of the parameters now) while the caller trains."""
        assert self.collector is not None and self._buffers is not None, "collect() first"
        self.collector.start(env, self._buffers[1])

    def end(self, failed: bool) -> bool:
        """
        At the end of ``learn``: close the collector, or stop it after an exception (``failed``).

        :return: whether a background collection was abandoned (the environments may be left mid-rollout)
        """
        collector, self.collector, self._buffers = self.collector, None, None
        if collector is None:
            return False
        abandoned = collector.running or collector.collection_failed
        collector.stop() if failed else collector.close()
        return abandoned
