"""Export to SB3's PPO: the saved zip opens with stable_baselines3.PPO alone and predicts the same actions."""

import io
import math
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch as th
from stable_baselines3 import PPO

from sb3_ewma import PPG, PPG_EWMA, PPO_EWMA
from sb3_ewma.common.saved_files import check_saved_file

SMALL = dict(n_steps=32, batch_size=16, n_epochs=2, seed=0, device="cpu")
PPG_SMALL = dict(n_steps=32, batch_size=16, n_policy_iterations=2, n_aux_epochs=1, seed=0, device="cpu")


def observations(model, n: int = 20) -> np.ndarray:
    return np.stack([model.observation_space.sample() for _ in range(n)])


def assert_same_predictions(model, exported, obs: np.ndarray) -> None:
    for deterministic in (True, False):
        th.manual_seed(7)
        expected, _ = model.predict(obs, deterministic=deterministic)
        th.manual_seed(7)
        actual, _ = exported.predict(obs, deterministic=deterministic)
        np.testing.assert_array_equal(actual, expected)
    obs_tensor = model.policy.obs_to_tensor(obs)[0]
    with th.no_grad():
        expected_values = model.policy.predict_values(obs_tensor).cpu().numpy()
        np.testing.assert_array_equal(exported.policy.predict_values(obs_tensor).cpu().numpy(), expected_values)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_ppo_ewma_export_saves_a_zip_that_sb3_ppo_loads_with_the_same_predictions(env_id, tmp_path):
    model = PPO_EWMA("MlpPolicy", env_id, ewma_decay=0.8, kl_coef=0.1, **SMALL).learn(64)
    exported = model.to_sb3()
    assert type(exported) is PPO
    assert (exported.n_steps, exported.batch_size, exported.n_epochs, exported.num_timesteps) == (32, 16, 2, 64)
    # the exported model is a copy: training it does not touch the source
    assert exported.policy is not model.policy
    obs = observations(model)
    assert_same_predictions(model, exported, obs)

    exported.save(tmp_path / "ppo.zip")
    loaded = PPO.load(tmp_path / "ppo.zip", device="cpu")
    assert_same_predictions(model, loaded, obs)
    # the optimizer state carries over (training can continue with SB3's PPO as it would have)
    for source, target in zip(model.policy.parameters(), loaded.policy.parameters()):
        th.testing.assert_close(
            loaded.policy.optimizer.state[target]["exp_avg_sq"], model.policy.optimizer.state[source]["exp_avg_sq"]
        )
    loaded.set_env(model.get_env())
    loaded.learn(32)


