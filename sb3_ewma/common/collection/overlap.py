"""
Overlapped (asynchronous) rollouts: the next rollout is collected on a collector thread, by a snapshot of the
parameters, while the main thread trains on the previous one.

Iteration ``k`` trains on the rollout collected by the parameters of the start of iteration ``k - 1`` (one iteration
of staleness, which the decoupled objective is built for: Hilton et al. 2021, section 5.1), while rollout ``k + 1``
is collected by a copy of the parameters at the start of iteration ``k``. The first rollout of every ``learn`` call
is collected before any training (fresh data), so the first update is the synchronous one.

Threads (not a process): torch releases the GIL in its kernels and C++ environments (Procgen) release it in
``step``, so collection and training overlap where those dominate; Python-heavy loops (CartPole with a small MLP)
mostly take turns on the GIL (the documentation's benchmarks page has the throughput figures).

Which thread does what:

- collector thread: ``env.step`` and the behavior policy's forward passes, ``num_timesteps``, the episode-info
  buffers, ``_last_obs``, and the callbacks' ``on_rollout_start`` and ``on_step`` (with their ``locals``);
- main thread: ``train()`` (with its logger records), and at the hand-off (the collector joined, the main thread owns
  the environments): the callbacks' ``on_rollout_end``, ``dump_logs``, the progress schedule, the snapshot copy.

``save()`` and ``predict()`` of the model wait for a running ``train()`` to end, so a checkpoint or an evaluation
made from ``on_step`` (``CheckpointCallback``, ``EvalCallback``) sees the parameters of an iteration boundary.
"""

import threading
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.type_aliases import MaybeCallback

from sb3_ewma.common.collection.process import ProcessRolloutCollector, check_forkable_env, check_process_collector
from sb3_ewma.common.collection.thread import RolloutCollector
from sb3_ewma.common.host import HostAlgorithm

ASYNC_ROLLOUTS = (False, True, "thread", "process")
"""The values of ``async_rollouts``: off, a collector thread (``True`` or ``"thread"``) or a collector process."""


def check_async_rollouts(async_rollouts: object, staleness: int = 0) -> None:
    """Raise a ``ValueError`` for an ``async_rollouts`` not in :data:`ASYNC_ROLLOUTS` or combined with staleness."""
    if not (isinstance(async_rollouts, (bool, np.bool_)) or async_rollouts in ("thread", "process")):
        raise ValueError(
            "async_rollouts must be False, True (a collector thread), 'thread' or 'process' (a collector process), "
            f"got {async_rollouts!r}"
        )
    if async_rollouts and staleness > 0:
        raise ValueError(
            f"async_rollouts={async_rollouts!r} trains on data one iteration stale already; it needs staleness=0, "
            f"got {staleness}"
        )


def rollout_collector_kind(async_rollouts: object) -> str | None:
    """``"thread"``, ``"process"`` or ``None`` (no overlap) for a valid ``async_rollouts``."""
    if not async_rollouts:
        return None
    return "process" if async_rollouts == "process" else "thread"


