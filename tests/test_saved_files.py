"""
Saved files: files written by version 0.1.0 (the proximal policy among the modules' parameters) still load, and files
written now open with the parent algorithm's own ``load`` (SB3's ``PPO.load``, sb3-contrib's ``RecurrentPPO.load`` and
``MaskablePPO.load``), which ignore the proximal policy's state kept in the file's data.
"""

import base64
import io
import json
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch as th
from sb3_contrib import MaskablePPO, RecurrentPPO
from sb3_contrib.common.envs import InvalidActionEnvDiscrete
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.save_util import data_to_json, load_from_zip_file
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_ewma import PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA

OLD_FILES = Path(__file__).parent / "data" / "saved_by_0.1.0"
ALGORITHMS = {
    "ppo_ewma": PPO_EWMA,
    "ppg_ewma": PPG_EWMA,
    "ppo_lstm_ewma": RecurrentPPO_EWMA,
    "ppo_mask_ewma": MaskablePPO_EWMA,
}


def masked_env() -> DummyVecEnv:
    return DummyVecEnv([lambda: InvalidActionEnvDiscrete(dim=4, ep_length=8, n_invalid_actions=1)])


def env_for(name: str):
    return masked_env() if name == "ppo_mask_ewma" else make_vec_env("CartPole-v1")


def saved_file(model) -> tuple[int, dict]:
    """The size in bytes of the file ``model.save`` writes, and its ``data`` (as JSON)."""
    buffer = io.BytesIO()
    model.save(buffer)
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as archive:
        return len(buffer.getvalue()), json.loads(archive.read("data"))


def averaged_state(model) -> dict[str, np.ndarray]:
    """The proximal state a file holds: the averaged parameters, the buffers and the EWMA's weight and count."""
    return {k: v.numpy() for k, v in model.proximal_ewma.state_dict().items() if k.startswith("average.")}


