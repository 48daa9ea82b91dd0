"""
Artificial staleness (Hilton et al. 2021, section 5.1) as the authors run it (``ppo_ewma/ppo.py``, ``learn``): rollouts
wait ``staleness`` iterations; when one is used, its advantages are computed anew (bootstrapped from the current value
function) and, in the ``"proximal"`` mode, its behavior log-probabilities are replaced by the recent policy's.
"""

import copy
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.utils import obs_as_tensor


@dataclass
class StaleRollout:
    """
    A collected rollout waiting to be trained on, with what its advantages need: the observation that follows its last
    step and whether that observation starts an episode.
    """

    buffer: RolloutBuffer
    last_obs: np.ndarray | dict[str, np.ndarray]
    last_episode_starts: np.ndarray

    @classmethod
    def capture(
        cls, buffer: RolloutBuffer, last_obs: np.ndarray | dict[str, np.ndarray], last_episode_starts: np.ndarray
    ) -> "StaleRollout":
        """Keep copies of the final observation and episode starts (the algorithm's own arrays move on)."""
        return cls(buffer, copy.deepcopy(last_obs), np.array(last_episode_starts, copy=True))


@th.no_grad()
def recompute_advantages(policy: ActorCriticPolicy, rollout: StaleRollout) -> None:
    """
    GAE(lambda) of a stale rollout, bootstrapped from the **current** value function at its final observation, as the
    authors compute advantages when the data is used. The values along the rollout stay the ones predicted at
    collection (the authors' ``vpred``), and so do the rewards (SB3 adds the value of a truncated episode's last state
    to its reward at collection).
    """
    last_values = policy.predict_values(obs_as_tensor(rollout.last_obs, policy.device))
    rollout.buffer.compute_returns_and_advantage(last_values=last_values, dones=rollout.last_episode_starts)


@th.no_grad()
def replace_behavior_log_probs(policy: ActorCriticPolicy, buffer: RolloutBuffer, batch_size: int) -> None:
    """
    Overwrite the stored behavior log-probabilities of a (not yet sampled) rollout buffer with those of ``policy``,
    computed in evaluation mode in batches of ``batch_size``: the ``"proximal"`` staleness mode, where the recent
    policy replaces the behavior policy for importance sampling too.
    """
    assert not buffer.generator_ready, "the buffer must not have been sampled yet (arrays of shape (n_steps, n_envs))"
    n_samples = buffer.buffer_size * buffer.n_envs
    observations = buffer.observations
    if isinstance(observations, dict):
        flat_obs: np.ndarray | dict[str, np.ndarray] = {
            key: value.reshape(n_samples, *value.shape[2:]) for key, value in observations.items()
        }
    else:
        flat_obs = observations.reshape(n_samples, *observations.shape[2:])
    actions = buffer.actions.reshape(n_samples, -1)
    training = policy.training
    policy.set_training_mode(False)
    log_probs = np.empty(n_samples, dtype=np.float32)
    for start in range(0, n_samples, batch_size):
        rows = slice(start, start + batch_size)
        obs_batch = {key: value[rows] for key, value in flat_obs.items()} if isinstance(flat_obs, dict) else flat_obs[rows]
        action_batch = th.as_tensor(actions[rows], device=policy.device)
        if isinstance(policy.action_space, spaces.Discrete):
            action_batch = action_batch.long().flatten()
        distribution = policy.get_distribution(obs_as_tensor(obs_batch, policy.device))
        log_probs[rows] = distribution.log_prob(action_batch).cpu().numpy()
    policy.set_training_mode(training)
    buffer.log_probs[...] = log_probs.reshape(buffer.buffer_size, buffer.n_envs)


def take_stale_rollout(algorithm: Any, waiting: deque[StaleRollout], recompute: bool = True) -> RolloutBuffer | None:
    """
    Artificial staleness ``k = algorithm.staleness``: queue the rollout just collected (``algorithm.rollout_buffer``)
    in ``waiting`` and return the one collected ``k`` iterations ago, prepared as the authors do (advantages computed
    anew when ``recompute``; in the ``"proximal"`` mode, the recent policy's log-probabilities), or None while fewer
    have been collected. Buffers are recycled: the one returned becomes ``algorithm.rollout_buffer``, which the next
    rollout fills.

    :param recompute: False for the sb3-contrib variants, whose advantages stay those computed at collection (anew,
        they would need the LSTM states of the rollout's end)
    """
    assert algorithm._last_obs is not None and algorithm._last_episode_starts is not None, "set by the rollout"
    waiting.append(StaleRollout.capture(algorithm.rollout_buffer, algorithm._last_obs, algorithm._last_episode_starts))
    if len(waiting) <= algorithm.staleness:
        algorithm.rollout_buffer = algorithm._make_rollout_buffer()
        return None
    stale = waiting.popleft()
    if recompute:
        recompute_advantages(algorithm.policy, stale)
        if algorithm.staleness_mode == "proximal":
            replace_behavior_log_probs(algorithm.policy, stale.buffer, algorithm._minibatch_size)
    algorithm.rollout_buffer = stale.buffer
    return stale.buffer
