"""The parts of PPO_EWMA and PPG_EWMA that deal with the proximal policy and the decoupled objective."""

from collections.abc import Callable
from typing import Any

import torch as th
from gymnasium import spaces
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import RolloutBufferSamples
from stable_baselines3.common.utils import FloatSchedule

from sb3_ewma.common.decoupled import AdvantageNormalizer, DecoupledPolicyObjective, resolve_ewma_decay, uses_proximal_network
from sb3_ewma.common.distributions import evaluate_actions_with_distribution
from sb3_ewma.common.ewma import ParameterEWMA, center_of_mass_from_ewma_decay
from sb3_ewma.common.format import without_rounding_noise
from sb3_ewma.common.proximal import ProximalSaveMixin, is_policy_parameter, make_proximal_ewma, proximal_distribution


class DecoupledAlgorithmMixin(ProximalSaveMixin):
    """
    Mixed into an SB3 ``OnPolicyAlgorithm`` (before it in the bases) that has the attributes set by
    :func:`sb3_ewma.common.decoupled.check_decoupled_hyperparams`'s parameters: builds the proximal policy, evaluates
    a minibatch's policy terms with the decoupled objective, and logs its diagnostics. Save/load of the proximal
    policy comes from :class:`ProximalSaveMixin`.
    """

    # set by the algorithm's constructor
    policy: Any  # an ActorCriticPolicy
    ewma_decay: float | str | None
    kl_coef: float
    kl_estimator: str
    imp_samp_max: float
    advantage_normalization: str
    advantage_ewma_decay: float
    advantage_normalizer: AdvantageNormalizer
    # set by _setup_proximal_policy
    proximal_decay: float | None
    proximal_ewma: ParameterEWMA | None

    def _set_decoupled_options(
        self,
        ewma_decay: float | str | None,
        kl_coef: float,
        kl_estimator: str,
        imp_samp_max: float,
        normalize_advantage: bool,
        advantage_normalization: str,
        advantage_ewma_decay: float,
    ) -> None:
        """Store the (already checked) options of the decoupled objective, from the algorithm's constructor."""
        self.ewma_decay = ewma_decay
        self.kl_coef = kl_coef
        self.kl_estimator = kl_estimator
        self.imp_samp_max = imp_samp_max
        self.advantage_normalization = advantage_normalization
        self.advantage_ewma_decay = advantage_ewma_decay
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

    def _build_policy(self) -> BasePolicy:
        """A new policy of the same structure as ``self.policy`` (for the proximal policy's copy)."""
        return self.policy_class(  # type: ignore[attr-defined]
            self.observation_space,  # type: ignore[attr-defined]
            self.action_space,  # type: ignore[attr-defined]
            self.lr_schedule,  # type: ignore[attr-defined]
            use_sde=self.use_sde,  # type: ignore[attr-defined]
            **self.policy_kwargs,  # type: ignore[attr-defined]
        )

    @property
    def minibatches_per_epoch(self) -> int:
        """Optimizer steps per epoch, ``ceil(n_steps * n_envs / batch_size)``."""
        return -(-self.n_steps * self.n_envs // self.batch_size)  # type: ignore[attr-defined]

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
            self.normalize_advantage,  # type: ignore[attr-defined]
            self.advantage_normalization,  # type: ignore[attr-defined]
            self.advantage_ewma_decay,  # type: ignore[attr-defined]
        )

    def _setup_proximal_policy(
        self, staleness: int = 0, staleness_mode: str = "decoupled", include: Callable[[str], bool] = is_policy_parameter
    ) -> None:
        """
        Resolve the EWMA decay and build the proximal network when one is needed: the EWMA, or without it a
        snapshot of the policy taken at the start of each iteration (with fresh data, the behavior policy).
        """
        # with the behavior policy as the proximal policy there is no EWMA (at most a snapshot, for the exact KL)
        ewma_decay = None if staleness_mode == "behavior" else self.ewma_decay
        self.proximal_decay = resolve_ewma_decay(ewma_decay, self.minibatches_per_epoch)
        self.proximal_ewma = None
        if uses_proximal_network(self.proximal_decay, staleness, staleness_mode, self._needs_distributions):
            self.proximal_ewma = make_proximal_ewma(self.policy, self._build_policy, self.proximal_decay or 0.0, include)

    @property
    def _uses_ewma(self) -> bool:
        return self.proximal_ewma is not None and self.proximal_decay is not None

    def _snapshot_proximal_policy(self) -> None:
        """Without an EWMA, the proximal network is the policy at the start of the iteration (the "recent" policy)."""
        if self.proximal_ewma is not None and self.proximal_decay is None:
            self.proximal_ewma.reset()

    def _update_proximal_policy(self) -> None:
        """After each policy optimizer step."""
        if self._uses_ewma:
            self.proximal_ewma.update()  # type: ignore[union-attr]

    def _proximal_log_prob(
        self, observations: th.Tensor, actions: th.Tensor, behavior_log_prob: th.Tensor
    ) -> tuple[th.Tensor, Distribution | None]:
        """Log-probabilities of the actions under the proximal policy, and its distribution (None: the behavior policy)."""
        if self.proximal_ewma is None:
            return behavior_log_prob, None
        distribution = proximal_distribution(self.proximal_ewma, observations)  # type: ignore[arg-type]
        with th.no_grad():
            return distribution.log_prob(actions), distribution

    def _policy_terms(
        self,
        rollout_data: RolloutBufferSamples,
        policy_objective: DecoupledPolicyObjective,
        importance_sample_with_proximal: bool = False,
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
        """
        The policy terms of one minibatch.

        :param rollout_data: the minibatch
        :param policy_objective: the decoupled objective (collects its diagnostics)
        :param importance_sample_with_proximal: use the proximal policy in place of the behavior policy for
            importance sampling too (the coupled "proximal" choice of the staleness experiments)
        :return: the policy loss (with its KL penalty), the entropy loss, the values from the same forward pass and
            the approximate reverse KL from the behavior policy (SB3's estimator, for ``target_kl``)
        """
        actions = rollout_data.actions
        if isinstance(self.action_space, spaces.Discrete):  # type: ignore[attr-defined]
            # Convert discrete action from float to long
            actions = rollout_data.actions.long().flatten()
        observations = rollout_data.observations
        distribution = None
        if self._needs_distributions:
            values, log_prob, entropy, distribution = evaluate_actions_with_distribution(self.policy, observations, actions)
        else:
            values, log_prob, entropy = self.policy.evaluate_actions(observations, actions)  # type: ignore[arg-type]
        advantages = self.advantage_normalizer.minibatch(rollout_data.advantages)

        behavior_log_prob = rollout_data.old_log_prob
        proximal_log_prob, proximal_dist = self._proximal_log_prob(observations, actions, behavior_log_prob)  # type: ignore[arg-type]
        if importance_sample_with_proximal:
            behavior_log_prob = proximal_log_prob
        policy_loss = policy_objective(advantages, log_prob, proximal_log_prob, behavior_log_prob, distribution, proximal_dist)
        # Entropy loss favor exploration (approximate entropy when no analytical form)
        entropy_loss = -th.mean(-log_prob) if entropy is None else -th.mean(entropy)
        # Approximate reverse KL from the behavior policy, as in SB3's PPO (kept on the device)
        with th.no_grad():
            log_ratio = log_prob - rollout_data.old_log_prob
            approx_kl_div = th.mean((th.exp(log_ratio) - 1) - log_ratio)
        return policy_loss, entropy_loss, values.flatten(), approx_kl_div

    def _apply_gradients(self, optimizer: th.optim.Optimizer) -> None:
        """
        After the loss's backward pass (gradients accumulated in ``.grad``): clip the gradient norm to
        ``max_grad_norm`` and take the optimizer step. Every optimizer step of every phase goes through here.
        """
        th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)  # type: ignore[attr-defined]
        optimizer.step()

    def _record_decoupled_logs(self, stats: dict[str, float]) -> None:
        """The decoupled objective's diagnostics, the advantage statistics and the EWMA's center of mass."""
        for key in ("proximal_kl", "imp_samp_capped_fraction", "kl_penalty"):
            if key in stats:
                self.logger.record(f"train/{key}", stats[key])  # type: ignore[attr-defined]
        for key, value in self.advantage_normalizer.stats().items():
            self.logger.record(f"train/{key}", value)  # type: ignore[attr-defined]
        if self._uses_ewma and self.proximal_decay is not None:
            center_of_mass = without_rounding_noise(center_of_mass_from_ewma_decay(self.proximal_decay))
            self.logger.record("train/ewma_center_of_mass", center_of_mass)  # type: ignore[attr-defined]