class AsyncRolloutMixin(HostAlgorithm):
    """
    Mixed into every algorithm (after data-parallel training in the bases): with ``async_rollouts=True``, ``learn``
    overlaps the collection of the next rollout with training on the current one (see
    :mod:`sb3_ewma.common.collection.overlap`). The algorithm provides ``async_rollouts``, ``_build_policy`` and the
    rollout loop (:class:`~sb3_ewma.common.collection.rollout.RolloutCollectionMixin`).
    """

    async_rollouts: bool
    rollout_collector: str

    def _set_async_rollouts(self, async_rollouts: bool | str) -> None:
        """Set ``async_rollouts`` (a bool) and ``rollout_collector`` (``"thread"`` or ``"process"``), checked."""

        kind = rollout_collector_kind(async_rollouts)
        if kind == "process":
            check_process_collector()
            check_forkable_env(self.env)  # checked again by learn() (after set_env)
        self.async_rollouts = kind is not None
        self.rollout_collector = kind or "thread"

    @property
    def _rollout_staleness(self) -> int:
        """Iterations between the parameters that collected the data trained on and those being trained."""
        return int(getattr(self, "staleness", 0)) + int(self.async_rollouts)

    @property
    def _training_lock(self) -> threading.RLock:
        """Held by the main thread during ``train()`` under ``async_rollouts``; ``save`` and ``predict`` take it."""
        lock = self.__dict__.get("_train_lock")
        if lock is None:
            lock = self.__dict__["_train_lock"] = threading.RLock()
        return lock

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_train_lock"]

    def save(self, *args: Any, **kwargs: Any) -> None:
        with self._training_lock:
            super().save(*args, **kwargs)

    def predict(self, *args: Any, **kwargs: Any) -> Any:
        with self._training_lock:
            return super().predict(*args, **kwargs)

    def learn(
        self,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str = "OnPolicyAlgorithm",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> Any:
        """
        The parent's ``learn`` (its arguments passed by name: ``MaskablePPO``'s has one more, ``use_masking``, which
        the algorithm hands to its rollout loop itself), or with ``async_rollouts`` its loop with overlapped rollouts.
        """
        if not self.async_rollouts:
            return super().learn(
                total_timesteps=total_timesteps,
                callback=callback,
                log_interval=log_interval,
                tb_log_name=tb_log_name,
                reset_num_timesteps=reset_num_timesteps,
                progress_bar=progress_bar,
            )
        return self._learn_async(total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar)

    def _learn_async(
        self,
        total_timesteps: int,
        callback: MaybeCallback,
        log_interval: int,
        tb_log_name: str,
        reset_num_timesteps: bool,
        progress_bar: bool,
    ) -> Any:
        """SB3's ``OnPolicyAlgorithm.learn`` loop with the next rollout collected during ``train()``."""
        algorithm: Any = self
        iteration = 0
        setup: tuple[int, BaseCallback] = algorithm._setup_learn(
            total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar
        )
        total_timesteps, learn_callback = setup
        learn_callback.on_training_start(locals(), globals())
        env = algorithm.env
        assert env is not None
        if getattr(self, "rollout_collector", "thread") == "process":
            collector: RolloutCollector = ProcessRolloutCollector(self, learn_callback)
        else:
            collector = RolloutCollector(self, learn_callback)
        training_buffer, next_buffer = self.rollout_buffer, self._make_rollout_buffer()
        try:
            continue_training = algorithm.num_timesteps < total_timesteps and algorithm._synchronize_iteration(
                collector.collect(env, training_buffer)
            )
            while continue_training:
                # the hand-off: the collector is joined, this thread owns the environments and the model
                iteration += 1
                self._on_hand_off(collector, iteration, total_timesteps, log_interval)
                collecting = algorithm.num_timesteps < total_timesteps
                if collecting:
                    collector.start(env, next_buffer)
                self.rollout_buffer = training_buffer
                with self._training_lock:
                    algorithm.train()
                if not collecting:
                    break
                # every rank's decision, episode statistics and VecNormalize pooled (data-parallel training)
                continue_training = algorithm._synchronize_iteration(collector.hand_off())
                training_buffer, next_buffer = next_buffer, training_buffer
        except BaseException:
            collector.stop()
            env.close()
            raise
        collector.close()
        learn_callback.on_training_end()
        return self

    def _on_hand_off(self, collector: RolloutCollector, iteration: int, total_timesteps: int, log_interval: int) -> None:
        """
        The one point of an iteration where no rollout is being collected: progress, logs (``dump_logs``), and the
        collection times of the rollout about to be trained on. Per-iteration synchronization belongs here.
        """
        algorithm: Any = self
        algorithm._update_current_progress_remaining(algorithm.num_timesteps, total_timesteps)
        algorithm.logger.record("time/collection_s", collector.collection_seconds)
        algorithm.logger.record("time/collection_wait_s", collector.wait_seconds)
        if log_interval is not None and iteration % log_interval == 0:
            assert algorithm.ep_info_buffer is not None
            algorithm.dump_logs(iteration)
