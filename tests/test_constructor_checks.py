"""
Checks of what the constructors, ``learn`` and ``predict`` pass on to SB3 unchecked (``sb3_ewma.common.checks``): each
mistake gets a ``ValueError`` naming the argument, the value and what is allowed, where SB3 fails later with an
unrelated message. The functions are pure; the constructors check their arguments against the rules
(:func:`sb3_ewma.common.rules.check_arguments`), ``learn`` :func:`check_callback` and ``MaskablePPO_EWMA.predict``
:func:`check_action_masks`.

Each test names the upstream (SB3, sb3-contrib) behavior it covers.
"""

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.callbacks import CheckpointCallback, EvalCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.policies import ActorCriticPolicy

import sb3_ewma.common.checks as checks
from sb3_ewma import PPG, PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA
from sb3_ewma.common.checks import (
    HyperparameterError,
    check_action_masks,
    check_callback,
    check_env_argument,
    check_observation_space,
    check_policy_kwargs,
    count_observations,
    warn_cuda_unavailable,
)
from sb3_ewma.common.rules import RULES, check_hyperparameters


def check_policy_argument(policy: object) -> None:
    check_hyperparameters({"policy": policy}, RULES)


def check_verbose(verbose: object) -> None:
    check_hyperparameters({"verbose": verbose}, RULES)


def test_policy_none() -> None:
    # SB3: 'NoneType' object is not callable, in _setup_model
    with pytest.raises(ValueError, match=r"policy must be a policy's name \('MlpPolicy', .*\), a policy class .*got None"):
        check_policy_argument(None)
    with pytest.raises(HyperparameterError, match=r"got 3"):
        check_policy_argument(3)
    with pytest.raises(HyperparameterError, match=r"got <class 'int'>"):  # a class, but no policy's
        check_policy_argument(int)
    check_policy_argument("MlpPolicy")
    check_policy_argument(ActorCriticPolicy)
    check_policy_argument(lambda *args, **kwargs: ActorCriticPolicy(*args, **kwargs))  # SB3 calls what it is given


def test_env_none() -> None:
    # SB3: AttributeError: 'NoneType' object has no attribute 'observation_space'
    with pytest.raises(ValueError, match=r"env must be an environment to train on: .* got None \(to only load a model"):
        check_env_argument(None)
    check_env_argument(None, init_setup_model=False)  # as load() builds the model
    with pytest.raises(ValueError, match=r"env must be a gymnasium environment, a VecEnv or a registered id .*got 42"):
        check_env_argument(42)
    check_env_argument("CartPole-v1")
    check_env_argument(gym.make("CartPole-v1"))
    check_env_argument(make_vec_env("CartPole-v1"))


@pytest.mark.parametrize("verbose", ["yes", None, "1"])
def test_verbose_not_a_level(verbose: object) -> None:
    # SB3: '>=' not supported between instances of 'str' and 'int'
    with pytest.raises(ValueError, match=rf"verbose must be a number: 0 or less \(no output\), .*got {verbose!r}"):
        check_verbose(verbose)


def test_verbose_levels_pass() -> None:
    # SB3 compares verbose with 1 and 2: any number is a level (-1 and 0.5 are quiet)
    for verbose in (0, 1, 2, True, False, np.int64(1), -1, 1.5, 3):
        check_verbose(verbose)


@pytest.mark.parametrize(
    "policy_kwargs, shown",
    [
        (dict(net_arch="big"), "'big'"),  # SB3: a torch.empty size error when the policy is built
        (dict(net_arch=[64, "64"]), r"\[64, '64'\]"),
        (dict(net_arch=[64, -1]), r"\[64, -1\]"),
        (dict(net_arch=[dict(pi=[64], vf="64")]), r"\[\{'pi': \[64\], 'vf': '64'\}\]"),
        (dict(net_arch=dict(pi=64, vf=[64])), r"\{'pi': 64, 'vf': \[64\]\}"),
    ],
)
def test_net_arch_not_sb3s(policy_kwargs: dict, shown: str) -> None:
    with pytest.raises(ValueError, match=rf"policy_kwargs net_arch must be a list of layer sizes .*got {shown}$"):
        check_policy_kwargs(policy_kwargs)


