"""
Artificial staleness (Hilton, Cobbe & Schulman 2021, section 5.1): the data of an iteration is trained on
``staleness`` iterations after it was collected::

    model = StalePPO_EWMA("MlpPolicy", "CartPole-v1", ewma_decay=None).set_staleness(4, mode="behavior")
    model.learn(100_000)
"""

import copy
from collections import deque
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.type_aliases import MaybeCallback
from stable_baselines3.common.utils import obs_as_tensor

from sb3_ewma.common.decoupled.algorithm import DecoupledAlgorithm
from sb3_ewma.maskable_ppo_ewma import MaskablePPO_EWMA
from sb3_ewma.ppo_ewma import PPO_EWMA
from sb3_ewma.recurrent_ppo_ewma import RecurrentPPO_EWMA

STALENESS_MODES = ("decoupled", "behavior", "proximal")
"""The old policies of the clipped objective with stale data, as the authors define them (see :meth:`set_staleness`)."""

SelfArtificialStaleness = TypeVar("SelfArtificialStaleness", bound="ArtificialStaleness")


@dataclass
class StaleRollout:
    """A collected rollout waiting to be trained on, with the observation after its last step and its episode starts."""

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
    authors do; the values and rewards along the rollout stay those of the collection.
    """
    last_values = policy.predict_values(obs_as_tensor(rollout.last_obs, policy.device))
    rollout.buffer.compute_returns_and_advantage(last_values=last_values, dones=rollout.last_episode_starts)


@th.no_grad()
def replace_behavior_log_probs(policy: ActorCriticPolicy, buffer: RolloutBuffer, batch_size: int) -> None:
    """
    Overwrite the behavior log-probabilities of a not yet sampled rollout buffer with ``policy``'s, computed in
    evaluation mode in batches of ``batch_size`` (the ``"proximal"`` mode).
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
        else:  # as the buffer's samples give them (MultiBinary's are stored as the space's integers)
            action_batch = action_batch.float()
        distribution = policy.get_distribution(obs_as_tensor(obs_batch, policy.device))
        log_probs[rows] = distribution.log_prob(action_batch).cpu().numpy()
    policy.set_training_mode(training)
    buffer.log_probs[...] = log_probs.reshape(buffer.buffer_size, buffer.n_envs)


