"""
Rollout collection with an explicit behavior policy.

SB3's ``OnPolicyAlgorithm.collect_rollouts`` always acts with ``self.policy`` and counts ``env.num_envs`` environment
steps per step. :func:`collect_rollout` is the same loop (same order of operations, so a model trained with it is
bitwise the model SB3 trains) with two things made explicit: the policy that acts (a snapshot of the parameters can
collect while ``self.policy`` trains, for overlapped rollouts) and the number of environment steps one vectorized
step counts for (``n_envs * world_size`` under data-parallel training, where ``num_timesteps`` is global).
"""

from typing import Any, ClassVar

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.utils import obs_as_tensor
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


def collect_rollout(
    algorithm: OnPolicyAlgorithm,
    policy: ActorCriticPolicy,
    env: VecEnv,
    callback: BaseCallback,
    rollout_buffer: RolloutBuffer,
    n_rollout_steps: int,
    timesteps_per_step: int | None = None,
) -> bool:
    """
    Fill ``rollout_buffer`` with ``n_rollout_steps`` steps of every environment of ``env``, acting with ``policy``,
    then compute returns and advantages with ``policy``'s value function. Reads and advances the algorithm's
    ``_last_obs``, ``_last_episode_starts``, ``num_timesteps`` and episode-info buffer, as SB3 does.

    :param algorithm: the algorithm whose state (last observation, step count, episode statistics) advances
    :param policy: the behavior policy (``algorithm.policy``, or a snapshot of it)
    :param env: the training environment
    :param callback: called at each step, and at the start and end of the rollout
    :param rollout_buffer: the buffer to fill (reset first)
    :param n_rollout_steps: steps per environment
    :param timesteps_per_step: environment steps one vectorized step counts for in ``num_timesteps``
        (default ``env.num_envs``)
    :return: False if a callback stopped the rollout early, True otherwise
    """
    assert algorithm._last_obs is not None, "No previous observation was provided"
    if timesteps_per_step is None:
        timesteps_per_step = env.num_envs
    device = policy.device
    action_space = algorithm.action_space
    # Switch to eval mode (this affects batch norm / dropout)
    policy.set_training_mode(False)

    n_steps = 0
    rollout_buffer.reset()
    # Sample new weights for the state dependent exploration
    if algorithm.use_sde:
        policy.reset_noise(env.num_envs)

    callback.on_rollout_start()

    new_obs: Any = None
    dones: np.ndarray = np.zeros(env.num_envs, dtype=bool)
    while n_steps < n_rollout_steps:
        if algorithm.use_sde and algorithm.sde_sample_freq > 0 and n_steps % algorithm.sde_sample_freq == 0:
            # Sample a new noise matrix
            policy.reset_noise(env.num_envs)

        with th.no_grad():
            obs_tensor = obs_as_tensor(algorithm._last_obs, device)
            actions, values, log_probs = policy(obs_tensor)
        actions = actions.cpu().numpy()

        clipped_actions = actions
        if isinstance(action_space, spaces.Box):
            if policy.squash_output:
                # Unscale the actions to match env bounds if they were squashed (scaled in [-1, 1])
                clipped_actions = policy.unscale_action(clipped_actions)
            else:
                # Clip the actions sampled from an unbounded Gaussian to the env bounds
                clipped_actions = np.clip(actions, action_space.low, action_space.high)

        new_obs, rewards, dones, infos = env.step(clipped_actions)

        algorithm.num_timesteps += timesteps_per_step

        # Give access to local variables
        callback.update_locals(locals())
        if not callback.on_step():
            return False

        algorithm._update_info_buffer(infos, dones)
        n_steps += 1

        if isinstance(action_space, spaces.Discrete):
            # Reshape in case of discrete action
            actions = actions.reshape(-1, 1)

        # Handle timeout by bootstrapping with the value function (SB3 issue #633)
        for idx, done in enumerate(dones):
            if done and infos[idx].get("terminal_observation") is not None and infos[idx].get("TimeLimit.truncated", False):
                terminal_obs = policy.obs_to_tensor(infos[idx]["terminal_observation"])[0]
                with th.no_grad():
                    terminal_value = policy.predict_values(terminal_obs)[0]
                rewards[idx] += algorithm.gamma * terminal_value

        rollout_buffer.add(
            algorithm._last_obs,  # type: ignore[arg-type]
            actions,
            rewards,
            algorithm._last_episode_starts,  # type: ignore[arg-type]
            values,
            log_probs,
        )
        algorithm._last_obs = new_obs
        algorithm._last_episode_starts = dones

    with th.no_grad():
        # Compute value for the last timestep
        values = policy.predict_values(obs_as_tensor(new_obs, device))

    rollout_buffer.compute_returns_and_advantage(last_values=values, dones=dones)

    callback.update_locals(locals())

    callback.on_rollout_end()

    return True


class RolloutCollectionMixin(HostAlgorithm):
    """
    Mixed into an SB3 ``OnPolicyAlgorithm`` (before it in the bases): routes ``collect_rollouts`` through
    :meth:`_collect_rollout_with` with ``self.policy`` acting and ``_timesteps_per_env_step`` environment steps counted
    per vectorized step. The rollout loop is SB3's (:func:`collect_rollout`); an algorithm whose loop is its parent's
    own (sb3-contrib's LSTM states, action masks) overrides :meth:`_collect_rollout_with` with that loop, and names the
    state it advances in :attr:`_collection_state_names`. The collectors of overlapped rollouts
    (:mod:`sb3_ewma.common.collection.overlap`) collect through the same method with a snapshot of the policy.
    """

    policy: Any  # an ActorCriticPolicy
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
        return collect_rollout(self, policy, env, callback, rollout_buffer, n_rollout_steps, self._timesteps_per_env_step)

    def collect_rollouts(
        self, env: VecEnv, callback: BaseCallback, rollout_buffer: RolloutBuffer, n_rollout_steps: int
    ) -> bool:
        return self._collect_rollout_with(self.policy, env, callback, rollout_buffer, n_rollout_steps)
