import math
from typing import Any, ClassVar

import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, Schedule

from sb3_ewma.common.checks import check_policy_keywords
from sb3_ewma.common.decoupled.algorithm import DecoupledAlgorithm
from sb3_ewma.common.distributed import rank_local_settings
from sb3_ewma.common.export import to_sb3_ppo
from sb3_ewma.common.rules import check_arguments
from sb3_ewma.ppo_ewma.policies import CnnPolicy, MlpPolicy, MultiInputPolicy


# (mypy: SB3's PPO types batch_size as an int, DecoupledAlgorithm as sb3-contrib's int | None)
class PPO_EWMA(DecoupledAlgorithm, PPO):  # type: ignore[misc]
    """
    PPO-EWMA: Proximal Policy Optimization with the decoupled objectives of Hilton, Cobbe & Schulman (2021). The
    proximal policy, which limits each update through clipping and/or a KL penalty, is an exponentially weighted moving
    average (EWMA) of the policy's parameters; the behavior policy, which collected the data, is used only for
    importance sampling. A drop-in replacement for SB3's ``PPO``: its arguments, with the same defaults and meaning,
    then the decoupled options. With ``ewma_decay=None`` it is SB3's PPO, up to the importance-sampling cap
    ``imp_samp_max``.

    Paper: https://arxiv.org/abs/2110.00641
    Guide: :ref:`algos` (the method and each option), :ref:`batch_size_invariance`

    :param policy: The policy model to use (MlpPolicy, CnnPolicy, ...)
    :param env: The environment to learn from (if registered in Gym, can be str)
    :param learning_rate: The learning rate, it can be a function
        of the current progress remaining (from 1 to 0)
    :param n_steps: The number of steps to run for each environment per update
        (i.e. rollout buffer size is n_steps * n_envs where n_envs is number of environment copies running in parallel)
        NOTE: n_steps * n_envs must be greater than 1 (because of the advantage normalization)
        See https://github.com/pytorch/pytorch/issues/29372
    :param batch_size: Minibatch size
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
    :param rollout_buffer_class: Rollout buffer class to use. If ``None``, it will be automatically selected.
    :param rollout_buffer_kwargs: Keyword arguments to pass to the rollout buffer on creation
    :param target_kl: Limit the KL divergence between updates,
        because the clipping is not enough to prevent large update
        see issue #213 (cf https://github.com/hill-a/stable-baselines/issues/213)
        By default, there is no limit on the kl div.
    :param stats_window_size: Window size for the rollout logging, specifying the number of episodes to average
        the reported success rate, mean episode length, and mean reward over
    :param tensorboard_log: the log location for tensorboard (if None, no logging)
    :param policy_kwargs: additional arguments to be passed to the policy on creation (this package's policies also take
        ``head_init_scale``)
    :param verbose: Verbosity level: 0 for no output, 1 for info messages (such as device or wrappers used), 2 for
        debug messages
    :param seed: Seed for the pseudo random generators
    :param device: Device (cpu, cuda, ...) on which the code should be run.
        Setting it to auto, the code will be run on the GPU if possible.
    :param ewma_decay: Decay of the EWMA of the policy's parameters that is the proximal policy: a number in [0, 1), an
        age rule, ``"auto"`` (default), ``"paper"``, ``"max_age"`` or ``"mean_age"``, or ``None`` (no EWMA: SB3's PPO;
        bit for bit when it trains eagerly, ``compile_step=False``). See :ref:`ewma-decay`.
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
    :param minibatch_sampling: ``"steps"`` (default, SB3's random steps) or ``"rollouts"`` (the authors' whole rollouts;
        ``batch_size`` a multiple or a divisor of ``n_steps``). See :ref:`minibatch-sampling`.
    :param log_gradient_noise_scale: Whether to log the gradient noise scale as ``train/gradient_noise_scale`` (default
        False). See :ref:`gradient-noise-scale`.
    :param distributed: Data-parallel training under torchrun: ``None`` (default: when ``WORLD_SIZE > 1``), ``True``
        (required) or ``False`` (never); not saved with the model. See :ref:`distributed`.
    :param async_rollouts: Collect the next rollout while training on this one: ``False`` (default), ``True`` or
        ``"thread"`` (a collector thread), ``"process"`` (a collector process). See :ref:`async_rollouts`.
    :param compile_step: Compile each minibatch's loss and optimizer step, and the rollout's acting step, with
        ``torch.compile``: ``"auto"`` (default: when a ``learn`` call plans enough steps), ``True`` or ``False``.
        See :ref:`compile-step`.
    :param _init_setup_model: Whether or not to build the network at the creation of the instance
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpPolicy": MlpPolicy,
        "CnnPolicy": CnnPolicy,
        "MultiInputPolicy": MultiInputPolicy,
    }
    # files of SB3's PPO load too (the EWMA starts from the loaded policy)
    loadable_parent_policy_modules = ("stable_baselines3.common.policies",)

    def __init__(
        self,
        policy: str | type[ActorCriticPolicy],
        env: GymEnv | str,
        learning_rate: float | Schedule = 3e-4,
        n_steps: int = 2048,
        batch_size: int = 64,
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
        check_arguments(locals())
        check_policy_keywords(PPO_EWMA, policy, policy_kwargs)
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

        if _init_setup_model:
            self._setup_model()

    def to_sb3(self) -> PPO:
        """
        This model as a plain SB3 ``PPO`` (same policy network and optimizer state, same ``predict``; the EWMA and the
        decoupled options are left out), whose ``save`` gives a zip that ``stable_baselines3.PPO.load`` opens.
        See :mod:`sb3_ewma.common.export`.
        """
        return to_sb3_ppo(self)
