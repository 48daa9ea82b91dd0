"""
Rollout collection with an explicit behavior policy, by the parents' own rollout loops.

SB3's ``OnPolicyAlgorithm.collect_rollouts`` (and sb3-contrib's ``RecurrentPPO`` and ``MaskablePPO`` ones) always
act with ``self.policy`` and count ``env.num_envs`` environment steps per step. With ``self.policy`` acting on one
process they run on the algorithm itself, as in the parent. Otherwise they run unchanged on a :class:`RolloutView` of
the algorithm that makes two things explicit: the policy that acts (a snapshot of the parameters collects while
``self.policy`` trains, for overlapped rollouts; a CPU copy in a collector process) and the number of environment
steps one vectorized step counts for (``n_envs * world_size`` under data-parallel training, where ``num_timesteps`` is
global).
"""

from collections import deque
from typing import Any, ClassVar, Protocol, cast

import numpy as np
import torch as th
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.vec_env import VecEnv


def tensors_to(value: Any, device: th.device) -> Any:
    """
    A copy of ``value`` with every tensor in it on ``device``: tensors, and tuples (named ones included, such as
    sb3-contrib's ``RNNStates``), lists and dicts of them; anything else is returned as it is.
    """
    if isinstance(value, th.Tensor):
        return value.to(device)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(tensors_to(item, device) for item in value))
    if isinstance(value, (tuple, list)):
        return type(value)(tensors_to(item, device) for item in value)
    if isinstance(value, dict):
        return {key: tensors_to(item, device) for key, item in value.items()}
    return value


class CollectingAlgorithm(Protocol):
    """
    What the rollout collectors (:mod:`~sb3_ewma.common.collection.thread`,
    :mod:`~sb3_ewma.common.collection.process`) and the overlapped rollouts
    (:mod:`~sb3_ewma.common.collection.overlap`) use of the algorithm they collect for: SB3's ``OnPolicyAlgorithm``
    state, and what :class:`~sb3_ewma.common.decoupled.algorithm.DecoupledAlgorithm` adds (its rollout loop with an
    explicit acting policy, its rollout buffers and policy copies).
    """

    num_timesteps: int
    rollout_buffer: RolloutBuffer
    _last_obs: Any
    # the attributes a rollout advances besides num_timesteps (a collector process sends them back)
    _collection_state_names: ClassVar[tuple[str, ...]]

    @property
    def policy(self) -> BasePolicy: ...

    @property
    def env(self) -> VecEnv | None: ...

    @property
    def n_steps(self) -> int: ...

    @property
    def device(self) -> th.device: ...

    @property
    def logger(self) -> Logger: ...

    @property
    def ep_info_buffer(self) -> deque[Any] | None: ...

    @property
    def _timesteps_per_env_step(self) -> int: ...

    # callback: a BaseCallback, or a collector's recorder of the steps (which has its on_step methods)
    def _collect_rollout_with(
        self,
        policy: Any,
        env: VecEnv,
        callback: Any,
        rollout_buffer: RolloutBuffer,
        n_rollout_steps: int,
        published: bool = True,
    ) -> bool: ...

    def _make_rollout_buffer(self) -> RolloutBuffer: ...

    def _update_info_buffer(self, infos: list[dict[str, Any]], dones: np.ndarray | None = None) -> None: ...


class RolloutView:
    """
    The algorithm as a parent's ``collect_rollouts`` sees it when another policy than ``algorithm.policy`` acts (the
    snapshot of overlapped rollouts, a collector process's copy) or when one vectorized step counts for more than
    ``n_envs`` steps (data-parallel training), so that SB3's and sb3-contrib's own rollout loops run unchanged (called
    as ``Parent.collect_rollouts(view, env, callback, buffer, n_steps)``, the view in place of ``self``). The contract:

    - every attribute read is the algorithm's, and every attribute written is written on the algorithm (``_last_obs``,
      ``_last_episode_starts``, ``_last_lstm_states``, the episode statistics through ``_update_info_buffer``), except
      ``policy`` (the acting policy), ``device`` (that policy's device), which the view holds, and ``num_timesteps``,
      which grows by ``timesteps_per_step`` (every rank's environments) for each vectorized step where the loop adds
      ``env.num_envs``: one vectorized step at a time, as the parents' loops do;
    - methods are the algorithm's, bound to the algorithm (``self._update_info_buffer`` updates the algorithm's
      buffers), so a loop that calls ``self.policy`` gets the acting policy and one that calls a method gets the
      algorithm's;
    - callbacks called from that loop see the view: ``locals["self"]`` in ``on_step`` is the view, whose attributes
      are the algorithm's but ``policy`` (and ``device``); ``callback.model`` stays the algorithm.

    With ``published=False`` (a collector thread's rollout, replayed to the callbacks and the counters at the hand-off)
    the view counts ``num_timesteps`` for itself, from the algorithm's, and keeps the episode statistics to itself
    (``_update_info_buffer`` does nothing): the training thread reads the algorithm's meanwhile (SB3's loop and
    ``dump_logs``).

    :param algorithm: the algorithm whose state (last observation, step count, episode statistics) advances
    :param policy: the acting policy (``algorithm.policy``, or a copy of it)
    :param timesteps_per_step: environment steps one vectorized step counts for in ``num_timesteps``
    :param published: whether the step count and the episode statistics are the algorithm's (see above)
    """

    def __init__(self, algorithm: OnPolicyAlgorithm, policy: Any, timesteps_per_step: int, published: bool = True) -> None:
        object.__setattr__(self, "_algorithm", algorithm)
        object.__setattr__(self, "_timesteps_per_step", timesteps_per_step)
        object.__setattr__(self, "policy", policy)
        object.__setattr__(self, "device", policy.device)
        object.__setattr__(self, "_published", published)
        if not published:  # the view's own count, from the algorithm's
            object.__setattr__(self, "num_timesteps", algorithm.num_timesteps)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._algorithm, name)

    def _update_info_buffer(self, infos: list[dict[str, Any]], dones: np.ndarray | None = None) -> None:
        """The algorithm's episode statistics, when published (otherwise the replay at the hand-off adds them)."""
        if self._published:
            self._algorithm._update_info_buffer(infos, dones)

    def __setattr__(self, name: str, value: Any) -> None:
        algorithm = self._algorithm
        if name == "num_timesteps":
            current = self.num_timesteps  # the algorithm's, or the view's own (published=False)
            # the parent's loop adds env.num_envs (this process's environments) per vectorized step
            assert value - current == algorithm.n_envs, "one vectorized step at a time"
            value = current + self._timesteps_per_step
            if not self._published:
                object.__setattr__(self, name, value)
                return
        setattr(algorithm, name, value)


def new_rollout_buffer(algorithm: OnPolicyAlgorithm) -> RolloutBuffer:
    """A new rollout buffer like ``algorithm.rollout_buffer`` (SB3's construction in ``_setup_model``)."""
    assert algorithm.rollout_buffer_class is not None, "chosen by OnPolicyAlgorithm._setup_model"
    # RolloutBuffer's constructor: _setup_model chose DictRolloutBuffer (which type checkers see among the attribute's
    # types) only for a Dict observation space
    buffer_class = cast(type[RolloutBuffer], algorithm.rollout_buffer_class)
    return buffer_class(
        algorithm.n_steps,
        algorithm.observation_space,
        algorithm.action_space,
        device=algorithm.device,
        gamma=algorithm.gamma,
        gae_lambda=algorithm.gae_lambda,
        n_envs=algorithm.n_envs,
        **algorithm.rollout_buffer_kwargs,
    )
