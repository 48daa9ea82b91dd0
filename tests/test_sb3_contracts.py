"""SB3's own save/load contract (the logic of stable-baselines3's tests/test_save_load.py) and loading with fewer envs."""

import pickle
from collections import OrderedDict
from copy import deepcopy

import numpy as np
import pytest
import torch as th
from sb3_contrib import MaskablePPO
from sb3_contrib.common.envs import InvalidActionEnvDiscrete
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_ewma import PPG, PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA

SETTINGS = {
    PPO_EWMA: dict(n_steps=64, batch_size=32, n_epochs=2),
    PPG_EWMA: dict(n_steps=64, batch_size=32, n_policy_iterations=2, n_aux_epochs=1),
    PPG: dict(n_steps=64, batch_size=32, n_policy_iterations=2, n_aux_epochs=1),
}


@pytest.mark.parametrize("model_class", [PPO_EWMA, PPG_EWMA, PPG])
def test_sb3_save_load_contract(tmp_path, model_class):
    env = DummyVecEnv([lambda: __import__("gymnasium").make("CartPole-v1")])
    model = model_class("MlpPolicy", env, policy_kwargs=dict(net_arch=[16]), seed=0, device="cpu", **SETTINGS[model_class])
    model.learn(256)
    env.reset()
    observations = np.concatenate([env.step([env.action_space.sample()])[0] for _ in range(10)], axis=0)
    original_params = deepcopy(model.get_parameters())

    invalid_object_params = deepcopy(original_params)
    invalid_object_params["I_should_not_be_a_valid_object"] = "and_I_am_an_invalid_tensor"
    with pytest.raises(ValueError):
        model.set_parameters(invalid_object_params, exact_match=True)
    with pytest.raises(ValueError):
        model.set_parameters(invalid_object_params, exact_match=False)

    # exact_match catches a missing module, whichever it is (the proximal EWMA included)
    for missing in original_params:
        missing_object_params = {key: value for key, value in original_params.items() if key != missing}
        with pytest.raises(ValueError, match=r"exact_match|missing|Names"):
            model.set_parameters(missing_object_params, exact_match=True)

    missing_state_dict_tensor_params = {
        name: OrderedDict(list(params.items())[:-1]) for name, params in original_params.items()
    }
    with pytest.raises(RuntimeError):
        model.set_parameters(missing_state_dict_tensor_params, exact_match=True)

    # every saved state dict holds tensors only (SB3 randomizes each entry with th.rand_like)
    random_params = {}
    for object_name, params in original_params.items():
        if "optim" in object_name:
            random_params[object_name] = params
        else:
            for name, value in params.items():
                assert isinstance(value, th.Tensor), f"{object_name}.{name} is a {type(value).__name__}"
            random_params[object_name] = OrderedDict((name, th.rand_like(value)) for name, value in params.items())
    model.set_parameters(random_params, exact_match=True)
    new_params = model.get_parameters()
    for object_name in new_params:
        for key, value in new_params[object_name].items():
            if "optim" not in object_name:
                assert not th.allclose(original_params[object_name][key], value), f"{object_name}.{key} unchanged"

    selected_actions, _ = model.predict(observations, deterministic=True)
    model.save(tmp_path / "test_save.zip")
    del model
    model = model_class.load(str(tmp_path / "test_save.zip"), env=env, device="cpu")
    for object_name, params in model.get_parameters().items():
        if "optim" not in object_name:
            for key, value in params.items():
                assert th.allclose(new_params[object_name][key], value), f"{object_name}.{key} changed by save/load"
    new_selected_actions, _ = model.predict(observations, deterministic=True)
    assert np.allclose(selected_actions, new_selected_actions, 1e-4)
    model.learn(128)


def test_set_parameters_without_exact_match_fills_the_missing_proximal_policy():
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=16, seed=0, device="cpu")
    params = {key: value for key, value in model.get_parameters().items() if key != "proximal_ewma"}
    with th.no_grad():
        for param in model.policy.parameters():
            param.add_(1.0)
    with pytest.warns(UserWarning, match="starts its EWMA from the loaded policy"):
        model.set_parameters(params, exact_match=False)
    average = dict(model.proximal_ewma.average.named_parameters())
    for name, param in model.policy.named_parameters():
        assert th.equal(average[name], param), name


def test_ewma_extra_state_round_trips_and_reads_old_files():
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=16, seed=0, device="cpu").learn(64)
    state = model.proximal_ewma.state_dict()
    assert isinstance(state["_extra_state"], th.Tensor)
    weight, n_updates = model.proximal_ewma.weight, model.proximal_ewma.n_updates
    assert n_updates == 2 * 10 * 2 and weight > 1  # 2 iterations x 10 epochs x 2 minibatches
    model.proximal_ewma.weight, model.proximal_ewma.n_updates = 1.0, 0
    model.proximal_ewma.load_state_dict(state)
    assert (model.proximal_ewma.weight, model.proximal_ewma.n_updates) == (weight, n_updates)
    # a file written before the state became a tensor
    model.proximal_ewma.load_state_dict({**state, "_extra_state": {"weight": 2.5, "n_updates": 3}})
    assert (model.proximal_ewma.weight, model.proximal_ewma.n_updates) == (2.5, 3)


