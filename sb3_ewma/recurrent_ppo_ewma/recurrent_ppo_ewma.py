import math
from collections.abc import Iterator
from typing import Any, ClassVar, TypeAlias, TypeVar, cast

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib import RecurrentPPO
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule
from stable_baselines3.common.vec_env import VecEnv

from sb3_ewma.common.checks import check_episode_starts, check_policy_keywords, count_observations
from sb3_ewma.common.collection.rollout import tensors_to
from sb3_ewma.common.decoupled.algorithm import DecoupledAlgorithm
from sb3_ewma.common.decoupled.objective import DecoupledPolicyObjective
from sb3_ewma.common.decoupled.step import CompiledMinibatch
from sb3_ewma.common.distributed import rank_local_settings
from sb3_ewma.common.export import to_parent_algorithm
from sb3_ewma.common.minibatches import rollout_minibatches
from sb3_ewma.common.rules import CONTRIB_RULES, check_arguments
from sb3_ewma.recurrent_ppo_ewma.buffers import ValidStepsRecurrentDictRolloutBuffer, ValidStepsRecurrentRolloutBuffer
from sb3_ewma.recurrent_ppo_ewma.policies import (
    CnnLstmPolicy,
    MlpLstmPolicy,
    MultiInputLstmPolicy,
    actor_sequence_latent,
    evaluate_valid_steps,
    is_recurrent_policy_parameter,
    sequence_latents,
    valid_steps_distribution,
)

# the rollout buffers of RecurrentPPO_EWMA (made by _make_rollout_buffer), for Box and for Dict observations
SelfRecurrentPPO_EWMA = TypeVar("SelfRecurrentPPO_EWMA", bound="RecurrentPPO_EWMA")
_ValidStepsBuffer: TypeAlias = ValidStepsRecurrentRolloutBuffer | ValidStepsRecurrentDictRolloutBuffer


def proximal_valid_steps_distribution(network: RecurrentActorCriticPolicy, minibatch: Any) -> Distribution:
    """The proximal network's distribution on a minibatch's valid steps, from the LSTM states stored in the buffer."""
    mask = minibatch.mask > 1e-8
    return valid_steps_distribution(network, minibatch.observations, minibatch.lstm_states, minibatch.episode_starts, mask)


