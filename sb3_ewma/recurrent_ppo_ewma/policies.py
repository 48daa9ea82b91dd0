"""
RecurrentPPO_EWMA uses sb3-contrib's recurrent actor-critic policies unchanged. The helpers below run a policy on the
padded sequences of a minibatch as ``evaluate_actions`` does, then keep the valid steps.
"""

import torch as th
from sb3_contrib.common.recurrent.policies import (
    RecurrentActorCriticCnnPolicy,
    RecurrentActorCriticPolicy,
    RecurrentMultiInputActorCriticPolicy,
)
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.type_aliases import PyTorchObs

from sb3_ewma.common.decoupled.proximal import is_policy_parameter

MlpLstmPolicy = RecurrentActorCriticPolicy
CnnLstmPolicy = RecurrentActorCriticCnnPolicy
MultiInputLstmPolicy = RecurrentMultiInputActorCriticPolicy

# the critic's own recurrent layer, or its linear layer when the critic has no LSTM and does not share the actor's
VALUE_ONLY_RECURRENT_PREFIXES = ("lstm_critic.", "critic.")


def is_recurrent_policy_parameter(name: str) -> bool:
    """Whether a parameter of a ``RecurrentActorCriticPolicy`` can change the action distribution."""
    return is_policy_parameter(name) and not name.startswith(VALUE_ONLY_RECURRENT_PREFIXES)


def _hidden_and_cell(states: tuple[th.Tensor, ...]) -> tuple[th.Tensor, th.Tensor]:
    """The (hidden, cell) pair of one LSTM (``RNNStates`` types it as a tuple of any length)."""
    hidden, cell = states
    return hidden, cell


def recurrent_actor_latent(
    policy: RecurrentActorCriticPolicy, obs: PyTorchObs, lstm_states: RNNStates, episode_starts: th.Tensor
) -> th.Tensor:
    """The actor's latent (after its LSTM and MLP) for every step of the padded sequences, as in ``get_distribution``."""
    features = super(ActorCriticPolicy, policy).extract_features(obs, policy.pi_features_extractor)
    latent_pi, _ = policy._process_sequence(features, _hidden_and_cell(lstm_states.pi), episode_starts, policy.lstm_actor)
    return policy.mlp_extractor.forward_actor(latent_pi)


def recurrent_latents(
    policy: RecurrentActorCriticPolicy, obs: PyTorchObs, lstm_states: RNNStates, episode_starts: th.Tensor
) -> tuple[th.Tensor, th.Tensor]:
    """The actor's and critic's latents for every step of the padded sequences, as in ``evaluate_actions``."""
    # a pair of tensors exactly when the features extractor is not shared
    features = policy.extract_features(obs)
    if isinstance(features, tuple):
        pi_features, vf_features = features
    else:
        pi_features = vf_features = features
    latent_pi, _ = policy._process_sequence(pi_features, _hidden_and_cell(lstm_states.pi), episode_starts, policy.lstm_actor)
    if policy.lstm_critic is not None:
        latent_vf, _ = policy._process_sequence(
            vf_features, _hidden_and_cell(lstm_states.vf), episode_starts, policy.lstm_critic
        )
    elif policy.shared_lstm:
        latent_vf = latent_pi.detach()
    else:
        # without an LSTM of its own and without sharing the actor's, the critic has its linear layer
        assert policy.critic is not None
        latent_vf = policy.critic(vf_features)
    return policy.mlp_extractor.forward_actor(latent_pi), policy.mlp_extractor.forward_critic(latent_vf)


def _lstm_over_sequences(
    features: th.Tensor, lstm_states: tuple[th.Tensor, ...], episode_starts: th.Tensor, lstm: th.nn.LSTM
) -> th.Tensor:
    """
    ``_process_sequence``'s output on a minibatch's padded sequences by one call of the LSTM: sb3-contrib's buffers cut
    sequences at episode starts, so resetting the initial state is the same computation, up to float rounding.
    """
    hidden, cell = _hidden_and_cell(lstm_states)
    n_seq = hidden.shape[1]
    features_sequence = features.reshape((n_seq, -1, lstm.input_size)).swapaxes(0, 1)
    keep = (1.0 - episode_starts.reshape((n_seq, -1))[:, 0]).view(1, n_seq, 1)
    output, _ = lstm(features_sequence, (keep * hidden, keep * cell))
    return th.flatten(output.transpose(0, 1), start_dim=0, end_dim=1)


