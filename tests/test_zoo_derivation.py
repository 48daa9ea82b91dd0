"""
Entries derived from rl-zoo3's tuned PPO entries (sb3_ewma.zoo.derivation): the rules by hand-computed values, every
entry of rl-zoo3's ppo.yml and ppo_lstm.yml by every algorithm (constructed, one action taken, where the environment
can be made here), the entry choice, the printed line, the error for an unknown environment and the config.yml round
trip through enjoy.
"""

import argparse
import inspect
import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import yaml

pytest.importorskip("rl_zoo3")

import rl_zoo3.import_envs  # noqa: F401  (registers rl-zoo3's NoVel ids)
from sb3_contrib.common.maskable.utils import get_action_masks

from sb3_ewma import zoo
from sb3_ewma.algorithms import ALGORITHMS
from sb3_ewma.envs.action_masks import ActionMaskOrAllValid, all_valid_action_mask
from sb3_ewma.zoo import derivation
from sb3_ewma.zoo.derivation import (
    ACTION_MASK_WRAPPER,
    PARENT_ALGOS,
    derive,
    missing_entry_hint,
    ppg_phase_settings,
    ppg_reward_normalization,
    zoo_entries,
    zoo_entry_for,
)

# keys of an entry that rl-zoo3's ExperimentManager consumes itself (the others go to the algorithm's constructor)
ZOO_KEYS = {"n_envs", "n_timesteps", "normalize", "env_wrapper", "frame_stack", "callback", "vec_env_wrapper", "policy"}
PPO_ENTRIES = zoo_entries("ppo")
LSTM_ENTRIES = zoo_entries("ppo_lstm")
CASES = [(algo, key) for key in PPO_ENTRIES for algo in ("ppo_ewma", "ppg", "ppg_ewma", "ppo_mask_ewma")] + [
    ("ppo_lstm_ewma", key) for key in LSTM_ENTRIES
]
_MAKEABLE: dict[str, bool] = {}


def makeable(env_id: str) -> bool:
    """Whether ``env_id`` is registered and its packages are installed here."""
    if env_id not in _MAKEABLE:
        try:
            gym.make(env_id).close()
            _MAKEABLE[env_id] = True
        except Exception:  # not registered, or a missing package (MuJoCo, PyBullet, MiniGrid)
            _MAKEABLE[env_id] = False
    return _MAKEABLE[env_id]


def test_ppg_phase_rule_by_hand() -> None:
    # CartPole-v1: E = 20, n_steps 32 x 8 envs (B = 256), batch 256, T = 1e5
    assert ppg_phase_settings(PPO_ENTRIES["CartPole-v1"]) == {
        "n_epochs": 4,  # round(sqrt(20)) = round(4.47)
        "n_value_epochs": 4,
        "batch_size": 256,
        "n_policy_iterations": 32,  # min(32, 100000 // (8 * 256) = 48)
        "n_aux_epochs": 6,
        "beta_clone": 1.0,
        "aux_batch_size": 128,  # 4 * 32
    }
    # Pendulum-v1: E = 10, n_steps 1024 x 4 envs (B = 4096), batch_size absent (SB3 PPO's 64), T = 1e5
    pendulum = ppg_phase_settings(PPO_ENTRIES["Pendulum-v1"])
    assert (pendulum["n_epochs"], pendulum["batch_size"]) == (3, 64)  # round(3.16)
    assert pendulum["n_policy_iterations"] == 3  # 100000 // 32768
    assert pendulum["aux_batch_size"] == 4096  # min(4 * 1024, 3 * 4096)
    # MountainCarContinuous-v0: n_steps 8 x 1 env, batch 256 (truncated to the 8-step iteration), T = 2e4
    mcc = ppg_phase_settings(PPO_ENTRIES["MountainCarContinuous-v0"])
    assert (mcc["batch_size"], mcc["n_policy_iterations"], mcc["aux_batch_size"]) == (8, 32, 32)
    # Acrobot-v1: E = 4, B = 256 x 16 = 4096, T = 1e6: 1e6 // 32768 = 30 iterations, aux min(1024, 30 * 4096)
    acrobot = ppg_phase_settings(PPO_ENTRIES["Acrobot-v1"])
    assert (acrobot["n_epochs"], acrobot["n_policy_iterations"], acrobot["aux_batch_size"]) == (2, 30, 1024)
    # the `default` entry: n_steps 2048 x 1 env (SB3 PPO's defaults), E = 10, T = 1e6: 1e6 // 16384 = 61 -> 32
    default = ppg_phase_settings(PPO_ENTRIES["default"])
    assert (default["n_epochs"], default["n_policy_iterations"], default["aux_batch_size"]) == (3, 32, 8192)
    # one epoch stays one; a tiny budget still gets one iteration per phase; the aux batch at most the phase buffer
    tiny = ppg_phase_settings({"n_epochs": 1, "n_steps": 100, "n_envs": 2, "n_timesteps": 50, "batch_size": 50})
    assert (tiny["n_epochs"], tiny["n_policy_iterations"], tiny["aux_batch_size"]) == (1, 1, 200)


