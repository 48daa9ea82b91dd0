import csv
import glob
import os

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import CheckpointCallback, EvalCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.envs import (
    FakeImageEnv,
    IdentityEnv,
    IdentityEnvBox,
    IdentityEnvMultiBinary,
    IdentityEnvMultiDiscrete,
    SimpleMultiObsEnv,
)
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

from sb3_ewma import PPO_EWMA, center_of_mass_from_ewma_decay
from sb3_ewma.ablations import StalePPO_EWMA
from sb3_ewma.common.decoupled.proximal import is_policy_parameter

SMALL = dict(n_steps=32, batch_size=16, n_epochs=2, seed=0, device="cpu")


def policy_side(policy: th.nn.Module) -> dict[str, th.Tensor]:
    return {name: p.detach().clone() for name, p in policy.named_parameters() if is_policy_parameter(name)}


@pytest.mark.parametrize(
    "env_id, kwargs",
    [("CartPole-v1", {}), ("CartPole-v1", {"learning_rate": 3e-2}), ("Pendulum-v1", {}), ("Pendulum-v1", {"use_sde": True})],
)
def test_same_parameters_and_logs_as_sb3_ppo_without_ewma(env_id, kwargs):
    settings = dict(n_steps=64, batch_size=32, n_epochs=3, seed=3, device="cpu", **kwargs)
    ppo = PPO("MlpPolicy", env_id, **settings).learn(256)
    ppo_ewma = PPO_EWMA("MlpPolicy", env_id, ewma_decay=None, **settings).learn(256)
    assert ppo_ewma.proximal_ewma is None
    # bit for bit: SB3's gradient clipping and optimizer step, on the same minibatches
    np.testing.assert_array_equal(ppo_ewma.policy.parameters_to_vector(), ppo.policy.parameters_to_vector())
    # SB3's logs, value and type (its console prints a numpy float32 approx_kl in full, a float with 3 digits)
    sb3_logs = {key: value for key, value in ppo.logger.name_to_value.items() if key.startswith("train/")}
    assert {key: ppo_ewma.logger.name_to_value[key] for key in sb3_logs} == sb3_logs
    for key, value in sb3_logs.items():
        assert type(ppo_ewma.logger.name_to_value[key]) is type(value), key
    if "learning_rate" in kwargs:
        assert sb3_logs["train/clip_fraction"] > 0  # the clipped case compared too


def test_proximal_policy_is_the_closed_form_ewma_of_the_parameter_history():
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", ewma_decay=0.7, **SMALL)
    history = [policy_side(model.policy)]
    optimizer_step = model.policy.optimizer.step

    def step_and_record(*args, **kwargs):
        result = optimizer_step(*args, **kwargs)
        history.append(policy_side(model.policy))
        return result

    model.policy.optimizer.step = step_and_record  # type: ignore[method-assign]
    model.learn(64)  # 2 iterations x 2 epochs x 2 minibatches
    k = len(history) - 1
    assert k == 8 and model.proximal_ewma.n_updates == k
    weights = 0.7 ** np.arange(k, -1, -1)
    assert model.proximal_ewma.weight == pytest.approx(weights.sum())
    proximal = dict(model.proximal_ewma.average.named_parameters())
    for name in history[0]:
        expected = sum(w * theta[name] for w, theta in zip(weights, history)) / weights.sum()
        th.testing.assert_close(proximal[name], expected, rtol=1e-5, atol=1e-6)
    # the value head is not averaged: it keeps its initial copy
    assert not any(name.startswith("value_net") for name in model.proximal_ewma.averaged_names)


def test_proximal_policy_gets_no_gradients_and_is_not_optimized():
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", **SMALL)
    proximal_params = list(model.proximal_ewma.parameters())
    assert proximal_params and all(not p.requires_grad for p in proximal_params)
    optimized = {id(p) for group in model.policy.optimizer.param_groups for p in group["params"]}
    assert not optimized & {id(p) for p in proximal_params}
    assert all(p.device == model.device for p in proximal_params)
    model.learn(32)
    assert all(p.grad is None for p in proximal_params)


