"""
The staleness modes as the authors define them (ppo_ewma/ppo.py, learn), the advantages of stale data, and the
ablation's classes (sb3_ewma.ablations): setting, saving and loading staleness.
"""

import copy
import csv
import io
import json
import shutil
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from sb3_contrib.common.envs import InvalidActionEnvDiscrete
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_ewma import PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA
from sb3_ewma.ablations import StaleMaskablePPO_EWMA, StalePPO_EWMA, StaleRecurrentPPO_EWMA
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


def trained_buffers(model):
    """Record the buffer each policy update of ``model`` starts on, and its advantages then."""
    trained_on = []
    start_iteration = model.advantage_normalizer.start_iteration

    def record_start(advantages):
        trained_on.append((model.rollout_buffer, advantages.copy()))
        return start_iteration(advantages)

    model.advantage_normalizer.start_iteration = record_start  # type: ignore[method-assign]
    return trained_on


def stale_contrib_model(algorithm, **kwargs):
    if algorithm is StaleRecurrentPPO_EWMA:
        policy_kwargs = dict(lstm_hidden_size=8, net_arch=[16])
        return StaleRecurrentPPO_EWMA("MlpLstmPolicy", "CartPole-v1", policy_kwargs=policy_kwargs, **SMALL, **kwargs)
    env = DummyVecEnv([lambda: InvalidActionEnvDiscrete(dim=4, ep_length=8, n_invalid_actions=1)])
    return StaleMaskablePPO_EWMA("MlpPolicy", env, **SMALL, **kwargs)


@pytest.mark.parametrize("algorithm", [StaleRecurrentPPO_EWMA, StaleMaskablePPO_EWMA], ids=lambda a: a.__name__)
def test_contrib_stale_data_keeps_the_advantages_of_its_collection(algorithm):
    model = stale_contrib_model(algorithm).set_staleness(1)
    model.learn(32)  # one rollout, buffered
    stale = model.stale_rollouts[0]
    collected = stale.buffer.advantages.copy()
    with th.no_grad():
        value_net = model.policy.value_net
        value_net.bias += 1.0  # a recomputation would change every advantage
    trained_on = trained_buffers(model)
    model.learn(32, reset_num_timesteps=False)
    buffer, advantages = trained_on[0]
    assert buffer is stale.buffer
    np.testing.assert_array_equal(advantages, collected)


@pytest.mark.parametrize("algorithm", [StalePPO_EWMA, StaleRecurrentPPO_EWMA, StaleMaskablePPO_EWMA], ids=lambda a: a.__name__)
def test_staleness_round_trips_and_its_algorithm_refuses_the_file(algorithm, tmp_path):
    model = algorithm("MlpPolicy", "CartPole-v1", **SMALL) if algorithm is StalePPO_EWMA else stale_contrib_model(algorithm)
    model.set_staleness(2, "behavior").learn(32)
    assert len(model.stale_rollouts) == 1
    model.save(tmp_path / "stale.zip")
    with zipfile.ZipFile(tmp_path / "stale.zip") as archive:
        data = json.loads(archive.read("data"))
    assert (data["staleness"], data["staleness_mode"]) == (2, "behavior") and "stale_rollouts" not in data
    env = model.get_env()
    loaded = algorithm.load(tmp_path / "stale.zip", env=env, device="cpu")
    assert (loaded.staleness, loaded.staleness_mode, len(loaded.stale_rollouts)) == (2, "behavior", 0)
    parent = {StalePPO_EWMA: PPO_EWMA, StaleRecurrentPPO_EWMA: RecurrentPPO_EWMA, StaleMaskablePPO_EWMA: MaskablePPO_EWMA}
    message = rf"was saved with artificial staleness=2: load it with sb3_ewma.ablations.{algorithm.__name__}.load\(\)"
    with pytest.raises(ValueError, match=message):
        parent[algorithm].load(tmp_path / "stale.zip", env=env, device="cpu")
    # a stream is checked too, after SB3's load has read it
    with pytest.raises(ValueError, match=r"the saved model was saved with artificial staleness=2"):
        parent[algorithm].load(io.BytesIO((tmp_path / "stale.zip").read_bytes()), env=env, device="cpu")


def test_a_file_of_0_1_0_trained_with_staleness_continues_with_the_ablation_only(tmp_path):
    """In 0.1.0 staleness was a constructor argument, saved in the file's data."""
    original = Path(__file__).parent / "data" / "saved_by_0.1.0" / "ppo_ewma.zip"
    stale_file = tmp_path / "stale_0_1_0.zip"
    with zipfile.ZipFile(original) as source, zipfile.ZipFile(stale_file, "w") as target:
        for item in source.infolist():
            content = source.read(item.filename)
            if item.filename == "data":
                data = json.loads(content)
                assert data["staleness"] == 0  # the fixture as saved
                data.update(staleness=3, staleness_mode="proximal")
                content = json.dumps(data).encode()
            target.writestr(item, content)
    with pytest.raises(ValueError, match=r"stale_0_1_0.zip was saved with artificial staleness=3: .*StalePPO_EWMA"):
        PPO_EWMA.load(stale_file, env="CartPole-v1", device="cpu")
    model = StalePPO_EWMA.load(stale_file, env="CartPole-v1", device="cpu")
    assert (model.staleness, model.staleness_mode, model.proximal.kind) == (3, "proximal", "ewma")
    shutil.copy(original, tmp_path / "fresh.zip")
    assert StalePPO_EWMA.load(tmp_path / "fresh.zip", env="CartPole-v1", device="cpu").staleness == 0