def test_policy_kwargs_that_sb3_takes_pass() -> None:
    for policy_kwargs in (None, {}, dict(net_arch=[]), dict(net_arch=None), dict(net_arch=(32, 32)), dict(ortho_init=False)):
        check_policy_kwargs(policy_kwargs)
    check_policy_kwargs(dict(net_arch=dict(pi=[32], vf=[64, 64])))
    # what SB3's ActorCriticPolicy builds beyond its documented forms: its deprecated list of one dict (with a warning),
    # layers of 0 units, keys other than pi and vf (ignored)
    for net_arch in ([dict(pi=[8], vf=[8])], [dict(vf=[8])], [64, 0], dict(pi=[64], value=[64]), {}):
        check_policy_kwargs(dict(net_arch=net_arch))
    with pytest.raises(ValueError, match=r"policy_kwargs must be None or a dict .*got 'big'"):
        check_policy_kwargs("big")


class TextObservationEnv(gym.Env):
    observation_space = spaces.Text(8)
    action_space = spaces.Discrete(2)


@pytest.mark.parametrize(
    "space, message",
    [
        # SB3: 'NoneType' object is not iterable, when it wraps the environment
        (spaces.Text(8), r"the observation space Text\(1, 8, .*\) \(Text\) is one no policy takes: the policies take Box"),
        (spaces.Tuple([spaces.Text(8)]), r"\(Tuple\) is one no policy takes"),
        (spaces.Dict({"a": spaces.Text(8)}), r"has entries no policy takes \('a': Text\): a Dict's entries must be Box"),
    ],
)
def test_observation_space_no_policy_takes(space: spaces.Space, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_observation_space(space)


@pytest.mark.parametrize(
    "space, message",
    [
        (spaces.Tuple([spaces.Discrete(2)]), r"Tuple\(Discrete\(2\)\) observation space is not supported"),
        (spaces.Dict({"a": spaces.Dict({"b": spaces.Discrete(2)})}), r"Nested observation spaces are not supported"),
    ],
)
def test_observation_spaces_sb3_refuses_clearly_are_left_to_it(space: spaces.Space, message: str) -> None:
    check_observation_space(space)

    class Env(gym.Env):
        observation_space = space
        action_space = spaces.Discrete(2)

    policy = "MultiInputPolicy" if isinstance(space, spaces.Dict) else "MlpPolicy"
    with pytest.raises(NotImplementedError, match=message):
        PPO_EWMA(policy, Env())


def test_observation_spaces_the_policies_take_pass() -> None:
    for space in (
        None,
        spaces.Box(-1, 1, (3,)),
        spaces.Discrete(4),
        spaces.MultiDiscrete([2, 3]),
        spaces.MultiBinary(3),
        spaces.Dict({"a": spaces.Box(-1, 1, (2,)), "b": spaces.Discrete(3)}),
    ):
        check_observation_space(space)


@pytest.mark.parametrize("callback", ["eval", 3, [EvalCallback, None]])
def test_callback_not_a_callback(callback: object) -> None:
    # SB3: 'str' object is not callable, at the first step (after the environments are reset)
    with pytest.raises(ValueError, match=r"callback must be None, a BaseCallback .* or a list of these, got "):
        check_callback(callback)


def test_callbacks_sb3_takes_pass() -> None:
    env = make_vec_env("CartPole-v1")
    for callback in (None, EvalCallback(env), [CheckpointCallback(100, "/nonexistent")], lambda _locals, _globals: True, []):
        check_callback(callback)


@pytest.mark.parametrize(
    "space, masks, n_observations, message",
    [
        # sb3-contrib: shape '[20, 20]' is invalid for input of size 5
        (spaces.Discrete(20), np.ones(5, dtype=bool), None, r"action_masks of shape \(5,\) for the action space Discrete"),
        (spaces.Discrete(4), np.ones((3, 4), dtype=bool), 2, r"hold masks for 3 observation\(s\), and predict was given 2"),
        (spaces.MultiDiscrete([2, 3]), np.ones(6), None, r"each observation needs 5 mask entries"),
        (spaces.MultiBinary(3), np.ones(3), None, r"each observation needs 6 mask entries"),
    ],
)
def test_wrong_mask_shapes(space: spaces.Space, masks: np.ndarray, n_observations: int | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_action_masks(masks, space, n_observations)


def test_masks_maskable_predict_takes_pass() -> None:
    from sb3_contrib.common.envs import InvalidActionEnvDiscrete

    env = InvalidActionEnvDiscrete(dim=5, ep_length=8, n_invalid_actions=1)
    model = MaskablePPO_EWMA("MlpPolicy", env, n_steps=8, batch_size=8, device="cpu")
    observation, _ = env.reset(seed=0)
    masks = env.action_masks()
    check_action_masks(masks, model.action_space, 1)
    check_action_masks(np.stack([masks, masks]), model.action_space, 2)
    check_action_masks(None, model.action_space, 1)
    model.predict(observation, action_masks=masks)  # what passes the check, predict takes
    # how predict would call it
    assert count_observations(observation, model.observation_space) == 1
    assert count_observations(np.stack([observation] * 3), model.observation_space) == 3
    assert count_observations(np.zeros((7, 2)), model.observation_space) is None  # predict's own error
    with pytest.raises(ValueError, match=r"hold masks for 2 observation\(s\), and predict was given 1"):
        check_action_masks(
            np.stack([masks, masks]), model.action_space, count_observations(observation, model.observation_space)
        )
    with pytest.raises(ValueError, match=r"each observation needs 5 mask entries"):
        check_action_masks(masks[:3], model.action_space, 1)


def test_cuda_by_name_without_a_gpu_warns_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # SB3's get_device("cuda") falls back to the CPU without a word
    monkeypatch.setattr(th.cuda, "is_available", lambda: False)
    monkeypatch.setattr(checks, "_CUDA_FALLBACK_WARNED", False)
    with pytest.warns(UserWarning, match=r"device='cuda': no CUDA GPU is available here, so the model trains on the CPU"):
        warn_cuda_unavailable("cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_cuda_unavailable("cuda:1")  # once per process
        monkeypatch.setattr(checks, "_CUDA_FALLBACK_WARNED", False)
        for device in ("auto", "cpu", th.device("cpu")):
            warn_cuda_unavailable(device)
    # a name that is not a device is refused, after the warning as before (torch's RuntimeError in SB3)
    with pytest.raises(ValueError, match=r"^device must be 'auto', 'cpu', 'cuda', 'cuda:N' .*got 'not a device'$"):
        warn_cuda_unavailable("not a device")


@pytest.mark.parametrize("algorithm", [PPO_EWMA, PPG_EWMA, PPG, RecurrentPPO_EWMA, MaskablePPO_EWMA])
def test_every_constructors_arguments_fit_the_check(algorithm: type) -> None:
    """Every constructor checks its arguments before anything is built."""
    policy = "MlpLstmPolicy" if algorithm is RecurrentPPO_EWMA else "MlpPolicy"
    assert algorithm(policy, "CartPole-v1", _init_setup_model=False).env is not None
    # as load() builds a model: the saved policy class, no environment yet
    assert algorithm(algorithm.policy_aliases[policy], None, _init_setup_model=False).env is None
    for mistake, message in [
        ({"verbose": "yes"}, "verbose must be"),
        ({"policy_kwargs": dict(net_arch="big")}, "policy_kwargs net_arch must be"),
    ]:
        with pytest.raises(ValueError, match=message):
            algorithm(policy, "CartPole-v1", **mistake)
    with pytest.raises(ValueError, match="policy must be"):
        algorithm(None, TextObservationEnv())
    with pytest.raises(ValueError, match=r"\(Text\) is one no policy takes"):
        algorithm(policy, TextObservationEnv())