@pytest.mark.parametrize(
    "n_steps, batch_size, n_envs, n_epochs, expected_com",
    # "auto": max(M, E x M / 2) with M = ceil(n_steps * n_envs / batch_size) minibatches per epoch, E epochs
    [(64, 16, 1, 10, 20), (64, 16, 2, 10, 40), (50, 16, 1, 10, 20), (64, 16, 1, 1, 4), (64, 16, 1, 3, 6)],
)
def test_auto_decay_center_of_mass(n_steps, batch_size, n_envs, n_epochs, expected_com):
    env = make_vec_env("CartPole-v1", n_envs=n_envs)
    model = PPO_EWMA("MlpPolicy", env, n_steps=n_steps, batch_size=batch_size, n_epochs=n_epochs, device="cpu")
    assert center_of_mass_from_ewma_decay(model.proximal_decay) == pytest.approx(expected_com)
    assert model.proximal_ewma.decay == pytest.approx(expected_com / (expected_com + 1))


@pytest.mark.parametrize(
    "env, policy, kwargs",
    [
        (IdentityEnv(4), "MlpPolicy", {}),
        (IdentityEnvBox(), "MlpPolicy", {}),
        (IdentityEnvBox(), "MlpPolicy", {"use_sde": True}),
        (IdentityEnvMultiDiscrete(3), "MlpPolicy", {}),
        (IdentityEnvMultiBinary(3), "MlpPolicy", {}),
        (SimpleMultiObsEnv(), "MultiInputPolicy", {}),
        (FakeImageEnv(screen_height=36, screen_width=36), "CnnPolicy", {}),
    ],
)
def test_action_and_observation_spaces(env, policy, kwargs):
    model = PPO_EWMA(policy, env, kl_coef=0.5, kl_estimator="exact", **SMALL, **kwargs)
    before = policy_side(model.policy)
    model.learn(64)
    after = policy_side(model.policy)
    assert any(not th.equal(before[name], after[name]) for name in before)
    assert model.proximal_ewma.n_updates == 8
    obs = model.get_env().reset()
    action, _ = model.predict(obs, deterministic=True)
    assert model.action_space.contains(action[0])


@pytest.mark.parametrize("kl_estimator", ["sample", "exact"])
def test_kl_penalized_objective_without_clipping(tmp_path, kl_estimator):
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", clip_range=None, kl_coef=3.0, kl_estimator=kl_estimator, **SMALL)
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(96)
    rows = list(csv.DictReader(open(tmp_path / "progress.csv")))
    penalties = [float(row["train/kl_penalty"]) for row in rows if row.get("train/kl_penalty")]
    assert penalties and all(p >= 0 for p in penalties) and max(penalties) > 0
    assert all(not row.get("train/clip_fraction") for row in rows)


def read_progress(tmp_path) -> list[dict[str, str]]:
    return list(csv.DictReader(open(tmp_path / "progress.csv")))


def test_logs_everything_sb3_ppo_logs_and_the_decoupled_diagnostics(tmp_path):
    ppo = PPO("MlpPolicy", "Pendulum-v1", **SMALL)
    ppo.set_logger(configure(str(tmp_path / "ppo"), ["csv"]))
    ppo.learn(64)
    ppo_keys = {key for key in read_progress(tmp_path / "ppo")[0] if key.startswith("train/")}

    model = PPO_EWMA("MlpPolicy", "Pendulum-v1", **SMALL)
    model.set_logger(configure(str(tmp_path / "ewma"), ["csv"]))
    model.learn(64)
    rows = read_progress(tmp_path / "ewma")
    keys = set(rows[0])
    new_keys = {
        "train/proximal_kl",
        "train/imp_samp_capped_fraction",
        "train/advantage_mean",
        "train/advantage_std",
        "train/ewma_center_of_mass",
    }
    assert ppo_keys <= keys and new_keys <= keys
    last = rows[-1]
    assert float(last["train/ewma_center_of_mass"]) == pytest.approx(2.0)  # 32 / 16 minibatches per epoch
    assert float(last["train/proximal_kl"]) > 0
    assert float(last["train/advantage_std"]) > 0


