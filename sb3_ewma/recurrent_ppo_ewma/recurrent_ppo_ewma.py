from collections.abc import Iterator
from typing import Any, ClassVar, TypeAlias, cast

import torch as th
from gymnasium import spaces
from sb3_contrib import RecurrentPPO
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv
from stable_baselines3.common.vec_env import VecEnv
from typing_extensions import Unpack

from sb3_ewma.common.collection.rollout import tensors_to
from sb3_ewma.common.decoupled.algorithm import DecoupledAlgorithm
from sb3_ewma.common.decoupled.arguments import (
    DecoupledArguments,
    PPOArguments,
    constructor_arguments,
    document_arguments,
    keyword_signature,
)
from sb3_ewma.common.decoupled.options import DecoupledOptions, parent_arguments
from sb3_ewma.common.export import to_parent_algorithm
from sb3_ewma.common.minibatches import rollout_minibatches
from sb3_ewma.recurrent_ppo_ewma.buffers import ValidStepsRecurrentDictRolloutBuffer, ValidStepsRecurrentRolloutBuffer
from sb3_ewma.recurrent_ppo_ewma.policies import (
    CnnLstmPolicy,
    MlpLstmPolicy,
    MultiInputLstmPolicy,
    evaluate_valid_steps,
    is_recurrent_policy_parameter,
    valid_steps_distribution,
)

# the rollout buffers of RecurrentPPO_EWMA (made by _make_rollout_buffer), for Box and for Dict observations
_ValidStepsBuffer: TypeAlias = ValidStepsRecurrentRolloutBuffer | ValidStepsRecurrentDictRolloutBuffer


def proximal_valid_steps_distribution(network: RecurrentActorCriticPolicy, minibatch: Any) -> Distribution:
    """The proximal network's distribution on a minibatch's valid steps, from the LSTM states stored in the buffer."""
    mask = minibatch.mask > 1e-8
    return valid_steps_distribution(network, minibatch.observations, minibatch.lstm_states, minibatch.episode_starts, mask)


class RecurrentPPOEWMAArguments(PPOArguments, DecoupledArguments, total=False):
    """The keyword arguments of :class:`RecurrentPPO_EWMA`: sb3-contrib's ``RecurrentPPO``'s and the decoupled options."""

    batch_size: int | None
    use_sde: bool
    sde_sample_freq: int