@pytest.mark.parametrize("model_class", [PPG_EWMA, PPG])
def test_load_with_fewer_envs(tmp_path, model_class):
    # aux minibatch of 4 rollouts of one environment, 2 iterations x 4 environments: 8 rollouts in the buffer
    model = model_class(
        "MlpPolicy",
        make_vec_env("CartPole-v1", n_envs=4, seed=0),
        n_steps=16,
        batch_size=32,
        n_policy_iterations=2,
        aux_batch_size=4 * 16,
        seed=0,
        device="cpu",
    ).learn(2 * 64)
    model.save(tmp_path / "model.zip")
    one_env = make_vec_env("CartPole-v1", n_envs=1, seed=1)
    # for predict / evaluation / videos with one environment
    loaded = model_class.load(tmp_path / "model.zip", env=one_env, device="cpu")
    observation = one_env.reset()
    np.testing.assert_array_equal(
        loaded.predict(observation, deterministic=True)[0], model.predict(observation, deterministic=True)[0]
    )
    # learning with 1 env: the 2-rollout auxiliary buffer cannot hold a minibatch of 4 rollouts; the error says what to do
    with pytest.raises(ValueError, match=r"aux_batch_size.*aux_batch_size=32"):
        loaded.learn(64)
    # following the advice works
    loaded = model_class.load(tmp_path / "model.zip", env=one_env, device="cpu", aux_batch_size=32)
    loaded.learn(2 * 16)
    assert loaded.n_aux_phases == model.n_aux_phases + 1
    # a constructor with the same settings still rejects them before any environment step
    with pytest.raises(ValueError, match="aux_batch_size"):
        model_class("MlpPolicy", one_env, n_steps=16, batch_size=16, n_policy_iterations=2, aux_batch_size=64)


def contract_env(model_class) -> DummyVecEnv:
    """CartPole, with action masks (all valid) for MaskablePPO_EWMA."""
    from sb3_ewma.envs.action_masks import ActionMaskOrAllValid

    wrap = ActionMaskOrAllValid if model_class is MaskablePPO_EWMA else (lambda env: env)
    return DummyVecEnv([lambda: wrap(__import__("gymnasium").make("CartPole-v1"))])


FIVE_CLASSES = {
    **SETTINGS,
    RecurrentPPO_EWMA: dict(n_steps=64, batch_size=32, n_epochs=2),
    MaskablePPO_EWMA: dict(n_steps=64, batch_size=32, n_epochs=2),
}


def tensors_off(state: dict, device: str) -> list[str]:
    return [name for name, value in state.items() if isinstance(value, th.Tensor) and value.device.type != device]


@pytest.mark.parametrize("model_class", list(FIVE_CLASSES), ids=lambda cls: cls.__name__)
def test_load_puts_every_tensor_on_the_device(tmp_path, model_class, device):
    """SB3's test_save_load: after load(device=X), every tensor of get_parameters() (and of the proximal state) is on X."""
    policy = "MlpLstmPolicy" if model_class is RecurrentPPO_EWMA else "MlpPolicy"
    model = model_class(policy, contract_env(model_class), seed=0, device=device, **FIVE_CLASSES[model_class]).learn(64)
    model.save(tmp_path / "model.zip")
    for load_device in {"cpu", device}:
        loaded = model_class.load(tmp_path / "model.zip", env=contract_env(model_class), device=load_device)
        assert loaded.device.type == load_device
        for object_name, state in loaded.get_parameters().items():
            if "optim" not in object_name:
                assert not tensors_off(state, load_device), f"{object_name}: {tensors_off(state, load_device)}"
        if model_class is not PPG:  # PPG's proximal policy is a snapshot taken by train(), not saved
            assert not tensors_off(loaded.proximal_ewma.state_dict(), load_device)
            assert (loaded.proximal_ewma.weight, loaded.proximal_ewma.n_updates) == (
                model.proximal_ewma.weight,
                model.proximal_ewma.n_updates,
            )
        loaded.learn(64)  # trains on that device


@pytest.mark.parametrize(
    "model_class, kwargs",
    [
        (PPO, {}),
        (PPO_EWMA, {}),
        (PPO_EWMA, {"async_rollouts": True}),
        (PPG_EWMA, {}),
        (MaskablePPO, {}),
        (MaskablePPO_EWMA, {}),
    ],
)
def test_a_model_deep_copies_and_pickles_after_predict_and_save_as_sb3s(tmp_path, model_class, kwargs):
    # SB3's PPO copies and pickles whatever it did before; so do these models
    settings = {**SETTINGS.get(model_class, dict(n_steps=64, batch_size=32, n_epochs=2)), **kwargs}
    env = InvalidActionEnvDiscrete(dim=10, n_invalid_actions=3) if "Maskable" in model_class.__name__ else "CartPole-v1"
    model = model_class("MlpPolicy", env, seed=0, device="cpu", **settings)
    model.learn(64)
    observation = model.env.reset()
    action, _ = model.predict(observation, deterministic=True)
    model.save(tmp_path / "model.zip")
    for copy in (deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert np.array_equal(copy.predict(observation, deterministic=True)[0], action)
        copy.save(tmp_path / "copy.zip")  # the copy's lock is free
