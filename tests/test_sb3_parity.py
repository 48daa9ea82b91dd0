"""
What SB3 accepts, the package accepts: a corpus of constructor and ``learn`` inputs taken from SB3's and sb3-contrib's
own tests and documentation (the deprecated forms SB3 still accepts included), each given to the parent class and to
the package's class side by side. They must agree: both accept it (and train one iteration) with the same warnings, or
both refuse it.

The numbers at the edges of each hyperparameter's range (:data:`EDGE_VALUES`: negative, 0, above 1, infinite, NaN) are
tried the same way, over two iterations. A value that SB3 trains with but that cannot train as asked is taken too, with
one more warning naming it (:data:`WARNED_BEYOND_SB3`); the one value the package refuses beyond SB3
(:data:`REFUSED_BEYOND_SB3`) is checked to be accepted by the parent and refused by the package, so that those lists are
exactly what differs.
"""

import math
import re
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from sb3_contrib import MaskablePPO, RecurrentPPO
from sb3_contrib.common.envs import InvalidActionEnvDiscrete
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.envs import FakeImageEnv, SimpleMultiObsEnv
from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike

from sb3_ewma import PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA


def linear_schedule(initial: float) -> Callable[[float], float]:
    """SB3's documentation's learning-rate schedule (guide, "Learning Rate Schedule")."""
    return lambda progress_remaining: progress_remaining * initial


