import math
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch as th
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from sb3_contrib.common.maskable.utils import is_masking_supported
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule
from stable_baselines3.common.vec_env import VecEnv

from sb3_ewma.common.checks import check_action_masks, check_policy_keywords, count_observations, warn_at_caller
from sb3_ewma.common.decoupled.algorithm import DecoupledAlgorithm
from sb3_ewma.common.distributed import rank_local_settings
from sb3_ewma.common.distributions import policy_latents
from sb3_ewma.common.export import to_parent_algorithm
from sb3_ewma.common.finite import naming_non_finite_observations
from sb3_ewma.common.rules import CONTRIB_RULES, check_arguments, trains
from sb3_ewma.maskable_ppo_ewma.policies import CnnPolicy, MlpPolicy, MultiInputPolicy

SelfMaskablePPO_EWMA = TypeVar("SelfMaskablePPO_EWMA", bound="MaskablePPO_EWMA")

NO_ACTION_MASKS = (
    "MaskablePPO_EWMA asks the environment for the valid actions at every step of learn(), and this environment has no"
    " action_masks() method: wrap it with sb3-contrib's ActionMasker (sb3_contrib.common.wrappers.ActionMasker(env,"
    " mask_fn), where mask_fn(env) returns the boolean mask of the valid actions), or with"
    " sb3_ewma.envs.action_masks.ActionMaskOrAllValid(env) (every action valid)"
)


def proximal_masked_distribution(network: MaskableActorCriticPolicy, minibatch: Any) -> Distribution:
    """The proximal network's distribution on a minibatch, with the action masks stored in the buffer."""
    return network.get_distribution(minibatch.observations, action_masks=minibatch.action_masks)