def sequence_latents(
    policy: RecurrentActorCriticPolicy,
    obs: PyTorchObs,
    lstm_states: RNNStates,
    episode_starts: th.Tensor,
    valid: th.Tensor,
) -> tuple[th.Tensor, th.Tensor]:
    """
    The actor's and critic's LSTM outputs (before ``mlp_extractor``) at a minibatch's valid steps, each LSTM called
    once; run eagerly, before the compiled training step (a graph would be built for each padded length).
    """
    # a pair of tensors exactly when the features extractor is not shared
    features = policy.extract_features(obs)
    pi_features, vf_features = features if isinstance(features, tuple) else (features, features)
    latent_pi = _lstm_over_sequences(pi_features, lstm_states.pi, episode_starts, policy.lstm_actor)[valid]
    if policy.lstm_critic is not None:
        latent_vf = _lstm_over_sequences(vf_features, lstm_states.vf, episode_starts, policy.lstm_critic)[valid]
    elif policy.shared_lstm:
        latent_vf = latent_pi.detach()
    else:
        assert policy.critic is not None
        latent_vf = policy.critic(vf_features[valid])
    return latent_pi, latent_vf


def actor_sequence_latent(
    policy: RecurrentActorCriticPolicy,
    obs: PyTorchObs,
    lstm_states: RNNStates,
    episode_starts: th.Tensor,
    valid: th.Tensor,
) -> th.Tensor:
    """The actor's LSTM output at a minibatch's valid steps, as :func:`sequence_latents` (the proximal network's)."""
    features = super(ActorCriticPolicy, policy).extract_features(obs, policy.pi_features_extractor)
    return _lstm_over_sequences(features, lstm_states.pi, episode_starts, policy.lstm_actor)[valid]


def evaluate_valid_steps(
    policy: RecurrentActorCriticPolicy,
    obs: PyTorchObs,
    actions: th.Tensor,
    lstm_states: RNNStates,
    episode_starts: th.Tensor,
    valid: th.Tensor,
    with_distribution: bool = False,
) -> tuple[th.Tensor, th.Tensor, th.Tensor | None, Distribution | None]:
    """
    ``evaluate_actions`` at the valid steps (``actions`` given for those only), and the valid steps' action
    distribution when ``with_distribution``. The heads run over the padded sequences, as in sb3-contrib's
    ``RecurrentPPO.train``, so that the valid steps' numbers and gradients are its own, bit for bit.
    """
    latent_pi, latent_vf = recurrent_latents(policy, obs, lstm_states, episode_starts)
    padded_actions = actions.new_zeros((valid.shape[0], *actions.shape[1:]))
    padded_actions[valid] = actions
    padded = policy._get_action_dist_from_latent(latent_pi)
    log_prob = padded.log_prob(padded_actions)[valid]
    entropy = padded.entropy()
    values = policy.value_net(latent_vf)[valid]
    distribution = policy._get_action_dist_from_latent(latent_pi[valid]) if with_distribution else None
    return values, log_prob, None if entropy is None else entropy[valid], distribution


def valid_steps_distribution(
    policy: RecurrentActorCriticPolicy, obs: PyTorchObs, lstm_states: RNNStates, episode_starts: th.Tensor, valid: th.Tensor
) -> Distribution:
    """The action distribution over the valid steps of the padded sequences."""
    latent_pi = recurrent_actor_latent(policy, obs, lstm_states, episode_starts)
    return policy._get_action_dist_from_latent(latent_pi[valid])


__all__ = ["CnnLstmPolicy", "MlpLstmPolicy", "MultiInputLstmPolicy"]