@document_arguments(RecurrentPPO)
class RecurrentPPO_EWMA(DecoupledAlgorithm, RecurrentPPO):
    """
    RecurrentPPO-EWMA: sb3-contrib's ``RecurrentPPO`` (PPO with LSTM policies) with an exponentially weighted moving
    average (EWMA) of the policy as the proximal policy and the decoupled objectives of Hilton, Cobbe & Schulman
    (2021, https://arxiv.org/abs/2110.00641), as :class:`sb3_ewma.PPO_EWMA` does for PPO.

    The proximal (EWMA) network is run on the same padded sequences as the current policy, starting from the LSTM
    states stored in the rollout buffer; the EWMA covers the actor's LSTM and heads (and the shared LSTM with
    ``shared_lstm=True``), not the critic's own LSTM or layers. Losses are means over the valid (unpadded) steps, as in
    ``RecurrentPPO``. With ``ewma_decay=None`` it is ``RecurrentPPO``, up to the
    importance-sampling cap ``imp_samp_max``.

    :param policy: The policy model to use (MlpLstmPolicy, CnnLstmPolicy, ...)
    :param batch_size: Minibatch size (``None``: the whole rollout)
    :param use_sde: Whether to use generalized State Dependent Exploration (gSDE)
        instead of action noise exploration (default: False)
    :param sde_sample_freq: Sample a new noise matrix every n steps when using gSDE
        Default: -1 (only sample at the beginning of the rollout)
    :param policy_kwargs: additional arguments to be passed to the policy on creation (``lstm_hidden_size``,
        ``n_lstm_layers``, ``shared_lstm``, ``enable_critic_lstm``, ...)
    :param minibatch_sampling: How each epoch is split into minibatches: ``"steps"`` (default, sb3-contrib's: the
        rollout's steps in time order from a random split point, cut into ``batch_size`` steps) or ``"rollouts"`` (the
        authors': whole ``n_steps``-step rollouts of ``batch_size / n_steps`` environments per minibatch, environments
        in random order; ``batch_size`` must be a multiple of ``n_steps``, or divide it: then each minibatch is a
        contiguous piece of one environment's rollout). The LSTM runs on sequences that start at an environment's
        first step, at an episode start or at the minibatch's first step, from the LSTM states stored there; with
        ``"rollouts"`` every epoch cuts the same sequences.
    :param log_gradient_noise_scale: Log the gradient noise scale ``B_simple`` (McCandlish et al. 2018) as
        ``train/gradient_noise_scale``, as :class:`sb3_ewma.PPO_EWMA` does (a minibatch's samples are its valid
        steps: ``batch_size``). Needs at least 2 minibatches per epoch; off by default.
    :param distributed: Data-parallel training on ``torch.distributed``, as :class:`sb3_ewma.PPO_EWMA` (documentation:
        "Data-Parallel Training"): each rank steps its own ``n_envs`` environments and carries their LSTM states; the
        losses are means over each rank's valid steps, and gradients are averaged over the ranks. Not saved with the
        model.
    :param async_rollouts: Overlap rollouts with training, as :class:`sb3_ewma.PPO_EWMA` (``True`` or ``"thread"``: a
        collector thread; ``"process"``: a forked collector process, CPU policies only): the collector carries the
        LSTM states from one rollout to the next (a collector process sends them back with each rollout).
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpLstmPolicy": MlpLstmPolicy,
        "CnnLstmPolicy": CnnLstmPolicy,
        "MultiInputLstmPolicy": MultiInputLstmPolicy,
    }

    policy: RecurrentActorCriticPolicy
    # the collector process sends the LSTM states back with each rollout
    _collection_state_names = (*DecoupledAlgorithm._collection_state_names, "_last_lstm_states")
    _parent_collect_rollouts = staticmethod(RecurrentPPO.collect_rollouts)
    _is_proximal_parameter = staticmethod(is_recurrent_policy_parameter)
    _proximal_distribution_of = staticmethod(proximal_valid_steps_distribution)
    # the advantages of stale data stay those computed at collection (anew, they would need the LSTM states)
    _recompute_stale_advantages = False

    @keyword_signature(RecurrentPPOEWMAArguments, parent=RecurrentPPO)
    def __init__(
        self, policy: str | type[MlpLstmPolicy], env: GymEnv | str, **kwargs: Unpack[RecurrentPPOEWMAArguments]
    ) -> None:
        # RecurrentPPO's arguments (with its defaults) and the decoupled options, checked before anything is built
        arguments = constructor_arguments(RecurrentPPO_EWMA, locals(), kwargs)
        options = DecoupledOptions.from_arguments(arguments, batch_size_may_be_none=True)
        super().__init__(**parent_arguments(RecurrentPPO, arguments))
        self._set_decoupled_options(options)
        if arguments["_init_setup_model"]:
            self._setup_model()

    def _setup_model(self) -> None:
        self._setup_parent_model()
        # the parent's buffer, sampling the per-step tensors of the valid steps only (see ValidStepsRecurrentRolloutBuffer)
        self.rollout_buffer = self._make_rollout_buffer()
        self._setup_decoupled_training()

    def _collect_rollout_with(
        self, policy: Any, env: VecEnv, callback: BaseCallback, rollout_buffer: RolloutBuffer, n_rollout_steps: int
    ) -> bool:
        """
        ``RecurrentPPO.collect_rollouts`` acting with ``policy``, from the LSTM states on that policy's device (a
        collector process acts on the CPU for a learner on a GPU).
        """
        states = self._last_lstm_states
        if states is not None and states.pi[0].device != policy.device:
            self._last_lstm_states = tensors_to(states, policy.device)
        return super()._collect_rollout_with(policy, env, callback, rollout_buffer, n_rollout_steps)

    def _rollout_minibatches(self, buffer: RolloutBuffer) -> Iterator[Any]:
        # whole rollouts, cut into sequences at environment changes and episode starts (the buffer's rollout_samples,
        # see ValidStepsRecurrentRolloutBuffer.rollout_samples in sb3_ewma/recurrent_ppo_ewma/buffers.py); every
        # buffer of this algorithm is made by _make_rollout_buffer
        valid_steps_buffer = cast(_ValidStepsBuffer, buffer)
        return rollout_minibatches(buffer, self._minibatch_size, valid_steps_buffer.rollout_samples)

    def _make_rollout_buffer(self) -> _ValidStepsBuffer:
        lstm = self.policy.lstm_actor
        buffer_class = (
            ValidStepsRecurrentDictRolloutBuffer
            if isinstance(self.observation_space, spaces.Dict)
            else ValidStepsRecurrentRolloutBuffer
        )
        return buffer_class(
            self.n_steps,
            self.observation_space,
            self.action_space,
            (self.n_steps, lstm.num_layers, self.n_envs, lstm.hidden_size),
            self.device,
            gamma=self.gamma,
            gae_lambda=self.gae_lambda,
            n_envs=self.n_envs,
        )

    # RecurrentPPO.train() is PPO's with the policy run on the padded sequences from the stored LSTM states and the
    # losses averaged over the valid steps: the training iteration is PPO_EWMA's (DecoupledAlgorithm.train), on
    # minibatches whose per-step tensors hold the valid steps only, with these two evaluations.
    def _evaluate_policy(
        self, rollout_data: Any, actions: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor | None, Distribution | None]:
        values, log_prob, entropy, distribution = evaluate_valid_steps(
            self.policy,
            rollout_data.observations,
            actions,
            rollout_data.lstm_states,
            rollout_data.episode_starts,
            rollout_data.mask > 1e-8,
        )
        return values, log_prob, entropy, distribution if self._needs_distributions else None

    def to_sb3(self) -> RecurrentPPO:
        """
        This model as a plain sb3-contrib ``RecurrentPPO`` (same policy network and optimizer state, same ``predict``;
        the EWMA and the decoupled options are left out), whose ``save`` gives a zip that
        ``sb3_contrib.RecurrentPPO.load`` opens without this package. See :mod:`sb3_ewma.common.export`.
        """
        return to_parent_algorithm(self, RecurrentPPO)