def proximal_network_state(model) -> dict[str, np.ndarray]:
    """Every parameter of the proximal network (files of 0.1.0 hold them all, and a load keeps them)."""
    return {f"average.{k}": v.numpy() for k, v in model.proximal_ewma.average.state_dict().items()}


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_files_saved_by_0_1_0_load_with_their_proximal_policy(name: str) -> None:
    expected = json.loads((OLD_FILES / "proximal_states.json").read_text())[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "no proximal policy" warning: it is in the file
        model = ALGORITHMS[name].load(OLD_FILES / f"{name}.zip", env=env_for(name), device="cpu")
    state = proximal_network_state(model)
    assert state.keys() == expected.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(state[key], np.array(value, dtype=np.float32))
    start = model.num_timesteps
    model.learn(32, reset_num_timesteps=False)
    assert model.num_timesteps > start


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_a_file_saved_by_0_1_0_is_saved_again_without_its_stale_attributes(name: str, tmp_path: Path) -> None:
    """
    Files of 0.1.0 carry the proximal policy's decay and a pickled copy of the EWMA in their data, attributes that
    are properties now, and the staleness setting (0), which the algorithms no longer read: a load drops them, and a
    save does not write them again.
    """
    model = ALGORITHMS[name].load(OLD_FILES / f"{name}.zip", env=env_for(name), device="cpu")
    assert not {"proximal_ewma", "proximal_decay", "staleness", "staleness_mode"} & set(vars(model))
    assert model.proximal_decay is not None and model.proximal_ewma is model.proximal.ewma
    model.save(tmp_path / "again.zip")
    with zipfile.ZipFile(tmp_path / "again.zip") as archive:
        data = json.loads(archive.read("data"))
    assert not {"proximal_ewma", "proximal_decay", "staleness", "staleness_mode"} & set(data)
    assert "proximal_policy_state" in data  # the proximal policy itself is kept, where it belongs
    # the advantage normalizer of a 0.1.0 file carries the means and stds of its last iteration's minibatches: not
    # saved again
    assert b"iteration_means" not in base64.b64decode(data["advantage_normalizer"][":serialized:"])
    again = ALGORITHMS[name].load(tmp_path / "again.zip")
    assert again.advantage_normalizer.moments.weight == model.advantage_normalizer.moments.weight


@pytest.mark.parametrize(
    "name, parent",
    [("ppo_ewma", PPO), ("ppo_lstm_ewma", RecurrentPPO), ("ppo_mask_ewma", MaskablePPO), ("ppg_ewma", PPO)],
)
def test_a_checkpoint_is_the_parent_s_plus_the_proximal_policy(name: str, parent) -> None:
    """
    A checkpoint after an iteration of 640 minibatches (PPO_EWMA's and PPG_EWMA's; 80 for the others) is the parent
    algorithm's with the same settings (SB3's PPO for PPG_EWMA, whose files it opens), plus the proximal policy's state
    dict (as the file holds it: in ``data``, serialized as SB3 serializes a value JSON cannot hold) and PPG's auxiliary
    optimizer's, within a few kilobytes (PPG's auxiliary value head among them): the per-minibatch statistics of the
    advantage normalization are not saved.
    """
    settings: dict = {"batch_size": 32, "seed": 0, "device": "cpu"}
    policy, steps = "MlpPolicy", 2048
    if name == "ppo_lstm_ewma":
        policy, steps = "MlpLstmPolicy", 256
        settings.update(n_steps=256, policy_kwargs={"lstm_hidden_size": 8, "net_arch": [16]})
    elif name == "ppo_mask_ewma":
        settings.update(n_steps=256)
        steps = 256
    sb3_size, _ = saved_file(parent(policy, env_for(name), **settings).learn(steps))
    own = {"n_policy_iterations": 1} if name == "ppg_ewma" else {}  # PPG: an auxiliary phase after the iteration
    model = ALGORITHMS[name](policy, env_for(name), **settings, **own).learn(steps)
    size, data = saved_file(model)
    proximal_state = {name: value.detach().cpu() for name, value in model.proximal_ewma.state_dict().items()}
    proximal_size = len(data_to_json({"proximal_policy_state": proximal_state}))
    aux_size = 0
    if name == "ppg_ewma":
        assert data["aux_optimizer_state"] and model.n_aux_phases == 1  # the auxiliary phase ran and is saved
        aux_size = len(data_to_json({"aux_optimizer_state": model.aux_optimizer.state_dict()}))
    assert size <= sb3_size + proximal_size + aux_size + 4 * 1024
    normalizer = data["advantage_normalizer"]
    assert b"iteration_means" not in base64.b64decode(normalizer[":serialized:"])
    assert normalizer["iteration_means"] == normalizer["iteration_stds"] == []  # the readable copy SB3 writes beside


@pytest.mark.parametrize(
    "name, parent",
    [("ppo_ewma", PPO), ("ppo_lstm_ewma", RecurrentPPO), ("ppo_mask_ewma", MaskablePPO)],
)
def test_the_parent_algorithm_opens_a_saved_file(name: str, parent, tmp_path: Path) -> None:
    kwargs: dict = {"policy_kwargs": {"lstm_hidden_size": 4, "net_arch": [8]}} if name == "ppo_lstm_ewma" else {}
    policy = "MlpLstmPolicy" if name == "ppo_lstm_ewma" else "MlpPolicy"
    model = ALGORITHMS[name](policy, env_for(name), n_steps=16, batch_size=16, seed=0, device="cpu", **kwargs).learn(32)
    model.save(tmp_path / "model.zip")
    opened = parent.load(tmp_path / "model.zip", env=env_for(name), device="cpu")
    np.testing.assert_array_equal(opened.policy.parameters_to_vector(), model.policy.parameters_to_vector())
    # and the package's own load still restores the proximal policy from the same file
    loaded = ALGORITHMS[name].load(tmp_path / "model.zip", device="cpu")
    for key, value in averaged_state(model).items():
        np.testing.assert_array_equal(averaged_state(loaded)[key], value)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_a_file_holds_only_the_averaged_parameters_of_the_proximal_policy(name: str, tmp_path: Path) -> None:
    kwargs: dict = {"policy_kwargs": {"lstm_hidden_size": 4, "net_arch": [8]}} if name == "ppo_lstm_ewma" else {}
    policy = "MlpLstmPolicy" if name == "ppo_lstm_ewma" else "MlpPolicy"
    model = ALGORITHMS[name](policy, env_for(name), n_steps=16, batch_size=16, seed=0, device="cpu", **kwargs).learn(32)
    model.save(tmp_path / "model.zip")
    saved = load_from_zip_file(tmp_path / "model.zip", device="cpu")[0]["proximal_policy_state"]
    ewma = model.proximal_ewma
    buffers = {f"average.{name}" for name, _ in ewma.average.named_buffers()}
    assert set(saved) == {"_extra_state", *(f"average.{name}" for name in ewma.averaged_names), *buffers}
    assert ewma.unaveraged_names and not any(name.startswith(("value_net", "lstm_critic")) for name in ewma.averaged_names)
    # the others keep their values on load (strict, as SB3's set_parameters loads a module)
    loaded = ALGORITHMS[name].load(tmp_path / "model.zip", device="cpu")
    kept = {name: value.clone() for name, value in loaded.proximal_ewma.average.named_parameters()}
    loaded.proximal_ewma.load_state_dict(model.proximal_ewma.state_dict(), strict=True)
    for name in loaded.proximal_ewma.unaveraged_names:
        assert th.equal(dict(loaded.proximal_ewma.average.named_parameters())[name], kept[name])


def test_set_parameters_from_a_path_restores_the_proximal_policy(tmp_path: Path) -> None:
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, seed=0, device="cpu").learn(64)
    model.save(tmp_path / "model.zip")
    other = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, seed=1, device="cpu")
    other.set_parameters(str(tmp_path / "model.zip"), exact_match=True, device="cpu")
    for key, value in averaged_state(model).items():
        np.testing.assert_array_equal(averaged_state(other)[key], value)
    assert "proximal_policy_state" not in other.__dict__ and "proximal_policy_state" not in model.__dict__