def test_set_staleness_before_the_model_is_built():
    model = StalePPO_EWMA("MlpPolicy", "CartPole-v1", ewma_decay=None, _init_setup_model=False, **SMALL)
    assert model.set_staleness(1, "decoupled") is model
    model._setup_model()
    assert model.proximal.kind == "snapshot" and len(model.stale_rollouts) == 0


@pytest.mark.parametrize("mode, kind", [("decoupled", "snapshot"), ("behavior", "behavior")])  # "proximal": refused
def test_with_async_rollouts_the_mode_chooses_the_anchor_of_the_one_iteration_stale_data(mode, kind):
    model = StalePPO_EWMA("MlpPolicy", "CartPole-v1", ewma_decay=None, async_rollouts=True, **SMALL)
    assert model.proximal.kind == "snapshot"  # as PPO_EWMA's with async_rollouts: the recent policy
    assert model.set_staleness(0, mode).proximal.kind == kind


def test_setting_staleness_again_drops_the_waiting_rollouts_and_logs_them(tmp_path):
    model = StalePPO_EWMA("MlpPolicy", "CartPole-v1", **SMALL).set_staleness(3)
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(64)
    assert len(model.stale_rollouts) == 2 and model._n_updates == 0
    with open(tmp_path / "progress.csv") as file:
        logged = [row["train/stale_iterations_buffered"] for row in csv.DictReader(file)]
    # SB3 dumps an iteration's train logs with the next iteration's: the second is still pending
    assert logged == ["", "1"] and model.logger.name_to_value["train/stale_iterations_buffered"] == 2
    model.set_staleness(1)
    assert len(model.stale_rollouts) == 0
    model.learn(32, reset_num_timesteps=False)  # buffers one rollout again: nothing trained yet
    assert model._n_updates == 0 and len(model.stale_rollouts) == 1


class MultiBinaryActions(gym.Env):
    """Three binary actions; the buffer stores them as the space's integers."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.MultiBinary(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.steps += 1
        return self.observation_space.sample(), float(action.sum()), self.steps == 10, False, {}


def test_the_proximal_mode_rescores_multi_binary_actions():
    """The recent policy's log-probabilities of stored MultiBinary actions (integers in the buffer, floats to SB3's
    Bernoulli distribution, as the buffer's samples give them)."""
    model = StalePPO_EWMA("MlpPolicy", DummyVecEnv([MultiBinaryActions] * 2), **SMALL).set_staleness(2, "proximal")
    model.learn(5 * 64)
    assert model._n_updates == 3  # 5 iterations, the first 2 waiting


def test_with_async_rollouts_the_proximal_mode_is_refused():
    """async_rollouts' data is one iteration stale, and "proximal" would rescore it with the recent policy, which the
    collector's hand-off does not: refused (it trained as "behavior", silently)."""
    model = StalePPO_EWMA("MlpPolicy", "CartPole-v1", async_rollouts=True, ewma_decay=None, **SMALL)
    with pytest.raises(ValueError, match="mode='proximal' rescores the stored data with the recent policy"):
        model.set_staleness(0, "proximal")
    assert model.set_staleness(0, "behavior").proximal.kind == "behavior"
    recurrent = stale_contrib_model(StaleRecurrentPPO_EWMA, async_rollouts=True)
    with pytest.raises(ValueError, match=r"'proximal' is StalePPO_EWMA's only"):
        recurrent.set_staleness(0, "proximal")


@pytest.mark.parametrize(
    "settings, keywords, message",
    [
        ({}, {"async_rollouts": True}, "artificial staleness needs a model with async_rollouts=False"),
        ({"ewma_decay": None}, {"kl_estimator": "exact", "kl_coef": 0.1}, "kl_estimator='exact' needs the proximal"),
    ],
)
def test_load_s_keywords_meet_the_checks_of_set_staleness_when_learning(settings, keywords, message, tmp_path):
    """load(..., keyword) sets attributes without set_staleness's checks: learn makes them, before anything runs."""
    model = StalePPO_EWMA("MlpPolicy", "CartPole-v1", **SMALL, **settings).set_staleness(2, "behavior")
    model.save(tmp_path / "stale.zip")
    loaded = StalePPO_EWMA.load(tmp_path / "stale.zip", env=model.get_env(), **keywords)
    with pytest.raises(ValueError, match=message):
        loaded.learn(64)
    assert loaded.num_timesteps == 0 and loaded._n_updates == 0


def test_a_new_run_starts_without_the_last_runs_waiting_rollouts():
    model = StalePPO_EWMA("MlpPolicy", "CartPole-v1", **SMALL).set_staleness(2)
    model.learn(64)  # two rollouts wait
    assert len(model.stale_rollouts) == 2 and model._n_updates == 0
    model.learn(32, reset_num_timesteps=False)  # the same run: the oldest is trained on
    assert len(model.stale_rollouts) == 2 and model._n_updates > 0
    updates = model._n_updates
    model.learn(32)  # reset_num_timesteps=True, SB3's new run (the environments reset): buffers its first rollout
    assert len(model.stale_rollouts) == 1 and model._n_updates == updates
