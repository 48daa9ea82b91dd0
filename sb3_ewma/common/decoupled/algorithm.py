"""
:class:`DecoupledAlgorithm`: what every algorithm of this package adds to its parent, in one class between the two:
``PPO_EWMA(DecoupledAlgorithm, PPO)``, and likewise with sb3-contrib's ``RecurrentPPO`` and ``MaskablePPO``, and SB3's
``OnPolicyAlgorithm`` for PPG.
"""

import contextlib
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, TypeVar

import torch as th
from gymnasium import spaces
from stable_baselines3.common.base_class import maybe_make_env
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, RolloutBufferSamples
from stable_baselines3.common.vec_env import VecEnv
from torch.nn import functional as F

from sb3_ewma.common.checks import check_learn_arguments
from sb3_ewma.common.collection.overlap import learn_with_overlapped_rollouts, rollout_settings
from sb3_ewma.common.collection.rollout import RolloutView, new_rollout_buffer
from sb3_ewma.common.decoupled.advantages import AdvantageNormalizer
from sb3_ewma.common.decoupled.arguments import learn_arguments
from sb3_ewma.common.decoupled.logs import record_train_logs, schedule_value, setup_clip_schedules
from sb3_ewma.common.decoupled.objective import DecoupledPolicyObjective
from sb3_ewma.common.decoupled.options import DecoupledOptions
from sb3_ewma.common.decoupled.proximal import (
    ProximalPolicy,
    is_policy_parameter,
    loading_from_file,
    parameters_with_proximal_state,
    prepare_load,
    proximal_state_in_data,
    torch_save_names,
)
from sb3_ewma.common.distributed import DataParallelTraining, note_world_size, wants_data_parallel, warn_world_size_change
from sb3_ewma.common.distributions import evaluate_actions_with_distribution
from sb3_ewma.common.ewma import ParameterEWMA
from sb3_ewma.common.gradient_noise import observe_gradient_noise
from sb3_ewma.common.host import HostAlgorithm
from sb3_ewma.common.keywords import check_constructor_call, unknown_policy_message
from sb3_ewma.common.losses import clipped_values
from sb3_ewma.common.minibatches import rollout_minibatches
from sb3_ewma.common.optim import clip_grad_norm, prefer_foreach
from sb3_ewma.common.precision import FLOAT32, TrainingPrecision
from sb3_ewma.common.staleness import take_stale_rollout

SelfAlgorithm = TypeVar("SelfAlgorithm", bound="DecoupledAlgorithm")


