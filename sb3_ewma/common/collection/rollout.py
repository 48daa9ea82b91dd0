"""
Rollout collection with an explicit behavior policy, by the parents' own rollout loops run on a :class:`RolloutView`
of the algorithm (the acting policy, and the environment steps one vectorized step counts for, made explicit).
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
    """A copy of ``value`` with every tensor in it (also in (named) tuples, lists and dicts) on ``device``."""
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
    What the rollout collectors and the overlapped rollouts use of the algorithm they collect for: SB3's
    ``OnPolicyAlgorithm`` state, and what :class:`~sb3_ewma.common.decoupled.algorithm.DecoupledAlgorithm` adds.
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
        policy: BasePolicy,
        env: VecEnv,
        callback: Any,
        rollout_buffer: RolloutBuffer,
        n_rollout_steps: int,
        published: bool = True,
    ) -> bool: ...

    def _make_rollout_buffer(self) -> RolloutBuffer: ...

    def _rollout_loop_kwargs(self) -> dict[str, Any]: ...

    def _update_info_buffer(self, infos: list[dict[str, Any]], dones: np.ndarray | None = None) -> None: ...


class RolloutView:
    """
    The algorithm as a parent's ``collect_rollouts`` sees it, passed in place of ``self``, so that SB3's and
    sb3-contrib's own rollout loops run unchanged with another acting policy or step count. Every attribute is read
    from and written to the algorithm (methods bound to it), except ``policy`` and ``device``, which the view holds,
    and ``num_timesteps``, which grows by ``timesteps_per_step`` per vectorized step. Callbacks called from the loop
    see the view as ``locals["self"]``.

    :param algorithm: the algorithm whose state (last observation, step count, episode statistics) advances
    :param policy: the acting policy (``algorithm.policy``, or a copy of it)
    :param timesteps_per_step: environment steps one vectorized step counts for in ``num_timesteps``
    :param published: whether the step count and the episode statistics are the algorithm's; if not (a collector
        thread's rollout, replayed at the hand-off), the view counts ``num_timesteps`` itself and drops the episodes
    """

    def __init__(
        self, algorithm: OnPolicyAlgorithm, policy: BasePolicy, timesteps_per_step: int, published: bool = True
    ) -> None:
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
    # DictRolloutBuffer only for a Dict observation space, with RolloutBuffer's constructor
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
