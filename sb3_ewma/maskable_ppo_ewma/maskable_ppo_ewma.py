import contextlib
from collections.abc import Iterator
from typing import Any, ClassVar, TypeVar

import torch as th
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from sb3_contrib.common.maskable.utils import is_masking_supported
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv
from stable_baselines3.common.vec_env import VecEnv
from typing_extensions import Unpack

from sb3_ewma.common.checks import warn_at_caller
from sb3_ewma.common.decoupled.algorithm import DecoupledAlgorithm
from sb3_ewma.common.decoupled.arguments import (
    DecoupledArguments,
    PPOArguments,
    constructor_arguments,
    document_arguments,
    keyword_signature,
)
from sb3_ewma.common.decoupled.options import DecoupledOptions, parent_arguments
from sb3_ewma.common.distributions import policy_latents
from sb3_ewma.common.export import to_parent_algorithm
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


class MaskablePPOEWMAArguments(PPOArguments, DecoupledArguments, total=False):
    """The keyword arguments of :class:`MaskablePPO_EWMA`: sb3-contrib's ``MaskablePPO``'s and the decoupled options."""

    batch_size: int | None
    rollout_buffer_class: type[RolloutBuffer] | None
    rollout_buffer_kwargs: dict[str, Any] | None


@document_arguments(MaskablePPO)
class MaskablePPO_EWMA(DecoupledAlgorithm, MaskablePPO):
    """
    MaskablePPO-EWMA: sb3-contrib's ``MaskablePPO`` (PPO with invalid-action masking) with an exponentially weighted
    moving average (EWMA) of the policy as the proximal policy and the decoupled objectives of Hilton, Cobbe &
    Schulman (2021, https://arxiv.org/abs/2110.00641), as :class:`sb3_ewma.PPO_EWMA` does for PPO.

    The proximal log-probabilities are those of the EWMA network's masked action distribution, with the action masks
    stored in the rollout buffer. With ``ewma_decay=None`` it is ``MaskablePPO``, up to the
    importance-sampling cap ``imp_samp_max``.

    :param batch_size: Minibatch size (``None``: the whole rollout)
    :param rollout_buffer_class: Rollout buffer class to use. If ``None``, it will be automatically selected.
    :param rollout_buffer_kwargs: Keyword arguments to pass to the rollout buffer on creation
    :param minibatch_sampling: How each epoch is split into minibatches: ``"steps"`` (default, SB3's: random steps)
        or ``"rollouts"`` (the authors': whole ``n_steps``-step rollouts of ``batch_size / n_steps`` environments per
        minibatch, environments in random order; ``batch_size`` must be a multiple of ``n_steps``, or divide it: then
        each minibatch is a contiguous piece of one environment's rollout). The action masks go with their steps.
    :param log_gradient_noise_scale: Log the gradient noise scale ``B_simple`` (McCandlish et al. 2018) as
        ``train/gradient_noise_scale``, as :class:`sb3_ewma.PPO_EWMA` does. Needs at least 2 minibatches per epoch;
        off by default.
    :param distributed: Data-parallel training on ``torch.distributed``, as :class:`sb3_ewma.PPO_EWMA` (documentation:
        "Data-Parallel Training"): each rank steps its own ``n_envs`` environments and asks them for their action
        masks; gradients are averaged over the ranks. Not saved with the model.
    :param async_rollouts: Overlap rollouts with training, as :class:`sb3_ewma.PPO_EWMA` (``True`` or ``"thread"``: a
        collector thread; ``"process"``: a forked collector process, CPU policies only): the collector asks the
        environments for the action masks at every step (``learn(use_masking=False)`` turns them off, as in
        ``MaskablePPO``).
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
    # the advantages of stale data stay those computed at collection, as RecurrentPPO_EWMA's
    _recompute_stale_advantages = False

    @keyword_signature(MaskablePPOEWMAArguments, parent=MaskablePPO)
    def __init__(self, policy: str | type[MlpPolicy], env: GymEnv | str, **kwargs: Unpack[MaskablePPOEWMAArguments]) -> None:
        # MaskablePPO's arguments (with its defaults) and the decoupled options, checked before anything is built
        arguments = constructor_arguments(MaskablePPO_EWMA, locals(), kwargs)
        options = DecoupledOptions.from_arguments(arguments, batch_size_may_be_none=True)
        super().__init__(**parent_arguments(MaskablePPO, arguments))
        self._set_decoupled_options(options)
        self._warn_without_action_masks()
        if arguments["_init_setup_model"]:
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

    def _build_policy(self) -> BasePolicy:
        # maskable policies take no use_sde
        return self.policy_class(self.observation_space, self.action_space, self.lr_schedule, **self.policy_kwargs)

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

    @contextlib.contextmanager
    def _learning(self, use_masking: bool = True, **parent_kwargs: Any) -> Iterator[None]:
        """``learn``'s ``use_masking``, for the rollout loop (also a collector's): the masks when the env has them."""
        if use_masking and self.env is not None and not is_masking_supported(self.env):
            raise ValueError(f"{NO_ACTION_MASKS}; or call learn(use_masking=False) to train without masks")
        self._use_masking = use_masking
        try:
            with super()._learning(**parent_kwargs):
                yield
        finally:
            del self._use_masking  # back to the class's True
