"""Phasic Policy Gradient with an EWMA of the policy as the proximal policy of its policy phase: :class:`PPG_EWMA`."""

from typing import Any

import torch as th
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.type_aliases import GymEnv, Schedule

from sb3_ewma.common.rules import RULES, check_hyperparameters
from sb3_ewma.ppg_ewma.ppg import PPG


class PPG_EWMA(PPG):
    """
    PPG-EWMA: :class:`~sb3_ewma.PPG` (Phasic Policy Gradient, Cobbe et al. 2020) whose policy phase uses the decoupled
    objectives of Hilton, Cobbe & Schulman (2021) with an exponentially weighted moving average (EWMA) of the policy as
    the proximal policy. The policy-phase arguments are SB3's ``PPO``'s, with the same defaults and meaning except
    ``n_epochs`` (default 1), then PPG's own and the decoupled options. With ``ewma_decay=None`` it is plain PPG.

    Papers: https://arxiv.org/abs/2009.04416 (PPG), https://arxiv.org/abs/2110.00641 (PPG-EWMA)
    Guide: :ref:`algos` (the EWMA and the decoupled options); the phases, architectures and memory: :ref:`ppg_ewma`

    :param policy: The policy model to use (MlpPolicy, CnnPolicy, ...; SB3's PPO policy classes are read as PPG's of the
        same kind)
    :param env: The environment to learn from (if registered in Gym, can be str)
    :param learning_rate: The learning rate of the policy phase, it can be a function
        of the current progress remaining (from 1 to 0)
    :param n_steps: The number of steps to run for each environment per update
        (i.e. rollout buffer size is n_steps * n_envs where n_envs is number of environment copies running in parallel)
    :param batch_size: Minibatch size of the policy phase
    :param n_epochs: Number of policy epochs ``E_pi`` per iteration (optimizing the policy objective and entropy)
    :param n_value_epochs: Number of value epochs ``E_V`` per iteration (optimizing the value loss); the first
        ``min(E_pi, E_V)`` epochs optimize both losses in the same steps
    :param gamma: Discount factor
    :param gae_lambda: Factor for trade-off of bias vs variance for Generalized Advantage Estimator
    :param clip_range: Clipping parameter of the ratio to the proximal policy, it can be a function of the current
        progress remaining (from 1 to 0). ``None`` turns clipping off (use the KL penalty ``kl_coef`` instead).
    :param clip_range_vf: Clipping parameter for the value function in the policy phase,
        it can be a function of the current progress remaining (from 1 to 0).
        This is a parameter specific to the OpenAI implementation. If None is passed (default),
        no clipping will be done on the value function.
        IMPORTANT: this clipping depends on the reward scaling.
    :param normalize_advantage: Whether to normalize or not the advantage (how: ``advantage_normalization``)
    :param ent_coef: Entropy coefficient for the loss calculation
    :param vf_coef: Value function coefficient for the loss calculation (policy phase)
    :param max_grad_norm: The maximum value for the gradient clipping (both phases)
    :param use_sde: Whether to use generalized State Dependent Exploration (gSDE)
        instead of action noise exploration (default: False)
    :param sde_sample_freq: Sample a new noise matrix every n steps when using gSDE
        Default: -1 (only sample at the beginning of the rollout)
    :param rollout_buffer_class: Rollout buffer class to use. If ``None``, it will be automatically selected.
    :param rollout_buffer_kwargs: Keyword arguments to pass to the rollout buffer on creation
    :param target_kl: Limit the KL divergence between updates: the iteration's policy epochs stop when the KL from the
        behavior policy exceeds ``1.5 * target_kl`` (value epochs go on). By default, there is no limit on the kl div.
    :param stats_window_size: Window size for the rollout logging, specifying the number of episodes to average
        the reported success rate, mean episode length, and mean reward over
    :param tensorboard_log: the log location for tensorboard (if None, no logging)
    :param policy_kwargs: additional arguments to be passed to the policy on creation (``arch`` is set by the argument
        of the same name)
    :param verbose: Verbosity level: 0 for no output, 1 for info messages (such as device or wrappers used), 2 for
        debug messages
    :param seed: Seed for the pseudo random generators
    :param device: Device (cpu, cuda, ...) on which the code should be run.
        Setting it to auto, the code will be run on the GPU if possible.
    :param n_policy_iterations: Iterations (rollouts) per policy phase ``N_pi``, ``>= 1``; an auxiliary phase follows
        each policy phase
    :param n_aux_epochs: Epochs ``E_aux`` of each auxiliary phase, ``>= 0`` (0: no auxiliary phase, nothing is stored)
    :param beta_clone: Weight ``>= 0`` of the behavioral-cloning term ``KL[pi_old, pi]`` of the auxiliary phase (the
        paper's 1 assumes returns of order one: see :ref:`ppg_ewma`)
    :param arch: Network architecture: ``"dual"`` (default, separate policy and value networks), ``"shared"`` or
        ``"detach"``
    :param aux_learning_rate: Learning rate of the auxiliary phase's optimizer (a number or a schedule of the progress
        remaining); ``None`` (default): ``learning_rate``
    :param aux_batch_size: Minibatch size of the auxiliary phase, which must divide its buffer of
        ``n_policy_iterations * n_steps * n_envs`` steps; ``None`` (default): ``batch_size``
    :param aux_micro_batch_size: Most samples on the device at once in the auxiliary phase (each minibatch's gradient is
        accumulated over micro-batches), at most ``aux_batch_size``; ``None`` (default): ``aux_batch_size``
    :param aux_optimizer_kwargs: Keyword arguments of the auxiliary phase's optimizer (the policy's
        ``optimizer_class``); ``None`` (default): the policy's ``optimizer_kwargs``
    :param aux_minibatch_sampling: ``minibatch_sampling`` of the auxiliary phase: ``"steps"`` (default) or
        ``"rollouts"`` (``aux_batch_size`` a multiple or a divisor of ``n_steps``). See :ref:`minibatch-sampling`.
    :param ewma_decay: Decay of the EWMA of the policy's parameters that is the proximal policy: a number in [0, 1), an
        age rule, ``"auto"`` (default), ``"paper"``, ``"max_age"`` or ``"mean_age"``, or ``None`` (no EWMA: plain PPG).
        See :ref:`ewma-decay`.
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
    :param minibatch_sampling: The policy phase's: ``"steps"`` (default, random steps) or ``"rollouts"`` (the authors'
        whole rollouts; ``batch_size`` a multiple or a divisor of ``n_steps``). See :ref:`minibatch-sampling`.
    :param log_gradient_noise_scale: Whether to log the gradient noise scale as ``train/gradient_noise_scale`` and
        ``aux/gradient_noise_scale`` (default False). See :ref:`gradient-noise-scale`.
    :param distributed: Data-parallel training under torchrun: ``None`` (default: when ``WORLD_SIZE > 1``), ``True``
        (required) or ``False`` (never); not saved with the model. See :ref:`distributed`.
    :param async_rollouts: Collect the next rollout while training on this one (one iteration stale; the proximal policy
        is the EWMA, with ``ewma_decay=None`` the policy at the start of the iteration): ``False`` (default), ``True``
        or ``"thread"`` (a collector thread), ``"process"`` (a collector process). See :ref:`async_rollouts`.
    :param compile_step: Compile each minibatch's loss and optimizer step, and the rollout's acting step, with
        ``torch.compile``: ``"auto"`` (default: when a ``learn`` call plans enough steps), ``True`` or ``False``.
        See :ref:`compile-step`.
    :param _init_setup_model: Whether or not to build the network at the creation of the instance
    """

    def __init__(
        self,
        policy: str | type[ActorCriticPolicy],
        env: GymEnv | str,
        learning_rate: float | Schedule = 3e-4,
        n_steps: int = 2048,
        batch_size: int = 64,
        n_epochs: int = 1,
        n_value_epochs: int = 1,
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
        rollout_buffer_class: type[RolloutBuffer] | None = None,
        rollout_buffer_kwargs: dict[str, Any] | None = None,
        target_kl: float | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: th.device | str = "auto",
        n_policy_iterations: int = 32,
        n_aux_epochs: int = 6,
        beta_clone: float = 1.0,
        arch: str = "dual",
        aux_learning_rate: float | Schedule | None = None,
        aux_batch_size: int | None = None,
        aux_micro_batch_size: int | None = None,
        aux_optimizer_kwargs: dict[str, Any] | None = None,
        aux_minibatch_sampling: str = "steps",
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
        check_hyperparameters({"ewma_decay": ewma_decay}, RULES)
        super().__init__(
            policy,
            env,
            learning_rate=learning_rate,
            n_steps=n_steps,
            batch_size=batch_size,
            n_epochs=n_epochs,
            n_value_epochs=n_value_epochs,
            gamma=gamma,
            gae_lambda=gae_lambda,
            clip_range=clip_range,
            clip_range_vf=clip_range_vf,
            normalize_advantage=normalize_advantage,
            ent_coef=ent_coef,
            vf_coef=vf_coef,
            max_grad_norm=max_grad_norm,
            use_sde=use_sde,
            sde_sample_freq=sde_sample_freq,
            rollout_buffer_class=rollout_buffer_class,
            rollout_buffer_kwargs=rollout_buffer_kwargs,
            target_kl=target_kl,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            policy_kwargs=policy_kwargs,
            verbose=verbose,
            seed=seed,
            device=device,
            n_policy_iterations=n_policy_iterations,
            n_aux_epochs=n_aux_epochs,
            beta_clone=beta_clone,
            arch=arch,
            aux_learning_rate=aux_learning_rate,
            aux_batch_size=aux_batch_size,
            aux_micro_batch_size=aux_micro_batch_size,
            aux_optimizer_kwargs=aux_optimizer_kwargs,
            aux_minibatch_sampling=aux_minibatch_sampling,
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
            _init_setup_model=False,
        )
        self.ewma_decay = ewma_decay

        if _init_setup_model:
            self._setup_model()

    @classmethod
    def _check_saved_data(cls, data: dict[str, Any], path: Any) -> None:
        """Files of :class:`PPG` load too (``ewma_decay=None``: no EWMA)."""