# (id, policy, environment, keyword arguments): SB3's tests (tests/test_custom_policy.py, test_run.py, test_sde.py,
# test_dict_env.py, test_cnn.py, test_save_load.py) and documentation (guide/examples.rst, custom_policy.rst)
PPO_CORPUS: list[tuple[str, str, str | Callable[[], Any], dict[str, Any]]] = [
    ("defaults", "MlpPolicy", "CartPole-v1", {}),
    ("net_arch_empty", "MlpPolicy", "CartPole-v1", dict(policy_kwargs=dict(net_arch=[]))),
    ("net_arch_list", "MlpPolicy", "CartPole-v1", dict(policy_kwargs=dict(net_arch=[4, 4]))),
    ("net_arch_dict", "MlpPolicy", "CartPole-v1", dict(policy_kwargs=dict(net_arch=dict(vf=[8, 4], pi=[8])))),
    ("net_arch_dict_pi_only", "MlpPolicy", "CartPole-v1", dict(policy_kwargs=dict(net_arch=dict(pi=[8])))),
    ("net_arch_none", "MlpPolicy", "CartPole-v1", dict(policy_kwargs=dict(net_arch=None))),
    # SB3's deprecated form (tests/test_custom_policy.py::test_flexible_mlp, "Old format, emits a warning")
    ("net_arch_old_vf", "MlpPolicy", "CartPole-v1", dict(policy_kwargs=dict(net_arch=[dict(vf=[8])]))),
    ("net_arch_old_pi_vf", "MlpPolicy", "CartPole-v1", dict(policy_kwargs=dict(net_arch=[dict(vf=[8], pi=[4])]))),
    (
        "docs_custom_policy",
        "MlpPolicy",
        "CartPole-v1",
        dict(policy_kwargs=dict(activation_fn=th.nn.ReLU, net_arch=dict(pi=[32, 32], vf=[32, 32]))),
    ),
    (
        "optimizer_adamw",
        "MlpPolicy",
        "CartPole-v1",
        dict(policy_kwargs=dict(optimizer_class=th.optim.AdamW, optimizer_kwargs=dict(weight_decay=0.0), net_arch=[16])),
    ),
    (
        "optimizer_rmsprop_tf",
        "MlpPolicy",
        "CartPole-v1",
        dict(policy_kwargs=dict(optimizer_class=RMSpropTFLike, net_arch=[16])),
    ),
    ("normalize_advantage_false", "MlpPolicy", "CartPole-v1", dict(normalize_advantage=False)),
    ("clip_range_vf", "MlpPolicy", "Pendulum-v1", dict(clip_range_vf=0.2, policy_kwargs=dict(net_arch=[16]))),
    ("clip_range_vf_negative", "MlpPolicy", "Pendulum-v1", dict(clip_range_vf=-0.2)),  # SB3 asserts it is positive
    ("n_steps_1", "MlpPolicy", "Pendulum-v1", dict(n_steps=1)),  # SB3: advantage normalization of 1 sample, refused
    ("batch_size_1", "MlpPolicy", "Pendulum-v1", dict(n_steps=1, batch_size=1, normalize_advantage=False)),
    ("truncated_minibatch", "MlpPolicy", "Pendulum-v1", dict(n_steps=64, batch_size=63)),
    ("lr_schedule_docs", "MlpPolicy", "CartPole-v1", dict(learning_rate=linear_schedule(0.001))),
    ("lr_schedule_sin", "MlpPolicy", "Pendulum-v1", dict(learning_rate=lambda t: t * np.sin(1.0))),
    ("clip_range_schedule", "MlpPolicy", "CartPole-v1", dict(clip_range=linear_schedule(0.2))),
    ("sde", "MlpPolicy", "Pendulum-v1", dict(use_sde=True, sde_sample_freq=4, policy_kwargs=dict(log_std_init=-2))),
    ("squash_output", "MlpPolicy", "Pendulum-v1", dict(use_sde=True, policy_kwargs=dict(squash_output=True))),
    ("target_kl", "MlpPolicy", "CartPole-v1", dict(target_kl=0.01)),
    ("ortho_init_false", "MlpPolicy", "CartPole-v1", dict(policy_kwargs=dict(ortho_init=False))),
    ("seed", "MlpPolicy", "CartPole-v1", dict(seed=1)),
    ("multi_input", "MultiInputPolicy", SimpleMultiObsEnv, dict(seed=1)),
    (
        "cnn_features_dim",
        "CnnPolicy",
        lambda: FakeImageEnv(screen_height=40, screen_width=40, n_channels=1, discrete=True),
        dict(policy_kwargs=dict(features_extractor_kwargs=dict(features_dim=32))),
    ),
    ("verbose_bool", "MlpPolicy", "CartPole-v1", dict(verbose=False)),
    ("n_epochs_numpy", "MlpPolicy", "CartPole-v1", dict(n_epochs=np.int64(2))),
    # what SB3 takes beyond its tests: truth values, clip ranges of 1 and more, no statistics window, a target of 0
    ("normalize_advantage_int", "MlpPolicy", "CartPole-v1", dict(normalize_advantage=1)),
    ("clip_range_1_5", "MlpPolicy", "CartPole-v1", dict(clip_range=1.5)),
    ("stats_window_0", "MlpPolicy", "CartPole-v1", dict(stats_window_size=0)),
    ("target_kl_0", "MlpPolicy", "CartPole-v1", dict(target_kl=0.0)),
    ("net_arch_unknown_key", "MlpPolicy", "CartPole-v1", dict(policy_kwargs=dict(net_arch=dict(pi=[8], value=[8])))),
    ("net_arch_string", "MlpPolicy", "CartPole-v1", dict(policy_kwargs=dict(net_arch="big"))),
    ("net_arch_dict_of_int", "MlpPolicy", "CartPole-v1", dict(policy_kwargs=dict(net_arch=dict(pi=8, vf=[8])))),
    ("seed_negative", "MlpPolicy", "CartPole-v1", dict(seed=-1)),
    ("n_steps_float", "MlpPolicy", "CartPole-v1", dict(n_steps=64.0)),
    # sequences SB3 iterates, truth values SB3 reads, one-element tensors SB3 computes with
    ("net_arch_array", "MlpPolicy", "CartPole-v1", dict(policy_kwargs=dict(net_arch=np.array([8, 8])))),
    ("net_arch_range", "MlpPolicy", "CartPole-v1", dict(policy_kwargs=dict(net_arch=range(4, 6)))),
    ("net_arch_dict_of_arrays", "MlpPolicy", "CartPole-v1", dict(policy_kwargs=dict(net_arch=dict(pi=np.array([8]), vf=[8])))),
    ("normalize_advantage_none", "MlpPolicy", "CartPole-v1", dict(normalize_advantage=None)),
    ("normalize_advantage_float", "MlpPolicy", "CartPole-v1", dict(normalize_advantage=1.0)),
    ("normalize_advantage_string", "MlpPolicy", "CartPole-v1", dict(normalize_advantage="yes")),
    ("ent_coef_tensor", "MlpPolicy", "CartPole-v1", dict(ent_coef=th.tensor(0.01))),
    ("vf_coef_tensor", "MlpPolicy", "CartPole-v1", dict(vf_coef=th.tensor(0.5))),
    ("verbose_tensor", "MlpPolicy", "CartPole-v1", dict(verbose=th.tensor(0))),
]

