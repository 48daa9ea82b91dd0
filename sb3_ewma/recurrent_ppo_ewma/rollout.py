"""
sb3-contrib's ``RecurrentPPO.collect_rollouts`` (the LSTM states carried from step to step and stored in the buffer)
with the two things :mod:`sb3_ewma.common.collection.rollout` makes explicit: the policy that acts (a snapshot of the
parameters collects while ``algorithm.policy`` trains, for overlapped rollouts) and the environment steps one vectorized
step counts for (``n_envs * world_size`` under data-parallel training). Same operations in the same order as the parent's,
so ``ewma_decay=None`` stays bitwise ``RecurrentPPO``.
"""

from copy import deepcopy
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.recurrent.buffers import RecurrentDictRolloutBuffer, RecurrentRolloutBuffer
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv

from sb3_ewma.common.collection.rollout import tensors_to


def collect_recurrent_rollout(
    algorithm: Any,
    policy: RecurrentActorCriticPolicy,
    env: VecEnv,
    callback: BaseCallback,
    rollout_buffer: RolloutBuffer,
    n_rollout_steps: int,
    timesteps_per_step: int,
) -> bool:
    """
    Fill the recurrent ``rollout_buffer`` with ``n_rollout_steps`` steps of every environment, acting with ``policy``
    from the algorithm's ``_last_lstm_states``, then compute returns and advantages with ``policy``'s value function.
    Advances the algorithm's ``_last_obs``, ``_last_episode_starts``, ``_last_lstm_states``, ``num_timesteps`` (by
    ``timesteps_per_step`` per step) and episode statistics, as ``RecurrentPPO.collect_rollouts`` does.

    :return: False if a callback stopped the rollout early, True otherwise
    """
    assert isinstance(
        rollout_buffer, (RecurrentRolloutBuffer, RecurrentDictRolloutBuffer)
    ), f"{rollout_buffer} doesn't support recurrent policy"

    assert algorithm._last_obs is not None, "No previous observation was provided"
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

    new_obs: Any = None  # the observations after the last step (the loop runs at least once)

    # the states as the acting policy's device needs them (a collector process acts on the CPU for a learner on a GPU)
    last_lstm_states = algorithm._last_lstm_states
    if last_lstm_states.pi[0].device != device:
        last_lstm_states = algorithm._last_lstm_states = tensors_to(last_lstm_states, device)
    lstm_states = deepcopy(last_lstm_states)

    while n_steps < n_rollout_steps:
        if algorithm.use_sde and algorithm.sde_sample_freq > 0 and n_steps % algorithm.sde_sample_freq == 0:
            # Sample a new noise matrix
            policy.reset_noise(env.num_envs)

        with th.no_grad():
            # Convert to pytorch tensor or to TensorDict
            obs_tensor = obs_as_tensor(algorithm._last_obs, device)
            episode_starts = th.tensor(algorithm._last_episode_starts, dtype=th.float32, device=device)
            actions, values, log_probs, lstm_states = policy(obs_tensor, lstm_states, episode_starts)

        actions = actions.cpu().numpy()

        # Rescale and perform action
        clipped_actions = actions
        # Clip the actions to avoid out of bound error
        if isinstance(action_space, spaces.Box):
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

        # Handle timeout by bootstraping with value function (SB3 issue #633)
        for idx, done_ in enumerate(dones):
            if done_ and infos[idx].get("terminal_observation") is not None and infos[idx].get("TimeLimit.truncated", False):
                terminal_obs: Any = policy.obs_to_tensor(infos[idx]["terminal_observation"])[0]
                with th.no_grad():
                    terminal_lstm_state = (
                        lstm_states.vf[0][:, idx : idx + 1, :].contiguous(),
                        lstm_states.vf[1][:, idx : idx + 1, :].contiguous(),
                    )
                    episode_starts = th.tensor([False], dtype=th.float32, device=device)
                    terminal_value = policy.predict_values(terminal_obs, terminal_lstm_state, episode_starts)[0]
                rewards[idx] += algorithm.gamma * terminal_value

        rollout_buffer.add(
            algorithm._last_obs,
            actions,
            rewards,
            algorithm._last_episode_starts,
            values,
            log_probs,
            lstm_states=algorithm._last_lstm_states,
        )

        algorithm._last_obs = new_obs
        algorithm._last_episode_starts = dones
        algorithm._last_lstm_states = lstm_states

    with th.no_grad():
        # Compute value for the last timestep
        episode_starts = th.tensor(dones, dtype=th.float32, device=device)
        last_obs: Any = obs_as_tensor(new_obs, device)  # a dict of tensors for Dict observations
        values = policy.predict_values(last_obs, lstm_states.vf, episode_starts)

    rollout_buffer.compute_returns_and_advantage(last_values=values, dones=dones)

    callback.on_rollout_end()

    return True