def test_ewma_advantage_normalization_uses_iteration_moments(tmp_path):
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", advantage_normalization="ewma", advantage_ewma_decay=0.0, **SMALL)
    raw = {}
    start_iteration = model.advantage_normalizer.start_iteration

    def spy(advantages):
        raw["advantages"] = advantages.copy()
        normalized = start_iteration(advantages)
        raw["normalized"] = normalized
        return normalized

    model.advantage_normalizer.start_iteration = spy  # type: ignore[method-assign]
    model.learn(32)
    advantages = raw["advantages"]
    # decay 0: the moments of this iteration alone
    assert model.advantage_normalizer.moments.mean == pytest.approx(advantages.mean(), rel=1e-5)
    assert model.advantage_normalizer.moments.std == pytest.approx(advantages.std(), rel=1e-5)
    assert raw["normalized"].mean() == pytest.approx(0.0, abs=1e-5)
    assert raw["normalized"].std() == pytest.approx(1.0, rel=1e-4)


def test_sb3_features_callbacks_tensorboard_progress_bar_vecnormalize(tmp_path):
    env = VecNormalize(make_vec_env("Pendulum-v1", n_envs=2, seed=0))
    eval_env = VecNormalize(make_vec_env("Pendulum-v1", n_envs=1, seed=1), training=False)
    callbacks = [
        EvalCallback(eval_env, eval_freq=32, n_eval_episodes=1, log_path=str(tmp_path / "eval")),
        CheckpointCallback(save_freq=32, save_path=str(tmp_path / "ckpt")),
    ]
    model = PPO_EWMA("MlpPolicy", env, tensorboard_log=str(tmp_path / "tb"), **SMALL)
    model.learn(128, callback=callbacks, progress_bar=True)
    assert glob.glob(str(tmp_path / "tb" / "PPO_EWMA_1" / "events.out.tfevents.*"))
    assert os.path.exists(tmp_path / "eval" / "evaluations.npz")
    assert len(glob.glob(str(tmp_path / "ckpt" / "*.zip"))) == 2
    assert model.num_timesteps == 128


def test_target_kl_stops_epochs_early():
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=8, n_epochs=10, target_kl=1e-6, seed=0, device="cpu")
    model.learn(128)
    # each iteration stops in its first epoch once the KL from the behavior policy exceeds 1.5 * target_kl
    assert model._n_updates == 2
    assert model.proximal_ewma.n_updates < 2 * 10 * 8


def test_save_load_round_trip_and_continue_training(tmp_path):
    model = PPO_EWMA(
        "MlpPolicy", "Pendulum-v1", ewma_decay=0.8, advantage_normalization="ewma", advantage_ewma_decay=0.9, **SMALL
    )
    model.learn(96)
    model.save(tmp_path / "model.zip")
    loaded = PPO_EWMA.load(tmp_path / "model.zip", env=make_vec_env("Pendulum-v1"), device="cpu")

    assert loaded.proximal_ewma.weight == pytest.approx(model.proximal_ewma.weight)
    assert loaded.proximal_ewma.n_updates == model.proximal_ewma.n_updates == 12
    for (name, a), (_, b) in zip(model.proximal_ewma.state_dict().items(), loaded.proximal_ewma.state_dict().items()):
        if isinstance(a, th.Tensor):
            assert th.equal(a, b), name
    assert not th.equal(
        model.proximal_ewma.average.action_net.weight, model.policy.action_net.weight
    ), "the average must differ from the policy for this test to mean something"
    moments, loaded_moments = model.advantage_normalizer.moments, loaded.advantage_normalizer.moments
    assert moments.weight > 0
    assert (loaded_moments.weight, loaded_moments.weighted_sum, loaded_moments.weighted_sumsq) == (
        moments.weight,
        moments.weighted_sum,
        moments.weighted_sumsq,
    )
    assert loaded.ewma_decay == 0.8 and loaded.advantage_normalization == "ewma"
    th.testing.assert_close(loaded.policy.parameters_to_vector(), model.policy.parameters_to_vector())

    loaded.learn(64, reset_num_timesteps=False)
    assert loaded.proximal_ewma.n_updates == 12 + 8
    assert loaded.num_timesteps == 96 + 64