class ArtificialStaleness(DecoupledAlgorithm):
    """
    Artificial staleness for an algorithm of this package, placed before it (``StalePPO_EWMA(ArtificialStaleness,
    PPO_EWMA)``): the setting (:meth:`set_staleness`, saved with the model), the queue of collected rollouts
    (``stale_rollouts``) and ``train()`` on the rollout collected ``staleness`` iterations ago.
    """

    # the modes this algorithm runs, and whether the advantages of stale data are computed when it is used
    staleness_modes: ClassVar[tuple[str, ...]] = STALENESS_MODES
    recompute_stale_advantages: ClassVar[bool] = True
    # load keeps this class's own setting, which DecoupledAlgorithm drops from older files
    _entries_of_older_files = tuple(
        entry for entry in DecoupledAlgorithm._entries_of_older_files if entry not in ("staleness", "staleness_mode")
    )
    # off until set_staleness; load restores the saved setting
    staleness: int = 0
    staleness_mode: str = "decoupled"
    stale_rollouts: deque[StaleRollout]

    def set_staleness(self: SelfArtificialStaleness, staleness: int, mode: str = "decoupled") -> SelfArtificialStaleness:
        """
        Train on the data of each iteration ``staleness`` iterations after it was collected. ``save`` and ``load`` keep
        the setting; ``staleness=0`` removes it and drops the rollouts waiting, as a new run does (``learn`` with
        ``reset_num_timesteps=True``). :class:`StalePPO_EWMA` computes the
        advantages of stale data when it is used, bootstrapped from the current value function; the other two keep
        those of the collection.

        :param staleness: iterations between the collection of the data and the training on it
        :param mode: the old policies of the loss with stale data, as the authors define them: ``"decoupled"``
            (importance sampling with the behavior policy, clipping anchored at the recent policy, the policy at the
            start of the iteration), ``"behavior"`` (both with the behavior policy: PPO on stale data) or
            ``"proximal"`` (both with the recent policy; :class:`StalePPO_EWMA` only). With an EWMA (``ewma_decay``
            not None) the EWMA replaces only the clipping anchor, in every mode. With ``async_rollouts`` (staleness 0,
            data one iteration stale) the mode chooses the clipping anchor likewise (``"proximal"``, which would rescore the
            data with the recent policy, is refused there).
        :return: the model
        """
        self._check_staleness(staleness, mode)
        self.staleness, self.staleness_mode = int(staleness), mode
        if "proximal" not in vars(self):
            return self  # not built yet (_init_setup_model=False): _setup_model reads the setting
        # the proximal policy may need a network of its own now (a snapshot), or no longer
        if self.proximal_decay is None and self._proximal_needs_network() != (self.proximal.network is not None):
            self.proximal = self._new_proximal_policy()
            self.training_precision.prepare(self.policy, self.proximal.network)
        self.stale_rollouts.clear()
        return self

    def _check_staleness(self, staleness: Any, mode: Any) -> None:
        """Raise a ``ValueError`` naming what :meth:`set_staleness` cannot do with these arguments."""
        if isinstance(staleness, bool) or not isinstance(staleness, (int, np.integer)) or staleness < 0:
            raise ValueError(f"staleness must be an integer >= 0 (iterations), got {staleness!r}")
        if mode not in STALENESS_MODES:
            raise ValueError(f"mode must be one of {STALENESS_MODES}, got {mode!r}")
        if staleness == 0 and not self.async_rollouts:
            return
        if mode not in self.staleness_modes:
            # the recent policy's log-probabilities on stored data need the rollout's LSTM states or action masks
            raise ValueError(
                f"mode must be {' or '.join(map(repr, self.staleness_modes))} with stale data for "
                f"{type(self).__name__} ('proximal' is StalePPO_EWMA's only), got {mode!r}"
            )
        if self.async_rollouts and mode == "proximal":
            raise ValueError(
                f"mode='proximal' rescores the stored data with the recent policy, which async_rollouts="
                f"{self.rollout_collector!r} (data one iteration stale) does not: use 'decoupled' or 'behavior'"
            )
        if staleness == 0:
            return
        if self.async_rollouts:
            raise ValueError(
                f"async_rollouts={self.rollout_collector!r} trains on data one iteration stale already: artificial "
                f"staleness needs a model with async_rollouts=False, got staleness={staleness}"
            )
        if self.ewma_decay is None and mode == "behavior" and self._needs_distributions:
            raise ValueError(
                "kl_estimator='exact' needs the proximal policy's distribution, which mode='behavior' with "
                "staleness > 0 and ewma_decay=None does not keep: use kl_estimator='sample'"
            )

    def _setup_model(self) -> None:
        super()._setup_model()
        self.stale_rollouts = deque()

    def _proximal_needs_network(self) -> bool:
        # without an EWMA, stale data (artificial, or with async_rollouts) is anchored at the recent policy, a snapshot,
        # in the "decoupled" mode only; "behavior" and "proximal" read the buffer's log-probabilities
        stale = self.staleness > 0 or self.async_rollouts
        return self._needs_distributions or (stale and self.staleness_mode == "decoupled")

    def _setup_learn(
        self,
        total_timesteps: int,
        callback: MaybeCallback = None,
        reset_num_timesteps: bool = True,
        tb_log_name: str = "run",
        progress_bar: bool = False,
    ) -> tuple[int, BaseCallback]:
        # the setting as the model now holds it (load's keywords are not set_staleness's): before anything is written
        self._check_staleness(self.staleness, self.staleness_mode)
        # the setting is set on a model after its setup: the ranks agree on it when learn starts
        self.data_parallel.check_same_settings(
            {"staleness": self.staleness, "staleness_mode": self.staleness_mode},
            advice="call set_staleness() with the same arguments on every rank",
        )
        if reset_num_timesteps:  # a new run: the rollouts waiting belong to the last one
            self.stale_rollouts.clear()
        return super()._setup_learn(total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar)

    def train(self) -> None:
        """The algorithm's ``train()`` on the rollout collected ``staleness`` iterations ago; nothing while fewer have been."""
        if self.staleness == 0:
            super().train()
            return
        assert self._last_obs is not None and self._last_episode_starts is not None, "set by the rollout"
        self.stale_rollouts.append(StaleRollout.capture(self.rollout_buffer, self._last_obs, self._last_episode_starts))
        if len(self.stale_rollouts) <= self.staleness:
            self.rollout_buffer = self._make_rollout_buffer()
            self.logger.record("train/stale_iterations_buffered", len(self.stale_rollouts))
            return
        stale = self.stale_rollouts.popleft()
        if self.recompute_stale_advantages:
            recompute_advantages(self.policy, stale)
            if self.staleness_mode == "proximal":
                replace_behavior_log_probs(self.policy, stale.buffer, self._minibatch_size)
        self.rollout_buffer = stale.buffer
        super().train()

    def _excluded_save_params(self) -> list[str]:
        # the rollouts waiting belong to this run
        return [*super()._excluded_save_params(), "stale_rollouts"]

    @classmethod
    def _check_saved_data(cls, data: dict[str, Any], path: Any) -> None:
        """Accept every file of the algorithm, with or without a staleness setting (DecoupledAlgorithm's refuses one)."""


class StalePPO_EWMA(ArtificialStaleness, PPO_EWMA):  # type: ignore[misc]  # batch_size, as PPO_EWMA
    """:class:`~sb3_ewma.PPO_EWMA` (same constructor) with artificial staleness (:meth:`set_staleness`, all three modes)."""


class StaleRecurrentPPO_EWMA(ArtificialStaleness, RecurrentPPO_EWMA):
    """
    :class:`~sb3_ewma.RecurrentPPO_EWMA` (same constructor) with artificial staleness (:meth:`set_staleness`, modes
    ``"decoupled"`` and ``"behavior"``).
    """

    staleness_modes = ("decoupled", "behavior")
    recompute_stale_advantages = False


class StaleMaskablePPO_EWMA(ArtificialStaleness, MaskablePPO_EWMA):
    """
    :class:`~sb3_ewma.MaskablePPO_EWMA` (same constructor) with artificial staleness (:meth:`set_staleness`, modes
    ``"decoupled"`` and ``"behavior"``).
    """

    staleness_modes = ("decoupled", "behavior")
    recompute_stale_advantages = False