class RecurrentPPO_EWMA(DecoupledAlgorithm, RecurrentPPO):
    """
    RecurrentPPO-EWMA: sb3-contrib's ``RecurrentPPO`` (PPO with LSTM policies) with the decoupled objectives and an
    exponentially weighted moving average (EWMA) of the policy as the proximal policy, as :class:`~sb3_ewma.PPO_EWMA`
    does for PPO: ``RecurrentPPO``'s arguments, with the same defaults and meaning, then the decoupled options. With
    ``ewma_decay=None`` it is ``RecurrentPPO``, up to the importance-sampling cap ``imp_samp_max``.

    Paper: https://arxiv.org/abs/2110.00641
    Guide: :ref:`algos` (the method and each option); the EWMA of an LSTM policy: :ref:`recurrent_ppo_ewma`

    :param policy: The policy model to use (MlpLstmPolicy, CnnLstmPolicy, ...)
    :param env: The environment to learn from (if registered in Gym, can be str)
    :param learning_rate: The learning rate, it can be a function
        of the current progress remaining (from 1 to 0)
    :param n_steps: The number of steps to run for each environment per update
        (i.e. batch size is n_steps * n_env where n_env is number of environment copies running in parallel)
    :param batch_size: Minibatch size (``None``: the whole rollout)
    :param n_epochs: Number of epoch when optimizing the surrogate loss (batch size-invariance needs 1)
    :param gamma: Discount factor
    :param gae_lambda: Factor for trade-off of bias vs variance for Generalized Advantage Estimator
    :param clip_range: Clipping parameter of the ratio to the proximal policy, it can be a function of the current
        progress remaining (from 1 to 0). ``None`` turns clipping off (use the KL penalty ``kl_coef`` instead).
    :param clip_range_vf: Clipping parameter for the value function,
        it can be a function of the current progress remaining (from 1 to 0).
        This is a parameter specific to the OpenAI implementation. If None is passed (default),
        no clipping will be done on the value function.
        IMPORTANT: this clipping depends on the reward scaling.
    :param normalize_advantage: Whether to normalize or not the advantage (how: ``advantage_normalization``)
    :param ent_coef: Entropy coefficient for the loss calculation
    :param vf_coef: Value function coefficient for the loss calculation
    :param max_grad_norm: The maximum value for the gradient clipping
    :param use_sde: Whether to use generalized State Dependent Exploration (gSDE)
        instead of action noise exploration (default: False)
    :param sde_sample_freq: Sample a new noise matrix every n steps when using gSDE
        Default: -1 (only sample at the beginning of the rollout)
    :param target_kl: Limit the KL divergence between updates,
        because the clipping is not enough to prevent large update
        see issue #213 (cf https://github.com/hill-a/stable-baselines/issues/213)
        By default, there is no limit on the kl div.
    :param stats_window_size: Window size for the rollout logging, specifying the number of episodes to average
        the reported success rate, mean episode length, and mean reward over
    :param tensorboard_log: the log location for tensorboard (if None, no logging)
    :param policy_kwargs: additional arguments to be passed to the policy on creation (``lstm_hidden_size``,
        ``n_lstm_layers``, ``shared_lstm``, ``enable_critic_lstm``, ...)
    :param verbose: the verbosity level: 0 no output, 1 info, 2 debug
    :param seed: Seed for the pseudo random generators
    :param device: Device (cpu, cuda, ...) on which the code should be run.
        Setting it to auto, the code will be run on the GPU if possible.
    :param ewma_decay: Decay of the EWMA of the policy's parameters that is the proximal policy: a number in [0, 1), an
        age rule, ``"auto"`` (default), ``"paper"``, ``"max_age"`` or ``"mean_age"``, or ``None`` (no EWMA: the proximal
        policy is the behavior policy). See :ref:`ewma-decay`.
    :param kl_coef: Coefficient ``>= 0`` of the decoupled KL penalty ``KL[pi_prox, pi]`` (default 0: no penalty).
        See :ref:`decoupled-objectives`.
    :param kl_estimator: The KL penalty's estimate: ``"sample"`` (default, the authors') or ``"exact"``.
        See :ref:`decoupled-objectives`.
    :param imp_samp_max: Cap on the importance weight ``pi / pi_behav``: a number ``> 1`` (default 100, the paper's) or
        0 (no cap). See :ref:`decoupled-objectives`.
    :param advantage_normalization: ``"minibatch"`` (default, SB3's) or ``"ewma"`` (the paper's, needs
        ``normalize_advantage=True``). See :ref:`advantage-normalization`.
    :param advantage_ewma_decay: Decay per iteration, in [0, 1), of the advantage moments of ``"ewma"`` normalization
        (default 0: this iteration only). See :ref:`advantage-normalization`.
    :param minibatch_sampling: ``"steps"`` (default, sb3-contrib's: time-ordered steps from a random split point) or
        ``"rollouts"`` (the authors' whole rollouts; ``batch_size`` a multiple or a divisor of ``n_steps``).
        See :ref:`minibatch-sampling`.
    :param log_gradient_noise_scale: Whether to log the gradient noise scale as ``train/gradient_noise_scale`` (default
        False). See :ref:`gradient-noise-scale`.
    :param distributed: Data-parallel training under torchrun: ``None`` (default: when ``WORLD_SIZE > 1``), ``True``
        (required) or ``False`` (never); not saved with the model. See :ref:`distributed`.
    :param async_rollouts: Collect the next rollout while training on this one (the collector carries the LSTM states):
        ``False`` (default), ``True`` or ``"thread"`` (a collector thread), ``"process"`` (a collector process).
        See :ref:`async_rollouts`.
    :param compile_step: Compile each minibatch's loss and optimizer step with ``torch.compile`` (the LSTMs run
        eagerly between the compiled pieces, one call each a minibatch): ``"auto"`` (default: when a ``learn`` call
        plans at least 2,000 optimizer steps), ``True`` or ``False``. See :ref:`compile-step`.
    :param _init_setup_model: Whether or not to build the network at the creation of the instance
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpLstmPolicy": MlpLstmPolicy,
        "CnnLstmPolicy": CnnLstmPolicy,
        "MultiInputLstmPolicy": MultiInputLstmPolicy,
    }

    # narrowed to the policies this class builds, as sb3-contrib's MaskablePPO and SB3's SAC narrow their `policy`
    # (a mutable attribute, so pyright wants the parent's type unchanged)
    policy: RecurrentActorCriticPolicy  # pyright: ignore[reportIncompatibleVariableOverride]
    # the collector process sends the LSTM states back with each rollout
    _collection_state_names = (*DecoupledAlgorithm._collection_state_names, "_last_lstm_states")
    _parent_collect_rollouts = staticmethod(RecurrentPPO.collect_rollouts)
    _is_proximal_parameter = staticmethod(is_recurrent_policy_parameter)
    _proximal_distribution_of = staticmethod(proximal_valid_steps_distribution)
    # compiled, the step takes the LSTMs' outputs (_compiled_minibatch): the LSTMs run eagerly, one call each a
    # minibatch, since the padded sequences change length from one minibatch to the next (a graph for each length)
    _compiled_evaluation = "sequences"
    # a compiled step saves tens of milliseconds here (sb3-contrib's loop over the padded steps is gone), against
    # hundreds of microseconds for PPO_EWMA's: it earns its compilation back within a thousand steps (performance guide)
    _auto_compile_min_steps = 2_000

    def __init__(
        self,
        policy: str | type[RecurrentActorCriticPolicy],
        env: GymEnv | str,
        learning_rate: float | Schedule = 3e-4,
        n_steps: int = 128,
        batch_size: int | None = 128,
        n_epochs: int = 10,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        clip_range: float | Schedule | None = 0.2,
        clip_range_vf: float | Schedule | None = None,
        normalize_advantage: bool = True,
        ent_coef: float = 0.0,
        vf_coef: float = 0.5,
        max_grad_norm: float = 0.5,
        use_sde: bool = False,
        sde_sample_freq: int = -1,
        target_kl: float | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: th.device | str = "auto",
        ewma_decay: float | str | None = "auto",
        kl_coef: float = 0.0,
        kl_estimator: str = "sample",
        imp_samp_max: float = 100.0,
        advantage_normalization: str = "minibatch",
        advantage_ewma_decay: float = 0.0,
        minibatch_sampling: str = "steps",
        log_gradient_noise_scale: bool = False,
        distributed: bool | None = None,
        async_rollouts: bool | str = False,
        compile_step: bool | str = "auto",
        _init_setup_model: bool = True,
    ) -> None:
        # checked before anything is built: no environment is made for bad input
        check_arguments(locals(), CONTRIB_RULES)
        check_policy_keywords(RecurrentPPO_EWMA, policy, policy_kwargs)
        # ranks other than 0 print nothing; each rank on its own GPU
        verbose, device = rank_local_settings(distributed, verbose, device)

        super().__init__(
            policy,
            env,
            learning_rate=learning_rate,
            n_steps=n_steps,
            batch_size=batch_size,
            n_epochs=n_epochs,
            gamma=gamma,
            gae_lambda=gae_lambda,
            # no clipping: an infinite clip range
            clip_range=math.inf if clip_range is None else clip_range,
            clip_range_vf=clip_range_vf,
            normalize_advantage=normalize_advantage,
            ent_coef=ent_coef,
            vf_coef=vf_coef,
            max_grad_norm=max_grad_norm,
            use_sde=use_sde,
            sde_sample_freq=sde_sample_freq,
            target_kl=target_kl,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            policy_kwargs=policy_kwargs,
            verbose=verbose,
            seed=seed,
            device=device,
            _init_setup_model=False,
        )

        self._set_decoupled_options(
            ewma_decay=ewma_decay,
            kl_coef=kl_coef,
            kl_estimator=kl_estimator,
            imp_samp_max=imp_samp_max,
            advantage_normalization=advantage_normalization,
            advantage_ewma_decay=advantage_ewma_decay,
            minibatch_sampling=minibatch_sampling,
            log_gradient_noise_scale=log_gradient_noise_scale,
            distributed=distributed,
            async_rollouts=async_rollouts,
            compile_step=compile_step,
        )

        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        super()._setup_model()
        # the parent's buffer, sampling the per-step tensors of the valid steps only (see ValidStepsRecurrentRolloutBuffer)
        self.rollout_buffer = self._make_rollout_buffer()

    def learn(
        self: SelfRecurrentPPO_EWMA,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str | None = None,
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfRecurrentPPO_EWMA:
        """
        ``RecurrentPPO.learn`` (same arguments), overlapped with ``async_rollouts``: ``DecoupledAlgorithm.learn``,
        typed as this class's (as ``RecurrentPPO.learn`` is typed as ``RecurrentPPO``'s).
        """
        return super().learn(total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar)

    def predict(
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """
        ``RecurrentPPO.predict`` (same arguments); where it fails on an ``episode_start`` without one flag per
        observation, the error says so (:func:`~sb3_ewma.common.checks.check_episode_starts`).
        """
        try:
            return super().predict(observation, state, episode_start, deterministic)
        except (ValueError, RuntimeError):
            # sb3-contrib's zip of the sequence with the flags, which it skips when no flag is set
            check_episode_starts(episode_start, count_observations(observation, self.observation_space))
            raise

    def _collect_rollout_with(
        self,
        policy: Any,
        env: VecEnv,
        callback: BaseCallback,
        rollout_buffer: RolloutBuffer,
        n_rollout_steps: int,
        published: bool = True,
    ) -> bool:
        """
        ``RecurrentPPO.collect_rollouts`` acting with ``policy``, from the LSTM states on that policy's device (a
        collector process acts on the CPU for a learner on a GPU).
        """
        states = self._last_lstm_states
        if states is not None and states.pi[0].device != policy.device:
            self._last_lstm_states = tensors_to(states, policy.device)
        return super()._collect_rollout_with(policy, env, callback, rollout_buffer, n_rollout_steps, published)

    def _rollout_minibatches(self, buffer: RolloutBuffer) -> Iterator[Any]:
        # whole rollouts, cut into sequences at environment changes and episode starts (the buffer's rollout_samples,
        # see ValidStepsRecurrentRolloutBuffer.rollout_samples in sb3_ewma/recurrent_ppo_ewma/buffers.py); every
        # buffer of this algorithm is made by _make_rollout_buffer
        valid_steps_buffer = cast(_ValidStepsBuffer, buffer)
        return rollout_minibatches(buffer, self._minibatch_size, valid_steps_buffer.rollout_samples)

    def _make_rollout_buffer(self) -> _ValidStepsBuffer:
        lstm = self.policy.lstm_actor
        buffer_class = (
            ValidStepsRecurrentDictRolloutBuffer
            if isinstance(self.observation_space, spaces.Dict)
            else ValidStepsRecurrentRolloutBuffer
        )
        return buffer_class(
            self.n_steps,
            self.observation_space,
            self.action_space,
            (self.n_steps, lstm.num_layers, self.n_envs, lstm.hidden_size),
            self.device,
            gamma=self.gamma,
            gae_lambda=self.gae_lambda,
            n_envs=self.n_envs,
        )

    # RecurrentPPO.train() is PPO's with the policy run on the padded sequences from the stored LSTM states and the
    # losses averaged over the valid steps: the training iteration is PPO_EWMA's (DecoupledAlgorithm.train), on
    # minibatches whose per-step tensors hold the valid steps only, with these two evaluations.
    def _evaluate_policy(
        self, rollout_data: Any, actions: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor | None, Distribution | None]:
        values, log_prob, entropy, distribution = evaluate_valid_steps(
            self.policy,
            rollout_data.observations,
            actions,
            rollout_data.lstm_states,
            rollout_data.episode_starts,
            rollout_data.mask > 1e-8,
            with_distribution=self._needs_distributions,
        )
        return values, log_prob, entropy, distribution

    def _compiled_minibatch(
        self, rollout_data: Any, policy_objective: DecoupledPolicyObjective, clip_range_vf: float | None
    ) -> CompiledMinibatch:
        """The core's compiled minibatch, with the LSTMs' outputs at its valid steps (:func:`sequence_latents`)."""
        data = rollout_data
        sequences = (data.observations, data.lstm_states, data.episode_starts, data.mask > 1e-8)
        with self.training_precision.forward(self.device):
            lstm_pi, lstm_vf = sequence_latents(self.policy, *sequences)
            proximal_lstm_pi = None
            proximal_network = cast(RecurrentActorCriticPolicy | None, self.proximal.network)  # a copy of the policy
            if proximal_network is not None:
                with th.no_grad():
                    proximal_lstm_pi = actor_sequence_latent(proximal_network, *sequences)
        minibatch = super()._compiled_minibatch(rollout_data, policy_objective, clip_range_vf)
        return minibatch._replace(lstm_outputs=(lstm_pi, lstm_vf, proximal_lstm_pi))

    def _step_in_pieces(self) -> str | None:
        return "the LSTMs run eagerly between the compiled pieces"

    def to_sb3(self) -> RecurrentPPO:
        """
        This model as a plain sb3-contrib ``RecurrentPPO`` (same policy network and optimizer state, same ``predict``;
        the EWMA and the decoupled options are left out), whose ``save`` gives a zip that
        ``sb3_contrib.RecurrentPPO.load`` opens without this package. See :mod:`sb3_ewma.common.export`.
        """
        return to_parent_algorithm(self, RecurrentPPO)
