"""
Bad input gets a clear error naming the parameter, the value and what is allowed, before any environment is stepped;
a legal setting that is almost surely a mistake gets a warning at the user's line. Every algorithm of the package.
"""

import io
import re
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_ewma import PPG, PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA, scale_hyperparams
from sb3_ewma.common.checks import unknown_keyword_message
from sb3_ewma.common.distributed import DataParallelContext, data_parallel_settings

SMALL = dict(n_steps=16, batch_size=16, seed=0, device="cpu")


class CountingEnv(gym.Env):
    """Counts its resets and steps: a bad input must raise before either."""

    observation_space = gym.spaces.Box(-1, 1, (2,))
    action_space = gym.spaces.Discrete(2)
    calls = 0

    def reset(self, *, seed=None, options=None):
        CountingEnv.calls += 1
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        CountingEnv.calls += 1
        return np.zeros(2, dtype=np.float32), 0.0, False, False, {}

    def action_masks(self) -> np.ndarray:
        return np.ones(2, dtype=bool)


ALGORITHMS: dict[str, tuple[type, str]] = {
    "PPO_EWMA": (PPO_EWMA, "MlpPolicy"),
    "PPG_EWMA": (PPG_EWMA, "MlpPolicy"),
    "PPG": (PPG, "MlpPolicy"),
    "RecurrentPPO_EWMA": (RecurrentPPO_EWMA, "MlpLstmPolicy"),
    "MaskablePPO_EWMA": (MaskablePPO_EWMA, "MlpPolicy"),
}

BAD_SETTINGS = [
    ({"batch_size": "64"}, r"batch_size must be an integer >= 2, got '64'"),
    ({"batch_size": 1}, r"batch_size must be an integer >= 2, got 1"),
    ({"batch_size": True}, r"batch_size must be an integer >= 2, got True"),
    ({"n_steps": 0}, r"n_steps must be an integer >= 1, got 0"),
    ({"n_steps": 16.5}, r"n_steps must be an integer >= 1, got 16.5"),
    ({"n_epochs": -1}, r"n_epochs must be an integer >= [01], got -1"),  # PPG: >= 0 (value epochs only)
    ({"learning_rate": "1e-3"}, r"learning_rate must be a number >= 0 or a schedule, got '1e-3'"),
    ({"learning_rate": -1e-3}, r"learning_rate must be a number >= 0 or a schedule, got -0.001"),
    ({"gamma": float("inf")}, r"gamma must be a finite number, got inf"),
    ({"max_grad_norm": float("nan")}, r"max_grad_norm must be a number \(math.inf: no clipping\), got nan"),
    ({"clip_range": float("nan")}, r"clip_range must be None \(no clipping\), a schedule or a number .*got nan"),
    ({"ent_coef": float("nan")}, r"ent_coef must be a finite number, got nan"),
    ({"clip_range_vf": -1}, r"clip_range_vf must be None, a number > 0 \(math.inf: no clipping\) or a schedule .*got -1"),
    ({"stats_window_size": -1}, r"stats_window_size must be an integer >= 0, got -1"),
    ({"kl_coef": -1.0}, r"kl_coef must be a finite number >= 0, got -1.0"),
    ({"ewma_decay": 1.0}, r"ewma_decay must be a number in \[0, 1\), got 1.0"),
    ({"seed": "0"}, r"seed must be an integer >= 0, got '0'"),
]


def make(name: str, **kwargs: Any):
    algorithm, policy = ALGORITHMS[name]
    if name == "RecurrentPPO_EWMA":
        kwargs.setdefault("policy_kwargs", dict(lstm_hidden_size=8, net_arch=[16]))
    if name.startswith("PPG"):
        kwargs.setdefault("n_policy_iterations", 1)
    return algorithm(policy, DummyVecEnv([CountingEnv]), **{**SMALL, **kwargs})


@pytest.mark.parametrize("name", list(ALGORITHMS))
@pytest.mark.parametrize("kwargs, message", BAD_SETTINGS)
def test_bad_settings_raise_before_the_environment_is_used(name: str, kwargs: dict, message: str) -> None:
    if name == "PPG" and "ewma_decay" in kwargs:
        pytest.skip("PPG takes no ewma_decay (test_ppg_has_no_ewma)")
    CountingEnv.calls = 0
    with pytest.raises(ValueError, match=message):
        make(name, **kwargs)
    assert CountingEnv.calls == 0


# values that SB3's PPO trains with but that cannot train as asked: taken, with a warning (tests/test_sb3_parity.py)
WARNED_SETTINGS = [
    ({"gamma": 1.5}, r"^gamma=1.5 is not in \[0, 1\]: it is no discount"),
    ({"gae_lambda": -1}, r"^gae_lambda=-1 is not in \[0, 1\]: it is no GAE weight"),
    ({"vf_coef": -1.0}, r"^vf_coef=-1.0 is not >= 0: the value loss is maximized"),
    ({"max_grad_norm": 0}, r"^max_grad_norm=0 is not > 0: every gradient is scaled to zero or reversed"),
    ({"target_kl": -0.1}, r"^target_kl=-0.1 is not None or a number >= 0: the early stop .* at the first minibatch"),
    ({"clip_range": 0}, r"^clip_range=0 is not > 0: no update may move the policy"),
    ({"learning_rate": 0}, r"^learning_rate=0 is not > 0: the policy never changes"),
    ({"target_kl": float("nan")}, r"^target_kl=nan is not None or a number >= 0: the early stop .* never comes"),
]


@pytest.mark.parametrize("name", list(ALGORITHMS))
@pytest.mark.parametrize("kwargs, message", WARNED_SETTINGS)
def test_values_that_cannot_train_as_asked_warn_at_the_users_line(name: str, kwargs: dict, message: str) -> None:
    with pytest.warns(UserWarning, match=message) as record:
        model = make(name, **kwargs)
    assert next(warning for warning in record if re.match(message, str(warning.message))).filename == __file__
    assert all(callable(getattr(model, key)) or repr(getattr(model, key)) == repr(value) for key, value in kwargs.items())