def test_ppg_reward_normalization_rule() -> None:
    # no normalization, or normalization without rewards: rewards normalized, observations as the entry had them
    assert ppg_reward_normalization({}) == "dict(norm_obs=False, norm_reward=True)"
    assert ppg_reward_normalization({"normalize": False}) == "dict(norm_obs=False, norm_reward=True)"
    assert (
        ppg_reward_normalization({"normalize": "dict(norm_obs=True, norm_reward=False, gamma=0.9)"})
        == "dict(norm_obs=True, norm_reward=True, gamma=0.9)"
    )
    assert ppg_reward_normalization({"normalize": {"norm_reward": False}}) == "dict(norm_reward=True)"
    # rewards already normalized (VecNormalize's default norm_reward=True): unchanged
    for normalize in (True, "dict(norm_obs=False, norm_reward=True)", "{'norm_obs': False}", {"clip_reward": 5.0}):
        assert ppg_reward_normalization({"normalize": normalize}) is None
    with pytest.raises(ValueError, match="normalize must be"):
        ppg_reward_normalization({"normalize": "VecNormalize(norm_reward=False)"})
    # in the derivation: added where missing (Pendulum), kept where present (Acrobot's `normalize: true`)
    pendulum = derive("ppg_ewma", PPO_ENTRIES["Pendulum-v1"])
    assert pendulum.entry["normalize"] == "dict(norm_obs=False, norm_reward=True)"
    assert "normalize: 'dict(norm_obs=False, norm_reward=True)'" in pendulum.summary()
    assert derive("ppg", PPO_ENTRIES["Acrobot-v1"]).entry["normalize"] is True
    assert "normalize" not in derive("ppo_ewma", PPO_ENTRIES["Pendulum-v1"]).entry  # PPO-EWMA: the entry as tuned


@pytest.mark.parametrize("algo", ["ppg", "ppg_ewma"])
def test_every_ppg_entry_normalizes_rewards(algo: str) -> None:
    """Every derived PPG entry and the package's own train on normalized rewards, but for the package's CartPole."""
    import sb3_ewma

    package = yaml.safe_load((Path(sb3_ewma.__file__).parent / "hyperparams" / f"{algo}.yml").read_text())
    entries = {**package, **{key: derive(algo, entry).entry for key, entry in PPO_ENTRIES.items() if key not in package}}
    raw_rewards = {key for key, entry in entries.items() if ppg_reward_normalization(entry) is not None}
    assert raw_rewards == {"CartPole-v1"}  # the package's CartPole entry: returns of at most 50 (see ppg.yml)


def test_decoupled_rule_and_summary() -> None:
    derivation = derive("ppo_ewma", PPO_ENTRIES["CartPole-v1"])
    assert derivation.entry == {**PPO_ENTRIES["CartPole-v1"], "ewma_decay": "auto", "imp_samp_max": 100.0}
    assert derivation.summary() == "added ewma_decay: 'auto', imp_samp_max: 100.0"
    ppg = derive("ppg", PPO_ENTRIES["Pendulum-v1"])
    assert "ewma_decay" not in ppg.entry and "imp_samp_max" not in ppg.entry
    assert "n_epochs: 10 -> 3" in ppg.summary() and "batch_size: 64" in ppg.summary()
    mask = derive("ppo_mask_ewma", PPO_ENTRIES["atari"])
    assert mask.entry["env_wrapper"] == [*PPO_ENTRIES["atari"]["env_wrapper"], ACTION_MASK_WRAPPER]
    mask = derive("ppo_mask_ewma", PPO_ENTRIES["MiniGrid-Unlock-v0"])
    assert mask.entry["env_wrapper"] == ["minigrid.wrappers.FlatObsWrapper", ACTION_MASK_WRAPPER]
    mask = derive("ppo_mask_ewma", PPO_ENTRIES["Pendulum-v1"])
    assert "use_sde" not in mask.entry and mask.removed == ["use_sde", "sde_sample_freq"]
    # the parent entry is not modified
    assert PPO_ENTRIES["Pendulum-v1"]["use_sde"] is True and "env_wrapper" not in PPO_ENTRIES["Pendulum-v1"]


