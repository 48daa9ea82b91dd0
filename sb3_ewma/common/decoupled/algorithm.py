"""
:class:`DecoupledAlgorithm`: what every algorithm of this package adds to its parent, in one class between the two:
``PPO_EWMA(DecoupledAlgorithm, PPO)``, and likewise with sb3-contrib's ``RecurrentPPO`` and ``MaskablePPO``, and
``PPG(DecoupledAlgorithm, PPO)``. It derives from ``OnPolicyAlgorithm``, as its parents do, so its ``super()`` calls reach
the parent's methods (``PPO_EWMA``'s MRO: ``PPO_EWMA, DecoupledAlgorithm, PPO, OnPolicyAlgorithm, BaseAlgorithm``).
"""

import contextlib
import dataclasses
import io
import math
import pathlib
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar, NamedTuple, TypeVar, cast

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.base_class import maybe_make_env
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy
from stable_baselines3.common.save_util import recursive_getattr
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, RolloutBufferSamples, Schedule
from stable_baselines3.common.utils import explained_variance, update_learning_rate
from stable_baselines3.common.vec_env import VecEnv
from torch.nn import functional as F

from sb3_ewma.common.checks import (
    HyperparameterError,
    check_callback,
    check_device_name,
    check_has_env,
    check_observation_space,
    check_save_folders,
    unknown_policy_message,
    warn_at_caller,
)
from sb3_ewma.common.collection.overlap import OverlappedRollouts, rollout_collector_kind, rollout_settings
from sb3_ewma.common.collection.rollout import RolloutView, new_rollout_buffer
from sb3_ewma.common.decoupled.advantages import AdvantageNormalizer
from sb3_ewma.common.decoupled.objective import DecoupledPolicyObjective, mean_of
from sb3_ewma.common.decoupled.options import resolve_ewma_decay
from sb3_ewma.common.decoupled.proximal import (
    ProximalPolicy,
    is_policy_parameter,
    parameters_with_proximal_state,
    with_states_in_data,
)
from sb3_ewma.common.decoupled.step import (
    AUTO_MIN_OPTIMIZER_STEPS,
    CompiledMinibatch,
    CompiledStep,
    MinibatchTerms,
    compile_unsupported,
    overridden_step,
    planned_iterations,
)
from sb3_ewma.common.distributed import (
    DataParallelTraining,
    SingleProcessTraining,
    data_parallel_settings,
    previous_world_size_change,
    wants_data_parallel,
    warn_world_size_change,
)
from sb3_ewma.common.distributions import (
    evaluate_actions_with_distribution,
    has_lean_evaluation,
    lean_evaluate_actions,
)
from sb3_ewma.common.ewma import ParameterEWMA, center_of_mass_from_ewma_decay
from sb3_ewma.common.finite import (
    check_finite_gradient_norm,
    check_finite_rollout,
    naming_non_finite_observations,
    scheduled_value,
)
from sb3_ewma.common.format import without_rounding_noise
from sb3_ewma.common.gradient_noise import GradientNoiseScale
from sb3_ewma.common.losses import clipped_values
from sb3_ewma.common.minibatches import rollout_minibatches
from sb3_ewma.common.precision import FLOAT32, TrainingPrecision
from sb3_ewma.common.rules import check_learn_arguments
from sb3_ewma.common.saved_files import check_load_keywords, check_saved_file, saved_model_name

SelfDecoupledAlgorithm = TypeVar("SelfDecoupledAlgorithm", bound="DecoupledAlgorithm")


class PolicyLossTerms(NamedTuple):
    """What :meth:`DecoupledAlgorithm._policy_loss_terms` computes for one minibatch."""

    values: th.Tensor
    policy_loss: th.Tensor
    entropy_loss: th.Tensor
    approx_kl_div: th.Tensor


@dataclasses.dataclass
class IterationLosses:
    """The losses of an iteration's minibatches, logged after its loop as SB3's PPO logs them."""

    entropy_losses: list[th.Tensor] = dataclasses.field(default_factory=list)
    value_losses: list[th.Tensor] = dataclasses.field(default_factory=list)
    approx_kl_divs: list[th.Tensor] = dataclasses.field(default_factory=list)  # the last policy epoch's
    loss: th.Tensor | None = None  # the last minibatch's

    def add_joint(self, terms: MinibatchTerms) -> None:
        """A minibatch's terms of the policy and the value function together, its loss the last one."""
        self.loss = terms.loss
        self.value_losses.append(terms.value_loss.detach())
        self.entropy_losses.append(terms.entropy_loss.detach())
        self.approx_kl_divs.append(terms.approx_kl_div)