class MaskablePPO_EWMA(DecoupledAlgorithm, MaskablePPO):
    """
    MaskablePPO-EWMA: sb3-contrib's ``MaskablePPO`` (PPO with invalid-action masking) with the decoupled objectives and
    an exponentially weighted moving average (EWMA) of the policy as the proximal policy, as :class:`~sb3_ewma.PPO_EWMA`
    does for PPO: ``MaskablePPO``'s arguments, with the same defaults and meaning, then the decoupled options. With
    ``ewma_decay=None`` it is ``MaskablePPO``, up to the importance-sampling cap ``imp_samp_max``.

    Paper: https://arxiv.org/abs/2110.00641
    Guide: :ref:`algos` (the method and each option); the action masks: :ref:`maskable_ppo_ewma`

    :param policy: The policy model to use (MlpPolicy, CnnPolicy, ...)
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
    :param rollout_buffer_class: Rollout buffer class to use. If ``None``, it will be automatically selected.
    :param rollout_buffer_kwargs: Keyword arguments to pass to the rollout buffer on creation
    :param target_kl: Limit the KL divergence between updates,
        because the clipping is not enough to prevent large update
        see issue #213 (cf https://github.com/hill-a/stable-baselines/issues/213)
        By default, there is no limit on the kl div.
    :param stats_window_size: Window size for the rollout logging, specifying the number of episodes to average
        the reported success rate, mean episode length, and mean reward over
    :param tensorboard_log: the log location for tensorboard (if None, no logging)
    :param policy_kwargs: additional arguments to be passed to the policy on creation
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
    :param minibatch_sampling: ``"steps"`` (default, random steps, with their action masks) or ``"rollouts"`` (the
        authors' whole rollouts; ``batch_size`` a multiple or a divisor of ``n_steps``). See :ref:`minibatch-sampling`.
    :param log_gradient_noise_scale: Whether to log the gradient noise scale as ``train/gradient_noise_scale`` (default
        False). See :ref:`gradient-noise-scale`.
    :param distributed: Data-parallel training under torchrun: ``None`` (default: when ``WORLD_SIZE > 1``), ``True``
        (required) or ``False`` (never); not saved with the model. See :ref:`distributed`.
    :param async_rollouts: Collect the next rollout while training on this one: ``False`` (default), ``True`` or
        ``"thread"`` (a collector thread), ``"process"`` (a collector process). See :ref:`async_rollouts`.
    :param compile_step: Compile each minibatch's loss and optimizer step, and the rollout's acting step, with
        ``torch.compile``: ``"auto"`` (default:
        when a ``learn`` call plans enough optimizer steps), ``True`` or ``False``. See :ref:`compile-step`.
    :param _init_setup_model: Whether or not to build the network at the creation of the instance
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpPolicy": MlpPolicy,
        "CnnPolicy": CnnPolicy,
        "MultiInputPolicy": MultiInputPolicy,
    }

    # learn()'s use_masking during a learn call (True otherwise), read by the rollout loop, also when a collector runs it
    _use_masking: bool = True
    _parent_collect_rollouts = staticmethod(MaskablePPO.collect_rollouts)
    _proximal_distribution_of = staticmethod(proximal_masked_distribution)
    _unsaved_attributes = ("_use_masking",)
    _compiled_evaluation = "action_masks"

    def __init__(
        self,
        policy: str | type[MaskableActorCriticPolicy],
        env: GymEnv | str,
        learning_rate: float | Schedule = 3e-4,
        n_steps: int = 2048,
        batch_size: int | None = 64,
        n_epochs: int = 10,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        clip_range: float | Schedule | None = 0.2,
        clip_range_vf: float | Schedule | None = None,
        normalize_advantage: bool = True,
        ent_coef: float = 0.0,
        vf_coef: float = 0.5,
        max_grad_norm: float = 0.5,
        rollout_buffer_class: type[RolloutBuffer] | None = None,
        rollout_buffer_kwargs: dict[str, Any] | None = None,
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
        check_policy_keywords(MaskablePPO_EWMA, policy, policy_kwargs)
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
            rollout_buffer_class=rollout_buffer_class,
            rollout_buffer_kwargs=rollout_buffer_kwargs,
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

        self._warn_without_action_masks()

        if _init_setup_model:
            self._setup_model()

    def set_env(self, env: GymEnv | str, force_reset: bool = True) -> None:
        """``MaskablePPO.set_env``, with a warning when the environment has no action masks."""
        super().set_env(env, force_reset=force_reset)
        self._warn_without_action_masks()

    def _warn_without_action_masks(self) -> None:
        # a warning, not an error: MaskablePPO trains without masks too (learn(use_masking=False)) and predicts
        # without them (action_masks=None)
        if self.env is not None and not is_masking_supported(self.env):
            warn_at_caller(f"{NO_ACTION_MASKS}; learn() raises until then, unless called with use_masking=False")

    def collect_rollouts(
        self,
        env: VecEnv,
        callback: BaseCallback,
        rollout_buffer: RolloutBuffer,
        n_rollout_steps: int,
        use_masking: bool = True,
    ) -> bool:
        """
        ``MaskablePPO.collect_rollouts`` (same arguments), through ``DecoupledAlgorithm``'s; inside ``learn``
        the masks are used when both this ``use_masking`` and ``learn``'s ask for them.
        """
        masking_of_learn = self._use_masking
        self._use_masking = use_masking and masking_of_learn
        try:
            return super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps)
        finally:
            self._use_masking = masking_of_learn

    def _rollout_loop_kwargs(self) -> dict[str, Any]:
        # MaskablePPO.collect_rollouts with the masks when learn asks for them
        return {"use_masking": self._use_masking}

    # MaskablePPO.train() is PPO's with the action masks passed to the policy evaluation: the training iteration is
    # PPO_EWMA's (DecoupledAlgorithm.train) with these two evaluations.
    def _evaluate_policy(
        self, rollout_data: Any, actions: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor | None, Distribution | None]:
        if not self._needs_distributions:
            values, log_prob, entropy = self.policy.evaluate_actions(
                rollout_data.observations, actions, action_masks=rollout_data.action_masks
            )
            return values, log_prob, entropy, None
        # as MaskableActorCriticPolicy.evaluate_actions, keeping the distribution for the exact KL
        latent_pi, latent_vf = policy_latents(self.policy, rollout_data.observations)
        distribution = self.policy._get_action_dist_from_latent(latent_pi)
        distribution.apply_masking(rollout_data.action_masks)
        return self.policy.value_net(latent_vf), distribution.log_prob(actions), distribution.entropy(), distribution

    def to_sb3(self) -> MaskablePPO:
        """
        This model as a plain sb3-contrib ``MaskablePPO`` (same policy network and optimizer state, same ``predict``;
        the EWMA and the decoupled options are left out), whose ``save`` gives a zip that
        ``sb3_contrib.MaskablePPO.load`` opens without this package. See :mod:`sb3_ewma.common.export`.
        """
        return to_parent_algorithm(self, MaskablePPO)

    def learn(  # type: ignore[override]  # MaskablePPO's order: use_masking before progress_bar
        self: SelfMaskablePPO_EWMA,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str | None = None,
        reset_num_timesteps: bool = True,
        use_masking: bool = True,
        progress_bar: bool = False,
    ) -> SelfMaskablePPO_EWMA:
        """
        ``MaskablePPO.learn`` (same arguments, in its order), overlapped with ``async_rollouts``: ``use_masking`` asks
        the environments for their action masks at every step, also on a collector.
        """
        # where the parent's rollout would fail (a call that trains)
        if use_masking and trains(total_timesteps) and self.env is not None and not is_masking_supported(self.env):
            raise ValueError(f"{NO_ACTION_MASKS}; or call learn(use_masking=False) to train without masks")
        self._use_masking = use_masking
        try:
            return super().learn(total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar)
        finally:
            del self._use_masking  # back to the class's True

    def predict(  # type: ignore[override]
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """``MaskablePPO.predict``; masks checked first; where it fails on a non-finite observation, the error says so."""
        check_action_masks(action_masks, self.action_space, count_observations(observation, self.observation_space))
        with naming_non_finite_observations(observation):
            return MaskablePPO.predict(self, observation, state, episode_start, deterministic, action_masks)