def test_ppgs_auxiliary_learning_rate_0_warns_as_learning_rate_0_does() -> None:
    with pytest.warns(UserWarning, match=r"^aux_learning_rate=0.0 is not > 0: the auxiliary phase never changes"):
        make("PPG_EWMA", aux_learning_rate=0.0)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_a_value_clipping_schedule_may_be_infinite_as_in_sb3(name: str) -> None:
    # SB3's spelling of no clipping, and what rl-zoo3 makes of clip_range_vf: .inf (a constant schedule)
    model = make(name, clip_range_vf=lambda _: float("inf"))
    model.learn(2 * model.n_steps * model.n_envs)
    assert model.logger.name_to_value["train/clip_range_vf"] == float("inf")


@pytest.mark.parametrize("name", ["RecurrentPPO_EWMA", "MaskablePPO_EWMA"])
def test_contrib_algorithms_keep_batch_size_none(name: str) -> None:
    # sb3-contrib's meaning: one minibatch of the whole rollout
    model = make(name, batch_size=None)
    assert model.minibatches_per_epoch == 1


def test_batch_size_1_without_advantage_normalization_is_allowed_as_in_sb3() -> None:
    model = make("PPO_EWMA", n_steps=4, batch_size=1, normalize_advantage=False)
    assert model.minibatches_per_epoch == 4


def test_ppg_has_no_ewma() -> None:
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'ewma_decay'"):
        PPG("MlpPolicy", DummyVecEnv([CountingEnv]), ewma_decay=0.9)
    assert PPG("MlpPolicy", DummyVecEnv([CountingEnv]), **SMALL).ewma_decay is None


@pytest.mark.parametrize("name", list(ALGORITHMS))
@pytest.mark.parametrize(
    "total_timesteps, log_interval, message",
    [
        # SB3: "'<' not supported between instances of 'int' and 'str'" at its loop's test
        ("100", 1, r"total_timesteps must be a number of environment steps, got '100'"),
        ([64], 1, r"total_timesteps must be a number of environment steps, got \[64\]"),
        # SB3: ZeroDivisionError after the first iteration trained
        (64, 0, r"log_interval must be None \(no logs\) or a number other than 0 .*got 0"),
    ],
)
def test_bad_learn_arguments_raise_before_the_environment_is_used(name, total_timesteps, log_interval, message) -> None:
    model = make(name)
    CountingEnv.calls = 0
    with pytest.raises(ValueError, match=message):
        model.learn(total_timesteps, log_interval=log_interval)
    assert CountingEnv.calls == 0


def test_learn_takes_every_budget_sb3s_learn_takes() -> None:
    # infinity until a callback stops training, NaN (nothing), a tensor, a Decimal; no log_interval check where nothing
    # trains (SB3's loop never divides by it)
    import math
    from decimal import Decimal

    from stable_baselines3.common.callbacks import BaseCallback

    class StopAt40(BaseCallback):
        def _on_step(self) -> bool:
            return self.num_timesteps < 40

    cases: list[tuple[Any, dict[str, Any]]] = [
        (math.inf, {"callback": StopAt40()}),
        (math.nan, {}),
        (th.tensor(32), {}),
        (Decimal(32), {}),
        (0, {"log_interval": 0}),
        (-(10**400), {}),  # no float holds it
        (-5, {"log_interval": "every"}),
    ]
    for total_timesteps, keywords in cases:
        expected = PPO("MlpPolicy", DummyVecEnv([CountingEnv]), **SMALL).learn(total_timesteps, **keywords).num_timesteps
        for name in ALGORITHMS:
            assert make(name).learn(total_timesteps, **keywords).num_timesteps == expected, (name, total_timesteps)


def test_learn_takes_true_as_sb3s_learn_does() -> None:
    # True is 1: one rollout, as in SB3
    assert PPO("MlpPolicy", DummyVecEnv([CountingEnv]), **SMALL).learn(True).num_timesteps == SMALL["n_steps"]
    assert make("PPO_EWMA").learn(True).num_timesteps == SMALL["n_steps"]


def test_learn_takes_a_float_that_is_a_whole_number() -> None:
    model = make("PPO_EWMA")
    model.learn(32.0)  # 3.2e1, as users write 1e5
    assert model.num_timesteps == 32