class DecoupledAlgorithm(OnPolicyAlgorithm):
    """
    The part of every algorithm of this package that is not its parent's: the decoupled options, PPO's ``train()``
    with the decoupled objective, and the collaborators it holds:

    - ``self.proximal``, the proximal policy (:class:`~sb3_ewma.common.decoupled.proximal.ProximalPolicy`: none,
      snapshot or EWMA);
    - ``self.data_parallel``, what training on several processes needs at each point of a run
      (:class:`~sb3_ewma.common.distributed.DataParallelTraining`, which averages the gradients at the end of each
      backward pass and adds a callback of its own to ``learn``'s, or
      :class:`~sb3_ewma.common.distributed.SingleProcessTraining`, which does nothing);
    - ``self.compiled_step``, the compiled minibatch loss, optimizer step and acting step, when ``compile_step`` is in
      effect (:class:`~sb3_ewma.common.decoupled.step.CompiledStep`);
    - ``self.gradient_noise``, the gradient noise scale of the policy updates, when logged
      (:class:`~sb3_ewma.common.gradient_noise.GradientNoiseScale`);
    - the rollout collector: the parent's own ``collect_rollouts``, acting with an explicit policy
      (:class:`~sb3_ewma.common.collection.rollout.RolloutView`), run by ``collect_rollouts`` or, with
      ``async_rollouts``, by a collector thread or process that ``collect_rollouts`` hands off from
      (``self.overlapped_rollouts``, :class:`~sb3_ewma.common.collection.overlap.OverlappedRollouts`, during ``learn``).

    An algorithm whose policy takes more than the observations overrides :meth:`_evaluate_policy`, names the
    proximal network's distribution in :attr:`_proximal_distribution_of` and says in :attr:`_compiled_evaluation` how
    the compiled step evaluates its policy.
    """

    # the parent's rollout loop, run with an explicit acting policy (_collect_rollout_with), and the attributes a
    # rollout advances besides num_timesteps and the episode statistics (a collector process sends them back)
    _parent_collect_rollouts: ClassVar[Callable[..., bool]] = staticmethod(OnPolicyAlgorithm.collect_rollouts)
    _collection_state_names: ClassVar[tuple[str, ...]] = ("_last_obs", "_last_episode_starts")
    # which policy parameters the proximal EWMA averages (those the action distribution depends on), and
    # distribution(network, minibatch) for policies that take more than the observations (ProximalPolicy)
    _is_proximal_parameter = staticmethod(is_policy_parameter)
    _proximal_distribution_of: ClassVar[Any] = None
    # how the compiled step evaluates the policy on a minibatch (compile_unsupported): from the observations, with the
    # rollout buffer's action masks ("action_masks"), or why it cannot (a sentence: the eager step only)
    _compiled_evaluation: ClassVar[str] = "observations"
    # the optimizer steps a learn call plans from which compile_step="auto" compiles (the performance guide)
    _auto_compile_min_steps: ClassVar[int] = AUTO_MIN_OPTIMIZER_STEPS
    # the algorithm's own attributes that `save` leaves out, and the modules of saved policies `load` also accepts
    _unsaved_attributes: ClassVar[tuple[str, ...]] = ()
    # modules (attribute: data entry) whose states `save` writes into the file's data, as the proximal policy's, for a
    # file that SB3's parent load opens (PPG's auxiliary optimizer)
    _modules_saved_in_data: ClassVar[dict[str, str]] = {}
    # entries of older files that `load` drops: properties now (0.1.0), or the staleness setting of 0.1.0
    _entries_of_older_files: ClassVar[tuple[str, ...]] = ("proximal_ewma", "proximal_decay", "staleness", "staleness_mode")
    loadable_parent_policy_modules: ClassVar[tuple[str, ...]] = ()
    # True while `load` rebuilds the model from a file (not a user's call of set_parameters)
    _loading: bool = False
    # the settings that `load`'s keywords give (a check that needs the environment tells them from the file's)
    _load_keywords: frozenset[str] = frozenset()

    # PPO's hyperparameters, set by the parent's constructor (PPG's own); the clip ranges are schedules after
    # _setup_model (an infinite clip_range: no clipping); sb3-contrib's batch_size may be None (the whole rollout)
    batch_size: int | None
    n_epochs: int
    clip_range: float | Schedule
    clip_range_vf: float | Schedule | None
    normalize_advantage: bool
    target_kl: float | None
    # the decoupled options (_set_decoupled_options)
    ewma_decay: float | str | None
    kl_coef: float
    kl_estimator: str
    imp_samp_max: float
    advantage_normalization: str
    advantage_ewma_decay: float
    minibatch_sampling: str
    log_gradient_noise_scale: bool
    distributed: bool | None
    async_rollouts: bool
    rollout_collector: str  # "thread" or "process"
    compile_step: bool | str = "auto"  # files saved before the option existed: "auto"
    advantage_normalizer: AdvantageNormalizer
    # the collaborators (set by the constructor and _setup_model), and the numeric format of train()
    data_parallel: DataParallelTraining | SingleProcessTraining
    proximal: ProximalPolicy
    gradient_noise: GradientNoiseScale | None
    compiled_step: CompiledStep
    training_precision: TrainingPrecision = FLOAT32
    overlapped_rollouts: OverlappedRollouts | None = None  # during a learn call with async_rollouts

    def _set_decoupled_options(
        self,
        *,
        ewma_decay: float | str | None,
        kl_coef: float,
        kl_estimator: str,
        imp_samp_max: float,
        advantage_normalization: str,
        advantage_ewma_decay: float,
        minibatch_sampling: str,
        log_gradient_noise_scale: bool,
        distributed: bool | None,
        async_rollouts: bool | str,
        compile_step: bool | str = "auto",
    ) -> None:
        """Store the checked options, after the parent's constructor (``_setup_model`` builds what they ask for)."""
        self.ewma_decay = ewma_decay
        self.kl_coef = kl_coef
        self.kl_estimator = kl_estimator
        self.imp_samp_max = imp_samp_max
        self.advantage_normalization = advantage_normalization
        self.advantage_ewma_decay = advantage_ewma_decay
        self.minibatch_sampling = minibatch_sampling
        self.log_gradient_noise_scale = log_gradient_noise_scale
        self.distributed = distributed
        self.compile_step = compile_step
        self.async_rollouts, self.rollout_collector = rollout_settings(async_rollouts, self.env)
        # created here, not in _setup_model, so that `load` restores the saved moments
        self.advantage_normalizer = AdvantageNormalizer(
            self.normalize_advantage, advantage_normalization, advantage_ewma_decay
        )

    def _setup_model(self) -> None:
        # an environment made from an id, or by `load`: a space no policy takes fails later with an unrelated error
        check_observation_space(self.observation_space)
        # "no clipping" as the constructor takes it, from load's keywords or the files of versions before 0.3.0
        if self.clip_range is None:
            self.clip_range = math.inf
        # built here, after `load` has set its keywords (distributed=False under torchrun's environment: no process
        # group), and before SB3 seeds each rank's environments
        self.data_parallel = (
            DataParallelTraining(self.device) if wants_data_parallel(self.distributed) else SingleProcessTraining()
        )
        if self.rank != 0:
            self.verbose = 0  # ranks other than 0 print nothing (the constructor's rule, for the verbose `load` sets)
        super()._setup_model()
        self._setup_decoupled_training()

    def _setup_decoupled_training(self) -> None:
        """After the parent's ``_setup_model`` (also on load): advantages, proximal policy, gradient noise, ranks."""
        self.advantage_normalizer.configure(self.normalize_advantage, self.advantage_normalization, self.advantage_ewma_decay)
        self.proximal = self._new_proximal_policy()
        self.training_precision.prepare(self.policy, self.proximal.network)
        self.gradient_noise = self._new_gradient_noise(self._minibatch_size, self.minibatches_per_epoch)
        self.compiled_step = CompiledStep(self.compile_step)
        # a loaded model that continues at another world size is warned when it learns
        self._world_size_change = previous_world_size_change(getattr(self, "trained_world_size", None), self.world_size)
        self.trained_world_size = self.world_size
        if isinstance(self.data_parallel, DataParallelTraining):  # the settings are read only for ranks to compare
            self.data_parallel.setup(data_parallel_settings(self), self._state_holders(), self.policy)
        self.advantage_normalizer.reducer = self.data_parallel.advantage_reducer

    def _new_proximal_policy(self) -> ProximalPolicy:
        """The EWMA of the policy, or without it a snapshot (:meth:`_proximal_needs_network`) or the behavior policy."""
        decay = resolve_ewma_decay(self.ewma_decay, self.minibatches_per_epoch, self.n_epochs)
        return ProximalPolicy.build(
            self.policy,
            decay,
            decay is not None or self._proximal_needs_network(),
            include=type(self)._is_proximal_parameter,
            distribution=type(self)._proximal_distribution_of,
        )

    def _proximal_needs_network(self) -> bool:
        """
        Whether the proximal policy without an EWMA is a snapshot of the policy at the start of each iteration: for the
        exact KL penalty's distribution, or with ``async_rollouts`` (the behavior policy is older than that policy).
        """
        return self._needs_distributions or self.async_rollouts

    def _new_gradient_noise(
        self, batch_size: int, minibatches_per_epoch: int, log_key: str = "train/gradient_noise_scale"
    ) -> GradientNoiseScale | None:
        """The gradient noise scale of a phase's minibatches (global ones: of every rank), or None when not logged."""
        if not self.log_gradient_noise_scale:
            return None
        if minibatches_per_epoch < 2 and not self._loading:  # said to the constructor's caller, not at every load
            warn_at_caller(
                f"log_gradient_noise_scale=True logs no {log_key} with {minibatches_per_epoch} minibatch per epoch: the "
                "estimate compares an epoch's minibatch gradients with their mean, and needs at least 2 (a batch size "
                "below the rollout's)"
            )
        return GradientNoiseScale(batch_size * self.world_size, minibatches_per_epoch)

    def set_training_precision(self, training_precision: TrainingPrecision) -> None:
        """The numeric format of ``train()`` from now on: its forward passes' autocast, its weights' memory format."""
        self.training_precision = training_precision
        training_precision.prepare(self.policy, self.proximal.network)

    def _make_rollout_buffer(self) -> RolloutBuffer:
        """A new rollout buffer like ``self.rollout_buffer`` (SB3's construction in ``_setup_model``)."""
        return new_rollout_buffer(self)

    @property
    def proximal_ewma(self) -> ParameterEWMA | None:
        """
        The proximal policy's network (an EWMA or a snapshot of the policy), or None. An EWMA is the entry
        ``proximal_ewma`` of ``get_parameters()`` (a saved file keeps it in its ``data`` as ``proximal_policy_state``); a
        snapshot, retaken from the policy at each iteration's start, is not saved.
        """
        proximal: ProximalPolicy | None = getattr(self, "proximal", None)
        return None if proximal is None else proximal.ewma

    @property
    def proximal_decay(self) -> float | None:
        """The resolved decay of the proximal EWMA (None: no EWMA)."""
        proximal: ProximalPolicy | None = getattr(self, "proximal", None)
        return None if proximal is None else proximal.decay

    @property
    def minibatches_per_epoch(self) -> int:
        """Optimizer steps per epoch, ``ceil(n_steps * n_envs / batch_size)``."""
        return -(-int(self.n_steps) * self.n_envs // self._minibatch_size)  # int: a numpy unsigned n_steps wraps

    @property
    def _minibatch_size(self) -> int:
        """Samples per minibatch: ``batch_size``, or the whole rollout for ``batch_size=None`` (sb3-contrib's)."""
        return self.batch_size or self.n_steps * self.n_envs

    @property
    def _needs_distributions(self) -> bool:
        """Whether the policy loss needs whole distributions (the exact KL penalty), not only log-probabilities."""
        return self.kl_coef > 0 and self.kl_estimator == "exact"

    @property
    def world_size(self) -> int:
        """Number of processes training this model (1 when not data-parallel)."""
        return self.data_parallel.world_size

    @property
    def rank(self) -> int:
        """This process's rank (0 when not data-parallel); rank 0 logs and saves."""
        return self.data_parallel.rank

    @property
    def _timesteps_per_env_step(self) -> int:
        """Environment steps one vectorized step of this process counts for: ``num_timesteps`` counts every rank's."""
        return self.n_envs * self.world_size

    # train(): SB3 PPO's loop with the decoupled objective
    def train(self) -> None:
        """
        Update policy using the currently gathered rollout buffer: SB3 PPO's ``train`` with the decoupled objective.
        """
        # [decoupled] the proximal policy's start (a snapshot proximal policy becomes the current policy)
        self.proximal.start_iteration()
        self._train_iteration(n_value_epochs=self.n_epochs, value_outlives_target_kl=False)

    def _train_iteration(self, n_value_epochs: int, value_outlives_target_kl: bool) -> None:
        """
        The epochs of one iteration on the rollout buffer, and their logs: SB3 PPO's loop, where the policy and the
        value function train together for ``n_epochs`` and ``target_kl`` ends the iteration. PPG's policy phase is the
        same loop with ``n_value_epochs`` of its own (the epochs past the shorter count train one of the two) and
        value epochs that go on after ``target_kl`` stops the policy's (``value_outlives_target_kl``).
        """
        # Switch to train mode (this affects batch norm / dropout)
        self.policy.set_training_mode(True)
        # Update optimizer learning rate
        self._update_learning_rate(self.policy.optimizer)
        # Compute current clip range (None: no clipping)
        clip_range, clip_range_vf = self._current_clip_ranges()
        # [decoupled] the advantage moments of this iteration ("ewma" normalization)
        buffer = self.rollout_buffer
        buffer.advantages = self.advantage_normalizer.start_iteration(buffer.advantages)
        policy_objective = DecoupledPolicyObjective(clip_range, self.kl_coef, self.kl_estimator, self.imp_samp_max)
        # [compiled] each minibatch's loss, backward pass, clipping, optimizer step and EWMA step as one function
        one_function, sentence = self.compiled_step.steps_whole(self._step_in_pieces, clip_range, clip_range_vf)
        if sentence is not None:
            self._announce(sentence)

        losses = IterationLosses()
        continue_training = True
        for epoch in range(max(self.n_epochs, n_value_epochs)):
            policy_epoch = continue_training and epoch < self.n_epochs
            value_epoch = epoch < n_value_epochs and (continue_training or value_outlives_target_kl)
            if not (policy_epoch or value_epoch):
                break
            if policy_epoch:
                losses.approx_kl_divs = []  # logged: the last policy epoch's
            # Do a complete pass on the rollout buffer (a value-only epoch needs no advantages)
            for rollout_data in self._minibatches(buffer) if policy_epoch else self._sampled_minibatches(buffer):
                if not (policy_epoch and continue_training):
                    # PPG: a value-only epoch, or the value steps after target_kl
                    self._value_step(rollout_data, clip_range_vf, losses)
                    continue
                if value_epoch:
                    continue_training = self._joint_step(
                        rollout_data,
                        policy_objective,
                        clip_range,
                        clip_range_vf,
                        epoch,
                        losses,
                        # read at each minibatch: a whole step that fails to compile leaves the rest in pieces
                        whole=one_function and self.compiled_step.whole,
                        value_outlives_target_kl=value_outlives_target_kl,
                    )
                else:
                    continue_training = self._policy_step(rollout_data, policy_objective, epoch, losses)
                if not continue_training and not (value_epoch and value_outlives_target_kl):
                    break  # target_kl reached: the iteration ends
            self._n_updates += 1

        self._record_train_logs(
            buffer,
            policy_objective.mean_stats(),
            entropy_losses=losses.entropy_losses,
            value_losses=losses.value_losses,
            approx_kl_divs=losses.approx_kl_divs,
            loss=losses.loss,
            clip_range=clip_range,
            clip_range_vf=clip_range_vf,
        )

    def _joint_step(
        self,
        rollout_data: Any,
        policy_objective: DecoupledPolicyObjective,
        clip_range: float | None,
        clip_range_vf: float | None,
        epoch: int,
        losses: IterationLosses,
        *,
        whole: bool,
        value_outlives_target_kl: bool,
    ) -> bool:
        """
        SB3 PPO's minibatch, the policy and the value function together.

        :param whole: the loss and its optimization step as one compiled function
        :param value_outlives_target_kl: PPG: when ``target_kl`` is reached, this minibatch's value step is taken
        :return: SB3's ``continue_training`` (False: ``target_kl`` reached, the policy step not taken)
        """
        if whole:
            # [compiled] the loss with its whole optimization step (backward, clipping, Adam, the EWMA step)
            losses.add_joint(self._whole_step(rollout_data, policy_objective, clip_range_vf))
            return True
        # [decoupled] the policy loss: importance sampling with the behavior policy, clipping (or a KL penalty) at the
        # proximal policy; the entropy and value losses; the approximate KL from the behavior policy
        terms = self._minibatch_loss(rollout_data, policy_objective, clip_range, clip_range_vf)
        losses.add_joint(terms)
        if self._reached_target_kl(terms.approx_kl_div, epoch):
            # SB3's PPO logs this minibatch's loss (add_joint), not optimized; PPG optimizes and logs its value loss
            if value_outlives_target_kl:
                losses.loss = self.vf_coef * terms.value_loss
                self._optimize(losses.loss, policy_update=False)
            return False
        self._optimize(terms.loss, policy_update=True)
        return True

    def _policy_step(
        self, rollout_data: Any, policy_objective: DecoupledPolicyObjective, epoch: int, losses: IterationLosses
    ) -> bool:
        """PPG's policy-only minibatch (its epochs past ``n_value_epochs``); returns SB3's ``continue_training``."""
        _, policy_loss, entropy_loss, approx_kl_div = self._policy_loss_terms(rollout_data, policy_objective)
        losses.entropy_losses.append(entropy_loss.detach())
        losses.approx_kl_divs.append(approx_kl_div)
        if self._reached_target_kl(approx_kl_div, epoch):
            return False
        losses.loss = policy_loss + self.ent_coef * entropy_loss
        self._optimize(losses.loss, policy_update=True)
        return True

    def _value_step(self, rollout_data: Any, clip_range_vf: float | None, losses: IterationLosses) -> None:
        """PPG's value-only minibatch (its epochs past ``n_epochs``, or after ``target_kl`` stopped the policy's)."""
        value_loss = self._value_loss(rollout_data, clip_range_vf)
        losses.value_losses.append(value_loss.detach())
        losses.loss = self.vf_coef * value_loss
        self._optimize(losses.loss, policy_update=False)

    def _optimize(self, loss: th.Tensor, policy_update: bool) -> None:
        """SB3 PPO's optimization step, then the proximal EWMA's after a policy update (not after a value-only step)."""
        # Optimization step
        self.policy.optimizer.zero_grad()
        loss.backward()
        # the gradient noise scale of the policy updates (not of value-only steps)
        self._apply_gradients(self.policy.optimizer, self.gradient_noise if policy_update else None, "train")
        if policy_update:
            # [decoupled] the EWMA step
            self.proximal.step()

    def _minibatch_loss(
        self,
        rollout_data: Any,
        policy_objective: DecoupledPolicyObjective,
        clip_range: float | None,
        clip_range_vf: float | None,
    ) -> MinibatchTerms:
        """
        One minibatch's loss, policy and value function together: compiled
        (:meth:`~sb3_ewma.common.decoupled.step.CompiledStep.minibatch_terms`) when ``compile_step`` is in effect,
        otherwise SB3 PPO's computation, operation for operation.
        """
        if self.compiled_step.covers(clip_range, clip_range_vf):
            return self.compiled_step.minibatch_terms(self._compiled_minibatch(rollout_data, policy_objective, clip_range_vf))
        values, policy_loss, entropy_loss, approx_kl_div = self._policy_loss_terms(rollout_data, policy_objective)
        # Clip the difference between old and new value (None: no clipping)
        # NOTE: this depends on the reward scaling
        values_pred = clipped_values(values, rollout_data.old_values, clip_range_vf)
        # Value loss using the TD(gae_lambda) target
        value_loss = F.mse_loss(rollout_data.returns, values_pred)
        loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss
        return MinibatchTerms(loss, value_loss, entropy_loss, approx_kl_div)

    def _policy_loss_terms(self, rollout_data: Any, policy_objective: DecoupledPolicyObjective) -> PolicyLossTerms:
        """
        One minibatch's policy terms, shared by every algorithm's ``train()`` (PPG's policy phase too): the values,
        the decoupled policy loss, SB3's entropy loss and its approximate KL from the behavior policy (for
        ``target_kl``; kept on the device).
        """
        actions = rollout_data.actions
        if isinstance(self.action_space, spaces.Discrete):
            # Convert discrete action from float to long
            actions = rollout_data.actions.long().flatten()
        with self.training_precision.forward(self.device):
            values, log_prob, entropy, distribution = self._evaluate_policy(rollout_data, actions)
            # [decoupled] the proximal policy's log-probabilities (and its distribution for the exact KL)
            proximal_log_prob, proximal_distribution = self.proximal.log_prob(
                rollout_data, actions, rollout_data.old_log_prob, self._needs_distributions
            )
        if self.training_precision.autocast_dtype is not None:
            # the losses in float32 (autocast's outputs are bfloat16; CUDA's mse_loss has no backward for a bfloat16
            # input against a float32 target)
            values, log_prob, proximal_log_prob = values.float(), log_prob.float(), proximal_log_prob.float()
            entropy = None if entropy is None else entropy.float()
        # Normalize advantage (per minibatch, or by the EWMA moments of the iteration)
        advantages = self.advantage_normalizer.minibatch(rollout_data.advantages)
        behavior_log_prob = rollout_data.old_log_prob
        policy_loss = policy_objective(
            advantages, log_prob, proximal_log_prob, behavior_log_prob, distribution, proximal_distribution
        )
        # Entropy loss favor exploration (approximate entropy when no analytical form)
        entropy_loss = -th.mean(-log_prob) if entropy is None else -th.mean(entropy)
        # Calculate approximate form of reverse KL Divergence for early stopping
        with th.no_grad():
            log_ratio = log_prob - behavior_log_prob
            approx_kl_div = th.mean((th.exp(log_ratio) - 1) - log_ratio)
        return PolicyLossTerms(values.flatten(), policy_loss, entropy_loss, approx_kl_div)

    def _evaluate_policy(
        self, rollout_data: Any, actions: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor | None, Distribution | None]:
        """The policy's values, log-probabilities, entropy (or None), and the distribution if the exact KL needs it."""
        if self._needs_distributions:
            return evaluate_actions_with_distribution(self.policy, rollout_data.observations, actions)
        if has_lean_evaluation(self.policy):
            # the same tensors as SB3's evaluate_actions, without building and validating the distribution
            return (*lean_evaluate_actions(self.policy, rollout_data.observations, actions), None)
        values, log_prob, entropy = self.policy.evaluate_actions(rollout_data.observations, actions)
        return values, log_prob, entropy, None

    def _value_loss(self, rollout_data: Any, clip_range_vf: float | None) -> th.Tensor:
        """The value loss of a minibatch alone (the value-only steps of PPG's policy phase)."""
        with self.training_precision.forward(self.device):
            values = self.policy.predict_values(rollout_data.observations).flatten()
        # the value loss in float32, as the policy terms
        values_pred = clipped_values(values.float(), rollout_data.old_values, clip_range_vf)
        return F.mse_loss(rollout_data.returns, values_pred)

    def _reached_target_kl(self, approx_kl_div: th.Tensor, epoch: int) -> bool:
        """
        SB3's ``target_kl`` early stop on the KL from the behavior policy (its mean over the ranks, data-parallel),
        with SB3's message at ``verbose >= 1``.
        """
        if self.target_kl is None:
            return False  # the KL is read from the device only with a target
        kl = self.data_parallel.mean_kl(approx_kl_div.item())
        reached = kl > 1.5 * self.target_kl
        if reached and self.verbose >= 1:
            print(f"Early stopping at step {epoch} due to reaching max kl: {kl:.2f}")
        return reached

    def _apply_gradients(
        self, optimizer: th.optim.Optimizer, gradient_noise: GradientNoiseScale | None, log_prefix: str
    ) -> None:
        """
        Every optimizer step of every phase, after ``backward()``: the gradient noise scale fed (before clipping, logged
        as ``<log_prefix>/gradient_noise_scale``), SB3's clipping and the step.
        """
        if gradient_noise is not None:
            # the number of steps taken identifies the iteration (an epoch cut short by target_kl is dropped)
            estimate = gradient_noise.observe_optimizer(optimizer, tag=self.num_timesteps)
            if estimate is not None and estimate.noise_scale is not None:
                self.logger.record(f"{log_prefix}/gradient_noise_scale", estimate.noise_scale)
        # SB3's clipping
        total_norm = th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
        check_finite_gradient_norm(total_norm, log_prefix, self._n_updates)
        if self.compiled_step.active:
            self.compiled_step.optimizer_step(optimizer)
        else:
            optimizer.step()

    def _update_learning_rate(self, optimizers: list[th.optim.Optimizer] | th.optim.Optimizer) -> None:
        # SB3's, with the schedule's value checked (a finite number) and read once
        learning_rate = scheduled_value("learning_rate", self.lr_schedule, self._current_progress_remaining)
        self.logger.record("train/learning_rate", learning_rate)
        for optimizer in optimizers if isinstance(optimizers, list) else [optimizers]:
            update_learning_rate(optimizer, learning_rate)

    def _current_clip_ranges(self) -> tuple[float | None, float | None]:
        """The clip ranges of the policy and of the value function at the current progress (``None``: no clipping)."""
        progress = self._current_progress_remaining
        clip_range = scheduled_value("clip_range", self.clip_range, progress, infinity_allowed=True)  # type: ignore[arg-type]
        clip_range_vf = (
            None
            if self.clip_range_vf is None
            else scheduled_value("clip_range_vf", self.clip_range_vf, progress, infinity_allowed=True)  # type: ignore[arg-type]
        )
        # an infinite value range is kept: SB3's clamp to it gives the values it computed, bit for bit
        return (None if clip_range == math.inf else clip_range), clip_range_vf

    def _minibatches(self, buffer: RolloutBuffer) -> Iterator[RolloutBufferSamples]:
        """One epoch over the rollout buffer (:meth:`_sampled_minibatches`), ready for the advantage normalization."""
        return self.advantage_normalizer.epoch(self._sampled_minibatches(buffer))

    def _sampled_minibatches(self, buffer: RolloutBuffer) -> Iterator[RolloutBufferSamples]:
        """One epoch's minibatches: SB3's random steps, or whole rollouts of environments (the authors')."""
        if self.minibatch_sampling == "rollouts":
            return self._rollout_minibatches(buffer)
        return buffer.get(self.batch_size)

    def _rollout_minibatches(self, buffer: RolloutBuffer) -> Iterator[RolloutBufferSamples]:
        return rollout_minibatches(buffer, self._minibatch_size)  # minibatch_sampling="rollouts"

    def _record_train_logs(
        self,
        buffer: RolloutBuffer,
        stats: dict[str, np.float64],
        *,
        entropy_losses: list[th.Tensor],
        value_losses: list[th.Tensor],
        approx_kl_divs: list[th.Tensor],
        loss: th.Tensor | None,
        clip_range: float | None,
        clip_range_vf: float | None,
    ) -> None:
        """
        SB3 PPO's logs of a training iteration, then the decoupled objective's diagnostics (``stats``), the advantage
        statistics and the EWMA's center of mass. An empty list or a None ``loss`` is not logged (PPG without policy or
        value epochs).
        """
        explained_var = explained_variance(buffer.values.flatten(), buffer.returns.flatten())
        # Logs
        if entropy_losses:
            self.logger.record("train/entropy_loss", mean_of(entropy_losses))
        if "policy_gradient_loss" in stats:
            self.logger.record("train/policy_gradient_loss", stats["policy_gradient_loss"])
        if value_losses:
            self.logger.record("train/value_loss", mean_of(value_losses))
        if approx_kl_divs:
            # SB3's mean of the minibatches' float32 values (a numpy float32, which its console prints in full)
            self.logger.record("train/approx_kl", np.mean(th.stack(approx_kl_divs).float().cpu().numpy()))
        if clip_range is not None and "clip_fraction" in stats:
            self.logger.record("train/clip_fraction", stats["clip_fraction"])
        if loss is not None:
            self.logger.record("train/loss", loss.item())
        self.logger.record("train/explained_variance", explained_var)
        if hasattr(self.policy, "log_std"):
            self.logger.record("train/std", th.exp(self.policy.log_std).mean().item())

        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        if clip_range is not None:
            self.logger.record("train/clip_range", clip_range)
        if clip_range_vf is not None:
            self.logger.record("train/clip_range_vf", clip_range_vf)

        # [decoupled] the objective's diagnostics, the advantage moments, the EWMA's age
        for key in ("proximal_kl", "imp_samp_capped_fraction", "kl_penalty"):
            if key in stats:
                self.logger.record(f"train/{key}", stats[key])
        for key, value in self.advantage_normalizer.stats().items():
            self.logger.record(f"train/{key}", value)
        if self.proximal.kind == "ewma" and self.proximal.decay is not None:
            center_of_mass = center_of_mass_from_ewma_decay(self.proximal.decay)
            self.logger.record("train/ewma_center_of_mass", without_rounding_noise(center_of_mass))

    # saving and loading, with the proximal policy's state
    def save(
        self,
        path: str | pathlib.Path | io.BufferedIOBase,
        exclude: Iterable[str] | None = None,
        include: Iterable[str] | None = None,
    ) -> None:
        """
        SB3's ``save``, on rank 0 only, with the proximal policy's state in the file's ``data``, where SB3's parent
        ``load`` ignores it (:func:`~sb3_ewma.common.decoupled.proximal.with_states_in_data`).
        """
        if self.rank != 0:
            return
        super(DecoupledAlgorithm, with_states_in_data(self, self._modules_saved_in_data)).save(path, exclude, include)

    @classmethod
    def load(
        cls: type[SelfDecoupledAlgorithm],
        path: str | pathlib.Path | io.BufferedIOBase,
        env: GymEnv | str | None = None,
        device: th.device | str = "auto",
        custom_objects: dict[str, Any] | None = None,
        print_system_info: bool = False,
        force_reset: bool = True,
        **kwargs: Any,
    ) -> SelfDecoupledAlgorithm:
        """
        SB3's ``load``, for the files this algorithm opens (its own, and its parent's: the EWMA then starts from the
        loaded policy); ``env`` may be a registered environment id.
        """
        parsed_device = check_device_name(device)  # before the file is opened
        if parsed_device is not None and parsed_device.type == "cpu" and parsed_device.index is not None:
            # SB3's load fails in torch.load ("don't know how to restore data location ... cpu:0")
            raise HyperparameterError(f"device={device!r}: torch loads saved tensors to 'cpu', not an indexed CPU: pass 'cpu'")
        data = check_saved_file(cls, path)
        if data is not None:
            cls._check_saved_data(data, path)
        check_load_keywords(cls, kwargs, data, custom_objects)
        if isinstance(env, str):
            env = maybe_make_env(env, kwargs.get("verbose", (data or {}).get("verbose", 0)))
        # as the constructor stores it (True: a thread, whatever the file's collector); a collector process that cannot
        # work here is refused when the model learns (a file loaded to predict on a platform that cannot fork loads)
        if "async_rollouts" in kwargs:
            collector = rollout_collector_kind(kwargs["async_rollouts"])
            kwargs.update(async_rollouts=collector is not None, rollout_collector=collector or "thread")
        # SB3's load sets its keywords as the model's attributes before _setup_model and set_parameters
        kwargs = {**kwargs, "_loading": True, "_load_keywords": frozenset(kwargs)}
        model = super().load(path, env, device, custom_objects, print_system_info, force_reset, **kwargs)
        del model._loading, model._load_keywords
        if data is None:  # a stream, read by SB3's load alone: the same checks on what it set
            cls._check_saved_data(vars(model), path)
        # entries of older files that these classes do not read (SB3's load puts every entry in __dict__)
        for entry in cls._entries_of_older_files:
            vars(model).pop(entry, None)
        return model

    @classmethod
    def _check_saved_data(cls, data: dict[str, Any], path: Any) -> None:
        """
        Further checks of a saved model's ``data`` in ``load`` (a file's before SB3's ``load``; a stream's after): a
        model trained with artificial staleness loads with the ablation's classes only.
        """
        if data.get("staleness"):
            raise ValueError(
                f"{saved_model_name(path)} was saved with artificial staleness={data['staleness']!r}: load it with "
                f"sb3_ewma.ablations.Stale{cls._package_class_name()}.load()"
            )

    @classmethod
    def _package_class_name(cls) -> str:
        """The name of this package's class that this class is or derives from (a user's subclass: its parent's)."""
        return next(klass.__name__ for klass in cls.__mro__ if klass.__module__.startswith("sb3_ewma."))

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        # the parent's modules and the proximal network, if any (none in the copy that ``save`` writes)
        state_dicts, torch_variables = super()._get_torch_save_params()
        return ([*state_dicts, "proximal_ewma"] if self._saved_ewma is not None else state_dicts), torch_variables

    @property
    def _saved_ewma(self) -> ParameterEWMA | None:
        """The proximal EWMA, which ``save`` and ``get_parameters`` keep (None: no EWMA; a snapshot is not kept)."""
        return self.proximal_ewma if self.proximal_decay is not None else None

    def set_parameters(
        self, load_path_or_dict: str | dict[str, th.Tensor], exact_match: bool = True, device: th.device | str = "auto"
    ) -> None:
        params = parameters_with_proximal_state(
            self,
            self._saved_ewma,
            load_path_or_dict,
            exact_match,
            device,
            self._modules_saved_in_data,
            self._loading,
            has_snapshot=self.proximal_ewma is not None and self._saved_ewma is None,
        )
        super().set_parameters(params, exact_match=exact_match, device=device)
        # whatever each rank loaded, they continue from rank 0's (nothing to do on one process)
        self.data_parallel.broadcast_state(self._state_holders())

    def _state_holders(self) -> dict[str, Any]:
        """The modules and optimizers whose states ``save`` writes, by name (the policy's, the proximal network's)."""
        names, _ = self._get_torch_save_params()
        return {name: recursive_getattr(self, name) for name in names}

    def _excluded_save_params(self) -> list[str]:
        # the collaborators (rebuilt by _setup_model), this run's state (world size change, the overlapped rollouts)
        unsaved = ["proximal", "data_parallel", "gradient_noise", "compiled_step", "training_precision", "distributed"]
        unsaved += ["_world_size_change", "overlapped_rollouts", *type(self)._unsaved_attributes, *self._modules_saved_in_data]
        return [*super()._excluded_save_params(), *unsaved]

    # learn() and collect_rollouts(): where data-parallel training and overlapped rollouts plug in
    def learn(
        self: SelfDecoupledAlgorithm,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str | None = None,
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfDecoupledAlgorithm:
        """
        SB3's ``learn``; with ``async_rollouts``, its ``collect_rollouts`` hands off rollouts collected during
        ``train()`` (:class:`~sb3_ewma.common.collection.overlap.OverlappedRollouts`).

        :param tb_log_name: the name of the run for TensorBoard logging (default: the algorithm's name)
        """
        check_learn_arguments(total_timesteps, log_interval)
        check_has_env(self.env, type(self).__name__)
        check_callback(callback)
        check_save_folders(callback, self.tensorboard_log)
        if tb_log_name is None:  # the package's class, also for a user's subclass of it
            tb_log_name = type(self)._package_class_name()
        if self._world_size_change is not None and self.rank == 0:
            warn_world_size_change(*self._world_size_change, self.n_envs)
        self._world_size_change = None
        starts_from = 0 if reset_num_timesteps else self.num_timesteps
        callback, progress_bar = self.data_parallel.start_learn(
            total_timesteps, starts_from, callback, progress_bar, self.set_logger
        )
        self._start_compiled_step(total_timesteps)
        overlapped = self.overlapped_rollouts = OverlappedRollouts(self.rollout_collector) if self.async_rollouts else None
        try:
            super().learn(
                total_timesteps=total_timesteps,
                callback=callback,
                log_interval=log_interval,
                tb_log_name=tb_log_name,
                reset_num_timesteps=reset_num_timesteps,
                progress_bar=progress_bar,
            )
        except BaseException:
            # a collection in flight is abandoned, and the environments it left mid-rollout closed
            if overlapped is not None and overlapped.end(failed=True) and self.env is not None:
                self.env.close()
            raise
        finally:
            self.overlapped_rollouts = None
        if overlapped is not None:
            overlapped.end(failed=False)
        return self

    def set_random_seed(self, seed: int | None = None) -> None:
        """Seed as SB3 does; data-parallel, each rank with a seed of its own (distinct, reproducible environments)."""
        super().set_random_seed(self.data_parallel.seed_for_rank(seed, self.n_envs))

    def collect_rollouts(
        self, env: VecEnv, callback: BaseCallback, rollout_buffer: RolloutBuffer, n_rollout_steps: int
    ) -> bool:
        overlapped = self.overlapped_rollouts
        if overlapped is None:
            continue_training = self._collect_rollout_with(self.policy, env, callback, rollout_buffer, n_rollout_steps)
        else:
            # the rollout collected during the last train() (the first of a learn call: collected now)
            continue_training, self.rollout_buffer = overlapped.collect(self, env, callback)
        # once per iteration, after the rollout: whether training goes on, and from which count (every rank's, when
        # data-parallel)
        continue_training, self.num_timesteps = self.data_parallel.synchronize_iteration(
            continue_training, self.num_timesteps, self.logger, self.ep_info_buffer, self.ep_success_buffer, self.env
        )
        if overlapped is not None and continue_training and self.num_timesteps < self._total_timesteps:
            overlapped.start_next(env)  # collected while SB3's loop trains on this one
        return continue_training

    def _collect_rollout_with(
        self,
        policy: BasePolicy,
        env: VecEnv,
        callback: BaseCallback,
        rollout_buffer: RolloutBuffer,
        n_rollout_steps: int,
        published: bool = True,
    ) -> bool:
        """
        The parent's rollout loop acting with ``policy`` (``self.policy`` or a copy); False if a callback stopped it. It
        runs on the model itself when ``self.policy`` acts on one process, otherwise on a
        :class:`~sb3_ewma.common.collection.rollout.RolloutView` (``published=False``: the view counts the steps and
        episodes for itself, for a rollout that a collector replays at the hand-off).
        """
        loop = type(self)._parent_collect_rollouts
        algorithm: Any = self
        if policy is not self.policy or self._timesteps_per_env_step != self.n_envs or not published:
            algorithm = RolloutView(self, policy, self._timesteps_per_env_step, published)
        # the model's own policy acts through the compiled acting step when it is in effect (a copy acts eagerly)
        acting = self.compiled_step.acting(policy) if policy is self.policy else contextlib.nullcontext()
        try:
            with acting:
                continue_training = loop(
                    algorithm, env, callback, rollout_buffer, n_rollout_steps, **self._rollout_loop_kwargs()
                )
        except (ValueError, RuntimeError):
            # a NaN or an infinity in an observation makes the policy's action distribution refuse it (torch's
            # "Expected parameter logits ... found invalid values"; the lean step's multinomial: "probability tensor
            # contains either inf, nan or element < 0", or its Gaussian's NaN check): say which environment and step
            check_finite_rollout(rollout_buffer, self._last_obs, algorithm.num_timesteps)
            raise
        # before any update uses them: the rewards and observations of the rollout
        check_finite_rollout(rollout_buffer, self._last_obs, algorithm.num_timesteps)
        return continue_training

    def _rollout_loop_kwargs(self) -> dict[str, Any]:
        """Further arguments of the parent's rollout loop (``MaskablePPO``'s ``use_masking``); none here."""
        return {}

    # compile_step: what the compiled step (self.compiled_step) takes from the model
    def _start_compiled_step(self, total_timesteps: int) -> None:
        """Whether this ``learn`` call's training and acting steps run compiled (``compile_step``), said in one line."""
        self.compiled_step.setting = self.compile_step  # as the model holds it now (a user may have set it)
        iterations = planned_iterations(total_timesteps, int(self.n_steps) * self._timesteps_per_env_step)
        planned = iterations if math.isinf(iterations) else self._planned_optimizer_steps(int(iterations))
        unsupported = None
        if self.compile_step is not False:
            # a subclass's own _evaluate_policy is not what the compiled step computes (the class that says how it
            # evaluates the policy is the reference)
            evaluation = self._compiled_evaluation
            reference = next(klass for klass in type(self).__mro__ if "_compiled_evaluation" in vars(klass))
            overridden = overridden_step(type(self), ("_evaluate_policy",), reference)
            if overridden is not None:
                evaluation = f"{overridden}, which the compiled step does not follow"
            unsupported = compile_unsupported(
                self.policy, self.device, evaluation, needs_distributions=self._needs_distributions
            )
        sentence = self.compiled_step.start_learn(
            planned,
            unsupported,
            planned_acting_steps=iterations * self.n_steps,
            acting_covered=CompiledStep.covers_acting(self.policy),
            in_pieces=self._step_in_pieces(),
            auto_min_optimizer_steps=self._auto_compile_min_steps,
            acting_elsewhere="a collector's copy of the policy acts, eagerly" if self.async_rollouts else None,
        )
        cannot_follow = unsupported is not None or self.compiled_step.failure is not None
        self._announce(sentence, warn=self.compile_step is True and cannot_follow)

    def _planned_optimizer_steps(self, iterations: int) -> int:
        """The optimizer steps of ``iterations`` iterations of ``train()``: ``n_epochs`` epochs of minibatches."""
        return iterations * self.n_epochs * self.minibatches_per_epoch

    def _step_in_pieces(self) -> str | None:
        """
        Why a compiled training step cannot be one function (``CompiledStep.whole_step``) for this model (None: it
        can): ``target_kl`` is read between the loss and the optimizer's step, the gradient noise scale reads the
        gradients, data-parallel gradients are averaged during ``backward()``, and the function steps torch's Adam.
        """
        if self.target_kl is not None:
            return "target_kl is read before the optimizer step"
        if self.gradient_noise is not None:
            return "the gradient noise scale reads the gradients"
        if self.world_size > 1:
            return "data-parallel gradients are averaged during backward()"
        overridden = overridden_step(type(self), ("_minibatch_loss", "_apply_gradients"), DecoupledAlgorithm)
        if overridden is not None:
            return f"{overridden}, which the whole step does not call"
        return CompiledStep.not_whole(self.policy, self.policy.optimizer)

    def _whole_step(
        self, rollout_data: Any, policy_objective: DecoupledPolicyObjective, clip_range_vf: float | None
    ) -> MinibatchTerms:
        """A minibatch's loss and its whole optimization step, one compiled function (``CompiledStep.whole_step``)."""
        minibatch = self._compiled_minibatch(rollout_data, policy_objective, clip_range_vf)
        ewma = self.proximal.ewma if self.proximal.kind == "ewma" else None
        return self.compiled_step.whole_step(minibatch, ewma, self.max_grad_norm, self._n_updates)

    def _compiled_minibatch(
        self, rollout_data: Any, policy_objective: DecoupledPolicyObjective, clip_range_vf: float | None
    ) -> CompiledMinibatch:
        """A minibatch as the compiled steps take it: the actions as the policy evaluates them, the advantages
        normalized, the coefficients and the proximal policy's network (a copy of the policy: compile_unsupported)."""
        actions = rollout_data.actions
        if isinstance(self.action_space, spaces.Discrete):
            actions = rollout_data.actions.long().flatten()
        return CompiledMinibatch(
            cast(ActorCriticPolicy | MaskableActorCriticPolicy, self.policy),
            cast(ActorCriticPolicy | MaskableActorCriticPolicy | None, self.proximal.network),
            rollout_data,
            actions,
            self.advantage_normalizer.minibatch(rollout_data.advantages),
            policy_objective,
            clip_range_vf,
            self.ent_coef,
            self.vf_coef,
            self.training_precision.autocast_dtype,
            rollout_data.action_masks if self._compiled_evaluation == "action_masks" else None,
        )

    def _announce(self, sentence: str, warn: bool = False) -> None:
        """One line about how the model trains: printed at ``verbose >= 1``, or a warning when ``warn``."""
        if warn:
            warnings.warn(sentence, UserWarning, stacklevel=3)
        elif self.verbose >= 1 and self.rank == 0:
            print(sentence)

    # SB3's methods with a check or a convenience of their own
    def predict(
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """
        SB3's ``predict``; an observation that holds NaN, or an infinity where SB3 fails on it, gets a sentence that
        says so (:func:`~sb3_ewma.common.finite.naming_non_finite_observations`): what SB3 predicts, this predicts.
        """
        with naming_non_finite_observations(observation):
            return super().predict(observation, state, episode_start, deterministic)

    def set_env(self, env: GymEnv | str, force_reset: bool = True) -> None:
        """SB3's ``set_env``; ``env`` may also be a registered environment id, made as the constructor makes it."""
        super().set_env(maybe_make_env(env, self.verbose), force_reset=force_reset)

    def _get_policy_from_name(self, policy_name: str) -> type[BasePolicy]:
        """SB3's, with the algorithm's policy names and the nearest one in the error for an unknown name."""
        if policy_name not in self.policy_aliases:
            raise ValueError(unknown_policy_message(type(self), policy_name))
        return super()._get_policy_from_name(policy_name)

    def _maybe_recommend_cpu(self, mlp_class_name: str = "ActorCriticPolicy") -> None:
        # SB3 recognizes its own ActorCriticPolicy by name only; this package's and sb3-contrib's MLP policies differ
        mlp_policy = self.policy_aliases.get("MlpPolicy", self.policy_aliases.get("MlpLstmPolicy"))
        if mlp_policy is not None and self.policy_class is mlp_policy:
            mlp_class_name = mlp_policy.__name__
        super()._maybe_recommend_cpu(mlp_class_name)
