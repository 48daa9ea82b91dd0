"""The part of every algorithm of this package that deals with the proximal policy and the decoupled objective."""

from collections.abc import Callable, Iterator
from typing import Any

import torch as th
from gymnasium import spaces
from stable_baselines3.common.base_class import maybe_make_env
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, RolloutBufferSamples, Schedule
from stable_baselines3.common.utils import FloatSchedule, explained_variance

from sb3_ewma.common.decoupled.advantages import AdvantageNormalizer
from sb3_ewma.common.decoupled.objective import DecoupledPolicyObjective, mean_of
from sb3_ewma.common.decoupled.options import check_decoupled_options, resolve_ewma_decay, uses_proximal_network
from sb3_ewma.common.decoupled.proximal import (
    ProximalSaveMixin,
    is_policy_parameter,
    make_proximal_ewma,
    proximal_action_log_prob,
    proximal_distribution,
)
from sb3_ewma.common.distributions import evaluate_actions_with_distribution
from sb3_ewma.common.ewma import ParameterEWMA, center_of_mass_from_ewma_decay
from sb3_ewma.common.format import without_rounding_noise
from sb3_ewma.common.gradient_noise import GradientNoiseScale
from sb3_ewma.common.host import HostAlgorithm
from sb3_ewma.common.keywords import check_keywords, check_policy_keywords, unknown_policy_message
from sb3_ewma.common.minibatches import rollout_minibatches
from sb3_ewma.common.optim import clip_grad_norm, prefer_foreach


