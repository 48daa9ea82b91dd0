"""Phasic Policy Gradient (Cobbe et al. 2020): :class:`PPG`, its policy phase and its auxiliary phase."""

import contextlib
import math
import time
import warnings
from collections.abc import Callable
from typing import Any, ClassVar, cast

import numpy as np
import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule
from stable_baselines3.common.utils import FloatSchedule, update_learning_rate
from stable_baselines3.common.vec_env import VecEnv

from sb3_ewma.common.checks import HyperparameterError, check_policy_keywords
from sb3_ewma.common.decoupled.algorithm import DecoupledAlgorithm
from sb3_ewma.common.decoupled.objective import mean_of
from sb3_ewma.common.distributed import rank_local_settings
from sb3_ewma.common.finite import scheduled_value
from sb3_ewma.common.format import human_bytes
from sb3_ewma.common.rules import check_arguments
from sb3_ewma.common.saved_files import saved_model_name
from sb3_ewma.ppg_ewma.auxiliary import auxiliary_losses, compute_old_policy, lean_auxiliary_losses
from sb3_ewma.ppg_ewma.buffers import AuxiliaryBuffer
from sb3_ewma.ppg_ewma.checks import PPG_RELATIONS, PPG_RULES, aux_batch_size_problem
from sb3_ewma.ppg_ewma.export import ppg_to_sb3_ppo
from sb3_ewma.ppg_ewma.policies import (
    CnnPolicy,
    MlpPolicy,
    MultiInputPolicy,
    PPGPolicy,
    is_ppg_policy_parameter,
    ppg_policy_class,
)

# the settings that the auxiliary minibatches' fit to the auxiliary buffer depends on (besides the environments)
_AUX_BUFFER_SETTINGS = ("n_steps", "batch_size", "n_policy_iterations", "aux_batch_size", "aux_minibatch_sampling")