@pytest.mark.parametrize("name", ["PPO_EWMA", "PPG_EWMA", "RecurrentPPO_EWMA", "MaskablePPO_EWMA"])
def test_no_limit_on_the_update_warns_at_the_users_line(name: str) -> None:
    with pytest.warns(UserWarning, match="clip_range=None and kl_coef=0: nothing limits") as record:
        make(name, clip_range=None, kl_coef=0.0)
    assert record[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        make(name, clip_range=None, kl_coef=1.0)


@pytest.mark.parametrize("saver, loader", [("PPG", "PPO_EWMA"), ("PPO_EWMA", "PPG_EWMA"), ("PPO_EWMA", "RecurrentPPO_EWMA")])
def test_loading_another_algorithms_file_names_both(saver: str, loader: str, tmp_path: Path) -> None:
    make(saver).save(tmp_path / "model.zip")
    with pytest.raises(ValueError, match=rf"model.zip was saved by {saver}.*not by {loader}"):
        ALGORITHMS[loader][0].load(tmp_path / "model.zip")
    # without the suffix too, as SB3 accepts it
    with pytest.raises(ValueError, match=rf"saved by {saver}.*not by {loader}"):
        ALGORITHMS[loader][0].load(tmp_path / "model")


def test_ppg_does_not_load_an_ewma_file(tmp_path: Path) -> None:
    make("PPG_EWMA", ewma_decay=0.5).save(tmp_path / "model.zip")
    with pytest.raises(ValueError, match=r"saved by PPG_EWMA \(ewma_decay=0.5\), not by PPG: load it with PPG_EWMA.load"):
        PPG.load(tmp_path / "model.zip")
    # from a stream too, checked on what SB3's load read
    with pytest.raises(ValueError, match=r"the saved model was saved by PPG_EWMA \(ewma_decay=0.5\), not by PPG"):
        PPG.load(io.BytesIO((tmp_path / "model.zip").read_bytes()))
    # PPG_EWMA opens a PPG file (an EWMA PPG with ewma_decay=None is plain PPG)
    make("PPG").save(tmp_path / "ppg.zip")
    assert PPG_EWMA.load(tmp_path / "ppg.zip").ewma_decay is None


def test_ppo_ewma_still_loads_an_sb3_ppo_file(tmp_path: Path) -> None:
    PPO("MlpPolicy", DummyVecEnv([CountingEnv]), **SMALL).save(tmp_path / "ppo.zip")
    with pytest.warns(UserWarning, match="no proximal policy"):
        PPO_EWMA.load(tmp_path / "ppo.zip")


def test_scale_hyperparams_rejects_an_unknown_key_with_a_suggestion() -> None:
    with pytest.raises(
        ValueError, match=r"unknown hyperparameter 'learnin_rate' for PPO_EWMA \(did you mean 'learning_rate'\?\)"
    ):
        scale_hyperparams({"n_envs": 8, "learnin_rate": 1e-3}, 16)
    with pytest.raises(
        ValueError, match=r"unknown hyperparameter 'n_aux_epoch' for PPG_EWMA \(did you mean 'n_aux_epochs'\?\)"
    ):
        scale_hyperparams({"n_envs": 8, "n_aux_epoch": 3}, 16, algo="ppg_ewma")
    # rl-zoo3's entry keys are known
    scaled = scale_hyperparams({"n_envs": 8, "n_timesteps": 1e5, "policy": "MlpPolicy", "normalize": True}, 16)
    assert scaled["n_envs"] == 16 and scaled["normalize"] is True


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_sb3_advice_to_train_mlp_policies_on_the_cpu(name: str) -> None:
    model = make(name)
    model.device = th.device("cuda")  # as if on a GPU: SB3 compares the device only
    with pytest.warns(UserWarning, match=rf"You are trying to run {name} on the GPU"):
        model._maybe_recommend_cpu()


def test_no_cpu_advice_for_a_cnn_policy() -> None:
    env = DummyVecEnv([lambda: ImageEnv()])
    model = PPO_EWMA("CnnPolicy", env, n_steps=16, batch_size=16, device="cpu")
    model.device = th.device("cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        model._maybe_recommend_cpu()


class ImageEnv(gym.Env):
    observation_space = gym.spaces.Box(0, 255, (36, 36, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return np.zeros((36, 36, 3), np.uint8), {}

    def step(self, action):
        return np.zeros((36, 36, 3), np.uint8), 0.0, False, False, {}


def test_world_size_warning_comes_with_training_at_the_users_line(tmp_path: Path) -> None:
    model = make("PPO_EWMA")
    model.trained_world_size = 2  # as saved by a 2-rank job
    model.save(tmp_path / "model.zip")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        loaded = PPO_EWMA.load(tmp_path / "model.zip", env=DummyVecEnv([CountingEnv]), device="cpu")  # for prediction
        loaded.predict(np.zeros(2, dtype=np.float32))
    with pytest.warns(UserWarning, match=r"trained on 2 rank\(s\) and continues on 1") as record:
        loaded.learn(16, reset_num_timesteps=False)
    assert [warning.filename for warning in record] == [__file__]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        loaded.learn(16, reset_num_timesteps=False)  # once


class GatheringContext(DataParallelContext):
    """A context whose all-gather returns given settings of other ranks (no process group)."""

    def __init__(self, others: list[dict[str, Any]]) -> None:
        self.others = others

    def all_gather_objects(self, value: Any) -> list[Any]:
        return [value, *self.others]


def test_rank_mismatch_shows_none_as_none_and_absent_as_not_set() -> None:
    with pytest.raises(ValueError, match=r"target_kl differs \(rank 0: None, rank 1: 0.01\)"):
        GatheringContext([{"target_kl": 0.01}]).check_same_settings({"target_kl": None})
    with pytest.raises(ValueError, match=r"target_kl differs \(rank 0: 0.01, rank 1: \(not set\)\)"):
        GatheringContext([{}]).check_same_settings({"target_kl": 0.01})
    model = make("PPO_EWMA")
    assert data_parallel_settings(model)["target_kl"] is None  # None-valued settings are compared too


@pytest.mark.parametrize("name", ["PPO_EWMA", "PPG_EWMA", "RecurrentPPO_EWMA", "MaskablePPO_EWMA"])
def test_the_ranks_compare_schedules_classes_and_numpy_numbers(name: str) -> None:
    """
    Settings that differ between ranks where the check once saw nothing: clip ranges (schedules after SB3's setup),
    learning-rate schedules, a policy's activation class; numpy numbers compare as Python's. Two models built alike
    have equal settings (no address or object identity in them).
    """

    def settings(**kwargs: Any) -> dict[str, Any]:
        return data_parallel_settings(make(name, **kwargs))

    assert settings() == settings()
    assert settings(n_steps=np.int64(32)) == settings(n_steps=32)
    assert settings(clip_range=0.2)["clip_range"] == "schedule 0.2 -> 0.2" != settings(clip_range=0.3)["clip_range"]
    assert settings(learning_rate=lambda progress: 3e-4 * progress)["lr_schedule"] == "schedule 0.0003 -> 0.0"
    assert settings(learning_rate=3e-4)["lr_schedule"] == "schedule 0.0003 -> 0.0003"
    tanh, relu = ({"activation_fn": activation} for activation in (th.nn.Tanh, th.nn.ReLU))
    assert settings(policy_kwargs=tanh)["policy_kwargs"] != settings(policy_kwargs=relu)["policy_kwargs"]
    with pytest.raises(ValueError, match=r"clip_range_vf differs \(rank 0: None, rank 1: 'schedule 0.5 -> 0.5'\)"):
        GatheringContext([settings(clip_range_vf=0.5)]).check_same_settings(settings())


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_learn_without_an_environment_says_how_to_give_one(name: str, tmp_path: Path) -> None:
    make(name).save(tmp_path / "model.zip")
    algorithm = ALGORITHMS[name][0]
    model = algorithm.load(tmp_path / "model.zip", device="cpu", tensorboard_log=str(tmp_path / "tb"))
    # SB3 asserts it without a word: an AssertionError still, with the sentence
    with pytest.raises(AssertionError, match=rf"^{name} has no environment to learn from .* or call model.set_env\(env\)"):
        model.learn(16)
    assert not (tmp_path / "tb").exists()
    PPO("MlpPolicy", DummyVecEnv([CountingEnv]), **SMALL).save(tmp_path / "sb3.zip")
    with pytest.raises(AssertionError):
        PPO.load(tmp_path / "sb3.zip", device="cpu").learn(16)


def test_loading_a_missing_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no saved model at .*nothere nor .*nothere.zip"):
        PPO_EWMA.load(tmp_path / "nothere")
    with pytest.raises(FileNotFoundError, match=r"no saved model at .*nothere.zip$"):
        PPG_EWMA.load(tmp_path / "nothere.zip")


@pytest.mark.parametrize("name", ["PPO_EWMA", "PPG_EWMA", "RecurrentPPO_EWMA", "MaskablePPO_EWMA"])
def test_an_advantage_decay_without_its_normalization_warns(name: str) -> None:
    with pytest.warns(UserWarning, match=r"advantage_ewma_decay=0.5 has no effect with advantage_normalization='minibatch'"):
        make(name, advantage_ewma_decay=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        make(name, advantage_ewma_decay=0.5, advantage_normalization="ewma")


@pytest.mark.parametrize("kwargs", [{"clip_range_vf": -0.2}, {"n_steps": 0}, {"batch_size": 1}])
def test_settings_sb3_asserts_still_raise_an_assertion_error(kwargs: dict) -> None:
    # SB3's own tests (and users' code) expect AssertionError for these: the clear error is both
    with pytest.raises(AssertionError, match="must be"):
        make("PPO_EWMA", **kwargs)
    with pytest.raises(ValueError, match="must be"):
        make("PPO_EWMA", **kwargs)


@pytest.mark.parametrize(
    "name, policy, message",
    [
        ("RecurrentPPO_EWMA", "MlpPolicy", r"Policy MlpPolicy unknown for RecurrentPPO_EWMA, whose policies are "),
        ("RecurrentPPO_EWMA", "MlpPolicy", r"did you mean 'MlpLstmPolicy'\? \(MlpPolicy is a policy of PPO_EWMA, "),
        ("RecurrentPPO_EWMA", "CnnPolicy", r"did you mean 'CnnLstmPolicy'\?"),
        ("RecurrentPPO_EWMA", "MultiInputPolicy", r"did you mean 'MultiInputLstmPolicy'\?"),
        ("PPO_EWMA", "MlpLstmPolicy", r"did you mean 'MlpPolicy'\? \(MlpLstmPolicy is a policy of RecurrentPPO_EWMA\)"),
        ("MaskablePPO_EWMA", "MlpLstmPolicy", r"did you mean 'MlpPolicy'\?"),
    ],
)
def test_an_unknown_policy_name_gets_the_algorithms_names(name: str, policy: str, message: str) -> None:
    algorithm, _ = ALGORITHMS[name]
    CountingEnv.calls = 0
    with pytest.raises(ValueError, match=message):
        algorithm(policy, DummyVecEnv([CountingEnv]), **SMALL)
    assert CountingEnv.calls == 0


@pytest.mark.parametrize(
    "name, kwargs, message",
    [
        (
            "PPO_EWMA",
            {"head_init_scale": 0.1},
            r"PPO_EWMA has no argument head_init_scale=0.1: it is a keyword of its policy, pass "
            r"policy_kwargs=dict\(head_init_scale=0.1\)",
        ),
        (
            "RecurrentPPO_EWMA",
            {"head_init_scale": 0.1},
            r"RecurrentPPO_EWMA has no argument head_init_scale=0.1, and its policies do not take it: it is a policy "
            r"keyword of PPO_EWMA, PPG_EWMA and PPG",
        ),
        (
            "RecurrentPPO_EWMA",
            {"policy_kwargs": {"head_init_scale": 0.1}},
            r"RecurrentPPO_EWMA's policy MlpLstmPolicy has no keyword head_init_scale=0.1 \(in policy_kwargs\): only "
            r"the policies of PPO_EWMA, PPG_EWMA and PPG take it",
        ),
        (
            "MaskablePPO_EWMA",
            {"policy_kwargs": {"head_init_scale": 0.1}},
            r"MaskablePPO_EWMA's policy MlpPolicy has no keyword head_init_scale=0.1",
        ),
        (
            "PPO_EWMA",
            {"policy_kwargs": {"lstm_hidden_size": 8}},
            r"only the policies of RecurrentPPO_EWMA take it: remove it, or use RecurrentPPO_EWMA",
        ),
        (
            "PPG_EWMA",
            {"staleness": 2},
            r"PPG_EWMA has no argument staleness=2: artificial staleness is an ablation: "
            r"sb3_ewma.ablations.StalePPO_EWMA\(...\).set_staleness\(staleness, mode\)",
        ),
        ("PPO_EWMA", {"staleness_mode": "behavior"}, r"PPO_EWMA has no argument staleness_mode='behavior': artificial"),
        ("PPO_EWMA", {"n_aux_epochs": 2}, r"PPO_EWMA has no argument n_aux_epochs=2: it is an argument of PPG_EWMA and PPG"),
        ("PPO_EWMA", {"learnin_rate": 1e-3}, r"PPO_EWMA has no argument learnin_rate=0.001: did you mean 'learning_rate'\?"),
        ("MaskablePPO_EWMA", {"use_sde": True}, r"MaskablePPO_EWMA has no argument use_sde=True: it is an argument of "),
    ],
)
def test_a_keyword_of_another_class_says_which_takes_it(name: str, kwargs: dict, message: str) -> None:
    """
    A policy keyword of another algorithm's policies in ``policy_kwargs`` is refused by the constructor; a keyword the
    constructor lacks is Python's ``TypeError`` there, and the command line (an rl-zoo3 entry, ``-params``) explains it
    with :func:`unknown_keyword_message`.
    """
    CountingEnv.calls = 0
    if "policy_kwargs" in kwargs:
        with pytest.raises(TypeError, match=message):
            make(name, **kwargs)
    else:
        ((keyword, value),) = kwargs.items()
        assert re.search(message, unknown_keyword_message(ALGORITHMS[name][0], keyword, value))
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{keyword}'"):
            make(name, **kwargs)
    assert CountingEnv.calls == 0
    # the policies that take head_init_scale
    if "head_init_scale" in str(kwargs) and name == "PPO_EWMA":
        assert make(name, policy_kwargs={"head_init_scale": 0.1}).policy.head_init_scale == 0.1


def test_ppg_batch_size_larger_than_the_rollout_is_named_and_trains_as_sb3s_ppo() -> None:
    # batch_size 256 with a rollout of 32 steps, which SB3's PPO takes: aux_batch_size defaults to it and cannot divide
    # 4 x 32 steps, so the auxiliary phase's minibatch is truncated (warned, with the settings that fit)
    with pytest.warns(
        UserWarning,
        match=r"batch_size=256 is larger than the rollout of n_steps \* n_envs = 32 \* 1 = 32 steps.* pass a batch_size "
        r"that divides the rollout \(batch_size=32 or a divisor of it\), or more n_steps, or aux_batch_size "
        r"\(e.g. aux_batch_size=128\).*truncated",
    ):
        model = make("PPG", n_steps=32, batch_size=256, n_policy_iterations=4)
    model.learn(4 * 32)
    assert model.n_aux_phases == 1
    # the advice works
    assert make("PPG", n_steps=32, batch_size=32, n_policy_iterations=4)._aux_minibatch_size == 32
    assert make("PPG", n_steps=32, batch_size=256, n_policy_iterations=4, aux_batch_size=128)._aux_minibatch_size == 128
    # an aux_batch_size of the user's that does not divide the buffer is refused (PPO has no such setting)
    with pytest.raises(ValueError, match=r"aux_batch_size \(default: batch_size\) must divide .* got 48"):
        make("PPG", n_steps=32, batch_size=32, n_policy_iterations=4, aux_batch_size=48)


def test_ppg_load_refuses_an_aux_batch_size_its_keywords_give_and_warns_of_one_fewer_environments_make(tmp_path: Path) -> None:
    envs = DummyVecEnv([CountingEnv, CountingEnv])
    settings = dict(n_steps=16, batch_size=16, n_policy_iterations=3, aux_batch_size=32, device="cpu")
    PPG("MlpPolicy", envs, **settings).save(tmp_path / "ppg.zip")  # an auxiliary buffer of 3 * 16 * 2 = 96 steps
    # a keyword of load that makes it not fit: refused as the constructor refuses it, whatever the environments
    for keywords in (dict(aux_batch_size=7), dict(n_steps=8)):
        with pytest.raises(ValueError, match=r"aux_batch_size \(default: batch_size\) must divide"):
            PPG.load(tmp_path / "ppg.zip", env=envs, device="cpu", **keywords)
    # the saved model with fewer environments (to predict or evaluate): a warning, learn() refuses until it is fixed
    with pytest.warns(UserWarning, match=r"aux_batch_size \(default: batch_size\) must divide .*; learn\(\) will raise"):
        model = PPG.load(tmp_path / "ppg.zip", env=DummyVecEnv([CountingEnv]), device="cpu")
    with pytest.raises(ValueError, match=r"aux_batch_size \(default: batch_size\) must divide"):
        model.learn(16)


COUNTING_ENV_ID = "Sb3EwmaTestCounting-v0"


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_load_and_set_env_take_an_environment_id_as_the_constructor_does(name: str, tmp_path: Path) -> None:
    if COUNTING_ENV_ID not in gym.registry:
        gym.register(COUNTING_ENV_ID, entry_point=CountingEnv)
    make(name).save(tmp_path / "model.zip")
    algorithm, _ = ALGORITHMS[name]
    for loaded in (
        algorithm.load(tmp_path / "model.zip", env=COUNTING_ENV_ID, device="cpu"),
        algorithm.load(tmp_path / "model.zip", COUNTING_ENV_ID, device="cpu"),  # positional, as SB3's load takes it
    ):
        assert isinstance(loaded.get_env(), DummyVecEnv) and loaded.n_envs == 1
        assert isinstance(loaded.get_env().envs[0].unwrapped, CountingEnv)
    loaded.set_env(COUNTING_ENV_ID)
    assert isinstance(loaded.get_env().envs[0].unwrapped, CountingEnv)
    loaded.learn(16)


class NoMaskEnv(gym.Env):
    """CountingEnv without action_masks()."""

    observation_space = CountingEnv.observation_space
    action_space = CountingEnv.action_space

    def reset(self, *, seed=None, options=None):
        return CountingEnv.reset(self, seed=seed, options=options)  # type: ignore[arg-type]

    def step(self, action):
        return CountingEnv.step(self, action)  # type: ignore[arg-type]


def test_maskable_ppo_ewma_on_an_environment_without_masks_says_so_at_construction() -> None:
    message = r"this environment has no action_masks\(\) method: wrap it with sb3-contrib's ActionMasker"
    with pytest.warns(
        UserWarning, match=message + r".*learn\(\) raises until then, unless called with use_masking=False"
    ) as record:
        model = MaskablePPO_EWMA("MlpPolicy", DummyVecEnv([NoMaskEnv]), **SMALL)
    assert record[0].filename == __file__
    CountingEnv.calls = 0
    with pytest.raises(ValueError, match=message + r".*or call learn\(use_masking=False\) to train without masks"):
        model.learn(16)
    assert CountingEnv.calls == 0
    model.learn(16, use_masking=False)  # MaskablePPO's way to train without masks
    with pytest.warns(UserWarning, match=message):
        model.set_env(DummyVecEnv([NoMaskEnv]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        model.set_env(DummyVecEnv([CountingEnv]))  # with masks


def test_load_checks_its_hyperparameters_as_the_constructor_does(tmp_path: Path) -> None:
    # SB3's load sets them unchecked; here each one gets the constructor's sentence, before anything is loaded
    make("PPO_EWMA").save(tmp_path / "ppo.zip")
    make("PPG_EWMA").save(tmp_path / "ppg.zip")
    with pytest.raises(ValueError, match=r"^ewma_decay must be a number in \[0, 1\), got 2$"):
        PPO_EWMA.load(tmp_path / "ppo.zip", ewma_decay=2)
    with pytest.raises(ValueError, match=r"^n_policy_iterations must be an integer >= 1, got 0$"):
        PPG_EWMA.load(tmp_path / "ppg.zip", n_policy_iterations=0)
    with pytest.raises(ValueError, match=r"^learning_rate must be a number >= 0 or a schedule"):
        PPO_EWMA.load(tmp_path / "ppo.zip", learning_rate=-1.0)
    # batch_size=1 with normalized advantages: SB3's constructor refuses it, its load takes it and trains (a minibatch
    # of one sample is left unnormalized), and so does this load
    PPO("MlpPolicy", DummyVecEnv([CountingEnv]), **SMALL).save(tmp_path / "sb3.zip")
    for algorithm, path in ((PPO, "sb3.zip"), (PPO_EWMA, "ppo.zip")):
        model = algorithm.load(tmp_path / path, env=DummyVecEnv([CountingEnv]), batch_size=1).learn(16)
        assert model.num_timesteps == 16 and all(th.isfinite(p).all() for p in model.policy.parameters())
    # good values load, as SB3's load sets them
    loaded = PPO_EWMA.load(tmp_path / "ppo.zip", ewma_decay=0.5, learning_rate=1e-4)
    assert loaded.proximal_decay == 0.5 and loaded.learning_rate == 1e-4
    assert PPG_EWMA.load(tmp_path / "ppg.zip", n_policy_iterations=2).n_policy_iterations == 2


def test_load_checks_the_hyperparameters_custom_objects_replaces(tmp_path: Path) -> None:
    # SB3's load puts custom_objects' values in place of the file's, unchecked: batch_size=0 trained forever
    make("PPO_EWMA").save(tmp_path / "ppo.zip")
    for replaced, sentence in (
        ({"batch_size": 0}, r"batch_size must be an integer >= 2, got 0"),
        ({"kl_coef": -1.0}, r"kl_coef must be a finite number >= 0, got -1.0"),
        ({"minibatch_sampling": "bogus"}, r"minibatch_sampling must be one of \('steps', 'rollouts'\), got 'bogus'"),
    ):
        with pytest.raises(ValueError, match=rf"^load\(\.\.\., custom_objects=\.\.\.\): {sentence}$"):
            PPO_EWMA.load(tmp_path / "ppo.zip", env=DummyVecEnv([CountingEnv]), custom_objects=replaced)
    # batch_size=1, which SB3's load takes (its constructor refuses it with normalized advantages), trains as SB3's
    PPO("MlpPolicy", DummyVecEnv([CountingEnv]), **SMALL).save(tmp_path / "sb3.zip")
    for algorithm, path in ((PPO, "sb3.zip"), (PPO_EWMA, "ppo.zip")):
        model = algorithm.load(tmp_path / path, env=DummyVecEnv([CountingEnv]), custom_objects={"batch_size": 1})
        assert model.learn(16).num_timesteps == 16 and model.batch_size == 1
    # a keyword wins over custom_objects in SB3's load: the keyword is what is checked
    model = PPO_EWMA.load(tmp_path / "ppo.zip", custom_objects={"batch_size": 0}, batch_size=8)
    assert model.batch_size == 8
    # rl-zoo3's enjoy and record_video load every model with these, silently (no advice about a learning rate of 0)
    enjoy = {"learning_rate": 0.0, "lr_schedule": lambda _: 0.0, "clip_range": lambda _: 0.0}
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        assert PPO_EWMA.load(tmp_path / "ppo.zip", custom_objects=enjoy).learning_rate == 0.0


def test_a_folder_that_cannot_be_written_is_refused_before_training(tmp_path: Path) -> None:
    from stable_baselines3.common.callbacks import CallbackList, CheckpointCallback, EvalCallback, EveryNTimesteps

    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    model = make("PPO_EWMA")
    for callback in (
        CheckpointCallback(save_freq=16, save_path=str(blocker / "checkpoints")),
        [EvalCallback(DummyVecEnv([CountingEnv]), best_model_save_path=str(blocker / "best"))],
        CallbackList([EvalCallback(DummyVecEnv([CountingEnv]), log_path=str(blocker / "evaluations"))]),
        # the callbacks an event callback runs
        EvalCallback(DummyVecEnv([CountingEnv]), callback_on_new_best=CheckpointCallback(1, str(blocker / "on_best"))),
        EvalCallback(DummyVecEnv([CountingEnv]), callback_after_eval=CheckpointCallback(1, str(blocker / "after_eval"))),
        EveryNTimesteps(16, CallbackList([CheckpointCallback(1, str(blocker / "every"))])),
    ):
        CountingEnv.calls = 0
        with pytest.raises(
            ValueError,
            match=rf"(save_path|best_model_save_path|log_path)='{re.escape(str(blocker))}/.*"
            rf"cannot be written: {re.escape(str(blocker))} is a file, not a folder; nothing was trained",
        ):
            model.learn(32, callback=callback)
        assert CountingEnv.calls == 0 and model.num_timesteps == 0
    with pytest.raises(ValueError, match=r"tensorboard_log=.* cannot be written"):
        make("PPO_EWMA", tensorboard_log=str(blocker / "tb")).learn(32)
    # a folder that does not exist yet is made, as SB3 makes it
    model.learn(32, callback=CheckpointCallback(save_freq=16, save_path=str(tmp_path / "new" / "checkpoints")))
    assert (tmp_path / "new" / "checkpoints").is_dir()


def test_learn_takes_the_callbacks_sb3s_learn_takes(tmp_path: Path) -> None:
    from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback

    class WritesItsFile(BaseCallback):
        """A user's callback whose save_path is a file it writes, not a folder."""

        def __init__(self, save_path: str) -> None:
            super().__init__()
            self.save_path = save_path

        def _on_step(self) -> bool:
            Path(self.save_path).write_text(str(self.num_timesteps))
            return True

    class ItsOwnChild(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.callback = self

        def _on_step(self) -> bool:
            return True

    existing = tmp_path / "steps.txt"
    existing.write_text("")
    for callback in (WritesItsFile(str(existing)), ItsOwnChild()):
        for algorithm in (PPO, PPO_EWMA):
            assert algorithm("MlpPolicy", DummyVecEnv([CountingEnv]), **SMALL).learn(16, callback=callback).num_timesteps == 16
    assert existing.read_text() == "16"
    # a callback class: SB3 calls it as a function callback (each call makes an unused callback), so it trains; warned
    assert PPO("MlpPolicy", DummyVecEnv([CountingEnv]), **SMALL).learn(16, callback=CheckpointCallback).num_timesteps == 16
    with pytest.warns(
        UserWarning, match=r"^callback=CheckpointCallback is the class: SB3 calls it .* CheckpointCallback\(\.\.\.\)$"
    ):
        assert make("PPO_EWMA").learn(16, callback=CheckpointCallback).num_timesteps == 16


def test_maskable_learn_asks_for_masks_only_when_it_trains() -> None:
    from sb3_contrib import MaskablePPO

    for algorithm in (MaskablePPO, MaskablePPO_EWMA):
        assert algorithm("MlpPolicy", "CartPole-v1", **SMALL).learn(0).num_timesteps == 0  # the parent: no rollout
    with pytest.raises(ValueError, match="has no action_masks"):
        MaskablePPO_EWMA("MlpPolicy", "CartPole-v1", **SMALL).learn(16)


# ----------------------------------------------------------------------------------------------------------------------
# the second bad-input trial (benchmarks/results/bad_input_trial/results.md)


@pytest.mark.parametrize(
    "policy_kwargs, message",
    [
        (
            {"activation_fn": "tanh"},
            r"^policy_kwargs activation_fn must be a class, such as torch.nn.Tanh \(nn.Tanh in an rl-zoo3 policy_kwargs "
            r"string\), got 'tanh'$",
        ),
        ({"optimizer_class": "adam"}, r"^policy_kwargs optimizer_class must be a class, such as torch.optim.Adam, got 'adam'"),
        ({"features_extractor_class": "NatureCNN"}, r"^policy_kwargs features_extractor_class must be a class, such as "),
        (
            {"optimizer_kwargs": {"lr": 1.0}},
            r"^policy_kwargs optimizer_kwargs must not hold lr \(got lr=1.0\): the optimizer's step size is the "
            r"algorithm's learning_rate argument",
        ),
    ],
)
@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_policy_kwargs_that_sb3_fails_on_unnamed_are_named(name: str, policy_kwargs: dict, message: str) -> None:
    # SB3 fails on each when it builds the policy: "'str' object is not callable", "got multiple values for 'lr'"
    with pytest.raises(TypeError):
        PPO("MlpPolicy", DummyVecEnv([CountingEnv]), policy_kwargs=policy_kwargs, **SMALL)
    CountingEnv.calls = 0
    with pytest.raises(ValueError, match=message):
        make(name, policy_kwargs=policy_kwargs)
    assert CountingEnv.calls == 0


def test_a_callable_activation_that_is_not_a_class_is_accepted_as_in_sb3() -> None:
    # SB3 calls activation_fn() and optimizer_class(params, lr=...): any callable does
    model = make("PPO_EWMA", policy_kwargs={"activation_fn": lambda: th.nn.Tanh(), "optimizer_kwargs": {"eps": 1e-5}})
    assert isinstance(model.policy.mlp_extractor.policy_net[1], th.nn.Tanh)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_log_interval_is_read_as_sb3_reads_it(name: str) -> None:
    # SB3 logs when iteration % log_interval == 0: -1 logs every iteration (rl-zoo3's -1 is its own default), 0 divides
    # by zero at the first log
    model = make(name)
    model.learn(32, log_interval=-1)
    assert model.num_timesteps == 32
    PPO("MlpPolicy", DummyVecEnv([CountingEnv]), **SMALL).learn(32, log_interval=-1)
    # any number: SB3 takes 1.5 (a log at iterations 3, 6, ...), True (1) and NaN (no logs)
    for number in (1.5, True, float("nan")):
        PPO("MlpPolicy", DummyVecEnv([CountingEnv]), **SMALL).learn(32, log_interval=number)
        make(name).learn(32, log_interval=number)
    for bad in (0, "1", False):
        CountingEnv.calls = 0
        with pytest.raises(
            ValueError,
            match=rf"^log_interval must be None \(no logs\) or a number other than 0 .*got {re.escape(repr(bad))}$",
        ):
            model.learn(32, log_interval=bad)
        assert CountingEnv.calls == 0


def test_a_tensorboard_log_that_is_not_a_path_is_named_before_training() -> None:
    model = make("PPO_EWMA", tensorboard_log=123)
    CountingEnv.calls = 0
    with pytest.raises(ValueError, match=r"^tensorboard_log must be None or a folder's path, got 123$"):
        model.learn(32)
    assert CountingEnv.calls == 0


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_a_schedule_that_gives_no_finite_number_is_named(name: str) -> None:
    # the first learning rate builds the optimizer: torch said "Invalid learning rate: nan"
    CountingEnv.calls = 0
    with pytest.raises(
        ValueError, match=r"^the learning_rate schedule returned nan at progress_remaining=1: a schedule must return"
    ):
        make(name, learning_rate=lambda _: float("nan"))
    assert CountingEnv.calls == 0
    # a clip range schedule that returns None: SB3's FloatSchedule failed in float(), unnamed; here before any update
    model = make(name, clip_range=lambda _: None)
    before = [parameter.detach().clone() for parameter in model.policy.parameters()]
    with pytest.raises(
        ValueError,
        match=r"^the clip_range schedule gave no number at progress_remaining=[0-9.]+ \(TypeError: float\(\) argument "
        r".*\): a schedule must return a finite number",
    ):
        model.learn(32)
    assert all(th.equal(a, b) for a, b in zip(before, model.policy.parameters()))


def test_a_device_that_is_not_a_torch_device_is_named() -> None:
    CountingEnv.calls = 0
    with pytest.raises(
        ValueError, match=r"^device must be 'auto', 'cpu', 'cuda', 'cuda:N' or another torch device .*got 'gpu'$"
    ):
        make("PPO_EWMA", device="gpu")
    assert CountingEnv.calls == 0
    with pytest.raises(RuntimeError):  # SB3: torch's list of twenty device types
        PPO("MlpPolicy", DummyVecEnv([CountingEnv]), **{**SMALL, "device": "gpu"})
    assert make("PPO_EWMA", device="auto") is not None


def test_load_warns_of_a_keyword_that_nothing_reads(tmp_path: Path) -> None:
    # SB3's load sets any keyword as an attribute: a misspelt setting changed nothing without a word
    make("PPO_EWMA").save(tmp_path / "model.zip")
    with pytest.warns(
        UserWarning,
        match=r"^load\(..., learnig_rate=0.0001\): PPO_EWMA has no argument learnig_rate=0.0001: did you mean "
        r"'learning_rate'\? SB3's load sets it as an attribute of the model, which nothing reads$",
    ) as record:
        loaded = PPO_EWMA.load(tmp_path / "model.zip", learnig_rate=1e-4)
    assert record[0].filename == __file__
    assert loaded.learnig_rate == 1e-4  # set, as SB3 sets it: warned, not refused
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        # settings, saved entries and attributes of the class are what load is for
        PPO_EWMA.load(tmp_path / "model.zip", learning_rate=1e-4, n_envs=1, seed=3)


def test_recurrent_predict_takes_one_episode_start_per_observation() -> None:
    model = make("RecurrentPPO_EWMA")
    observations = np.zeros((2, 2), dtype=np.float32)
    with pytest.raises(
        ValueError,
        match=r"^episode_start of shape \(3,\) for 2 observation\(s\): give one flag per observation \(shape \(2,\)",
    ):
        model.predict(observations, episode_start=np.ones(3))
    actions, state = model.predict(observations, episode_start=np.ones(2))
    assert actions.shape == (2,) and state is not None
    # no episode starting: sb3-contrib's RecurrentPPO runs the sequence without the flags, whatever their number
    from sb3_contrib import RecurrentPPO

    observation = np.zeros(2, dtype=np.float32)
    expected = RecurrentPPO.predict(model, observation, episode_start=np.zeros(2), deterministic=True)[0]
    np.testing.assert_array_equal(model.predict(observation, episode_start=np.zeros(2), deterministic=True)[0], expected)


def test_scale_hyperparams_names_what_is_not_an_entry() -> None:
    with pytest.raises(ValueError, match=r"^hyperparams must be a dict of an rl-zoo3 entry's settings .*got None$"):
        scale_hyperparams(None, 16)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_predict_names_a_non_finite_observation_where_the_parent_fails_on_it(name: str) -> None:
    from sb3_contrib import MaskablePPO, RecurrentPPO
    from stable_baselines3.common.base_class import BaseAlgorithm

    parents = {"PPO_EWMA": PPO, "RecurrentPPO_EWMA": RecurrentPPO, "MaskablePPO_EWMA": MaskablePPO}
    parent_predict = parents.get(name, BaseAlgorithm).predict  # PPG's: SB3's BaseAlgorithm's
    model = make(name)
    nan = np.array([0.0, np.nan], dtype=np.float32)
    # the parent: torch's "Expected parameter logits ... found invalid values", which names the policy's output (and
    # nothing once a torch.compile in the process has turned torch's validation of distributions off)
    if th.distributions.Distribution._validate_args:
        with pytest.raises(ValueError, match="invalid values"):
            parent_predict(model, nan, deterministic=True)
    with pytest.raises(
        ValueError,
        match=r"^predict was given a non-finite observation \(nan at index \(1,\)\): the policy acts on finite observations",
    ):
        model.predict(nan)
    # an infinity that the network turns into finite outputs (its tanh): predicted, as the parent predicts it
    inf = np.array([[0.0, 0.0], [np.inf, 0.0]], dtype=np.float32)
    expected = parent_predict(model, inf, deterministic=True)[0]
    np.testing.assert_array_equal(model.predict(inf, deterministic=True)[0], expected)
    assert model.predict(np.zeros(2, dtype=np.float32))[0].shape == ()
    # infinities that a ReLU network turns into NaN (inf - inf): where the parent fails, the sentence
    relu = dict(activation_fn=th.nn.ReLU, net_arch=[16, 16])
    model = make(name, policy_kwargs={**relu, "lstm_hidden_size": 8} if name == "RecurrentPPO_EWMA" else relu)
    infinities = np.array([np.inf, np.inf], dtype=np.float32)
    if th.distributions.Distribution._validate_args:
        with pytest.raises(ValueError, match="invalid values"):
            parent_predict(model, infinities, deterministic=True)
        with pytest.raises(ValueError, match=r"^predict was given a non-finite observation \(inf at index \(0,\)\)"):
            model.predict(infinities, deterministic=True)


def test_load_names_a_device_that_is_not_one(tmp_path: Path) -> None:
    make("PPO_EWMA").save(tmp_path / "model.zip")
    with pytest.raises(ValueError, match=r"^device must be 'auto', 'cpu', 'cuda', 'cuda:N' .*got 'gpu'$"):
        PPO_EWMA.load(tmp_path / "model.zip", device="gpu")
    assert PPO_EWMA.load(tmp_path / "model.zip", device="cpu").device == th.device("cpu")
    # an indexed CPU: SB3's load fails inside torch.load ("don't know how to restore data location"); a sentence here
    for device in ("cpu:0", th.device("cpu", 0)):
        with pytest.raises(
            ValueError, match=r"^device=.*: torch loads saved tensors to 'cpu', not an indexed CPU: pass 'cpu'$"
        ):
            PPO_EWMA.load(tmp_path / "model.zip", device=device)
    with pytest.raises(RuntimeError, match="restore data location"):
        PPO.load(tmp_path / "model.zip", device="cpu:0")


@pytest.mark.parametrize("total_timesteps, trained", [(-5, 0), (0, 0), (16.5, 32)])
def test_learn_takes_the_budgets_sb3_takes(total_timesteps: float, trained: int) -> None:
    # SB3 trains while num_timesteps < total_timesteps: nothing for 0 or less, whole rollouts past a fraction
    from stable_baselines3 import PPO

    for algorithm in (PPO, PPO_EWMA):
        model = algorithm("MlpPolicy", DummyVecEnv([CountingEnv]), **SMALL).learn(total_timesteps)
        assert model.num_timesteps == trained


def test_the_constructor_check_joins_no_process_group(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # under torchrun (WORLD_SIZE > 1) a new model would join the group: the check of load's keywords must not
    import torch.distributed as dist

    from sb3_ewma.common.rules import check_constructor_settings

    make("PPO_EWMA").save(tmp_path / "model.zip")
    for name, value in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="1").items():
        monkeypatch.setenv(name, value)
    check_constructor_settings(PPO_EWMA, "MlpPolicy", {"n_epochs": 2})
    with pytest.raises(ValueError, match=r"^n_epochs must be an integer >= 1, got 0$"):
        PPO_EWMA.load(tmp_path / "model.zip", n_epochs=0)
    assert not dist.is_initialized()


def test_load_checks_against_the_saved_options(tmp_path: Path) -> None:
    # the options a new value depends on are the saved ones, not the defaults: no false warning, no false pass
    make("PPO_EWMA", advantage_normalization="ewma", kl_coef=0.5, minibatch_sampling="rollouts").save(tmp_path / "m.zip")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # advantage_ewma_decay has an effect with the saved "ewma" normalization
        PPO_EWMA.load(tmp_path / "m.zip", advantage_ewma_decay=0.95, clip_range=None)
    with pytest.raises(ValueError, match=r"minibatch_sampling='rollouts' .* got 100"):
        PPO_EWMA.load(tmp_path / "m.zip", batch_size=100)