# sb3-contrib's tests (tests/test_lstm.py, tests/test_invalid_actions.py)
RECURRENT_CORPUS: list[tuple[str, str, str | Callable[[], Any], dict[str, Any]]] = [
    ("lstm_defaults", "MlpLstmPolicy", "CartPole-v1", dict(n_steps=16, seed=0)),
    (
        "lstm_shared",
        "MlpLstmPolicy",
        "CartPole-v1",
        dict(n_steps=16, seed=0, policy_kwargs=dict(shared_lstm=True, enable_critic_lstm=False)),
    ),
    ("lstm_no_critic", "MlpLstmPolicy", "CartPole-v1", dict(n_steps=16, policy_kwargs=dict(enable_critic_lstm=False))),
    (
        "lstm_contradiction",  # sb3-contrib refuses a shared LSTM beside a critic LSTM
        "MlpLstmPolicy",
        "CartPole-v1",
        dict(n_steps=16, policy_kwargs=dict(shared_lstm=True, enable_critic_lstm=True)),
    ),
    ("lstm_sde", "MlpLstmPolicy", "Pendulum-v1", dict(n_steps=16, sde_sample_freq=4, use_sde=True, clip_range_vf=0.1)),
    ("lstm_batch", "MlpLstmPolicy", "CartPole-v1", dict(n_steps=128, learning_rate=0.0007, batch_size=256, seed=1)),
    ("lstm_old_net_arch", "MlpLstmPolicy", "CartPole-v1", dict(n_steps=16, policy_kwargs=dict(net_arch=[dict(vf=[8])]))),
]
MASKABLE_CORPUS: list[tuple[str, str, str | Callable[[], Any], dict[str, Any]]] = [
    ("mask_defaults", "MlpPolicy", lambda: InvalidActionEnvDiscrete(dim=20, n_invalid_actions=10), dict(n_steps=64, seed=8)),
    (
        "mask_gamma",
        "MlpPolicy",
        lambda: InvalidActionEnvDiscrete(dim=70, n_invalid_actions=55),
        dict(gamma=0.1, seed=32, clip_range=0.4, n_steps=64),
    ),
    ("mask_batch_none", "MlpPolicy", lambda: InvalidActionEnvDiscrete(dim=20, n_invalid_actions=10), dict(batch_size=None)),
    (
        "mask_old_net_arch",
        "MlpPolicy",
        lambda: InvalidActionEnvDiscrete(dim=20, n_invalid_actions=10),
        dict(n_steps=64, policy_kwargs=dict(net_arch=[dict(pi=[8], vf=[8])])),
    ),
]

REFUSED_BEYOND_SB3 = {
    # value: why the package refuses what SB3 takes
    "clip_range_nan": (dict(clip_range=math.nan), "every clipped term is NaN: SB3's loss is NaN at every step"),
}

EDGE_VALUES = (-1.0, 0, 1.5, math.inf, -math.inf, math.nan)
EDGE_PARAMETERS = (
    "learning_rate",
    "gamma",
    "gae_lambda",
    "clip_range",
    "clip_range_vf",
    "ent_coef",
    "vf_coef",
    "max_grad_norm",
    "target_kl",
)
# (parameter, value) that SB3 trains with and the package takes with a warning naming the parameter
WARNED_BEYOND_SB3 = {
    ("learning_rate", 0),
    ("gamma", -1.0),
    ("gamma", 1.5),
    ("gae_lambda", -1.0),
    ("gae_lambda", 1.5),
    ("clip_range", -1.0),
    ("clip_range", 0),
    ("clip_range", -math.inf),
    ("clip_range", math.inf),  # no clipping and kl_coef=0: nothing limits an update
    ("vf_coef", -1.0),
    ("max_grad_norm", -1.0),
    ("max_grad_norm", 0),
    ("target_kl", -1.0),
    ("target_kl", -math.inf),
    ("target_kl", math.nan),
}