class PPG(DecoupledAlgorithm, PPO):  # type: ignore[misc]  # batch_size, as PPO_EWMA
    """
    Phasic Policy Gradient (PPG; Cobbe et al. 2020): PPO's policy phase, whose proximal policy is the behavior policy as
    in PPO, alternating with an auxiliary phase that distills the value function into the policy network;
    :class:`~sb3_ewma.PPG_EWMA` adds an EWMA of the policy as the proximal policy. The policy-phase arguments are SB3's
    ``PPO``'s, with the same defaults and meaning except ``n_epochs`` (default 1), then PPG's own and the decoupled
    options.

    Paper: https://arxiv.org/abs/2009.04416
    Guide: :ref:`algos` (the decoupled options); the phases, architectures and memory: :ref:`ppg_ewma`

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
        is the policy at the start of the iteration): ``False`` (default), ``True`` or ``"thread"`` (a collector
        thread), ``"process"`` (a collector process). See :ref:`async_rollouts`.
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
    # narrowed to the policies this class builds, as sb3-contrib's MaskablePPO and SB3's SAC narrow their `policy`
    # (a mutable attribute, so pyright wants the parent's type unchanged)
    policy: PPGPolicy  # pyright: ignore[reportIncompatibleVariableOverride]
    aux_buffer: AuxiliaryBuffer | None
    aux_minibatch_sampling: str = "steps"  # files saved before the option existed: "steps"
    _is_proximal_parameter = staticmethod(is_ppg_policy_parameter)
    # the auxiliary buffer is not saved: a loaded model restarts its current policy phase
    _unsaved_attributes = ("aux_buffer", "aux_lr_schedule", "aux_gradient_noise", "_policy_phase_time")
    _modules_saved_in_data = {"aux_optimizer": "aux_optimizer_state"}

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
        check_arguments(locals(), PPG_RULES, PPG_RELATIONS)
        # SB3's PPO policy classes as PPG's of the same kind: a script written for PPO runs unchanged
        policy = ppg_policy_class(policy)
        check_policy_keywords(type(self), policy, policy_kwargs)
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
            policy_kwargs={**(policy_kwargs or {}), "arch": arch},
            verbose=verbose,
            seed=seed,
            device=device,
            _init_setup_model=False,
        )
        self.n_value_epochs = n_value_epochs
        self.n_policy_iterations = int(n_policy_iterations)
        self.n_aux_epochs = int(n_aux_epochs)
        self.beta_clone = float(beta_clone)
        self.arch = arch
        self.aux_learning_rate = aux_learning_rate
        # as given (None: the default), so that `load(..., batch_size=...)` moves the defaults with it
        self.aux_batch_size = None if aux_batch_size is None else int(aux_batch_size)
        self.aux_micro_batch_size = None if aux_micro_batch_size is None else int(aux_micro_batch_size)
        self.aux_optimizer_kwargs = aux_optimizer_kwargs
        self.aux_minibatch_sampling = aux_minibatch_sampling
        self._set_decoupled_options(
            ewma_decay=None,
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
        # the position in the phase schedule, saved with the model
        self.phase = 0  # index of the current policy phase
        self.phase_iteration = 0  # policy iterations done in the current policy phase
        self.n_aux_phases = 0  # auxiliary phases done (fewer than the phases with n_aux_epochs=0)
        self._policy_phase_time = 0.0  # seconds of rollouts and updates in the current policy phase

        if _init_setup_model:
            self._setup_model()

    def _check_buffer_sizes(self) -> None:
        """Checks that need the number of environments, before anything is built (the environment is not stepped)."""
        rollout_size = self.n_steps * self.n_envs
        if self.normalize_advantage and rollout_size <= 1:
            raise HyperparameterError(f"n_steps * n_envs must be > 1 with normalize_advantage=True, got {rollout_size}")
        problem = self._aux_batch_size_problem()
        if problem is None:
            return
        if self._aux_minibatch_may_be_truncated():
            # batch_size's default, which SB3's PPO takes whatever the rollout: the last auxiliary minibatch of each
            # epoch is smaller, as the policy phase's is
            warnings.warn(
                f"{problem}. The auxiliary phase takes batch_size's value, so its last minibatch of each epoch will be "
                f"truncated",
                UserWarning,
                stacklevel=2,
            )
            return
        if not self._loading or self._load_keywords & set(_AUX_BUFFER_SETTINGS):
            raise ValueError(problem)  # the constructor's, or load's keywords that set it
        # a saved model loaded with fewer environments (to predict, evaluate, record videos): it cannot learn as it is
        warnings.warn(f"{problem}; learn() will raise until then", UserWarning, stacklevel=2)

    def _aux_minibatch_may_be_truncated(self) -> bool:
        """Whether ``aux_batch_size`` is ``batch_size``'s (its default) with random steps: any size then trains."""
        return self._aux_minibatch_size == self.batch_size and self.aux_minibatch_sampling == "steps"

    def _aux_batch_size_problem(self) -> str | None:
        """Why ``aux_batch_size`` does not fit the auxiliary buffer of this number of environments, or None."""
        if self.n_aux_epochs == 0:
            return None
        return aux_batch_size_problem(
            type(self).__name__,
            self.n_policy_iterations,
            self.n_steps,
            self.n_envs,
            self._minibatch_size,
            self._aux_minibatch_size,
        )

    @property
    def _aux_minibatch_size(self) -> int:
        """Samples per auxiliary minibatch: ``aux_batch_size``, by default ``batch_size``."""
        return self._minibatch_size if self.aux_batch_size is None else int(self.aux_batch_size)

    @property
    def _aux_minibatches_per_epoch(self) -> int:
        """Optimizer steps per auxiliary epoch: the auxiliary buffer's steps over ``_aux_minibatch_size``."""
        return math.ceil(self.n_policy_iterations * self.n_steps * self.n_envs / self._aux_minibatch_size)

    @property
    def _aux_micro_batch_size(self) -> int:
        """Most samples on the device at once in the auxiliary phase: ``aux_micro_batch_size``, by default the minibatch."""
        return self._aux_minibatch_size if self.aux_micro_batch_size is None else int(self.aux_micro_batch_size)

    def _setup_model(self) -> None:
        # load's arch keyword against the saved policy's (its policy_kwargs), which SB3's load builds whatever the keyword
        built_arch = self.policy_kwargs.get("arch", self.arch)
        if built_arch != self.arch:
            raise ValueError(
                f"arch={self.arch!r} differs from the saved policy's arch={built_arch!r}: a saved policy keeps its "
                "architecture, as SB3's load refuses other policy_kwargs"
            )
        self._check_buffer_sizes()
        super()._setup_model()

    def _setup_decoupled_training(self) -> None:
        """
        After ``PPO._setup_model`` (also on load): the auxiliary phase's optimizer and buffer, then the decoupled
        training (the proximal policy; the ranks, which share the auxiliary optimizer's state too).
        """
        # the auxiliary buffer is not saved: a loaded model restarts its current policy phase (a no-op when building;
        # without an auxiliary phase there is no buffer to refill)
        if self.n_aux_epochs > 0:
            self.phase_iteration = 0
        self._policy_phase_time = 0.0

        self.aux_lr_schedule = self.lr_schedule if self.aux_learning_rate is None else FloatSchedule(self.aux_learning_rate)
        aux_optimizer_kwargs = self.policy.optimizer_kwargs if self.aux_optimizer_kwargs is None else self.aux_optimizer_kwargs
        # called as the policy calls it (SB3's optimizers take lr; torch's Optimizer base class does not)
        optimizer_class = cast(Callable[..., th.optim.Optimizer], self.policy.optimizer_class)
        self.aux_optimizer = optimizer_class(self.policy.parameters(), lr=self.aux_lr_schedule(1), **aux_optimizer_kwargs)
        self.aux_buffer = None
        if self.n_aux_epochs > 0:
            self.aux_buffer = AuxiliaryBuffer(
                self.n_policy_iterations, self.n_steps, self.n_envs, self.observation_space, device=self.device
            )
            if self.verbose >= 1:
                print(
                    f"PPG auxiliary buffer: {self.aux_buffer.capacity} steps, "
                    f"{human_bytes(self.aux_buffer.nbytes)} of host memory (+ pi_old)"
                )
        super()._setup_decoupled_training()
        self.aux_gradient_noise = self._new_gradient_noise(
            self._aux_minibatch_size, self._aux_minibatches_per_epoch, "aux/gradient_noise_scale"
        )

    @property
    def _aux_rollout_length(self) -> int | None:
        """Rows per auxiliary minibatch unit: ``n_steps`` (whole rollouts) or None (random steps)."""
        return self.n_steps if self.aux_minibatch_sampling == "rollouts" else None

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        # the auxiliary optimizer, if any (none in the copy that ``save`` writes, where it is the data entry
        # aux_optimizer_state: the file opens with stable_baselines3.PPO.load)
        state_dicts, torch_variables = super()._get_torch_save_params()
        return ([*state_dicts, "aux_optimizer"] if self.aux_optimizer is not None else state_dicts), torch_variables

    def collect_rollouts(
        self, env: VecEnv, callback: BaseCallback, rollout_buffer: RolloutBuffer, n_rollout_steps: int
    ) -> bool:
        # unchanged, only timed (rollouts are part of the policy phase; overlapped, they run beside training and the
        # hand-off's wait is logged as time/collection_wait_s)
        if self.overlapped_rollouts is not None:
            return super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps)
        start = time.perf_counter()
        result = super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps)
        self._policy_phase_time += time.perf_counter() - start
        return result

    def train(self) -> None:
        """
        One iteration of the policy phase on the rollout buffer (``n_epochs`` policy epochs and ``n_value_epochs``
        value epochs: the training core's loop), then, at the end of every ``n_policy_iterations``-th iteration, the
        auxiliary phase.
        """
        start = time.perf_counter()
        if self.phase_iteration == 0 and self.n_aux_epochs > 0:
            # a new policy phase: the auxiliary phase moved the policy, so the EWMA restarts from it (without an
            # auxiliary phase the EWMA goes on, as in PPO-EWMA)
            assert self.aux_buffer is not None
            self.aux_buffer.reset()
            self.proximal.restart()
        else:
            self.proximal.start_iteration()
        # the value epochs go on when target_kl stops the policy epochs
        self._train_iteration(n_value_epochs=self.n_value_epochs, value_outlives_target_kl=True)
        buffer = self.rollout_buffer
        if self.aux_buffer is not None:
            self.aux_buffer.add(buffer)
        self.phase_iteration += 1
        self._policy_phase_time += time.perf_counter() - start
        self._record_phase_logs()

        if self.phase_iteration >= self.n_policy_iterations:
            if self.aux_buffer is not None and self.aux_buffer.size > 0:
                self._auxiliary_phase()
            self.phase += 1
            self.phase_iteration = 0
            self._policy_phase_time = 0.0

    def _record_phase_logs(self) -> None:
        """The policy phase's position and time, after the training core's logs of the iteration."""
        # the policy phase this iteration belongs to (0, 1, ...) and its position in it (1 .. n_policy_iterations)
        self.logger.record("train/phase", self.phase)
        self.logger.record("train/phase_iteration", self.phase_iteration)
        # rollouts and updates of the current policy phase so far (the whole phase at its last iteration)
        self.logger.record("time/policy_phase_s", self._policy_phase_time)

    def _auxiliary_phase(self) -> None:
        """
        The auxiliary phase (Cobbe et al. 2020, section 3): ``pi_old`` stored on the auxiliary buffer, then
        ``n_aux_epochs`` epochs of the joint loss (:func:`~sb3_ewma.ppg_ewma.auxiliary.auxiliary_losses`) with the
        auxiliary optimizer, each minibatch's gradient accumulated over micro-batches of ``aux_micro_batch_size``
        rows; its logs under ``aux/``.
        """
        start = time.perf_counter()
        buffer = self.aux_buffer
        assert buffer is not None
        compute_old_policy(self.policy, buffer, self._aux_micro_batch_size)
        # Switch to train mode (this affects batch norm / dropout)
        self.policy.set_training_mode(True)
        learning_rate = scheduled_value("aux_learning_rate", self.aux_lr_schedule, self._current_progress_remaining)
        update_learning_rate(self.aux_optimizer, learning_rate)

        stats: dict[str, list[th.Tensor]] = {"aux_value_loss": [], "clone_kl": [], "value_loss": [], "loss": []}
        n_updates = 0
        for _ in range(self.n_aux_epochs):
            for minibatch in buffer.minibatch_indices(self._aux_minibatch_size, self._aux_rollout_length):
                self.aux_optimizer.zero_grad()
                starts = range(0, len(minibatch), self._aux_micro_batch_size)
                minibatch_losses: list[th.Tensor] = []
                for start_index in starts:
                    indices = minibatch[start_index : start_index + self._aux_micro_batch_size]
                    losses = self._auxiliary_losses(buffer, indices)
                    # the minibatch loss is the mean over its samples: weight each micro-batch by its share; the
                    # ranks average the accumulated gradient once, after the last micro-batch
                    share = len(indices) / len(minibatch)
                    last = start_index == starts[-1]
                    with contextlib.nullcontext() if last else self.data_parallel.accumulating():
                        (losses[-1] * share).backward()
                    weighted = [value.detach() * share for value in losses]
                    minibatch_losses = [a + b for a, b in zip(minibatch_losses, weighted)] if minibatch_losses else weighted
                for key, value in zip(stats, minibatch_losses):
                    stats[key].append(value)
                self._apply_gradients(self.aux_optimizer, self.aux_gradient_noise, "aux")
                n_updates += 1

        self.n_aux_phases += 1
        for key, history in stats.items():
            self.logger.record(f"aux/{key}", mean_of(history))
        self.logger.record("aux/learning_rate", learning_rate)
        self.logger.record("aux/n_updates", n_updates)
        self.logger.record("aux/n_samples", buffer.size)
        self.logger.record("aux/n_phases", self.n_aux_phases)
        self.logger.record("time/aux_phase_s", time.perf_counter() - start)

    def _planned_optimizer_steps(self, iterations: int) -> int:
        """The policy phase's epochs (of the policy, the value function or both) and the auxiliary phases' epochs."""
        policy_phase = iterations * max(self.n_epochs, self.n_value_epochs) * self.minibatches_per_epoch
        return policy_phase + iterations // self.n_policy_iterations * self.n_aux_epochs * self._aux_minibatches_per_epoch

    def _auxiliary_losses(self, buffer: AuxiliaryBuffer, indices: np.ndarray) -> tuple[th.Tensor, ...]:
        """The auxiliary losses of the rows ``indices``: compiled when ``compile_step`` is in effect."""
        if self.compiled_step.active:
            return self.compiled_step.run(
                lean_auxiliary_losses,
                self.policy,
                buffer.observations(indices),
                buffer.value_targets(indices),
                buffer.old_policy(indices),
                float(self.beta_clone),
                self.training_precision.autocast_dtype,
                self.compiled_step.observation_plan(self.policy),
            )
        with self.training_precision.forward(self.device):
            return auxiliary_losses(self.policy, buffer, indices, self.beta_clone)

    def _setup_learn(
        self,
        total_timesteps: int,
        callback: MaybeCallback = None,
        reset_num_timesteps: bool = True,
        tb_log_name: str = "run",
        progress_bar: bool = False,
    ) -> tuple[int, BaseCallback]:
        # before anything is set up or written: a model loaded with fewer environments may lack room for its
        # auxiliary batches, and cannot learn as it is
        problem = self._aux_batch_size_problem()
        if problem is not None and not self._aux_minibatch_may_be_truncated():
            raise ValueError(problem)
        return super()._setup_learn(total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar)

    @classmethod
    def _check_saved_data(cls, data: dict[str, Any], path: Any) -> None:
        # plain JSON when it is a number or None; a schedule or "auto" would be a string or serialized
        ewma_decay = data.get("ewma_decay")
        if ewma_decay is not None:
            raise ValueError(
                f"{saved_model_name(path)} was saved by PPG_EWMA (ewma_decay={ewma_decay!r}), not by PPG: load it with "
                "PPG_EWMA.load()"
            )

    def to_sb3(self) -> PPO:
        """
        The policy and value networks as a plain SB3 ``PPO`` (same ``predict``; the auxiliary value head, auxiliary
        optimizer, phases and EWMA are left out), whose ``save`` gives a zip that ``stable_baselines3.PPO.load``
        opens. Needs a policy without shared MLP layers (``arch="dual"``, or a dict / empty ``net_arch``), else a
        ``ValueError``; see :mod:`sb3_ewma.ppg_ewma.export`.
        """
        return ppg_to_sb3_ppo(self)
