"""The staleness modes as the authors define them (ppo_ewma/ppo.py, learn) and the advantages of stale data."""

import copy

import numpy as np
import pytest
import torch as th

from sb3_ewma.ablations import StalePPO_EWMA
from sb3_ewma.common.decoupled.objective import DecoupledPolicyObjective

SMALL = dict(n_steps=32, batch_size=16, n_epochs=1, seed=0, device="cpu")
MODES = ["decoupled", "behavior", "proximal"]


@pytest.mark.parametrize("ewma_decay", ["auto", None])
def test_the_three_modes_are_one_loss_at_staleness_0(ewma_decay):
    finals = []
    for mode in MODES:
        model = StalePPO_EWMA("MlpPolicy", "CartPole-v1", ewma_decay=ewma_decay, **{**SMALL, "n_epochs": 2})
        model.set_staleness(0, mode)
        model.learn(96)
        finals.append(model.policy.parameters_to_vector())
    np.testing.assert_array_equal(finals[0], finals[1])
    np.testing.assert_array_equal(finals[0], finals[2])


def log_prob(policy, observations, actions):
    with th.no_grad():
        return policy.get_distribution(observations).log_prob(actions.long().flatten())


@pytest.mark.parametrize("ewma_decay", ["auto", None])
@pytest.mark.parametrize("mode", MODES)
def test_anchor_and_importance_sampling_policies_of_stale_data(monkeypatch, mode, ewma_decay):
    """
    staleness 1, one epoch of 2 minibatches: iteration 3 trains on the rollout of iteration 2, collected by the initial
    policy P0 (the behavior policy); at its first minibatch the policy is still P1, the recent policy.
    """
    model = StalePPO_EWMA("MlpPolicy", "CartPole-v1", ewma_decay=ewma_decay, **SMALL).set_staleness(1, mode)
    behavior_policy = copy.deepcopy(model.policy)
    calls = []
    minibatches = []
    evaluate_policy = model._evaluate_policy

    def record_minibatch(rollout_data, actions):
        minibatches.append(rollout_data)
        return evaluate_policy(rollout_data, actions)

    model._evaluate_policy = record_minibatch  # type: ignore[method-assign]
    original_call = DecoupledPolicyObjective.__call__

    def record_call(self, advantages, log_prob_, proximal_log_prob, behavior_log_prob, *args):
        ewma = model.proximal_ewma.average if model.proximal_ewma is not None and model.proximal_decay is not None else None
        data = minibatches[-1]
        calls.append(
            dict(
                current=log_prob_.detach().clone(),
                proximal=proximal_log_prob.clone(),
                importance=behavior_log_prob.clone(),
                behavior=log_prob(behavior_policy, data.observations, data.actions),
                ewma=None if ewma is None else log_prob(ewma, data.observations, data.actions),
            )
        )
        return original_call(self, advantages, log_prob_, proximal_log_prob, behavior_log_prob, *args)

    monkeypatch.setattr(DecoupledPolicyObjective, "__call__", record_call)
    model.learn(3 * 32)
    assert len(calls) == 4  # iterations 2 and 3, 2 minibatches each
    first = calls[2]  # iteration 3, first minibatch: current policy == recent policy P1 != P0
    assert not th.allclose(first["current"], first["behavior"])
    expected_importance = first["current"] if mode == "proximal" else first["behavior"]
    th.testing.assert_close(first["importance"], expected_importance)
    if ewma_decay is None:
        expected_anchor = first["behavior"] if mode == "behavior" else first["current"]
    else:
        expected_anchor = first["ewma"]  # the EWMA replaces the anchor only, in every mode
        assert not th.allclose(first["ewma"], first["current"]) and not th.allclose(first["ewma"], first["behavior"])
    th.testing.assert_close(first["proximal"], expected_anchor)


def test_stale_advantages_bootstrap_from_the_current_value_function():
    gamma, gae_lambda = 0.9, 0.8
    model = StalePPO_EWMA("MlpPolicy", "CartPole-v1", gamma=gamma, gae_lambda=gae_lambda, **SMALL).set_staleness(1)
    model.learn(32)  # one rollout, buffered
    stale = model.stale_rollouts[0]
    before = stale.buffer.advantages.copy()[:, 0]
    stale_values = stale.buffer.values.copy()[:, 0]
    episode_starts = stale.buffer.episode_starts[:, 0]
    last_episode_start = float(stale.last_episode_starts[0])
    with th.no_grad():
        model.policy.value_net.bias += 1.0  # the current value function: +1 everywhere, also at the final observation
    model.collect_rollouts(model.env, model._init_callback(None), model.rollout_buffer, model.n_steps)
    trained_on = []  # the buffer train() starts on, and its advantages then (sampling flattens the buffer's arrays)
    start_iteration = model.advantage_normalizer.start_iteration

    def record_start(advantages):
        trained_on.append((model.rollout_buffer, advantages.copy(), model.rollout_buffer.returns.copy()))
        return start_iteration(advantages)

    model.advantage_normalizer.start_iteration = record_start  # type: ignore[method-assign]
    model.train()
    buffer, advantages, returns = trained_on[0]
    assert buffer is stale.buffer
    # by hand: delta of the last step grows by gamma * 1 (unless an episode ended there), and the change flows back
    # through GAE with factor gamma * lambda until an episode boundary; the stored values along the rollout are kept
    expected = before.copy()
    change = gamma * (1.0 - last_episode_start)
    for step in reversed(range(32)):
        expected[step] += change
        change *= gamma * gae_lambda * (1.0 - episode_starts[step])
    np.testing.assert_allclose(advantages[:, 0], expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(advantages[:, 0], before)
    np.testing.assert_allclose(returns[:, 0], advantages[:, 0] + stale_values, rtol=1e-6)
