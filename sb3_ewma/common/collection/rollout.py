"""
Rollout collection with an explicit behavior policy, by the parents' own rollout loops.

SB3's ``OnPolicyAlgorithm.collect_rollouts`` (and sb3-contrib's ``RecurrentPPO`` and ``MaskablePPO`` ones) always
act with ``self.policy`` and count ``env.num_envs`` environment steps per step. They run here unchanged, on a
:class:`RolloutView` of the algorithm that makes two things explicit: the policy that acts (a snapshot of the
parameters can collect while ``self.policy`` trains, for overlapped rollouts; a CPU copy in a collector process) and
the number of environment steps one vectorized step counts for (``n_envs * world_size`` under data-parallel training,
where ``num_timesteps`` is global). With ``self.policy`` acting on one process, a model trained this way is bitwise the
model its parent trains, by construction.
"""

from collections.abc import Callable
from typing import Any, ClassVar

import torch as th
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.vec_env import VecEnv

from sb3_ewma.common.host import HostAlgorithm


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


class RolloutView:
    """
    The algorithm as a parent's ``collect_rollouts`` sees it: every attribute read and written is the algorithm's,
    except ``policy`` (the acting policy), ``device`` (that policy's device) and the step count, which grows by
    ``timesteps_per_step`` for each vectorized step where the loop adds ``env.num_envs``.

    :param algorithm: the algorithm whose state (last observation, step count, episode statistics) advances
    :param policy: the acting policy (``algorithm.policy``, or a copy of it)
    :param timesteps_per_step: environment steps one vectorized step counts for in ``num_timesteps``
    """

    def __init__(self, algorithm: OnPolicyAlgorithm, policy: Any, timesteps_per_step: int) -> None:
        object.__setattr__(self, "_algorithm", algorithm)
        object.__setattr__(self, "_timesteps_per_step", timesteps_per_step)
        object.__setattr__(self, "policy", policy)
        object.__setattr__(self, "device", policy.device)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._algorithm, name)

    def __setattr__(self, name: str, value: Any) -> None:
        algorithm = self._algorithm
        if name == "num_timesteps":
            # the parent's loop adds env.num_envs (this process's environments) per vectorized step
            assert value - algorithm.num_timesteps == algorithm.n_envs, "one vectorized step at a time"
            value = algorithm.num_timesteps + self._timesteps_per_step
        setattr(algorithm, name, value)


def collect_rollout(
    parent_collect_rollouts: Callable[..., bool],
    algorithm: OnPolicyAlgorithm,
    policy: Any,
    env: VecEnv,
    callback: BaseCallback,
    rollout_buffer: RolloutBuffer,
    n_rollout_steps: int,
    timesteps_per_step: int,
    **kwargs: Any,
) -> bool:
    """
    Fill ``rollout_buffer`` with ``n_rollout_steps`` steps of every environment by the parent's loop
    (``parent_collect_rollouts``, e.g. ``OnPolicyAlgorithm.collect_rollouts``), acting with ``policy`` and counting
    ``timesteps_per_step`` environment steps per vectorized step. Reads and advances the algorithm's ``_last_obs``,
    ``_last_episode_starts``, ``num_timesteps`` and episode statistics (and what else the loop carries, such as LSTM
    states), as the parent does.

    :param kwargs: further arguments of the parent's loop (``MaskablePPO``'s ``use_masking``)
    :return: False if a callback stopped the rollout early, True otherwise
    """
    view = RolloutView(algorithm, policy, timesteps_per_step)
    return parent_collect_rollouts(view, env, callback, rollout_buffer, n_rollout_steps, **kwargs)


class RolloutCollectionMixin(HostAlgorithm):
    """
    Mixed into an SB3 ``OnPolicyAlgorithm`` (before it in the bases): routes ``collect_rollouts`` through
    :meth:`_collect_rollout_with` with ``self.policy`` acting and ``_timesteps_per_env_step`` environment steps counted
    per vectorized step. The rollout loop is the parent's (:attr:`_parent_collect_rollouts`, run by
    :func:`collect_rollout`): an algorithm whose parent has a loop of its own (sb3-contrib's LSTM states, action masks)
    names it there, and the state it advances in :attr:`_collection_state_names`. The collectors of overlapped rollouts
    (:mod:`sb3_ewma.common.collection.overlap`) collect through the same method with a snapshot of the policy.
    """

    policy: Any  # an ActorCriticPolicy
    _parent_collect_rollouts: ClassVar[Callable[..., bool]] = staticmethod(OnPolicyAlgorithm.collect_rollouts)
    """The parent's rollout loop, which :meth:`_collect_rollout_with` runs (sb3-contrib's algorithms name theirs)."""
    _collection_state_names: ClassVar[tuple[str, ...]] = ("_last_obs", "_last_episode_starts")
    """The attributes a rollout advances besides ``num_timesteps`` and the episode statistics (a collector process sends
    them back with its rollout)."""

    @property
    def _timesteps_per_env_step(self) -> int:
        """Environment steps that one vectorized step of this process counts for in ``num_timesteps``."""
        return self.n_envs

    def _synchronize_iteration(self, continue_training: bool) -> bool:
        """
        Once per iteration, on the main thread, after the rollout (the environments idle) and before ``train()``:
        whether training goes on. Data-parallel training synchronizes the ranks here
        (:class:`sb3_ewma.common.distributed.DataParallelMixin`); overlapped rollouts call it at their hand-off.
        """
        return continue_training

    def _collect_rollout_with(
        self, policy: Any, env: VecEnv, callback: BaseCallback, rollout_buffer: RolloutBuffer, n_rollout_steps: int
    ) -> bool:
        """
        Fill ``rollout_buffer`` with ``n_rollout_steps`` steps of every environment, acting with ``policy``
        (``self.policy`` or a snapshot of it, of the same structure), as the parent's ``collect_rollouts`` does with
        ``self.policy``. Returns False if a callback stopped the rollout early.
        """
        return collect_rollout(
            type(self)._parent_collect_rollouts,
            self,
            policy,
            env,
            callback,
            rollout_buffer,
            n_rollout_steps,
            self._timesteps_per_env_step,
            **self._rollout_loop_kwargs(),
        )

    def _rollout_loop_kwargs(self) -> dict[str, Any]:
        """Further arguments of the parent's rollout loop (``MaskablePPO``'s ``use_masking``); none here."""
        return {}

    def collect_rollouts(
        self, env: VecEnv, callback: BaseCallback, rollout_buffer: RolloutBuffer, n_rollout_steps: int
    ) -> bool:
        return self._collect_rollout_with(self.policy, env, callback, rollout_buffer, n_rollout_steps)