def test_load_plain_ppo_file_starts_the_ewma_from_the_policy(tmp_path):
    PPO("MlpPolicy", "CartPole-v1", **SMALL).learn(32).save(tmp_path / "ppo.zip")
    with pytest.warns(UserWarning, match="starts its EWMA from the loaded policy"):
        model = PPO_EWMA.load(tmp_path / "ppo.zip", env=make_vec_env("CartPole-v1"), device="cpu")
    proximal = dict(model.proximal_ewma.average.named_parameters())
    for name, param in model.policy.named_parameters():
        assert th.equal(proximal[name], param), name
    assert model.proximal_ewma.weight == 1.0
    model.learn(32)


class CountingEnv(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,))
    action_space = gym.spaces.Discrete(2)
    calls = 0

    def reset(self, *, seed=None, options=None):
        CountingEnv.calls += 1
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        CountingEnv.calls += 1
        return np.zeros(2, dtype=np.float32), 0.0, False, False, {}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"ewma_decay": 1.0}, r"ewma_decay must be .*\[0, 1\)"),
        ({"ewma_decay": -0.1}, r"ewma_decay must be .*\[0, 1\)"),
        (
            {"ewma_decay": "fast"},
            r"ewma_decay must be a number in \[0, 1\), None or one of \('auto', 'paper', 'max_age', 'mean_age'\)",
        ),
        ({"kl_coef": -1.0}, r"kl_coef must be a finite number >= 0"),
        ({"kl_estimator": "mc"}, r"kl_estimator must be one of \('sample', 'exact'\)"),
        ({"imp_samp_max": 0.5}, r"imp_samp_max must be 0 \(no cap\) or a number > 1"),
        ({"imp_samp_max": 1}, r"imp_samp_max must be 0 \(no cap\) or a number > 1"),
        ({"imp_samp_max": -3}, r"imp_samp_max must be 0 \(no cap\) or a number > 1"),
        ({"advantage_ewma_decay": 1.0}, r"advantage_ewma_decay must be a number in \[0, 1\)"),
        ({"advantage_normalization": "batch"}, r"advantage_normalization must be one of \('minibatch', 'ewma'\)"),
        ({"clip_range": float("nan")}, r"clip_range must be None \(no clipping\), a schedule or a number .*got nan"),
    ],
)
def test_bad_input_raises_before_the_environment_is_used(kwargs, message):
    CountingEnv.calls = 0
    env = DummyVecEnv([CountingEnv])
    with pytest.raises(ValueError, match=message):
        PPO_EWMA("MlpPolicy", env, **kwargs)
    assert CountingEnv.calls == 0


@pytest.mark.parametrize(
    "staleness, mode, message",
    [
        (2, "recent", r"mode must be one of \('decoupled', 'behavior', 'proximal'\), got 'recent'"),
        (-1, "decoupled", r"staleness must be an integer >= 0 \(iterations\), got -1"),
        (True, "decoupled", r"staleness must be an integer >= 0 \(iterations\), got True"),
    ],
)
def test_bad_staleness_changes_nothing(staleness, mode, message):
    model = StalePPO_EWMA("MlpPolicy", "CartPole-v1", **SMALL)
    with pytest.raises(ValueError, match=message):
        model.set_staleness(staleness, mode)
    assert model.staleness == 0 and "staleness" not in vars(model)


def test_staleness_is_saved_with_the_model_and_can_be_removed(tmp_path):
    model = StalePPO_EWMA("MlpPolicy", "CartPole-v1", ewma_decay=None, **SMALL).set_staleness(2, "decoupled")
    assert model.proximal.kind == "snapshot"  # stale data is anchored at the recent policy: a network of its own
    model.save(tmp_path / "stale.zip")
    loaded = StalePPO_EWMA.load(tmp_path / "stale.zip", device="cpu")
    assert (loaded.staleness, loaded.staleness_mode, loaded.proximal.kind) == (2, "decoupled", "snapshot")
    loaded.set_staleness(0)
    assert loaded.proximal.kind == "behavior" and loaded.staleness == 0  # the buffer's log-probabilities again
    # PPO_EWMA itself does not run artificial staleness: it refuses the file rather than train on fresh data
    with pytest.raises(ValueError, match=r"stale.zip was saved with artificial staleness=2: load it with "):
        PPO_EWMA.load(tmp_path / "stale.zip", device="cpu")
    # a file without staleness opens in both, and PPO_EWMA keeps no setting it does not read
    StalePPO_EWMA("MlpPolicy", "CartPole-v1", **SMALL).save(tmp_path / "fresh.zip")
    assert "staleness" not in vars(PPO_EWMA.load(tmp_path / "fresh.zip", device="cpu"))
    assert StalePPO_EWMA.load(tmp_path / "fresh.zip", device="cpu").staleness == 0


