"""Phasic Policy Gradient with an EWMA of the policy as the proximal policy of its policy phase: :class:`PPG_EWMA`."""

from typing import Any

import torch as th
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.type_aliases import GymEnv, Schedule

from sb3_ewma.common.decoupled.options import check_ewma_decay
from sb3_ewma.ppg_ewma.ppg import PPG


class PPG_EWMA(PPG):
    """
    PPG-EWMA: Phasic Policy Gradient (Cobbe et al. 2020, https://arxiv.org/abs/2009.04416) whose policy phase uses the
    decoupled objectives with an EWMA of the policy as the proximal policy (Hilton, Cobbe & Schulman 2021,
    https://arxiv.org/abs/2110.00641). With ``ewma_decay=None`` it is plain PPG (see :class:`PPG`).

    Training alternates two phases:

    - policy phase, ``n_policy_iterations`` (``N_pi``) iterations, each a rollout followed by ``n_epochs`` (``E_pi``)
      epochs on the policy loss (decoupled clipped or KL-penalized objective, plus entropy) and ``n_value_epochs``
      (``E_V``) epochs on the value loss. The states and value targets of every iteration are stored in a host-memory
      auxiliary buffer (observations in their own dtype). The proximal EWMA, of the policy side only (trunk and policy
      head), is reset at the start of every policy phase that follows an auxiliary phase (not with ``n_aux_epochs=0``)
      and updated after every optimizer step on the policy loss (not after value-only steps, even with a shared trunk).
    - auxiliary phase: the policy's outputs ``pi_old`` are computed once on all stored states, then
      ``n_aux_epochs`` (``E_aux``) epochs minimize ``0.5 * MSE(aux value head, V_targ) + beta_clone * KL[pi_old, pi]
      + 0.5 * MSE(value head, V_targ)`` with an Adam optimizer of its own, in minibatches of ``aux_batch_size`` that
      are accumulated from micro-batches of ``aux_micro_batch_size`` (only one micro-batch is on the device at a time).
      The value targets are not recomputed. The EWMA is not updated in this phase.

    The network architecture is chosen with ``arch`` (see :mod:`sb3_ewma.ppg_ewma.policies`): ``"dual"`` (separate
    policy and value networks), ``"shared"`` or ``"detach"`` (one network, value head on the detached trunk); the
    auxiliary value head always sits on the policy trunk.

    The policy-phase arguments have the names, defaults and meaning of SB3's ``PPO`` and of ``PPO_EWMA``, except
    ``n_epochs`` (PPG's ``E_pi``, default 1). The paper's Procgen settings: ``n_steps=256`` with 64 environments per
    process, ``batch_size=2048`` (8 minibatches), ``learning_rate=5e-4``, ``gamma=0.999``, ``ent_coef=0.01``,
    ``aux_batch_size=4 * 256`` (4 rollouts of one environment), no gradient clipping (``max_grad_norm=float("inf")``).

    :param policy: The policy model to use (MlpPolicy, CnnPolicy, MultiInputPolicy or a :class:`PPGPolicy` subclass;
        SB3's PPO policy classes are read as PPG's of the same kind)
    :param env: The environment to learn from (if registered in Gym, can be str)
    :param learning_rate: The learning rate of the policy phase, it can be a function
        of the current progress remaining (from 1 to 0)
    :param n_steps: The number of steps to run for each environment per iteration
        (i.e. rollout buffer size is n_steps * n_envs where n_envs is number of environment copies running in parallel)
    :param batch_size: Minibatch size of the policy phase
    :param n_epochs: Number of policy epochs ``E_pi`` per iteration (optimizing the policy objective and entropy)
    :param n_value_epochs: Number of value epochs ``E_V`` per iteration (optimizing the value loss). The first
        ``min(E_pi, E_V)`` epochs optimize the sum of both losses in the same steps.
    :param gamma: Discount factor
    :param gae_lambda: Factor for trade-off of bias vs variance for Generalized Advantage Estimator
    :param clip_range: Clipping parameter ``eps`` of the ratio ``pi / pi_prox``, it can be a function of the current
        progress remaining (from 1 to 0). ``None`` turns clipping off (use the KL penalty ``kl_coef`` instead).
    :param clip_range_vf: Clipping parameter for the value function in the policy phase,
        it can be a function of the current progress remaining (from 1 to 0).
        If None is passed (default), no clipping will be done on the value function.
        IMPORTANT: this clipping depends on the reward scaling.
    :param normalize_advantage: Whether to normalize or not the advantage (see ``advantage_normalization``)
    :param ent_coef: Entropy coefficient for the loss calculation
    :param vf_coef: Value function coefficient of the policy phase's loss
    :param max_grad_norm: The maximum value for the gradient clipping (both phases)
    :param use_sde: Whether to use generalized State Dependent Exploration (gSDE)
        instead of action noise exploration (default: False)
    :param sde_sample_freq: Sample a new noise matrix every n steps when using gSDE
        Default: -1 (only sample at the beginning of the rollout)
    :param rollout_buffer_class: Rollout buffer class to use. If ``None``, it will be automatically selected.
    :param rollout_buffer_kwargs: Keyword arguments to pass to the rollout buffer on creation
    :param target_kl: Limit the KL divergence between updates: stop the iteration's policy epochs when the estimated
        KL from the behavior policy (as in SB3) exceeds ``1.5 * target_kl`` (value epochs go on). No limit by default.
    :param stats_window_size: Window size for the rollout logging, specifying the number of episodes to average
        the reported success rate, mean episode length, and mean reward over
    :param tensorboard_log: the log location for tensorboard (if None, no logging)
    :param policy_kwargs: additional arguments to be passed to the policy on creation (``arch`` is set by the
        argument of the same name)
    :param verbose: Verbosity level: 0 for no output, 1 for info messages (such as device or wrappers used), 2 for
        debug messages
    :param seed: Seed for the pseudo random generators
    :param device: Device (cpu, cuda, ...) on which the code should be run.
        Setting it to auto, the code will be run on the GPU if possible.
    :param n_policy_iterations: Iterations (rollouts) per policy phase ``N_pi``; an auxiliary phase follows each
        policy phase. The auxiliary buffer holds ``N_pi * n_steps * n_envs`` steps.
    :param n_aux_epochs: Epochs ``E_aux`` over the auxiliary buffer in each auxiliary phase (0: no auxiliary phase,
        nothing is stored).
    :param beta_clone: Weight of the behavioral-cloning term ``KL[pi_old, pi]`` of the auxiliary phase, ``>= 0``.
        It is weighed against ``0.5 * MSE`` of the returns, so the paper's 1 assumes returns of order one, as with
        normalized rewards (``VecNormalize(norm_reward=True)``, the paper's runs): with raw returns of order 100 the
        auxiliary phase can move the policy far (logged as ``aux/clone_kl``).
    :param arch: Network architecture: ``"dual"`` (default), ``"shared"`` or ``"detach"``.
    :param aux_learning_rate: Learning rate of the auxiliary phase's Adam optimizer (a number or a schedule of the
        progress remaining); ``None`` (default): the policy phase's ``learning_rate``.
    :param aux_batch_size: Minibatch size (per optimizer step) of the auxiliary phase; must divide the buffer size
        ``N_pi * n_steps * n_envs``. ``None`` (default): ``batch_size``, i.e. ``N_pi * n_steps * n_envs / batch_size``
        auxiliary steps per epoch. The paper used 4 rollouts of one environment (``4 * n_steps``).
    :param aux_micro_batch_size: Largest number of samples sent to the device at once in the auxiliary phase (also
        when computing ``pi_old``): each minibatch's gradient is accumulated over micro-batches of this size, so that
        ``aux_batch_size`` does not bound device memory. ``None`` (default): ``aux_batch_size``.
    :param aux_optimizer_kwargs: Keyword arguments of the auxiliary phase's optimizer (the policy's
        ``optimizer_class``), e.g. ``dict(eps=1e-8)``; ``None`` (default): the policy's ``optimizer_kwargs`` (SB3's
        Adam default ``eps=1e-5``; the authors use PyTorch's ``1e-8`` in both optimizers).
    :param aux_minibatch_sampling: The same for the auxiliary phase: ``"steps"`` (default, random steps) or
        ``"rollouts"`` (the authors': whole rollouts of one environment, ``aux_batch_size / n_steps`` per minibatch;
        ``aux_batch_size`` must be a multiple or a divisor of ``n_steps``).
    :param ewma_decay: Decay ``beta_prox`` in [0, 1) of the EWMA of the policy parameters (trunk and policy head)
        that serves as the proximal policy, updated after every optimizer step on the policy loss and reset at the start
        of every policy phase that follows an auxiliary phase; its center of mass is ``beta / (1 - beta)`` optimizer
        steps. A name (:mod:`sb3_ewma.common.ewma_age`) sets the center of mass from
        the minibatches per epoch ``M`` and the policy epochs ``E``: ``"paper"`` ``M`` (the paper's setting),
        ``"max_age"`` ``E * M``, ``"mean_age"`` ``E * M / 2``; ``"auto"`` (default) is ``"mean_age"`` with
        several epochs, ``"paper"`` with one. ``None``: no
        EWMA, the proximal policy is the behavior policy (plain PPG).
    :param kl_coef: Coefficient ``beta`` of the decoupled KL penalty ``KL[pi_prox, pi]`` (0: no penalty). Use it alone
        with ``clip_range=None`` for the decoupled KL-penalized objective, or together with clipping.
    :param kl_estimator: How the KL penalty is computed: ``"sample"`` (the authors' ``0.5 * mean(log(pi/pi_prox)^2)``
        over the taken actions) or ``"exact"`` (the KL divergence of the two action distributions).
    :param imp_samp_max: Cap on the importance weight ``pi / pi_behav`` (paper: 100), 0 for no cap; must be > 1.
    :param advantage_normalization: ``"minibatch"`` (SB3's, each minibatch by its own statistics; default) or
        ``"ewma"`` (the paper's: each iteration by the mean and std of EWMA moments over iterations). Only used when
        ``normalize_advantage=True``.
    :param advantage_ewma_decay: Decay in [0, 1) per iteration of the advantage moments for
        ``advantage_normalization="ewma"`` (0: the current iteration only; span ``2 / (1 - decay) - 1`` iterations).
    :param minibatch_sampling: How each policy epoch is split into minibatches: ``"steps"`` (default, SB3's: random steps)
        or ``"rollouts"`` (the authors': whole ``n_steps``-step rollouts of ``batch_size / n_steps`` environments per
        minibatch, environments in random order; ``batch_size`` must be a multiple of ``n_steps``, or divide it:
        then each minibatch is a contiguous piece of one environment's rollout).
    :param log_gradient_noise_scale: Log the gradient noise scale ``B_simple`` (McCandlish et al. 2018) as
        ``train/gradient_noise_scale`` (policy phase) and ``aux/gradient_noise_scale`` (auxiliary phase), estimated
        after every epoch from the minibatch gradients of the epoch and their mean, smoothed with EMAs (see
        :mod:`sb3_ewma.common.gradient_noise`). It approximates the critical batch size, below which the batch
        size-invariance rules hold. Needs at least 2 minibatches per epoch; costs one copy of the gradient and one
        norm per optimizer step, so it is off by default.
    :param distributed: Data-parallel training on ``torch.distributed`` (documentation: "Data-Parallel
        Training"): ``None`` (default) joins, or creates from torchrun's environment, the default process group when
        ``WORLD_SIZE > 1``; ``True`` requires it (also with one rank); ``False`` never (each process trains its own
        model). Hyperparameters are per rank (``n_envs``, ``n_steps``, ``batch_size``); gradients are averaged over
        the ranks; ``num_timesteps`` and ``total_timesteps`` count the environment steps of all ranks; rank 0 alone
        logs, saves and runs the callbacks. Not saved with the model.
    :param async_rollouts: Overlap rollouts with training: each policy-phase iteration trains on the rollout collected
        by the parameters of the previous iteration while a collector collects the next one with a snapshot of
        the current parameters (staleness of exactly one iteration; the first rollout of each ``learn`` call is fresh).
        The behavior log-probabilities are those stored at collection; the proximal policy is the EWMA (EWMA off, as in
        :class:`PPG`: the policy at the start of the iteration). Collection goes on during the auxiliary phase.
        ``True`` or ``"thread"``: a collector thread, whose callbacks' ``on_step`` runs on that thread (it overlaps
        where torch and the environments release the GIL: larger networks, C++ environments); ``"process"``: a
        forked collector process (CPU policies; for Python-heavy loops such as CartPole with a small MLP), whose
        rollouts are replayed to the callbacks at the hand-off, the next ``learn`` call then starting with
        ``env.reset()`` (documentation: "Overlapped Rollouts").
    :param compile_step: Compile each minibatch's loss (forward and backward passes) and optimizer step with
        ``torch.compile``: ``"auto"`` (default) when a ``learn`` call plans enough optimizer steps to earn back the
        compilation, ``True`` always, ``False`` never (the parent's eager step, operation for operation). Policies
        other than SB3's categorical and diagonal Gaussian ``ActorCriticPolicy`` train eagerly (one line says why).
        See the performance guide.
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
        check_ewma_decay(ewma_decay)
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