class DecoupledAlgorithm(HostAlgorithm):
    """
    The part of every algorithm of this package that is not its parent's: the decoupled options, PPO's ``train()``
    with the decoupled objective, and the collaborators it calls explicitly: ``self.proximal``, the proximal policy
    (:class:`~sb3_ewma.common.decoupled.proximal.ProximalPolicy`: none, snapshot or EWMA); ``self.data_parallel``,
    data-parallel training (:class:`~sb3_ewma.common.distributed.DataParallelTraining`, None unless the model trains
    on several processes); the rollout collector, the parent's own rollout loop acting with an explicit policy
    (:mod:`~sb3_ewma.common.collection.rollout`), run by ``collect_rollouts`` or, with ``async_rollouts``, by a
    collector thread or process (:mod:`~sb3_ewma.common.collection.overlap`). It comes first in the algorithm's bases
    (at run time it derives from ``object``: :mod:`sb3_ewma.common.host`).

    An algorithm whose policy takes more than the observations overrides :meth:`_evaluate_policy` and names the
    proximal network's distribution in :attr:`_proximal_distribution_of`.
    """

    # the parent's rollout loop, run with an explicit acting policy (_collect_rollout_with), and the attributes a
    # rollout advances besides num_timesteps and the episode statistics (a collector process sends them back)
    _parent_collect_rollouts: ClassVar[Callable[..., bool]] = staticmethod(OnPolicyAlgorithm.collect_rollouts)
    _collection_state_names: ClassVar[tuple[str, ...]] = ("_last_obs", "_last_episode_starts")
    # which policy parameters the proximal EWMA averages (those the action distribution depends on), and
    # distribution(network, minibatch) for policies that take more than the observations (ProximalPolicy)
    _is_proximal_parameter = staticmethod(is_policy_parameter)
    _proximal_distribution_of: ClassVar[Any] = None
    # whether the advantages of stale data are computed when it is used (sb3_ewma.common.staleness)
    _recompute_stale_advantages: ClassVar[bool] = True
    # the algorithm's own attributes that `save` leaves out, and the modules of saved policies `load` also accepts
    _unsaved_attributes: ClassVar[tuple[str, ...]] = ()
    loadable_parent_policy_modules: ClassVar[tuple[str, ...]] = ()

    # the decoupled options are attributes (typed in sb3_ewma.common.host), set by _set_decoupled_options; artificial
    # staleness (an ablation: sb3_ewma.ablations.with_staleness) is off unless set on the model
    staleness: int = 0
    staleness_mode: str = "decoupled"
    advantage_normalizer: AdvantageNormalizer
    # the collaborators, set by _setup_model, and the numeric format of train() (sb3_ewma.common.precision)
    proximal: ProximalPolicy
    data_parallel: DataParallelTraining | None = None
    training_precision: TrainingPrecision = FLOAT32

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # before the constructor runs: clear errors for what it does not take (sb3_ewma.common.keywords)
        check_constructor_call(cls, args, kwargs)
        return super().__new__(cls)

    def _set_decoupled_options(self, options: DecoupledOptions) -> None:
        """Store the (checked) options as attributes; after the parent's constructor (a collector process checks the env)."""
        for name, value in options.as_dict().items():
            setattr(self, name, value)
        self.async_rollouts, self.rollout_collector = rollout_settings(options.async_rollouts, self.env)
        # created here, not in _setup_model, so that `load` restores the saved moments
        self.advantage_normalizer = AdvantageNormalizer(
            self.normalize_advantage, options.advantage_normalization, options.advantage_ewma_decay
        )

    def _setup_model(self) -> None:
        self._setup_parent_model()
        self._setup_decoupled_training()

    def _setup_parent_model(self) -> None:
        # The parent's _setup_model (same random-number sequence, so ewma_decay=None reproduces the parent) turns
        # clip_range into a schedule and cannot take None: it gets SB3's defaults, the real schedules are set after.
        clip_ranges = {"clip_range": self.clip_range, "clip_range_vf": self.clip_range_vf}
        self.__dict__.update(clip_range=0.2, clip_range_vf=None)
        super()._setup_model()
        self.__dict__.update(clip_ranges)
        setup_clip_schedules(self)

    def _setup_decoupled_training(self) -> None:
        """After the parent's ``_setup_model`` (also on load): advantages, proximal policy, stale rollouts, ranks."""
        self.advantage_normalizer.configure(self.normalize_advantage, self.advantage_normalization, self.advantage_ewma_decay)
        for stale in ("proximal_ewma", "proximal_decay"):  # attributes of files saved before, set by `load`
            self.__dict__.pop(stale, None)
        self.proximal = ProximalPolicy.of(self)
        self.training_precision.prepare(self.policy, self.proximal.network)
        self._stale_buffers: deque[Any] = deque()
        data_parallel = self._join_data_parallel()
        note_world_size(self)
        if data_parallel is not None:
            data_parallel.setup(self)

    def _join_data_parallel(self) -> DataParallelTraining | None:
        """Join the process group when ``self.distributed`` asks for it (once, before the policy is built)."""
        if "data_parallel" not in self.__dict__:
            wanted = wants_data_parallel(getattr(self, "distributed", None))
            self.data_parallel = DataParallelTraining(self.device) if wanted else None
        return self.data_parallel

    def _build_policy(self) -> BasePolicy:
        """A new policy of the same structure as ``self.policy`` (for the proximal policy and the collectors)."""
        return self.policy_class(
            self.observation_space, self.action_space, self.lr_schedule, use_sde=self.use_sde, **self.policy_kwargs
        )

    def _make_rollout_buffer(self) -> RolloutBuffer:
        """A new rollout buffer like ``self.rollout_buffer`` (SB3's construction in ``_setup_model``)."""
        return new_rollout_buffer(self)

    @property
    def proximal_ewma(self) -> ParameterEWMA | None:
        """The proximal policy's network (an EWMA or a snapshot of the policy), or None."""
        return getattr(self.__dict__.get("proximal"), "ewma", None)

    @property
    def proximal_decay(self) -> float | None:
        """The resolved decay of the proximal EWMA (None: no EWMA)."""
        return getattr(self.__dict__.get("proximal"), "decay", None)

    @property
    def world_size(self) -> int:
        """Number of processes training this model (1 when not data-parallel)."""
        return getattr(self.data_parallel, "world_size", 1)

    @property
    def rank(self) -> int:
        """This process's rank (0 when not data-parallel); rank 0 logs and saves."""
        return getattr(self.data_parallel, "rank", 0)

    @property
    def _timesteps_per_env_step(self) -> int:
        """Environment steps one vectorized step of this process counts for: ``num_timesteps`` counts every rank's."""
        return self.n_envs * self.world_size

    @property
    def _rollout_staleness(self) -> int:
        """Iterations between the parameters that collected the data trained on and those being trained."""
        return self.staleness + int(self.async_rollouts)

    @property
    def _minibatch_size(self) -> int:
        """Samples per minibatch: ``batch_size``, or the whole rollout for ``batch_size=None`` (sb3-contrib's)."""
        return self.batch_size or self.n_steps * self.n_envs

    @property
    def minibatches_per_epoch(self) -> int:
        """Optimizer steps per epoch, ``ceil(n_steps * n_envs / batch_size)``."""
        return -(-self.n_steps * self.n_envs // self._minibatch_size)

    @property
    def _needs_distributions(self) -> bool:
        """Whether the policy loss needs whole distributions (the exact KL penalty), not only log-probabilities."""
        return self.kl_coef > 0 and self.kl_estimator == "exact"

    @property
    def _training_lock(self) -> threading.RLock:
        """Held during ``train()`` under ``async_rollouts``; ``save`` and ``predict`` take it."""
        return self.__dict__.setdefault("_train_lock", threading.RLock())

    def _get_policy_from_name(self, policy_name: str) -> type[BasePolicy]:
        """SB3's, with the algorithm's policy names and the nearest one in the error for an unknown name."""
        if policy_name not in self.policy_aliases:
            raise ValueError(unknown_policy_message(type(self), policy_name))
        return super()._get_policy_from_name(policy_name)

    def _maybe_recommend_cpu(self, mlp_class_name: str = "ActorCriticPolicy") -> None:
        # SB3 recognizes its own ActorCriticPolicy by name only; this package's and sb3-contrib's MLP policies differ
        aliases = getattr(self, "policy_aliases", {})
        mlp_policy = aliases.get("MlpPolicy", aliases.get("MlpLstmPolicy"))
        if mlp_policy is not None and self.policy_class is mlp_policy:
            mlp_class_name = mlp_policy.__name__
        super()._maybe_recommend_cpu(mlp_class_name)

    def set_env(self, env: GymEnv | str, force_reset: bool = True) -> None:
        """SB3's ``set_env``; ``env`` may also be a registered environment id, made as the constructor makes it."""
        super().set_env(maybe_make_env(env, self.verbose), force_reset=force_reset)

    def set_random_seed(self, seed: int | None = None) -> None:
        """Seed as SB3 does, with ``seed + rank * n_envs`` on each rank: distinct, reproducible environments."""
        self._join_data_parallel()
        super().set_random_seed(None if seed is None else seed + self.rank * self.n_envs)

    def learn(
        self: SelfAlgorithm,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str | None = None,
        reset_num_timesteps: bool = True,
        *parent_args: Any,
        progress_bar: bool = False,
        **parent_kwargs: Any,
    ) -> SelfAlgorithm:
        """SB3's ``learn`` (TensorBoard run: the algorithm's name), overlapped with ``async_rollouts``; after
        ``reset_num_timesteps``, the parent's arguments in its order (``MaskablePPO``: ``use_masking, progress_bar``)."""
        if parent_args:
            progress_bar, parent_kwargs = learn_arguments(super().learn, parent_args, progress_bar, parent_kwargs)
        check_learn_arguments(total_timesteps, log_interval)
        if tb_log_name is None:  # the package's class, also for a user's subclass of it
            tb_log_name = next(klass.__name__ for klass in type(self).__mro__ if klass.__module__.startswith("sb3_ewma."))
        with self._learning(**parent_kwargs):
            if self.async_rollouts:
                learn_with_overlapped_rollouts(
                    self, total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar
                )
                return self
            return super().learn(
                total_timesteps=total_timesteps,
                callback=callback,
                log_interval=log_interval,
                tb_log_name=tb_log_name,
                reset_num_timesteps=reset_num_timesteps,
                progress_bar=progress_bar,
                **parent_kwargs,
            )

    def _learning(self, **parent_kwargs: Any) -> Any:
        """The context ``learn`` runs in, after checking the parent's further arguments (none here)."""
        if parent_kwargs:
            raise TypeError(f"{type(self).__name__}.learn() got unexpected keyword arguments {sorted(parent_kwargs)}")
        return contextlib.nullcontext()

    def _setup_learn(self, total_timesteps: int, callback: MaybeCallback = None, *args: Any, **kwargs: Any) -> Any:
        world_size_change: tuple[int, int] | None = self.__dict__.pop("_world_size_change", None)
        if world_size_change is not None and self.rank == 0:
            warn_world_size_change(*world_size_change, self.n_envs)
        if self.data_parallel is not None:
            self.data_parallel.start_learn(self, total_timesteps)
        result = super()._setup_learn(total_timesteps, callback, *args, **kwargs)
        if self.data_parallel is not None:
            self.data_parallel.start_vec_normalize(self.env)
        return result

    def _init_callback(self, callback: MaybeCallback, progress_bar: bool = False) -> BaseCallback:
        if self.data_parallel is not None:
            callback, progress_bar = self.data_parallel.learn_callback(callback, progress_bar)
        return super()._init_callback(callback, progress_bar)

    def _update_info_buffer(self, infos: list[dict[str, Any]], dones: Any = None) -> None:
        super()._update_info_buffer(infos, dones)
        if self.data_parallel is not None:
            self.data_parallel.record_episodes(infos, dones)

    def collect_rollouts(
        self, env: VecEnv, callback: BaseCallback, rollout_buffer: RolloutBuffer, n_rollout_steps: int
    ) -> bool:
        continue_training = self._collect_rollout_with(self.policy, env, callback, rollout_buffer, n_rollout_steps)
        return self._synchronize_iteration(continue_training)

    def _collect_rollout_with(
        self, policy: Any, env: VecEnv, callback: BaseCallback, rollout_buffer: RolloutBuffer, n_rollout_steps: int
    ) -> bool:
        """The parent's rollout loop acting with ``policy`` (``self.policy`` or a copy); False if a callback stopped it."""
        view = RolloutView(self, policy, self._timesteps_per_env_step)
        loop = type(self)._parent_collect_rollouts
        return loop(view, env, callback, rollout_buffer, n_rollout_steps, **self._rollout_loop_kwargs())

    def _rollout_loop_kwargs(self) -> dict[str, Any]:
        """Further arguments of the parent's rollout loop (``MaskablePPO``'s ``use_masking``); none here."""
        return {}

    def _synchronize_iteration(self, continue_training: bool) -> bool:
        """Once per iteration, after the rollout: whether training goes on (on every rank, when data-parallel)."""
        data_parallel = self.data_parallel
        return continue_training if data_parallel is None else data_parallel.synchronize_iteration(self, continue_training)

    def predict(self, *args: Any, **kwargs: Any) -> Any:
        with self._training_lock:  # the parameters of an iteration boundary under async_rollouts
            return super().predict(*args, **kwargs)

    def save(self, *args: Any, **kwargs: Any) -> None:
        """
        SB3's ``save``, on rank 0 only (the ranks hold the same model), with the proximal policy's state in the file's
        ``data`` (``proximal_policy_state``), where SB3's parent ``load`` ignores it.
        """
        if self.rank != 0:
            return
        with self._training_lock, proximal_state_in_data(self, self.__dict__.get("proximal")):
            super().save(*args, **kwargs)

    @classmethod
    def load(cls, path: Any, *args: Any, **kwargs: Any) -> Any:
        """SB3's ``load``, for files this algorithm opens (:func:`prepare_load`); ``env`` may be an environment id."""
        args = prepare_load(cls, path, args, kwargs)
        with loading_from_file():
            return super().load(path, *args, **kwargs)

    @classmethod
    def _check_saved_data(cls, data: dict[str, Any], path: Any) -> None:
        """Further checks of a saved file's ``data`` before ``load`` (values serialized); none here."""

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        state_dicts, torch_variables = super()._get_torch_save_params()
        return torch_save_names(state_dicts, self.__dict__.get("proximal")), torch_variables

    def set_parameters(self, load_path_or_dict: Any, exact_match: bool = True, device: th.device | str = "auto") -> None:
        params = parameters_with_proximal_state(self, load_path_or_dict, exact_match, device)
        super().set_parameters(params, exact_match=exact_match, device=device)
        if self.data_parallel is not None:
            # whatever each rank loaded, they continue from rank 0's
            self.data_parallel.broadcast_state(self)

    def _excluded_save_params(self) -> list[str]:
        # the collaborators (rebuilt by _setup_model), this run's state (stale rollouts, epoch in progress), the lock
        unsaved = ["proximal", "data_parallel", "training_precision", "distributed", "_world_size_change", "_stale_buffers"]
        unsaved += ["_gradient_noise", "_train_lock", *type(self)._unsaved_attributes]
        return [*super()._excluded_save_params(), *unsaved]

    def train(self) -> None:
        """SB3 PPO's ``train`` with the decoupled objective, on the rollout buffer (or the one ``staleness`` ago)."""
        buffer = self._take_training_buffer()
        if buffer is None:
            self.logger.record("train/stale_iterations_buffered", len(self._stale_buffers))
            return
        # Switch to train mode (this affects batch norm / dropout)
        self.policy.set_training_mode(True)
        # Update optimizer learning rate
        self._update_learning_rate(self.policy.optimizer)
        # Compute current clip ranges (None: no clipping)
        clip_range, clip_range_vf = self._current_clip_ranges()

        buffer.advantages = self.advantage_normalizer.start_iteration(buffer.advantages)
        # [decoupled] the proximal policy: the EWMA, or a snapshot of the policy now
        self.proximal.start_iteration()
        policy_objective = DecoupledPolicyObjective(clip_range, self.kl_coef, self.kl_estimator, self.imp_samp_max)

        entropy_losses, value_losses = [], []
        continue_training = True
        # train for n_epochs epochs
        for epoch in range(self.n_epochs):
            approx_kl_divs = []
            # Do a complete pass on the rollout buffer
            for rollout_data in self._minibatches(buffer):
                # [decoupled] the policy loss: importance sampling with the behavior policy, clipping at the proximal
                with self.training_precision.forward(self.device):
                    policy_loss, entropy_loss, values, approx_kl_div = self._policy_terms(rollout_data, policy_objective)
                entropy_losses.append(entropy_loss.detach())
                approx_kl_divs.append(approx_kl_div)

                # Clip the difference between old and new value (None: no clipping; <= 0: no movement)
                # NOTE: this depends on the reward scaling
                values_pred = clipped_values(values, rollout_data.old_values, clip_range_vf)
                # Value loss using the TD(gae_lambda) target
                value_loss = F.mse_loss(rollout_data.returns, values_pred)
                value_losses.append(value_loss.detach())

                loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss

                # Early stopping on the KL from the behavior policy (read from the device only when needed)
                if self._kl_exceeds_target(approx_kl_div):
                    continue_training = False
                    if self.verbose >= 1:
                        print(f"Early stopping at step {epoch} due to reaching max kl: {approx_kl_div:.2f}")
                    break

                # Optimization step
                self.policy.optimizer.zero_grad()
                loss.backward()
                self._apply_gradients(self.policy.optimizer)
                # [decoupled] the EWMA step
                self.proximal.step()

            self._n_updates += 1
            if not continue_training:
                break

        losses = {"entropy_loss": entropy_losses, "value_loss": value_losses, "approx_kl": approx_kl_divs}
        record_train_logs(self, buffer, policy_objective.mean_stats(), losses, loss, clip_range, clip_range_vf)

    def _take_training_buffer(self) -> RolloutBuffer | None:
        """
        The buffer to train on this iteration: the one just collected, or with staleness ``k`` the one collected
        ``k`` iterations ago (None while fewer have been collected; see :func:`take_stale_rollout`).
        """
        if self.staleness == 0:
            return self.rollout_buffer
        return take_stale_rollout(self, self._stale_buffers, type(self)._recompute_stale_advantages)

    def _current_clip_ranges(self) -> tuple[float | None, float | None]:
        """The clip ranges of the policy and of the value function at the current progress (``None``: no clipping)."""
        progress = self._current_progress_remaining
        return schedule_value(self.clip_range, progress), schedule_value(self.clip_range_vf, progress)

    def _minibatches(self, buffer: RolloutBuffer) -> Iterator[RolloutBufferSamples]:
        """One epoch over the rollout buffer: SB3's random steps, or whole rollouts of environments (the authors')."""
        if self.minibatch_sampling == "rollouts":
            return self.advantage_normalizer.epoch(self._rollout_minibatches(buffer))
        return self.advantage_normalizer.epoch(buffer.get(self.batch_size))

    def _rollout_minibatches(self, buffer: RolloutBuffer) -> Iterator[RolloutBufferSamples]:
        return rollout_minibatches(buffer, self._minibatch_size)  # minibatch_sampling="rollouts"

    def _policy_terms(
        self, rollout_data: RolloutBufferSamples, policy_objective: DecoupledPolicyObjective
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
        """
        The policy loss of a minibatch (with its KL penalty), the entropy loss, the values of the same forward pass and
        the approximate KL from the behavior policy (SB3's, for ``target_kl``). Importance sampling uses the buffer's
        log-probabilities (the behavior policy's; the recent policy's in the ``"proximal"`` staleness mode).
        """
        actions = rollout_data.actions
        if isinstance(self.action_space, spaces.Discrete):
            # Convert discrete action from float to long
            actions = rollout_data.actions.long().flatten()
        values, log_prob, entropy, distribution = self._evaluate_policy(rollout_data, actions)
        advantages = self.advantage_normalizer.minibatch(rollout_data.advantages)

        behavior_log_prob = rollout_data.old_log_prob
        proximal_log_prob, proximal_dist = self._proximal_log_prob(rollout_data, actions, behavior_log_prob)
        policy_loss = policy_objective(advantages, log_prob, proximal_log_prob, behavior_log_prob, distribution, proximal_dist)
        # Entropy loss favor exploration (approximate entropy when no analytical form)
        entropy_loss = -th.mean(-log_prob) if entropy is None else -th.mean(entropy)
        # Approximate reverse KL from the behavior policy, as in SB3's PPO (kept on the device)
        with th.no_grad():
            log_ratio = log_prob - rollout_data.old_log_prob
            approx_kl_div = th.mean((th.exp(log_ratio) - 1) - log_ratio)
        return policy_loss, entropy_loss, values.flatten(), approx_kl_div

    def _evaluate_policy(
        self, rollout_data: Any, actions: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor | None, Distribution | None]:
        """The policy's values, log-probabilities, entropy (or None), and the distribution if the exact KL needs it."""
        if self._needs_distributions:
            return evaluate_actions_with_distribution(self.policy, rollout_data.observations, actions)
        values, log_prob, entropy = self.policy.evaluate_actions(rollout_data.observations, actions)
        return values, log_prob, entropy, None

    def _proximal_log_prob(
        self, rollout_data: Any, actions: th.Tensor, behavior_log_prob: th.Tensor
    ) -> tuple[th.Tensor, Distribution | None]:
        """The proximal policy's log-probabilities of ``actions``, and its distribution when the loss needs it."""
        return self.proximal.log_prob(rollout_data, actions, behavior_log_prob, self._needs_distributions)

    def _kl_exceeds_target(self, approx_kl_div: th.Tensor) -> bool:
        """SB3's ``target_kl`` early stop on the KL from the behavior policy (its mean over the ranks, data-parallel)."""
        if self.target_kl is None:
            return False  # the KL is read from the device only with a target
        kl = approx_kl_div.item() if self.data_parallel is None else self.data_parallel.mean_kl(approx_kl_div.item())
        return kl > 1.5 * self.target_kl

    def _apply_gradients(self, optimizer: th.optim.Optimizer) -> None:
        """Every optimizer step of every phase, after ``backward()``: data-parallel averaging, clipping, the step."""
        if self.data_parallel is not None:
            self.data_parallel.average_gradients(optimizer)
        if self.log_gradient_noise_scale:
            observe_gradient_noise(self, optimizer)  # the minibatch gradient, before clipping
        # SB3's clip_grad_norm_ and Adam step, with the same numbers in fewer calls on CPU (sb3_ewma.common.optim)
        clip_grad_norm(self.policy.parameters(), self.max_grad_norm)
        prefer_foreach(optimizer)
        optimizer.step()

    def _gradient_noise_batching(self, optimizer: th.optim.Optimizer) -> tuple[int, int, str] | None:
        """``(samples per minibatch, minibatches per epoch, log prefix)`` of the phase ``optimizer`` steps, or None."""
        if optimizer is self.policy.optimizer:
            return self._minibatch_size, self.minibatches_per_epoch, "train"
        return None