@pytest.mark.parametrize("policy_kwargs", [{}, {"head_init_scale": 0.1}])
def test_exported_zip_opens_with_sb3_alone(tmp_path, policy_kwargs):
    # PPO_EWMA's policies are SB3's with one more keyword: the export holds SB3's own class
    model = PPO_EWMA(
        "MlpPolicy", "CartPole-v1", **{**SMALL, "policy_kwargs": {**SMALL.get("policy_kwargs", {}), **policy_kwargs}}
    )
    model.learn(32)
    model.to_sb3().save(tmp_path / "ppo.zip")
    obs = observations(model, 5)
    np.save(tmp_path / "obs.npy", obs)
    expected, _ = model.predict(obs, deterministic=True)
    # a fresh interpreter that never imports sb3_ewma (it would fail to unpickle a class of this package)
    script = (
        "import sys, numpy as np\n"
        "from stable_baselines3 import PPO\n"
        f"model = PPO.load({str(tmp_path / 'ppo.zip')!r}, device='cpu')\n"
        f"print(model.predict(np.load({str(tmp_path / 'obs.npy')!r}), deterministic=True)[0].tolist())\n"
        "assert not any(name.startswith('sb3_ewma') for name in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == str(expected.tolist())


def test_export_of_the_kl_penalty_alone_warns_and_uses_ppo_default():
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", clip_range=None, kl_coef=0.3, **SMALL)
    with pytest.warns(UserWarning, match=r"KL penalty alone \(clip_range=None, kl_coef > 0\).*clip_range=0.2"):
        exported = model.to_sb3()
    assert exported.clip_range(1.0) == 0.2
    assert_same_predictions(model, exported, observations(model))


@pytest.mark.filterwarnings("ignore:clip_range=")  # nothing limits the update: the constructor says so
@pytest.mark.parametrize("clip_range", [None, math.inf])
def test_export_without_clipping_or_penalty_is_sb3s_no_clipping(clip_range):
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", clip_range=clip_range, kl_coef=0.0, **SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exported = model.to_sb3()
    assert exported.clip_range(1.0) == math.inf


@pytest.mark.parametrize(
    "algo, kwargs",
    [
        (PPG_EWMA, dict(arch="dual")),
        (PPG, dict(arch="dual", policy_kwargs=dict(net_arch=[32]))),
        (PPG_EWMA, dict(arch="shared", policy_kwargs=dict(net_arch=dict(pi=[16], vf=[8])))),
        (PPG_EWMA, dict(arch="detach", policy_kwargs=dict(net_arch=dict(pi=[16], vf=[16])))),
    ],
)
def test_ppg_export_keeps_policy_and_value_networks(algo, kwargs, tmp_path):
    model = algo("MlpPolicy", "CartPole-v1", **PPG_SMALL, **kwargs).learn(64)  # one policy phase and its aux phase
    exported = model.to_sb3()
    assert exported.policy.share_features_extractor == (kwargs["arch"] != "dual")
    assert not any(name.startswith("aux_value_net") for name in exported.policy.state_dict())
    exported.save(tmp_path / "ppo.zip")
    loaded = PPO.load(tmp_path / "ppo.zip", device="cpu")
    assert_same_predictions(model, loaded, observations(model))
    # Adam's moments matched by parameter name (PPG's optimizer also holds the auxiliary head)
    source_parameters = dict(model.policy.named_parameters())
    for name, parameter in loaded.policy.named_parameters():
        source_state = model.policy.optimizer.state[source_parameters[name]]
        th.testing.assert_close(loaded.policy.optimizer.state[parameter]["exp_avg"], source_state["exp_avg"])


def test_a_ppg_file_opens_with_sb3s_ppo_and_goes_to_sb3_through_to_sb3(tmp_path):
    model = PPG_EWMA("MlpPolicy", "CartPole-v1", **PPG_SMALL).learn(64)
    model.save(tmp_path / "ppg.zip")
    # the auxiliary optimizer's state is a data entry, which SB3's load ignores: SB3's PPO opens the file with the
    # package's policy class, predicts as the model does, and trains on
    opened = PPO.load(tmp_path / "ppg.zip", env=model.get_env(), device="cpu")
    assert type(opened.policy) is type(model.policy)
    assert_same_predictions(model, opened, observations(model))
    opened.learn(64)
    # the package's own load restores that state
    loaded = PPG_EWMA.load(tmp_path / "ppg.zip", device="cpu")
    for expected, got in zip(
        model.aux_optimizer.state_dict()["state"].values(), loaded.aux_optimizer.state_dict()["state"].values()
    ):
        th.testing.assert_close(got["exp_avg"], expected["exp_avg"])
    assert not hasattr(loaded, "aux_optimizer_state")
    # this package's loaders of another algorithm, and `enjoy --algo ppo` (check_saved_file), name to_sb3()
    to_sb3 = r"load it with sb3_ewma.PPG_EWMA.load \(or sb3_ewma.PPG.load\), whose to_sb3\(\) gives SB3's PPO$"
    with pytest.raises(ValueError, match=r"ppg.zip was saved by PPG_EWMA or PPG, not by PPO_EWMA .*" + to_sb3):
        PPO_EWMA.load(tmp_path / "ppg.zip", device="cpu")
    with pytest.raises(ValueError, match=r"ppg.zip was saved by PPG_EWMA or PPG, not by PPO .*" + to_sb3):
        check_saved_file(PPO, tmp_path / "ppg.zip")
    PPG_EWMA.load(tmp_path / "ppg.zip", device="cpu").to_sb3().save(tmp_path / "ppo.zip")
    assert_same_predictions(model, PPO.load(tmp_path / "ppo.zip", device="cpu"), observations(model))


def test_ppg_with_shared_mlp_layers_cannot_be_exported():
    model = PPG_EWMA("MlpPolicy", "CartPole-v1", arch="shared", **PPG_SMALL)
    with pytest.raises(ValueError, match="no shared MLP layers"):
        model.to_sb3()


@pytest.mark.parametrize("algo", [PPO_EWMA, PPG_EWMA])
def test_export_stays_on_the_model_device(algo, device, tmp_path):
    settings = {**(PPG_SMALL if algo is PPG_EWMA else SMALL), "device": device}
    model = algo("MlpPolicy", "CartPole-v1", **settings).learn(64)
    exported = model.to_sb3()
    assert {tensor.device.type for tensor in exported.policy.state_dict().values()} == {device}
    obs = observations(model)
    assert_same_predictions(model, exported, obs)
    exported.save(tmp_path / "ppo.zip")
    loaded = PPO.load(tmp_path / "ppo.zip", device=device)
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0])


