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
from types import TracebackType
from typing import Any

import numpy as np
from stable_baselines3.common.type_aliases import MaybeCallback
from stable_baselines3.common.vec_env import VecEnv

from sb3_ewma.common.collection.process import ProcessRolloutCollector, check_forkable_env, check_process_collector
from sb3_ewma.common.collection.rollout import CollectingAlgorithm
from sb3_ewma.common.collection.thread import RolloutCollector


class TrainingLock:
    """
    The lock that ``train()`` holds under ``async_rollouts`` and that ``save`` and ``predict`` take (re-entrant). A
    model's copy (``copy.deepcopy``, ``pickle``) gets a new, free lock, as a lock's state means nothing outside its
    process and ``threading.RLock`` itself neither copies nor pickles.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()

    def __enter__(self) -> bool:
        return self._lock.__enter__()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._lock.__exit__(exc_type, exc, traceback)

    def __reduce__(self) -> tuple[Any, ...]:
        return (TrainingLock, ())


ASYNC_ROLLOUTS = (False, True, "thread", "process")
"""The values of ``async_rollouts``: off, a collector thread (``True`` or ``"thread"``) or a collector process."""


def check_async_rollouts(async_rollouts: object) -> None:
    """Raise a ``ValueError`` for an ``async_rollouts`` not in :data:`ASYNC_ROLLOUTS`."""
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
    after checking that a collector process can fork here and copy ``env`` (checked again by ``learn``).
    """
    kind = rollout_collector_kind(async_rollouts)
    if kind == "process":
        check_process_collector()
        check_forkable_env(env)
    return kind is not None, kind or "thread"


def learn_with_overlapped_rollouts(
    algorithm: CollectingAlgorithm,
    total_timesteps: int,
    callback: MaybeCallback,
    log_interval: int,
    tb_log_name: str,
    reset_num_timesteps: bool,
    progress_bar: bool,
) -> None:
    """
    SB3's ``OnPolicyAlgorithm.learn`` loop for ``algorithm`` (an algorithm with ``async_rollouts``), with the next
    rollout collected by a collector (``algorithm.rollout_collector``: a thread or a forked process) during
    ``train()``, which runs under ``algorithm._training_lock``.
    """
    iteration = 0
    total_timesteps, learn_callback = algorithm._setup_learn(
        total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar
    )
    # SB3's learn() passes its locals: the same names here
    learn_locals = dict(
        self=algorithm,
        total_timesteps=total_timesteps,
        callback=learn_callback,
        log_interval=log_interval,
        tb_log_name=tb_log_name,
        reset_num_timesteps=reset_num_timesteps,
        progress_bar=progress_bar,
        iteration=iteration,
    )
    learn_callback.on_training_start(learn_locals, globals())
    env = algorithm.env
    assert env is not None
    if algorithm.rollout_collector == "process":
        collector: RolloutCollector = ProcessRolloutCollector(algorithm, learn_callback)
    else:
        collector = RolloutCollector(algorithm, learn_callback)
    training_buffer, next_buffer = algorithm.rollout_buffer, algorithm._make_rollout_buffer()
    try:
        continue_training = algorithm.num_timesteps < total_timesteps and algorithm.data_parallel.synchronize_iteration(
            algorithm, collector.collect(env, training_buffer)
        )
        while continue_training:
            # the hand-off: the collector is joined, this thread owns the environments and the model
            iteration += 1
            _on_hand_off(algorithm, collector, iteration, total_timesteps, log_interval)
            collecting = algorithm.num_timesteps < total_timesteps
            if collecting:
                collector.start(env, next_buffer)
            algorithm.rollout_buffer = training_buffer
            with algorithm._training_lock:
                algorithm.train()
            if not collecting:
                break
            # every rank's decision, episode statistics and VecNormalize pooled (data-parallel training)
            continue_training = algorithm.data_parallel.synchronize_iteration(algorithm, collector.hand_off())
            training_buffer, next_buffer = next_buffer, training_buffer
    except BaseException:
        collector.stop()
        env.close()
        raise
    collector.close()
    learn_callback.on_training_end()


def _on_hand_off(
    algorithm: CollectingAlgorithm, collector: RolloutCollector, iteration: int, total_timesteps: int, log_interval: int
) -> None:
    """
    The one point of an iteration where no rollout is being collected: progress, logs (``dump_logs``), and the
    collection times of the rollout about to be trained on. Per-iteration synchronization belongs here.
    """
    algorithm._update_current_progress_remaining(algorithm.num_timesteps, total_timesteps)
    algorithm.logger.record("time/collection_s", collector.collection_seconds)
    algorithm.logger.record("time/collection_wait_s", collector.wait_seconds)
    if log_interval is not None and iteration % log_interval == 0:
        assert algorithm.ep_info_buffer is not None
        algorithm.dump_logs(iteration)
