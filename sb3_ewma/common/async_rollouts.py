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
import time
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.type_aliases import MaybeCallback
from stable_baselines3.common.vec_env import VecEnv

from sb3_ewma.common.host import HostAlgorithm
from sb3_ewma.common.rollout import collect_rollout

COLLECTOR_STOP_TIMEOUT_S = 60.0
"""How long the main thread waits, after an exception, for the collector to stop at its next environment step."""


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


def parameter_tensors(module: th.nn.Module) -> list[th.Tensor]:
    """The parameters and buffers of a module, in a fixed order (the same for two modules of one structure)."""
    return [*module.parameters(), *module.buffers()]


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

    :param algorithm: the algorithm (``PPO_EWMA``, ``PPG_EWMA``) whose environment and state the rollouts advance
    :param callback: the ``learn`` call's callback
    """

    def __init__(self, algorithm: Any, callback: BaseCallback) -> None:
        self.algorithm = algorithm
        self.callback = callback
        self.stop_requested = threading.Event()
        self.collector_callback = _CollectorCallback(callback, self.stop_requested)
        with th.random.fork_rng(devices=[]):  # its random initialization, overwritten, must not advance the RNG
            self.behavior_policy: ActorCriticPolicy = algorithm._build_policy().to(algorithm.device)
        if hasattr(self.behavior_policy, "optimizer"):
            self.behavior_policy.optimizer = None  # never optimized
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
        """Copy the policy's current parameters into the behavior policy."""
        with th.no_grad():
            th._foreach_copy_(self._behavior_tensors, self._policy_tensors)

    def _collect(self, env: VecEnv, rollout_buffer: RolloutBuffer) -> None:
        start = time.perf_counter()
        try:
            self._result = collect_rollout(
                self.algorithm,
                self.behavior_policy,
                env,
                self.collector_callback,
                rollout_buffer,
                self.algorithm.n_steps,
                self.algorithm._timesteps_per_env_step,
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


class AsyncRolloutMixin(HostAlgorithm):
    """
    Mixed into PPO_EWMA and PPG_EWMA (first in the bases): with ``async_rollouts=True``, ``learn`` overlaps the
    collection of the next rollout with training on the current one (see :mod:`sb3_ewma.common.async_rollouts`).
    The algorithm provides ``async_rollouts``, ``_build_policy`` and ``_timesteps_per_env_step``.
    """

    async_rollouts: bool
    rollout_collector: str
    rollout_buffer: RolloutBuffer

    def _set_async_rollouts(self, async_rollouts: bool | str) -> None:
        """Set ``async_rollouts`` (a bool) and ``rollout_collector`` (``"thread"`` or ``"process"``), checked."""
        from sb3_ewma.common.process_collector import check_forkable_env, check_process_collector  # they import this

        kind = rollout_collector_kind(async_rollouts)
        if kind == "process":
            check_process_collector(self.device)
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

    def _make_rollout_buffer(self) -> RolloutBuffer:
        """A new rollout buffer like ``self.rollout_buffer`` (SB3's construction in ``_setup_model``)."""
        return self.rollout_buffer_class(  # type: ignore[misc]
            self.n_steps,
            self.observation_space,
            self.action_space,
            device=self.device,
            gamma=self.gamma,
            gae_lambda=self.gae_lambda,
            n_envs=self.n_envs,
            **self.rollout_buffer_kwargs,
        )

    def learn(
        self,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str = "OnPolicyAlgorithm",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> Any:
        if not self.async_rollouts:
            return super().learn(total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar)
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
            from sb3_ewma.common.process_collector import ProcessRolloutCollector  # it imports this module

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