def test_recurrent_ppo_ewma_exports_to_recurrent_ppo(tmp_path):
    from sb3_contrib import RecurrentPPO

    from sb3_ewma import RecurrentPPO_EWMA

    settings = dict(SMALL, policy_kwargs=dict(lstm_hidden_size=8, net_arch=[16]))
    model = RecurrentPPO_EWMA("MlpLstmPolicy", "CartPole-v1", **settings).learn(64)
    exported = model.to_sb3()
    assert type(exported) is RecurrentPPO and exported.policy is not model.policy
    assert (exported.n_steps, exported.batch_size, exported.n_epochs, exported.num_timesteps) == (32, 16, 2, 64)
    exported.save(tmp_path / "recurrent.zip")
    # a fresh interpreter with sb3-contrib alone: the same actions along a sequence, carrying the LSTM states
    obs = observations(model, 6)
    np.save(tmp_path / "obs.npy", obs)
    expected, states = [], None
    for step, observation in enumerate(obs):
        action, states = model.predict(
            observation[None], state=states, episode_start=np.array([step == 0]), deterministic=True
        )
        expected.append(int(action[0]))
    script = (
        "import sys, numpy as np\n"
        "from sb3_contrib import RecurrentPPO\n"
        f"model = RecurrentPPO.load({str(tmp_path / 'recurrent.zip')!r}, device='cpu')\n"
        "actions, states = [], None\n"
        f"for step, obs in enumerate(np.load({str(tmp_path / 'obs.npy')!r})):\n"
        "    action, states = model.predict(obs[None], state=states, episode_start=np.array([step == 0]), "
        "deterministic=True)\n"
        "    actions.append(int(action[0]))\n"
        "print(actions)\n"
        "assert not any(name.startswith('sb3_ewma') for name in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == str(expected)
    # the values too, and training goes on as RecurrentPPO
    loaded = RecurrentPPO.load(tmp_path / "recurrent.zip", env=model.get_env(), device="cpu")
    for name, tensor in model.policy.state_dict().items():
        th.testing.assert_close(loaded.policy.state_dict()[name], tensor, rtol=0, atol=0)
    loaded.learn(32)


def test_maskable_ppo_ewma_exports_to_maskable_ppo(tmp_path):
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.env_util import make_vec_env

    from sb3_ewma import MaskablePPO_EWMA
    from sb3_ewma.envs.action_masks import ActionMaskOrAllValid

    env = make_vec_env("CartPole-v1", n_envs=1, seed=0, wrapper_class=ActionMaskOrAllValid)
    model = MaskablePPO_EWMA("MlpPolicy", env, ewma_decay=0.8, **SMALL).learn(64)
    exported = model.to_sb3()
    assert type(exported) is MaskablePPO
    exported.save(tmp_path / "maskable.zip")
    loaded = MaskablePPO.load(tmp_path / "maskable.zip", device="cpu")
    obs = observations(model)
    masks = np.tile([True, False], (len(obs), 1))
    for action_masks in (None, masks):
        for deterministic in (True, False):
            th.manual_seed(7)
            expected, _ = model.predict(obs, action_masks=action_masks, deterministic=deterministic)
            th.manual_seed(7)
            actual, _ = loaded.predict(obs, action_masks=action_masks, deterministic=deterministic)
            np.testing.assert_array_equal(actual, expected)
    assert np.all(loaded.predict(obs, action_masks=masks)[0] == 0)
    loaded.set_env(model.get_env())
    loaded.learn(32)


def test_sb3s_set_parameters_takes_get_parameters_without_the_proximal_entry() -> None:
    # the documented call (docs/guide/export.md): SB3's set_parameters refuses unknown entries, even without exact_match
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, device="cpu", seed=0).learn(64)
    ppo = PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, device="cpu", seed=1)
    params = model.get_parameters()
    with pytest.raises(ValueError, match="proximal_ewma"):
        ppo.set_parameters(params, exact_match=False)
    params.pop("proximal_ewma", None)
    ppo.set_parameters(params)
    for expected, got in zip(model.policy.parameters(), ppo.policy.parameters()):
        assert th.equal(expected, got)
    observation = np.zeros((1, 4), dtype=np.float32)
    assert np.array_equal(ppo.predict(observation, deterministic=True)[0], model.predict(observation, deterministic=True)[0])