def test_staleness_trains_on_the_buffer_collected_k_iterations_ago():
    model = StalePPO_EWMA("MlpPolicy", "CartPole-v1", **SMALL).set_staleness(2)
    first_buffer = model.rollout_buffer
    initial = model.policy.parameters_to_vector()
    model.learn(64)  # 2 iterations: only buffering
    np.testing.assert_array_equal(model.policy.parameters_to_vector(), initial)
    assert model._n_updates == 0
    model.learn(32, reset_num_timesteps=False)  # third iteration trains on the first rollout
    assert model._n_updates == 2
    assert model.rollout_buffer is first_buffer  # recycled for the next rollout
    assert not np.array_equal(model.policy.parameters_to_vector(), initial)


@pytest.mark.parametrize("mode", ["decoupled", "behavior", "proximal"])
def test_staleness_modes_without_ewma(mode):
    model = StalePPO_EWMA("MlpPolicy", "CartPole-v1", ewma_decay=None, **SMALL).set_staleness(1, mode)
    # "behavior" and "proximal" read the log-probabilities in the buffer (the behavior policy's, or the recent policy's
    # written over them); "decoupled" anchors at the recent policy, a snapshot network
    assert (model.proximal_ewma is None) == (mode != "decoupled")
    if model.proximal_ewma is not None:
        snapshots = []
        reset = model.proximal_ewma.reset

        def record_reset():
            reset()
            snapshots.append(model.policy.parameters_to_vector())

        model.proximal_ewma.reset = record_reset  # type: ignore[method-assign]
    model.learn(96)
    assert model._n_updates == 2 * 2
    if model.proximal_ewma is not None:
        # a snapshot of the policy at the start of each training iteration, never averaged
        assert len(snapshots) == 2 and model.proximal_ewma.n_updates == 0


def test_load_sb3_ppo_file_keeps_its_advantage_options(tmp_path):
    PPO("MlpPolicy", "CartPole-v1", normalize_advantage=False, **SMALL).learn(32).save(tmp_path / "ppo.zip")
    with pytest.warns(UserWarning, match="starts its EWMA"):
        model = PPO_EWMA.load(tmp_path / "ppo.zip", env=make_vec_env("CartPole-v1"), device="cpu")
    assert model.normalize_advantage is False and model.advantage_normalizer.enabled is False
    advantages = th.tensor([1.0, 5.0, 9.0])
    assert th.equal(model.advantage_normalizer.minibatch(advantages), advantages)


def test_load_with_the_ewma_turned_off_ignores_the_saved_proximal_policy(tmp_path):
    PPO_EWMA("MlpPolicy", "CartPole-v1", **SMALL).learn(32).save(tmp_path / "ewma.zip")
    with pytest.warns(UserWarning, match="has no proximal policy"):
        model = PPO_EWMA.load(tmp_path / "ewma.zip", env=make_vec_env("CartPole-v1"), device="cpu", ewma_decay=None)
    assert model.proximal_ewma is None
    model.learn(32)


def test_behavior_mode_keeps_the_ewma_as_the_anchor(tmp_path):
    # as in the authors' code, the EWMA replaces the clipping anchor in every staleness mode
    model = StalePPO_EWMA("MlpPolicy", "CartPole-v1", kl_coef=1.0, kl_estimator="exact", **SMALL)
    model.set_staleness(0, "behavior")
    assert model.proximal_decay is not None and model.proximal_ewma is not None
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(64)
    assert model.proximal_ewma.n_updates == 2 * 2 * 2
    assert read_progress(tmp_path)[-1].get("train/ewma_center_of_mass")