def _make_env(env: str | Callable[[], Any]) -> Any:
    return make_vec_env(env, n_envs=1, seed=0)


def _warning_texts(caught: list[warnings.WarningMessage], names: tuple[str, str]) -> list[str]:
    # the class name in a message (SB3's "You are trying to run PPO on the GPU") is the class's own
    texts = {re.sub(rf"\b{names[1]}\b", names[0], str(warning.message)) for warning in caught}
    return sorted(texts)


def outcome(
    algorithm: type, policy: str, env: str | Callable[[], Any], kwargs: dict[str, Any], iterations: int = 1
) -> tuple[str, Any]:
    """("accepted", its warnings) after building the model and training ``iterations``, or ("refused", None)."""
    kwargs = {"device": "cpu", "n_steps": 64, **kwargs}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            model = algorithm(policy, _make_env(env), **kwargs)
            model.learn(iterations * model.n_steps * model.n_envs)
        except (ValueError, AssertionError, TypeError, IndexError, RuntimeError):  # RuntimeError: SB3 fails training
            return "refused", None
    return "accepted", caught


def assert_same(parent: type, algorithm: type, policy: str, env: Any, kwargs: dict[str, Any]) -> None:
    expected, parent_warnings = outcome(parent, policy, env, kwargs)
    got, package_warnings = outcome(algorithm, policy, env, kwargs)
    assert got == expected, f"{parent.__name__}: {expected}, {algorithm.__name__}: {got}"
    if expected == "accepted":
        names = (parent.__name__, algorithm.__name__)
        assert _warning_texts(package_warnings, names) == _warning_texts(parent_warnings, names)


@pytest.fixture(autouse=True)
def one_thread() -> None:
    th.set_num_threads(1)


@pytest.mark.parametrize("case", PPO_CORPUS, ids=[case[0] for case in PPO_CORPUS])
def test_ppo_ewma_agrees_with_ppo(case: tuple) -> None:
    _, policy, env, kwargs = case
    assert_same(PPO, PPO_EWMA, policy, env, kwargs)


@pytest.mark.parametrize("case", PPO_CORPUS, ids=[case[0] for case in PPO_CORPUS])
def test_ppg_ewma_agrees_with_ppo(case: tuple) -> None:
    _, policy, env, kwargs = case
    # PPG's auxiliary phase after every iteration, so that one iteration runs it too
    expected, _ = outcome(PPO, policy, env, kwargs)
    got, _ = outcome(PPG_EWMA, policy, env, {**kwargs, "n_policy_iterations": 1})
    assert got == expected


@pytest.mark.parametrize("case", RECURRENT_CORPUS, ids=[case[0] for case in RECURRENT_CORPUS])
def test_recurrent_ppo_ewma_agrees_with_recurrent_ppo(case: tuple) -> None:
    _, policy, env, kwargs = case
    assert_same(RecurrentPPO, RecurrentPPO_EWMA, policy, env, kwargs)


@pytest.mark.parametrize("case", MASKABLE_CORPUS, ids=[case[0] for case in MASKABLE_CORPUS])
def test_maskable_ppo_ewma_agrees_with_maskable_ppo(case: tuple) -> None:
    _, policy, env, kwargs = case
    assert_same(MaskablePPO, MaskablePPO_EWMA, policy, env, kwargs)


def test_a_function_that_builds_the_policy_is_taken_as_the_parents_take_it() -> None:
    # SB3 calls policy_class(...) on what it is given; PPG needs its own policies (their auxiliary value head)
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
    from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
    from stable_baselines3.common.policies import ActorCriticPolicy

    def factory(policy_class: type) -> Any:
        return lambda *args, **kwargs: policy_class(*args, **kwargs)

    masked = lambda: InvalidActionEnvDiscrete(dim=4, n_invalid_actions=1)  # noqa: E731
    for parent, algorithm, policy, env in (
        (PPO, PPO_EWMA, ActorCriticPolicy, "CartPole-v1"),
        (RecurrentPPO, RecurrentPPO_EWMA, RecurrentActorCriticPolicy, "CartPole-v1"),
        (MaskablePPO, MaskablePPO_EWMA, MaskableActorCriticPolicy, masked),
    ):
        assert outcome(parent, factory(policy), env, {})[0] == "accepted"
        assert outcome(algorithm, factory(policy), env, {})[0] == "accepted", algorithm.__name__
    with pytest.raises(ValueError, match="policy must be a PPG policy"):
        PPG_EWMA(factory(ActorCriticPolicy), "CartPole-v1", device="cpu")