def test_a_ppg_file_trained_on_by_sb3s_ppo_restarts_the_states_sb3_kept_unread(tmp_path):
    model = PPG_EWMA("MlpPolicy", "CartPole-v1", **PPG_SMALL).learn(64)
    model.save(tmp_path / "ppg.zip")
    opened = PPO.load(tmp_path / "ppg.zip", env=model.get_env(), device="cpu").learn(64)
    opened.save(tmp_path / "trained_by_ppo.zip")  # SB3 writes the package's entries back, unread and now stale
    with pytest.warns(UserWarning, match=r"states of proximal_ewma, aux_optimizer are stale \(saved at update 2, the "):
        loaded = PPG_EWMA.load(tmp_path / "trained_by_ppo.zip", device="cpu")
    # the EWMA restarts from the policy SB3 trained, not from the one saved before
    for name, parameter in loaded.policy.named_parameters():
        if name in loaded.proximal_ewma.averaged_names:
            assert th.equal(dict(loaded.proximal_ewma.average.named_parameters())[name], parameter)
    assert loaded.aux_optimizer.state_dict()["state"] == {}


def test_set_parameters_of_a_stream_restores_the_states_in_the_data(tmp_path):
    model = PPG_EWMA("MlpPolicy", "CartPole-v1", **PPG_SMALL).learn(64)
    model.save(tmp_path / "ppg.zip")
    other = PPG_EWMA("MlpPolicy", "CartPole-v1", **{**PPG_SMALL, "seed": 1})
    with open(tmp_path / "ppg.zip", "rb") as file:
        other.set_parameters(io.BytesIO(file.read()), exact_match=True, device="cpu")
    for expected, got in zip(model.proximal_ewma.state_dict().values(), other.proximal_ewma.state_dict().values()):
        assert th.equal(expected, got)
    saved_moments = [state["exp_avg"] for state in model.aux_optimizer.state_dict()["state"].values()]
    assert saved_moments and all(
        th.equal(expected, state["exp_avg"])
        for expected, state in zip(saved_moments, other.aux_optimizer.state_dict()["state"].values())
    )


def test_an_auxiliary_optimizer_saved_before_its_first_step_loads_as_it_was(tmp_path):
    # no tensors yet: SB3 writes the state as JSON, which reads Adam's betas back as a list
    model = PPG_EWMA("MlpPolicy", "CartPole-v1", **PPG_SMALL).learn(32)
    assert model.aux_optimizer.state_dict()["state"] == {}
    model.save(tmp_path / "ppg.zip")
    loaded = PPG_EWMA.load(tmp_path / "ppg.zip", device="cpu")
    assert loaded.aux_optimizer.state_dict()["param_groups"] == model.aux_optimizer.state_dict()["param_groups"]
    assert isinstance(loaded.aux_optimizer.param_groups[0]["betas"], tuple)


def test_export_does_not_seed_the_global_generators_in_mid_run() -> None:
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, seed=0, device="cpu")
    th.manual_seed(1)
    np.random.seed(1)
    numpy_state = np.random.get_state()[1].copy()
    first = model.to_sb3()
    after_first = th.rand(4)
    second = model.to_sb3()
    after_second = th.rand(4)
    # seeding with the model's seed at each export would replay the same numbers after each
    assert not th.equal(after_first, after_second)
    np.testing.assert_array_equal(np.random.get_state()[1], numpy_state)
    assert first.seed == second.seed == 0