def test_entry_choice() -> None:
    # the package's own entries win (CartPole-v1 is in ppg.yml, with its own N_pi = 8)
    assert zoo_entry_for("ppg", "CartPole-v1").source == "package"
    assert zoo_entry_for("ppo_ewma", "BreakoutNoFrameskip-v4", is_atari=True).key == "atari"
    choice = zoo_entry_for("ppg", "MountainCarContinuous-v0")
    assert (choice.source, choice.key, choice.path.name) == ("derived", "MountainCarContinuous-v0", "ppo.yml")
    # ppo_lstm_ewma: rl-zoo3's ppo_lstm.yml before the package's `default`
    choice = zoo_entry_for("ppo_lstm_ewma", "Acrobot-v1")
    assert (choice.source, choice.path.name, choice.derivation.entry["policy"]) == ("derived", "ppo_lstm.yml", "MlpLstmPolicy")
    assert zoo_entry_for("ppo_lstm_ewma", "Foo-v0").key == "default"
    # an environment no file lists: rl-zoo3's parent `default` entry derived, as rl-zoo3 uses its own
    for algo in ("ppo_ewma", "ppo_mask_ewma", "ppg", "ppg_ewma"):
        choice = zoo_entry_for(algo, "Foo-v0")
        assert (choice.source, choice.key, choice.path.name) == ("derived", "default", "ppo.yml")
        assert choice.derivation.entry == derive(algo, PPO_ENTRIES["default"]).entry
    assert zoo_entry_for("ppo_mask_ewma", "CartPole-v1").source == "derived"


@pytest.mark.parametrize("env_id", ["Swimmer-v4", "Ant-v4"])
def test_package_mujoco_entries_are_the_derived_ones_with_max_age(env_id: str) -> None:
    """ppo_ewma.yml's Swimmer-v4 and Ant-v4 entries: rl-zoo3's, derived, but the EWMA's age "max_age" (measured; see
    their comment), so that they cannot drift from rl-zoo3's tuning unnoticed."""
    choice = zoo_entry_for("ppo_ewma", env_id)
    assert (choice.source, choice.key) == ("package", env_id)
    package = yaml.safe_load(choice.path.read_text())[env_id]
    assert package == {**derive("ppo_ewma", PPO_ENTRIES[env_id]).entry, "ewma_decay": "max_age"}
    # the other algorithms keep the derived entry
    assert zoo_entry_for("ppg_ewma", env_id).source == "derived"


@pytest.mark.parametrize("algo, key", CASES, ids=[f"{algo}-{key}" for algo, key in CASES])
def test_every_zoo_entry_derives(algo: str, key: str) -> None:
    parent = LSTM_ENTRIES if algo == "ppo_lstm_ewma" else PPO_ENTRIES
    derived = derive(algo, parent[key]).entry
    parameters = set(inspect.signature(ALGORITHMS[algo].__init__).parameters)
    unknown = set(derived) - ZOO_KEYS - parameters
    assert not unknown, f"{algo} takes no {unknown}"
    if algo in ("ppg", "ppg_ewma"):
        epochs = parent[key].get("n_epochs", 10)
        assert derived["n_epochs"] == derived["n_value_epochs"] == max(1, round(math.sqrt(epochs)))
        assert 1 <= derived["n_policy_iterations"] <= 32 and derived["n_aux_epochs"] == 6
        iteration = derived.get("n_steps", 2048) * derived.get("n_envs", 1)
        assert derived["aux_batch_size"] <= derived["n_policy_iterations"] * iteration
    assert derived.get("ewma_decay") == (None if algo == "ppg" else "auto")


def _manager(algo: str, env_id: str, log_folder: Path, **kwargs: Any) -> zoo.ExperimentManager:
    zoo.register_zoo()
    return zoo.ExperimentManager(
        argparse.Namespace(), algo, env_id, str(log_folder), eval_freq=0, seed=0, verbose=0, device="cpu", **kwargs
    )


MADE_CASES = [(algo, key) for algo, key in CASES if key not in ("default", "atari")]


