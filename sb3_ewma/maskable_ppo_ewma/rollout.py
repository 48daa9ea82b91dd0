"""
sb3-contrib's ``MaskablePPO.collect_rollouts`` (the action masks asked of the environments at every step and stored in
the buffer) with the two things :mod:`sb3_ewma.common.collection.rollout` makes explicit: the policy that acts (a
snapshot of the parameters collects while ``algorithm.policy`` trains, for overlapped rollouts) and the environment
steps one vectorized step counts for (``n_envs * world_size`` under data-parallel training). Same operations in the
same order as the parent's, so ``ewma_decay=None`` stays bitwise ``MaskablePPO``.
"""

from typing import Any

import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.buffers import MaskableDictRolloutBuffer, MaskableRolloutBuffer
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv


def collect_maskable_rollout(
    algorithm: Any,
    policy: MaskableActorCriticPolicy,
    env: VecEnv,
    callback: BaseCallback,
    rollout_buffer: RolloutBuffer,
    n_rollout_steps: int,
    timesteps_per_step: int,
    use_masking: bool = True,
) -> bool:
    """
    Fill the maskable ``rollout_buffer`` with ``n_rollout_steps`` steps of every environment, acting with ``policy``
    under the environments' action masks (``use_masking``), then compute returns and advantages with ``policy``'s
    value function. Advances the algorithm's ``_last_obs``, ``_last_episode_starts``, ``num_timesteps`` (by
    ``timesteps_per_step`` per step) and episode statistics, as ``MaskablePPO.collect_rollouts`` does.

    :return: False if a callback stopped the rollout early, True otherwise
    """
    assert isinstance(
        rollout_buffer, (MaskableRolloutBuffer, MaskableDictRolloutBuffer)
    ), "RolloutBuffer doesn't support action masking"
    assert algorithm._last_obs is not None, "No previous observation was provided"
    device = policy.device
    # Switch to eval mode (this affects batch norm / dropout)
    policy.set_training_mode(False)
    n_steps = 0
    action_masks = None
    rollout_buffer.reset()

    if use_masking and not is_masking_supported(env):
        raise ValueError("Environment does not support action masking. Consider using ActionMasker wrapper")

    callback.on_rollout_start()

    new_obs: Any = None  # the observations after the last step (the loop runs at least once)

    while n_steps < n_rollout_steps:
        with th.no_grad():
            # Convert to pytorch tensor or to TensorDict
            obs_tensor = obs_as_tensor(algorithm._last_obs, device)

            # This is the only change related to invalid action masking
            if use_masking:
                action_masks = get_action_masks(env)

            actions, values, log_probs = policy(obs_tensor, action_masks=action_masks)

        actions = actions.cpu().numpy()
        new_obs, rewards, dones, infos = env.step(actions)

        algorithm.num_timesteps += timesteps_per_step

        # Give access to local variables
        callback.update_locals(locals())
        if not callback.on_step():
            return False

        algorithm._update_info_buffer(infos, dones)
        n_steps += 1

        if isinstance(algorithm.action_space, spaces.Discrete):
            # Reshape in case of discrete action
            actions = actions.reshape(-1, 1)

        # Handle timeout by bootstraping with value function (SB3 issue #633)
        for idx, done in enumerate(dones):
            if done and infos[idx].get("terminal_observation") is not None and infos[idx].get("TimeLimit.truncated", False):
                terminal_obs: Any = policy.obs_to_tensor(infos[idx]["terminal_observation"])[0]
                with th.no_grad():
                    terminal_value = policy.predict_values(terminal_obs)[0]
                rewards[idx] += algorithm.gamma * terminal_value

        rollout_buffer.add(
            algorithm._last_obs,
            actions,
            rewards,
            algorithm._last_episode_starts,
            values,
            log_probs,
            action_masks=action_masks,
        )
        algorithm._last_obs = new_obs
        algorithm._last_episode_starts = dones

    with th.no_grad():
        # Compute value for the last timestep
        # Masking is not needed here, the choice of action doesn't matter.
        # We only want the value of the current observation.
        values = policy.predict_values(obs_as_tensor(new_obs, device))

    rollout_buffer.compute_returns_and_advantage(last_values=values, dones=dones)

    callback.on_rollout_end()

    return True