def test_save_writes_a_copy_and_leaves_the_model_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """
    ``save`` needs no switch: SB3's ``save`` writes a copy of the model whose proximal policy is a ``data`` entry, while
    the model itself, read during the write (as another thread may), still has ``proximal_ewma`` among its parameters.
    """
    import stable_baselines3.common.base_class as base_class

    model = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, seed=0, device="cpu").learn(32)
    attributes = dict(vars(model))
    written: dict = {}

    def save_to_zip_file(path, data=None, params=None, pytorch_variables=None) -> None:
        written.update(data=data, params=params, model_names=set(model.get_parameters()))

    monkeypatch.setattr(base_class, "save_to_zip_file", save_to_zip_file)
    model.save(tmp_path / "model.zip")
    assert set(written["params"]) == {"policy", "policy.optimizer"}
    assert "proximal_policy_state" in written["data"] and "proximal" not in written["data"]
    assert written["model_names"] == {"policy", "policy.optimizer", "proximal_ewma"}
    assert vars(model) == attributes


def test_set_parameters_reads_only_the_entries_it_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a learning-rate schedule of a module that is gone when the file is read (rl-zoo3's, on a machine without it)
    (tmp_path / "gone_schedule.py").write_text("class Schedule:\n    def __call__(self, progress):\n        return 3e-4\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import gone_schedule  # type: ignore[import-not-found]

    settings = dict(n_steps=16, batch_size=16, seed=0, device="cpu")
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", learning_rate=gone_schedule.Schedule(), **settings).learn(32)
    model.save(tmp_path / "model.zip")
    monkeypatch.delitem(sys.modules, "gone_schedule")
    monkeypatch.setattr(sys, "path", [entry for entry in sys.path if entry != str(tmp_path)])
    for source in (str(tmp_path / "model.zip"), io.BytesIO((tmp_path / "model.zip").read_bytes())):
        other = PPO_EWMA("MlpPolicy", "CartPole-v1", **settings)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            other.set_parameters(source, exact_match=True, device="cpu")
        for key, value in averaged_state(model).items():
            np.testing.assert_array_equal(averaged_state(other)[key], value)


@pytest.mark.parametrize("options", [dict(async_rollouts=True), dict(kl_coef=0.1, kl_estimator="exact")], ids=str)
def test_a_snapshot_proximal_policy_is_not_saved_and_takes_sb3_ppos_parameters(options, tmp_path):
    # without an EWMA, the proximal network is the policy at the iteration's start (retaken each iteration): the
    # parameters are SB3's PPO's, as with ewma_decay=None alone
    kwargs = dict(n_steps=32, batch_size=16, n_epochs=1, seed=0, device="cpu")
    sb3 = PPO("MlpPolicy", "CartPole-v1", **kwargs)
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", ewma_decay=None, **kwargs, **options)
    assert model.proximal.kind == "snapshot"
    assert set(model.get_parameters()) == set(sb3.get_parameters()) == {"policy", "policy.optimizer"}
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        model.set_parameters(sb3.get_parameters())
        model.learn(64).save(tmp_path / "snapshot.zip")
        loaded = PPO_EWMA.load(tmp_path / "snapshot.zip", device="cpu")
    assert loaded.proximal.kind == "snapshot"
    for name, value in model.policy.state_dict().items():
        assert th.equal(loaded.policy.state_dict()[name], value), name
    loaded.set_env(model.get_env())
    loaded.learn(32, reset_num_timesteps=False)  # the snapshot retaken from the loaded policy
    assert loaded._n_updates == model._n_updates + 1