@pytest.mark.parametrize("algo, env_id", MADE_CASES, ids=[f"{algo}-{key}" for algo, key in MADE_CASES])
def test_every_zoo_entry_builds_and_acts(algo: str, env_id: str, tmp_path: Path) -> None:
    if not makeable(env_id):
        pytest.skip(f"{env_id} cannot be made here (not registered or its package is missing); derivation tested above")
    manager = _manager(algo, env_id, tmp_path)
    if algo == "ppo_mask_ewma" and not isinstance(gym.make(env_id).action_space, gym.spaces.Discrete):
        # refused before the run folder is created (sb3_ewma.zoo.checks)
        with pytest.raises(ValueError, match=r"--algo ppo_mask_ewma \(MaskablePPO_EWMA\) acts in Discrete, Multi"):
            manager.setup_experiment()
        assert not (tmp_path / "ppo_mask_ewma").exists()
        return
    setup = manager.setup_experiment()
    assert setup is not None
    model, saved = setup
    assert isinstance(model, ALGORITHMS[algo])
    if manager.entry_choice is not None and manager.entry_choice.source == "derived":
        assert dict(saved) == {k: v for k, v in manager.entry_choice.derivation.entry.items()}
    env = model.get_env()
    observation = env.reset()
    extra = {"action_masks": get_action_masks(env)} if algo == "ppo_mask_ewma" else {}
    action, _ = model.predict(observation, **extra)
    env.step(action)
    env.close()


def test_derived_entry_prints_one_line_and_trains(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sb3_ewma.train import main

    main(["--algo", "ppg_ewma", "--env", "MountainCarContinuous-v0", "-n", "256", "-f", str(tmp_path), *QUIET])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("sb3-ewma: ")]
    assert lines == [
        "sb3-ewma: no ppg_ewma entry for MountainCarContinuous-v0 in this package; derived from rl-zoo3's ppo.yml entry "
        "'MountainCarContinuous-v0' (sb3_ewma.zoo.derivation): added n_value_epochs: 3, n_policy_iterations: 32, "
        "n_aux_epochs: 6, beta_clone: 1.0, aux_batch_size: 32, ewma_decay: 'auto', imp_samp_max: 100.0; "
        "changed n_epochs: 10 -> 3, batch_size: 256 -> 8"
    ]
    model = ALGORITHMS["ppg_ewma"].load(tmp_path / "ppg_ewma" / "MountainCarContinuous-v0_1" / "MountainCarContinuous-v0.zip")
    assert (model.n_epochs, model.n_policy_iterations, model.aux_batch_size, model.batch_size) == (3, 32, 32, 8)
    # "auto" = "mean_age": 3 epochs of 1 minibatch of 8 -> center of mass 3 x 1 / 2 = 1.5, decay 1.5 / 2.5
    assert model.proximal_decay == pytest.approx(0.6)


QUIET = ["--num-threads", "1", "--eval-freq", "-1", "--verbose", "0", "--seed", "0"]


def test_config_round_trip_through_enjoy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sb3_ewma.enjoy import main as enjoy
    from sb3_ewma.train import main as train

    # ppo_mask_ewma on CartPole: the derived entry adds an env wrapper, which enjoy must apply from config.yml
    train(["--algo", "ppo_mask_ewma", "--env", "CartPole-v1", "-n", "256", "-f", str(tmp_path), *QUIET])
    run = tmp_path / "ppo_mask_ewma" / "CartPole-v1_1"
    config = yaml.load((run / "CartPole-v1" / "config.yml").read_text(), Loader=yaml.UnsafeLoader)
    assert dict(config) == derive("ppo_mask_ewma", PPO_ENTRIES["CartPole-v1"]).entry
    capsys.readouterr()
    enjoy(["--algo", "ppo_mask_ewma", "--env", "CartPole-v1", "-f", str(tmp_path), "-n", "50", "--no-render"])
    output = capsys.readouterr().out
    assert "Loading" in output and "CartPole-v1.zip" in output
    # a rerun (the same command) derives the same entry
    train(["--algo", "ppo_mask_ewma", "--env", "CartPole-v1", "-n", "256", "-f", str(tmp_path), *QUIET])
    rerun = yaml.load(
        (tmp_path / "ppo_mask_ewma" / "CartPole-v1_2" / "CartPole-v1" / "config.yml").read_text(), Loader=yaml.UnsafeLoader
    )
    assert rerun == config