def test_the_deprecated_net_arch_warns_once_as_in_sb3() -> None:
    # SB3's policy reads the old form and warns; the proximal policy's copy does not warn again
    kwargs = dict(policy_kwargs=dict(net_arch=[dict(pi=[4], vf=[8])]))
    for algorithm in (PPO, PPO_EWMA, PPG_EWMA):
        with pytest.warns(UserWarning, match="you should now pass directly a dictionary") as caught:
            model = algorithm("MlpPolicy", "CartPole-v1", n_steps=64, device="cpu", **kwargs)
        assert sum("shared layers" in str(warning.message) for warning in caught) == 1
        layers = [module.out_features for module in model.policy.mlp_extractor.value_net if hasattr(module, "out_features")]
        assert layers == [8]


@pytest.mark.parametrize("value", EDGE_VALUES, ids=str)
@pytest.mark.parametrize("name", EDGE_PARAMETERS)
def test_the_edges_of_each_range_agree_with_ppo(name: str, value: float) -> None:
    kwargs = {"n_steps": 16, "batch_size": 16, "n_epochs": 2, "seed": 0, name: value}
    expected, parent_warnings = outcome(PPO, "MlpPolicy", "CartPole-v1", kwargs, iterations=2)
    got, package_warnings = outcome(PPO_EWMA, "MlpPolicy", "CartPole-v1", kwargs, iterations=2)
    if {name: value} in [refused for refused, _ in REFUSED_BEYOND_SB3.values()]:  # math.nan: the same object
        assert (expected, got) == ("accepted", "refused")
        return
    assert got == expected, f"PPO: {expected}, PPO_EWMA: {got}"
    if expected == "refused":
        return
    names = ("PPO", "PPO_EWMA")
    extra = set(_warning_texts(package_warnings, names)) - set(_warning_texts(parent_warnings, names))
    assert bool(extra) == ((name, value) in WARNED_BEYOND_SB3), extra
    assert all(text.startswith(f"{name}={value!r}") for text in extra), extra


# other types than the defaults' (numpy scalars, floats, booleans, levels beyond 0-2)
TYPE_CASES = [
    dict(n_steps=16.0),
    dict(batch_size=np.int64(16)),
    dict(n_epochs=np.int16(2)),
    dict(n_epochs=True),
    dict(batch_size=True, normalize_advantage=False),
    dict(seed=1.0),
    dict(seed=np.int64(3)),
    dict(gamma=np.float32(0.9)),
    dict(clip_range=np.float32(0.1)),
    dict(normalize_advantage=np.bool_(True)),
    dict(verbose=-1),
    dict(verbose=1.5),
    dict(stats_window_size=10.0),
    dict(n_steps=np.uint8(16)),
    dict(n_steps=True),  # refused by both (SB3: n_steps * n_envs must be greater than 1; its buffer takes no bool)
    dict(gamma=True),
    dict(clip_range=True),
    dict(max_grad_norm=True),
    dict(target_kl=True),
]


@pytest.mark.parametrize("kwargs", TYPE_CASES, ids=[repr(case) for case in TYPE_CASES])
def test_the_types_sb3_takes_agree_with_ppo(kwargs: dict) -> None:
    kwargs = {"n_steps": 16, "batch_size": 16, "n_epochs": 2, **kwargs}
    expected, _ = outcome(PPO, "MlpPolicy", "CartPole-v1", kwargs, iterations=2)
    assert outcome(PPO_EWMA, "MlpPolicy", "CartPole-v1", kwargs, iterations=2)[0] == expected


@pytest.mark.parametrize("name", list(REFUSED_BEYOND_SB3))
def test_the_values_refused_beyond_sb3_are_exactly_these(name: str) -> None:
    kwargs, _ = REFUSED_BEYOND_SB3[name]
    assert outcome(PPO, "MlpPolicy", "CartPole-v1", kwargs)[0] == "accepted"
    with pytest.raises(ValueError, match=re.escape(next(iter(kwargs)))):
        PPO_EWMA("MlpPolicy", "CartPole-v1", device="cpu", **kwargs)