class DecoupledAlgorithmMixin(ProximalSaveMixin, HostAlgorithm):
    """
    Mixed into an SB3 ``OnPolicyAlgorithm`` with PPO's hyperparameters (before it in the bases; see
    :mod:`sb3_ewma.common.host`): stores the decoupled options (:meth:`_set_decoupled_options`), builds the proximal
    policy, evaluates a minibatch's policy terms with the decoupled objective, takes the optimizer steps and logs the
    diagnostics. Save/load of the proximal policy comes from :class:`ProximalSaveMixin`.
    """

    # set by _set_decoupled_options
    ewma_decay: float | str | None
    kl_coef: float
    kl_estimator: str
    imp_samp_max: float
    advantage_normalization: str
    advantage_ewma_decay: float
    advantage_normalizer: AdvantageNormalizer
    staleness: int
    staleness_mode: str
    # set by _setup_proximal_policy
    proximal_decay: float | None
    proximal_ewma: ParameterEWMA | None

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # before the constructor runs, so that a keyword it does not take gets a message that says which class or
        # option takes it (Python's TypeError names the keyword only); a policy keyword of another algorithm's
        # policies likewise (sb3_ewma.common.keywords)
        check_keywords(cls, kwargs)
        check_policy_keywords(cls, kwargs.get("policy", args[0] if args else None), kwargs.get("policy_kwargs"))
        return super().__new__(cls)

    def _get_policy_from_name(self, policy_name: str) -> type[BasePolicy]:
        """SB3's, with the algorithm's policy names and the nearest one in the error for an unknown name."""
        if policy_name not in self.policy_aliases:
            raise ValueError(unknown_policy_message(type(self), policy_name))
        return super()._get_policy_from_name(policy_name)

    def set_env(self, env: GymEnv | str, force_reset: bool = True) -> None:
        """SB3's ``set_env``; ``env`` may also be a registered environment id, made as the constructor makes it."""
        super().set_env(maybe_make_env(env, self.verbose), force_reset=force_reset)

    def _excluded_save_params(self) -> list[str]:
        # the gradient noise trackers hold gradients of the epoch in progress: rebuilt when training resumes
        return [*super()._excluded_save_params(), "_gradient_noise"]

    def _maybe_recommend_cpu(self, mlp_class_name: str = "ActorCriticPolicy") -> None:
        """
        SB3's advice to train MLP policies on the CPU, for this algorithm's MLP policy (SB3 recognizes its own
        ``ActorCriticPolicy`` by name only; this package's and sb3-contrib's MLP policies have other names).
        """
        aliases = getattr(self, "policy_aliases", {})
        mlp_policy = aliases.get("MlpPolicy", aliases.get("MlpLstmPolicy"))
        if mlp_policy is not None and self.policy_class is mlp_policy:
            mlp_class_name = mlp_policy.__name__
        super()._maybe_recommend_cpu(mlp_class_name)

    def _set_decoupled_options(
        self,
        *,
        ewma_decay: float | str | None,
        kl_coef: float,
        kl_estimator: str,
        imp_samp_max: float,
        normalize_advantage: bool,
        advantage_normalization: str,
        advantage_ewma_decay: float,
        staleness: int = 0,
        staleness_mode: str = "decoupled",
    ) -> None:
        """
        Check the options of the decoupled objective (a ``ValueError`` names the first one out of range) and store
        them. Called by the algorithm's constructor before it builds anything (no environment is created on bad input).
        """
        check_decoupled_options(
            ewma_decay=ewma_decay,
            kl_coef=kl_coef,
            kl_estimator=kl_estimator,
            imp_samp_max=imp_samp_max,
            normalize_advantage=normalize_advantage,
            advantage_normalization=advantage_normalization,
            advantage_ewma_decay=advantage_ewma_decay,
            staleness=staleness,
            staleness_mode=staleness_mode,
        )
        self.ewma_decay = ewma_decay
        self.kl_coef = kl_coef
        self.kl_estimator = kl_estimator
        self.imp_samp_max = imp_samp_max
        self.advantage_normalization = advantage_normalization
        self.advantage_ewma_decay = advantage_ewma_decay
        self.staleness = int(staleness)
        self.staleness_mode = staleness_mode
        # created here, not in _setup_model, so that `load` restores the saved moments
        self.advantage_normalizer = AdvantageNormalizer(normalize_advantage, advantage_normalization, advantage_ewma_decay)

    def _setup_clip_schedules(self) -> None:
        """PPO's clip-range schedules, where ``clip_range=None`` means no clipping."""
        for name in ("clip_range", "clip_range_vf"):
            value = getattr(self, name)
            if value is None:
                continue
            if name == "clip_range_vf" and isinstance(value, (float, int)):
                assert value > 0, "`clip_range_vf` must be positive, pass `None` to deactivate vf clipping"
            setattr(self, name, FloatSchedule(value))

    def _current_clip_ranges(self) -> tuple[float | None, float | None]:
        """The clip ranges of the policy and of the value function at the current progress (``None``: no clipping)."""
        return self._schedule_value(self.clip_range), self._schedule_value(self.clip_range_vf)

    def _schedule_value(self, schedule: float | Schedule | None) -> float | None:
        if schedule is None:
            return None
        return float(schedule(self._current_progress_remaining)) if callable(schedule) else float(schedule)

    def _build_policy(self) -> BasePolicy:
        """A new policy of the same structure as ``self.policy`` (for the proximal policy's copy)."""
        return self.policy_class(
            self.observation_space,
            self.action_space,
            self.lr_schedule,
            use_sde=self.use_sde,
            **self.policy_kwargs,
        )

    def _make_rollout_buffer(self) -> RolloutBuffer:
        """A new rollout buffer like ``self.rollout_buffer`` (SB3's construction in ``_setup_model``)."""
        assert self.rollout_buffer_class is not None, "chosen by OnPolicyAlgorithm._setup_model"
        return self.rollout_buffer_class(
            self.n_steps,
            self.observation_space,
            self.action_space,
            device=self.device,
            gamma=self.gamma,
            gae_lambda=self.gae_lambda,
            n_envs=self.n_envs,
            **self.rollout_buffer_kwargs,
        )

    def _minibatches(self, buffer: RolloutBuffer) -> Iterator[RolloutBufferSamples]:
        """One epoch over the rollout buffer: SB3's random steps, or whole rollouts of environments (the authors')."""
        if getattr(self, "minibatch_sampling", "steps") == "rollouts":
            minibatches = self._rollout_minibatches(buffer)
        else:
            minibatches = buffer.get(self.batch_size)
        if not self.advantage_normalizer.pools_minibatches:
            return minibatches
        # data-parallel: the advantage moments of all the epoch's global minibatches in one collective
        epoch = list(minibatches)
        self.advantage_normalizer.pool_epoch([minibatch.advantages for minibatch in epoch])
        return iter(epoch)

    def _rollout_minibatches(self, buffer: RolloutBuffer) -> Iterator[RolloutBufferSamples]:
        """An epoch in minibatches of whole rollouts (``minibatch_sampling="rollouts"``)."""
        return rollout_minibatches(buffer, self._minibatch_size)

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

    def _setup_advantage_normalizer(self) -> None:
        """
        Apply the current advantage options to the normalizer. It is created in ``__init__`` so that ``load`` restores
        its saved moments; the options come from the attributes, which ``load`` may have changed (or, for a file saved
        by SB3's PPO, restored without any normalizer).
        """
        self.advantage_normalizer.configure(
            self.normalize_advantage,
            self.advantage_normalization,
            self.advantage_ewma_decay,
        )

    def _setup_proximal_policy(
        self, staleness: int = 0, staleness_mode: str = "decoupled", include: Callable[[str], bool] = is_policy_parameter
    ) -> None:
        """
        Resolve the EWMA decay and build the proximal network when one is needed: the EWMA, or without it a
        snapshot of the policy taken at the start of each iteration (with fresh data, the behavior policy). The EWMA,
        when there is one, is the clipping anchor in every staleness mode (as in the authors' code).
        """
        self.proximal_decay = resolve_ewma_decay(self.ewma_decay, self.minibatches_per_epoch, self.n_epochs)
        self.proximal_ewma = None
        if uses_proximal_network(self.proximal_decay, staleness, staleness_mode, self._needs_distributions):
            self.proximal_ewma = make_proximal_ewma(self.policy, self._build_policy, self.proximal_decay or 0.0, include)

    @property
    def _rollout_staleness(self) -> int:
        """
        Iterations between the parameters that collected the data trained on and those being trained: ``staleness``
        (overlapped rollouts add one: :class:`~sb3_ewma.common.collection.overlap.AsyncRolloutMixin`).
        """
        return self.staleness

    @property
    def _uses_ewma(self) -> bool:
        return self.proximal_ewma is not None and self.proximal_decay is not None

    def _snapshot_proximal_policy(self) -> None:
        """Without an EWMA, the proximal network is the policy at the start of the iteration (the "recent" policy)."""
        if self.proximal_ewma is not None and self.proximal_decay is None:
            self.proximal_ewma.reset()

    def _update_proximal_policy(self) -> None:
        """After each policy optimizer step."""
        if self.proximal_ewma is not None and self.proximal_decay is not None:
            self.proximal_ewma.update()

    def _evaluate_policy(
        self, rollout_data: Any, actions: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor | None, Distribution | None]:
        """
        The current policy on a minibatch: values, log-probabilities of ``actions``, entropy (or None) and, only when
        the exact KL penalty needs it, the action distribution. Overridden by algorithms whose policies take more
        than the observations (LSTM states, action masks).
        """
        if self._needs_distributions:
            return evaluate_actions_with_distribution(self.policy, rollout_data.observations, actions)
        values, log_prob, entropy = self.policy.evaluate_actions(rollout_data.observations, actions)
        return values, log_prob, entropy, None

    def _proximal_distribution(self, rollout_data: Any) -> Distribution:
        """The proximal policy's action distribution on a minibatch (overridden like :meth:`_evaluate_policy`)."""
        assert self.proximal_ewma is not None
        return proximal_distribution(self.proximal_ewma, rollout_data.observations)

    def _proximal_action_log_prob(self, rollout_data: Any, actions: th.Tensor) -> th.Tensor:
        """
        The proximal policy's log-probabilities of ``actions`` when the loss needs nothing else: the lean pass on the
        observations (:func:`proximal_action_log_prob`). Algorithms that override :meth:`_proximal_distribution`
        (LSTM states, action masks) override this too.
        """
        assert self.proximal_ewma is not None
        return proximal_action_log_prob(self.proximal_ewma, rollout_data.observations, actions)

    def _proximal_log_prob(
        self, rollout_data: Any, actions: th.Tensor, behavior_log_prob: th.Tensor
    ) -> tuple[th.Tensor, Distribution | None]:
        """
        Log-probabilities of the actions under the proximal policy, and its distribution (None: the behavior policy,
        or a loss that needs only the log-probabilities).
        """
        if self.proximal_ewma is None:
            return behavior_log_prob, None
        if not self._needs_distributions:
            return self._proximal_action_log_prob(rollout_data, actions), None
        with th.no_grad():
            distribution = self._proximal_distribution(rollout_data)
            return distribution.log_prob(actions), distribution

    def _policy_terms(
        self, rollout_data: RolloutBufferSamples, policy_objective: DecoupledPolicyObjective
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
        """
        The policy terms of one minibatch: importance sampling with the buffer's log-probabilities (the behavior
        policy's, or in the ``"proximal"`` staleness mode the recent policy's), the anchor from the proximal policy.

        :param rollout_data: the minibatch
        :param policy_objective: the decoupled objective (collects its diagnostics)
        :return: the policy loss (with its KL penalty), the entropy loss, the values from the same forward pass and
            the approximate reverse KL from the behavior policy (SB3's estimator, for ``target_kl``)
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

    def _kl_exceeds_target(self, approx_kl_div: th.Tensor) -> bool:
        """
        SB3's ``target_kl`` early stop: whether the approximate KL from the behavior policy exceeds
        ``1.5 * target_kl`` (False without ``target_kl``; read from the device only then). Data-parallel training
        averages the KL over the ranks first (:class:`sb3_ewma.common.distributed.DataParallelMixin`).
        """
        target_kl = self.target_kl
        return target_kl is not None and self._global_kl(approx_kl_div) > 1.5 * target_kl

    def _global_kl(self, approx_kl_div: th.Tensor) -> float:
        """The approximate KL of the minibatch as a number (data-parallel training: its mean over the ranks)."""
        return approx_kl_div.item()

    def _apply_gradients(self, optimizer: th.optim.Optimizer) -> None:
        """
        After the loss's backward pass (gradients accumulated in ``.grad``): clip the gradient norm to
        ``max_grad_norm`` and take the optimizer step. Every optimizer step of every phase goes through here.
        """
        self._observe_gradient_noise(optimizer)  # the minibatch gradient, before clipping
        # SB3's clip_grad_norm_ and Adam step, with the same numbers in fewer calls on CPU (sb3_ewma.common.optim)
        clip_grad_norm(self.policy.parameters(), self.max_grad_norm)
        prefer_foreach(optimizer)
        optimizer.step()

    def _gradient_noise_batching(self, optimizer: th.optim.Optimizer) -> tuple[int, int, str] | None:
        """
        For the gradient noise scale: ``(samples per minibatch, minibatches per epoch, log prefix)`` of the phase that
        ``optimizer`` steps, or None to skip it. Here the policy optimizer's (PPG adds its auxiliary phase).
        """
        if optimizer is self.policy.optimizer:
            return self._minibatch_size, self.minibatches_per_epoch, "train"
        return None

    def _observe_gradient_noise(self, optimizer: th.optim.Optimizer) -> None:
        """Feed the minibatch gradient to the optimizer's :class:`GradientNoiseScale` and log it after each epoch."""
        if not getattr(self, "log_gradient_noise_scale", False):
            return
        batching = self._gradient_noise_batching(optimizer)
        if batching is None:
            return
        batch_size, steps_per_epoch, prefix = batching
        # under data-parallel training the gradient here is already averaged over the ranks (DataParallelMixin comes
        # first in the bases): the gradient of a global minibatch of world_size * batch_size samples
        batch_size *= getattr(self, "world_size", 1)
        trackers: dict[str, GradientNoiseScale] = self.__dict__.setdefault("_gradient_noise", {})
        tracker = trackers.get(prefix)
        if tracker is None or (tracker.batch_size, tracker.steps_per_epoch) != (batch_size, steps_per_epoch):
            tracker = trackers[prefix] = GradientNoiseScale(batch_size, steps_per_epoch)
        gradients = [
            param.grad if param.grad is not None else th.zeros_like(param)
            for group in optimizer.param_groups
            for param in group["params"]
        ]
        # the number of steps taken identifies the iteration (an epoch cut short by target_kl is dropped)
        estimate = tracker.observe(gradients, tag=self.num_timesteps)
        if estimate is not None and estimate.noise_scale is not None:
            self.logger.record(f"{prefix}/gradient_noise_scale", estimate.noise_scale)

    def _record_train_logs(
        self,
        buffer: RolloutBuffer,
        stats: dict[str, float],
        entropy_losses: list[th.Tensor],
        value_losses: list[th.Tensor],
        approx_kl_divs: list[th.Tensor],
        loss: th.Tensor,
        clip_range: float | None,
        clip_range_vf: float | None,
    ) -> None:
        """
        SB3 PPO's logs of a training iteration, then the decoupled objective's diagnostics. A loss that no minibatch
        computed (PPG's value-only epochs, a policy phase stopped by ``target_kl``) is not logged.
        """
        explained_var = explained_variance(buffer.values.flatten(), buffer.returns.flatten())
        if entropy_losses:
            self.logger.record("train/entropy_loss", mean_of(entropy_losses))
        if "policy_gradient_loss" in stats:
            self.logger.record("train/policy_gradient_loss", stats["policy_gradient_loss"])
        if value_losses:
            self.logger.record("train/value_loss", mean_of(value_losses))
        if approx_kl_divs:
            self.logger.record("train/approx_kl", mean_of(approx_kl_divs))
        if clip_range is not None and "clip_fraction" in stats:
            self.logger.record("train/clip_fraction", stats["clip_fraction"])
        self.logger.record("train/loss", loss.item())
        self.logger.record("train/explained_variance", explained_var)
        if hasattr(self.policy, "log_std"):
            self.logger.record("train/std", th.exp(self.policy.log_std).mean().item())

        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        if clip_range is not None:
            self.logger.record("train/clip_range", clip_range)
        if clip_range_vf is not None:
            self.logger.record("train/clip_range_vf", clip_range_vf)

        self._record_decoupled_logs(stats)

    def _record_decoupled_logs(self, stats: dict[str, float]) -> None:
        """The decoupled objective's diagnostics, the advantage statistics and the EWMA's center of mass."""
        for key in ("proximal_kl", "imp_samp_capped_fraction", "kl_penalty"):
            if key in stats:
                self.logger.record(f"train/{key}", stats[key])
        for key, value in self.advantage_normalizer.stats().items():
            self.logger.record(f"train/{key}", value)
        if self._uses_ewma and self.proximal_decay is not None:
            center_of_mass = without_rounding_noise(center_of_mass_from_ewma_decay(self.proximal_decay))
            self.logger.record("train/ewma_center_of_mass", center_of_mass)