def test_scale_n_envs_on_a_derived_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sb3_ewma.train import main

    # Acrobot-v1 has no ppo_lstm_ewma entry of the package: derived from ppo_lstm.yml (16 envs x 256 steps, 4 epochs,
    # batch_size absent: RecurrentPPO's 128)
    main(["--algo", "ppo_lstm_ewma", "--env", "Acrobot-v1", "-n", "64", "-f", str(tmp_path), "--scale-n-envs", "4", *QUIET])
    output = capsys.readouterr().out
    assert "derived from rl-zoo3's ppo_lstm.yml entry 'Acrobot-v1'" in output
    assert "n_envs: 16 -> 4 (c = reference / target = 4)" in output
    assert "batch_size: 128 (default) -> 32" in output
    # 'auto' = 'mean_age': M = 256 * 16 / 128 = 32 minibatches, E = 4, center of mass 4 * 32 / 2 = 64, times c = 256
    assert "'auto' = 'mean_age' (center of mass 64 = E x M / 2, M = 32 minibatches per epoch, E = 4 epochs)" in output
    model = ALGORITHMS["ppo_lstm_ewma"].load(tmp_path / "ppo_lstm_ewma" / "Acrobot-v1_1" / "Acrobot-v1.zip")
    assert model.ewma_decay == pytest.approx(256 / 257)


def test_an_env_without_entry_trains_with_the_default_entry_as_rl_zoo3s_ppo(tmp_path: Path, monkeypatch) -> None:
    gym.register("SB3EwmaUnknownTask-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")
    try:
        for algo in ("ppo_ewma", "ppo_mask_ewma"):
            hyperparams, _ = _manager(algo, "SB3EwmaUnknownTask-v0", tmp_path).read_hyperparameters()
            assert hyperparams["policy"] == "MlpPolicy" and hyperparams["ewma_decay"] == "auto"
        # an rl-zoo3 file without a `default` entry: rl-zoo3's error plus where to put one
        without_default = tmp_path / "ppo.yml"
        without_default.write_text(yaml.safe_dump({k: v for k, v in PPO_ENTRIES.items() if k != "default"}))
        monkeypatch.setattr(derivation, "zoo_hyperparams_file", lambda parent: without_default)
        for algo in ("ppo_ewma", "ppo_mask_ewma"):
            manager = _manager(algo, "SB3EwmaUnknownTask-v0", tmp_path)
            with pytest.raises(ValueError) as error:
                manager.read_hyperparameters()
            message = str(error.value)
            assert message.startswith(f"Hyperparameters not found for {algo}-SB3EwmaUnknownTask-v0")
            assert message.endswith(missing_entry_hint(algo)) and "-conf" in message and "-params" in message
        assert "this package's ppo_mask_ewma.yml" not in missing_entry_hint("ppo_mask_ewma")  # it has none
    finally:
        gym.registry.pop("SB3EwmaUnknownTask-v0")


@pytest.mark.parametrize("params", [dict(n_envs=1), dict(n_steps=64), dict(n_steps=64, aux_batch_size=128)], ids=str)
def test_a_derived_ppg_entrys_phase_sizes_follow_the_command_lines_params(params: dict, tmp_path: Path) -> None:
    # LunarLanderContinuous-v3: rl-zoo3's 16 envs x 1024 steps; the auxiliary minibatch of 4 rollouts must divide the
    # auxiliary buffer of the sizes the run has, which -params sets (rl-zoo3's --algo ppo trains with them)
    manager = _manager("ppg_ewma", "LunarLanderContinuous-v3", tmp_path, hyperparams=params)
    hyperparams, _ = manager.read_hyperparameters()
    entry = {**PPO_ENTRIES["LunarLanderContinuous-v3"], **{k: v for k, v in params.items() if k != "aux_batch_size"}}
    expected = ppg_phase_settings(entry)
    assert hyperparams["n_policy_iterations"] == expected["n_policy_iterations"]
    assert hyperparams["aux_batch_size"] == params.get("aux_batch_size", expected["aux_batch_size"])
    buffer = hyperparams["n_policy_iterations"] * hyperparams["n_steps"] * hyperparams["n_envs"]
    assert buffer % hyperparams["aux_batch_size"] == 0


def test_action_mask_wrapper() -> None:
    env = ActionMaskOrAllValid(gym.make("CartPole-v1"))
    np.testing.assert_array_equal(env.action_masks(), [True, True])
    assert all_valid_action_mask(gym.spaces.MultiDiscrete([3, 2])).shape == (5,)
    assert all_valid_action_mask(gym.spaces.MultiBinary(4)).shape == (8,)

    class Masked(gym.Wrapper):
        def action_masks(self) -> np.ndarray:
            return np.array([False, True])

    np.testing.assert_array_equal(ActionMaskOrAllValid(Masked(gym.make("CartPole-v1"))).action_masks(), [False, True])
    with pytest.raises(ValueError, match="no continuous actions"):
        ActionMaskOrAllValid(gym.make("Pendulum-v1"))


def test_parent_algos_cover_the_package() -> None:
    assert set(PARENT_ALGOS) == set(ALGORITHMS)