def test_an_accepted_input_trains_the_same() -> None:
    # the old net_arch form: PPO_EWMA without an EWMA is SB3's PPO, number for number
    kwargs = dict(
        n_steps=64, batch_size=32, n_epochs=2, seed=3, device="cpu", policy_kwargs=dict(net_arch=[dict(pi=[8], vf=[8])])
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = PPO("MlpPolicy", gym.make("CartPole-v1"), **kwargs).learn(128)
        model = PPO_EWMA("MlpPolicy", gym.make("CartPole-v1"), ewma_decay=None, imp_samp_max=0, **kwargs).learn(128)
    for expected, got in zip(reference.policy.parameters(), model.policy.parameters()):
        assert th.equal(expected, got)


# learn's and predict's arguments beyond the defaults, on a model of each class
CALL_CASES: dict[str, Callable[[Any], Any]] = {
    "learn_0": lambda model: model.learn(0),
    "learn_negative": lambda model: model.learn(-5),
    "learn_float": lambda model: model.learn(1.5),
    "learn_numpy": lambda model: model.learn(np.int64(32)),
    "log_interval_negative": lambda model: model.learn(32, log_interval=-1),
    "log_interval_float": lambda model: model.learn(32, log_interval=2.0),
    "log_interval_string": lambda model: model.learn(32, log_interval="1"),
    "callback_list": lambda model: model.learn(32, callback=[]),
    "callback_function": lambda model: model.learn(32, callback=lambda _locals, _globals: True),
    "predict_list": lambda model: model.predict([0.0, 0.0, 0.0, 0.0]),
    "predict_batch": lambda model: model.predict(np.zeros((3, 4))),
    "predict_wrong_shape": lambda model: model.predict(np.zeros(5)),
    "predict_integers": lambda model: model.predict(np.zeros(4, dtype=np.int64)),
    "predict_nan": lambda model: model.predict(np.full(4, np.nan)),
    "set_random_seed_negative": lambda model: model.set_random_seed(-1),
}


def _call_outcome(algorithm: type, call: Callable[[Any], Any]) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = algorithm("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu", seed=0)
        try:
            call(model)
        except (ValueError, AssertionError, TypeError, IndexError, RuntimeError):
            return "refused"
    return "accepted"


@pytest.mark.parametrize("name", list(CALL_CASES))
def test_learn_and_predict_arguments_agree_with_ppo(name: str) -> None:
    assert _call_outcome(PPO_EWMA, CALL_CASES[name]) == _call_outcome(PPO, CALL_CASES[name])


@pytest.mark.parametrize(
    "kwargs",
    [
        # rl-zoo3's way to load a model of another version (enjoy.py)
        dict(custom_objects={"learning_rate": 0.0, "lr_schedule": lambda _: 0.0, "clip_range": lambda _: 0.0}),
        dict(env="n_envs=4"),
        dict(env="n_envs=1", n_steps=64),
        dict(env="n_envs=1", batch_size=64),
        dict(env="n_envs=1", learning_rate=0.0),
        dict(unknown_keyword=1),
        dict(policy_kwargs=dict(net_arch=[8])),  # refused by both: not the saved policy's
    ],
    ids=["custom_objects", "more_envs", "n_steps", "batch_size", "learning_rate_0", "unknown_keyword", "policy_kwargs"],
)
def test_load_arguments_agree_with_ppo(kwargs: dict, tmp_path) -> None:
    def loaded(algorithm: type) -> str:
        path = tmp_path / f"{algorithm.__name__}.zip"
        settings = {**kwargs}
        if "env" in settings:
            settings["env"] = make_vec_env("CartPole-v1", n_envs=int(settings["env"].split("=")[1]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            algorithm("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=16, device="cpu", seed=0).learn(32).save(path)
            try:
                model = algorithm.load(path, device="cpu", **settings)
                if model.env is not None:
                    model.learn(64, reset_num_timesteps=False)
            except (ValueError, AssertionError, TypeError, KeyError, RuntimeError):
                return "refused"
        return "accepted"

    assert loaded(PPO_EWMA) == loaded(PPO)
