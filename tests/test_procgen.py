import importlib
import re
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import VecMonitor, VecNormalize, VecTransposeImage, is_vecenv_wrapped

import sb3_ewma.envs
from sb3_ewma.envs import (
    PROCGEN_GAMES,
    PROCGEN_NORMALIZATION_CONSTANTS,
    ProcgenGymnasiumEnv,
    ProcgenMonitor,
    ProcgenVecEnv,
    make_procgen_env,
    normalized_return,
    parse_procgen_env_id,
    register_procgen_envs,
)
from sb3_ewma.envs.procgen import check_procgen_args

try:
    import procgen
except ImportError:  # the tests that do not need it still run
    procgen = None

requires_procgen = pytest.mark.skipif(procgen is None, reason="needs procgen: pip install -e '.[procgen]'")

th.set_num_threads(1)

# bigfish (easy) ends episodes quickly under random actions (the fish gets eaten), with nonzero rewards;
# num_threads=0 keeps procgen on the calling thread (2 shared cores)
GAME, MODE = "bigfish", "easy"


def make(n_envs: int = 2, seed: int | None = 0, game: str = GAME, **kwargs) -> ProcgenVecEnv:
    return make_procgen_env(game, n_envs=n_envs, distribution_mode=MODE, seed=seed, num_threads=0, **kwargs)


def random_actions(n_steps: int, n_envs: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 15, size=(n_steps, n_envs))


def test_games_and_normalized_return():
    assert len(PROCGEN_GAMES) == 16
    if procgen is not None:
        assert sorted(PROCGEN_GAMES) == sorted(procgen.env.ENV_NAMES)
    for mode in ("easy", "hard"):
        assert set(PROCGEN_NORMALIZATION_CONSTANTS[mode]) == set(PROCGEN_GAMES)
    # (R - R_min) / (R_max - R_min), constants of the Procgen paper
    assert normalized_return("starpilot", 1.5, "hard") == 0.0
    assert normalized_return("starpilot", 35.0, "hard") == 1.0
    assert normalized_return("starpilot", 18.25, "hard") == pytest.approx(0.5)  # 1.5 + 33.5 / 2
    assert normalized_return("starpilot", 33.25, "easy") == pytest.approx(0.5)  # 2.5 + 61.5 / 2
    assert normalized_return("fruitbot", 0.0, "easy") == pytest.approx(1.5 / 33.9)  # (0 + 1.5) / (32.4 + 1.5)
    assert normalized_return("fruitbot", 0.0, "hard") == pytest.approx(0.5 / 27.7)
    assert normalized_return("bigfish", 10.0, "hard") == pytest.approx(0.25)
    assert normalized_return("bigfish", 10.0, "easy") == pytest.approx(9.0 / 39.0)
    np.testing.assert_allclose(normalized_return("coinrun", np.array([5.0, 7.5, 10.0]), "easy"), [0.0, 0.5, 1.0])
    with pytest.raises(ValueError, match="distribution_mode"):
        normalized_return("coinrun", 10.0, "memory")
    with pytest.raises(ValueError, match="game must be one of"):
        normalized_return("pong", 10.0, "hard")


def test_normalized_return_never_assumes_the_mode():
    # the easy and hard constants differ (starpilot: 2.5..64 vs 1.5..35): a game alone is refused
    with pytest.raises(ValueError, match="distribution_mode is required"):
        normalized_return("starpilot", 20.0)
    # an environment id names its mode
    assert normalized_return("procgen-starpilot-easy", 33.25) == pytest.approx(0.5)
    assert normalized_return("procgen-starpilot-hard", 18.25) == pytest.approx(0.5)
    assert normalized_return("procgen-starpilot-easy", 33.25, "easy") == pytest.approx(0.5)
    with pytest.raises(ValueError, match="contradicts the environment id"):
        normalized_return("procgen-starpilot-easy", 33.25, "hard")
    np.testing.assert_allclose(normalized_return("procgen-coinrun-hard", np.array([5.0, 10.0])), [0.0, 1.0])


@requires_procgen
def test_episode_statistics_match_raw_procgen():
    # leaper (easy) under random actions: many short episodes, and some levels completed (reward 10)
    game, n_envs, n_steps, seed = "leaper", 4, 1500, 123
    actions = random_actions(n_steps, n_envs)
    # the raw procgen env and the adapter, same seed, stepped in lockstep with the same actions
    raw = procgen.ProcgenEnv(num_envs=n_envs, env_name=game, distribution_mode=MODE, rand_seed=seed, num_threads=0)
    env = make(n_envs, seed=seed, game=game)
    obs = env.reset()
    assert obs.dtype == np.uint8 and obs.shape == (n_envs, 64, 64, 3)
    np.testing.assert_array_equal(obs, raw.reset()["rgb"])

    returns, lengths = np.zeros(n_envs), np.zeros(n_envs, dtype=int)
    expected, got = [], []
    for t in range(n_steps):
        raw_obs, raw_rewards, firsts, raw_infos = raw.step(actions[t].astype(np.int32))
        returns += raw_rewards
        lengths += 1
        for i in np.flatnonzero(firsts):
            expected.append((t, i, returns[i], lengths[i], bool(raw_infos[i]["prev_level_complete"])))
            returns[i], lengths[i] = 0.0, 0

        new_obs, rewards, dones, infos = env.step(actions[t])
        assert new_obs.dtype == np.uint8 and rewards.dtype == np.float32 and dones.dtype == bool
        np.testing.assert_array_equal(new_obs, raw_obs["rgb"])
        np.testing.assert_array_equal(rewards, raw_rewards)
        for i in np.flatnonzero(dones):
            info = infos[i]
            episode = info["episode"]
            got.append((t, i, episode["r"], episode["l"], episode["level_complete"]))
            assert episode["normalized_return"] == pytest.approx(normalized_return(game, episode["r"], MODE))
            assert episode["level_seed"] == raw_infos[i]["prev_level_seed"]
            assert info["is_success"] == episode["level_complete"]
            assert info["TimeLimit.truncated"] is False
            # the best procgen offers: the observation before the final action
            np.testing.assert_array_equal(info["terminal_observation"], obs[i])
        assert all("episode" not in infos[i] for i in np.flatnonzero(~dones))
        obs = new_obs
    raw.env.close()
    env.close()

    assert len(got) == len(expected) >= 20
    for (t, i, ret, length, complete), (t2, i2, ret2, length2, complete2) in zip(got, expected):
        assert (t, i, length, complete) == (t2, i2, length2, complete2)
        assert ret == pytest.approx(ret2, abs=1e-5)
    assert any(ret != 0 for _, _, ret, _, _ in got)
    assert any(complete for *_, complete in got) and not all(complete for *_, complete in got)


@requires_procgen
def test_cnn_policy_wraps_channel_first_and_learns():
    env = make(2)
    assert env.observation_space == gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
    assert env.action_space == gym.spaces.Discrete(15)
    model = PPO("CnnPolicy", env, n_steps=16, batch_size=32, n_epochs=1, seed=0, device="cpu")
    assert isinstance(model.env, VecTransposeImage)
    assert model.env.observation_space.shape == (3, 64, 64)
    assert model.env.observation_space.dtype == np.uint8
    model.learn(64)
    assert model.num_timesteps == 64
    # Monitor-style statistics: evaluate_policy uses them without warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        returns, lengths = evaluate_policy(model, model.get_env(), n_eval_episodes=2, return_episode_rewards=True)
    assert len(returns) == 2 and all(length > 0 for length in lengths)
    env.close()


@requires_procgen
def test_seeding_is_reproducible():
    first = make(3, seed=7).reset()
    assert np.array_equal(first, make(3, seed=7).reset())
    assert not np.array_equal(first, make(3, seed=8).reset())
    # procgen seeds are int32: seeds are taken modulo 2**31
    assert np.array_equal(first, make(3, seed=7 + 2**31).reset())

    env = make(3, seed=8)
    assert env.seed(7) == [7, 7, 7]
    np.testing.assert_array_equal(env.reset(), first)  # seed() applies at the next reset (rebuild)

    # a reset after steps starts new levels, reproducibly
    actions = random_actions(5, 3)
    other = make(3, seed=7)
    for env_ in (env, other):
        env_.reset()
        for action in actions:
            env_.step(action)
    after_env, after_other = env.reset(), other.reset()
    np.testing.assert_array_equal(after_env, after_other)
    assert not np.array_equal(after_env, first)
    # a reset of a fresh environment keeps its levels
    np.testing.assert_array_equal(env.reset(), after_env)
    # SB3's seeding path: PPO(seed=...) calls env.seed before learn() resets
    model = PPO("CnnPolicy", make(3, seed=99), n_steps=8, batch_size=24, n_epochs=1, seed=7, device="cpu")
    np.testing.assert_array_equal(model.get_env().reset(), first.transpose(0, 3, 1, 2))


@requires_procgen
def test_close_releases_procgen():
    env = make(2)
    env.reset()
    procgen_env = env._env
    env.close()
    assert procgen_env.closed and env._env is None
    with pytest.raises(RuntimeError, match="closed"):
        env.step(np.zeros(2, dtype=int))
    env.close()  # idempotent


@requires_procgen
def test_reward_normalization():
    n_envs, n_steps, gamma = 4, 400, 0.99
    actions = random_actions(n_steps, n_envs, seed=1)
    raw_env = make(n_envs, seed=3)
    env = make(n_envs, seed=3, normalize_reward=True, gamma=gamma, clip_reward=10.0)
    assert isinstance(env, VecNormalize)
    assert not env.norm_obs and env.norm_reward and env.gamma == gamma and env.clip_reward == 10.0
    raw_env.reset()
    obs = env.reset()
    assert obs.dtype == np.uint8
    returns = np.zeros(n_envs)
    changed, episodes = 0, 0
    for t in range(n_steps):
        _, raw_rewards, raw_dones, raw_infos = raw_env.step(actions[t])
        obs, rewards, dones, infos = env.step(actions[t])
        assert obs.dtype == np.uint8
        # per-env discounted return, divided by the running std of these returns, clipped
        returns = gamma * returns + raw_rewards
        std = np.sqrt(env.ret_rms.var + env.epsilon)
        np.testing.assert_allclose(rewards, np.clip(raw_rewards / std, -10, 10), rtol=1e-5)
        returns[raw_dones] = 0.0
        np.testing.assert_allclose(env.returns, returns)
        changed += int(np.sum(~np.isclose(rewards, raw_rewards) & (raw_rewards != 0)))
        np.testing.assert_array_equal(dones, raw_dones)
        for i in np.flatnonzero(dones):
            # raw returns in the episode statistics
            assert infos[i]["episode"]["r"] == raw_infos[i]["episode"]["r"]
            episodes += 1
    assert changed > 0 and episodes > 0


def test_argument_validation():
    with pytest.raises(ValueError, match=r"env_name must be one of .*bigfish"):
        make_procgen_env("pong")
    with pytest.raises(ValueError, match=r"distribution_mode must be one of .*easy.*hard"):
        make_procgen_env("coinrun", distribution_mode="medium")
    with pytest.raises(ValueError, match=r"distribution_mode 'memory' is only available for env_name in .*maze"):
        make_procgen_env("bigfish", distribution_mode="memory")
    with pytest.raises(ValueError, match="n_envs must be an integer >= 1"):
        make_procgen_env("coinrun", n_envs=0)
    with pytest.raises(ValueError, match="num_levels"):
        make_procgen_env("coinrun", num_levels=-1)
    with pytest.raises(ValueError, match=r"render_mode must be one of .*rgb_array"):
        make_procgen_env("coinrun", render_mode="human")
    with pytest.raises(ValueError, match=r"unknown procgen keyword argument.*rand_seed"):
        make_procgen_env("coinrun", rand_seed=3)
    with pytest.raises(ValueError, match="num_levels and start_level"):
        make_procgen_env("maze", distribution_mode="exploration", num_levels=10)


def test_procgen_option_values_that_abort_the_process_are_refused(monkeypatch, tmp_path):
    # procgen: "fassert failed 'num_threads >= 0'", "fatal: invalid dtype for option ...", "fatal: failed to load
    # image", each ending the process without a Python error; said before procgen is imported
    monkeypatch.setitem(sys.modules, "procgen", None)
    for options, message in (
        (dict(num_threads=-1), "num_threads must be an integer >= 0, got -1"),
        (dict(num_threads="2"), "num_threads must be an integer >= 0, got '2'"),
        (dict(debug_mode=1.5), "debug_mode must be an integer, got 1.5"),
        (dict(resource_root=str(tmp_path / "none") + "/"), "resource_root must be the path of an existing folder"),
        (dict(resource_root=str(tmp_path)), "resource_root must be the path of an existing folder ending with '/'"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            make_procgen_env("coinrun", **options)
    # what procgen takes: its boolean options as any value, a negative debug_mode
    check_procgen_args("coinrun", procgen_kwargs=dict(num_threads=0, debug_mode=-1, use_backgrounds=1, center_agent=0))
    check_procgen_args("coinrun", procgen_kwargs=dict(resource_root=str(tmp_path) + "/"))


def test_arguments_are_checked_before_procgen_is_imported(monkeypatch):
    """A seed that is no integer, or a gamma that is no number, is said even where procgen is not installed."""
    monkeypatch.setitem(sys.modules, "procgen", None)
    with pytest.raises(ValueError, match="seed must be an integer or None, got 'x'"):
        make_procgen_env("coinrun", seed="x")
    with pytest.raises(ValueError, match=r"gamma must be a number in \[0, 1\], got '0\.99'"):
        make_procgen_env("coinrun", normalize_reward=True, gamma="0.99")
    with pytest.raises(ValueError, match="clip_reward must be a number > 0, got None"):
        make_procgen_env("coinrun", normalize_reward=True, clip_reward=None)


def test_missing_procgen_raises_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "procgen", None)
    # a fresh import of the package works without procgen (the original modules are restored afterwards)
    monkeypatch.setattr(sb3_ewma, "envs", sb3_ewma.envs)
    for name in ("sb3_ewma.envs", "sb3_ewma.envs.procgen"):
        monkeypatch.delitem(sys.modules, name)
    envs = importlib.import_module("sb3_ewma.envs")
    with pytest.raises(ImportError, match=r'pip install -e "\.\[procgen\]"'):
        envs.make_procgen_env("coinrun", n_envs=2)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[procgen\]"'):
        envs.ProcgenGymnasiumEnv("coinrun")


def test_missing_system_library_names_the_package(monkeypatch):
    """A machine without libGL.so.1: procgen's libenv.so cannot be loaded when its environment is built (cffi raises
    an OSError there; the gymnasium environment builds at its first reset), and the error names the system package to
    install and LD_LIBRARY_PATH."""
    from sb3_ewma.envs import procgen as procgen_module

    library = "/site-packages/procgen/data/prebuilt/libenv.so"
    errors = {
        "libGL.so.1": OSError(f"cannot load library '{library}': libGL.so.1: cannot open shared object file: No such file"),
        "libglib-2.0.so.0": OSError(f"cannot load library '{library}': libglib-2.0.so.0: cannot open shared object file"),
        "unrelated": OSError("[Errno 24] Too many open files"),
    }

    def failing_class(error: OSError) -> type:
        class FailingEnv:
            def __init__(self, **kwargs):
                raise error

        return FailingEnv

    monkeypatch.setattr(procgen_module, "_procgen_env_class", lambda: failing_class(errors["libGL.so.1"]))
    for build in (lambda: make_procgen_env("coinrun", n_envs=2), lambda: ProcgenGymnasiumEnv("coinrun").reset()):
        with pytest.raises(OSError) as raised:
            build()
        message = str(raised.value)
        assert "libGL.so.1" in message and "`apt-get install libgl1` (Debian, Ubuntu)" in message
        assert "`dnf install mesa-libGL` (Fedora, RHEL)" in message and "LD_LIBRARY_PATH" in message
        assert raised.value.__cause__ is errors["libGL.so.1"]
    monkeypatch.setattr(procgen_module, "_procgen_env_class", lambda: failing_class(errors["libglib-2.0.so.0"]))
    with pytest.raises(OSError, match=r"here libglib-2\.0\.so\.0\. Install it: `apt-get install libglib2\.0-0`"):
        make_procgen_env("coinrun", n_envs=2)
    monkeypatch.setattr(procgen_module, "_procgen_env_class", lambda: failing_class(errors["unrelated"]))
    with pytest.raises(OSError) as raised:
        make_procgen_env("coinrun", n_envs=2)
    assert raised.value is errors["unrelated"]  # any other OSError passes through as it was


def test_gymnasium_registration():
    env_ids = register_procgen_envs()
    assert len(env_ids) == 32 and "procgen-starpilot-easy" in env_ids and "procgen-coinrun-hard" in env_ids
    assert all(env_id in gym.registry for env_id in env_ids)
    assert parse_procgen_env_id("procgen-starpilot-easy") == ("starpilot", "easy")
    assert parse_procgen_env_id("procgen-coinrun-hard") == ("coinrun", "hard")
    for bad in ("procgen-pong-easy", "procgen-starpilot-medium", "CartPole-v1", "procgen-starpilot-v0"):
        assert parse_procgen_env_id(bad) is None


@requires_procgen
def test_gymnasium_make():
    env = gym.make("procgen-bigfish-easy", num_threads=0)
    obs, info = env.reset(seed=5)
    assert obs.shape == (64, 64, 3) and obs.dtype == np.uint8 and "level_seed" in info
    # same first frame as the vectorized env with the same seed
    np.testing.assert_array_equal(obs, make(1, seed=5).reset()[0])
    previous = obs
    for action in random_actions(2000, 1, seed=2)[:, 0]:
        obs, reward, terminated, truncated, info = env.step(action)
        assert not truncated and isinstance(reward, float)
        if terminated:
            break
        previous = obs
    assert terminated and "level_complete" in info
    np.testing.assert_array_equal(obs, previous)  # the observation before the final action
    new_obs, _ = env.reset()
    assert not np.array_equal(new_obs, obs)
    env.close()

    single = ProcgenGymnasiumEnv("coinrun", distribution_mode="hard", render_mode="rgb_array")
    first, _ = single.reset(seed=1)
    assert single.render().shape == (512, 512, 3)
    single.step(0)
    # a reset mid-episode rebuilds procgen; reset(seed=...) reproduces the levels
    assert np.array_equal(single.reset(seed=1)[0], first)
    single.close()


@requires_procgen
def test_vec_env_api_and_rendering():
    env = make(2, render_mode="rgb_array")
    env.reset()
    assert env.get_attr("render_mode") == ["rgb_array", "rgb_array"]
    assert env.get_attr("env_name", indices=1) == [GAME]
    assert env.has_attr("distribution_mode") and not env.has_attr("no_such_attribute")
    env.set_attr("custom", 3)
    assert env.get_attr("custom") == [3, 3]
    with pytest.raises(ValueError, match="indices=None"):
        env.set_attr("custom", 4, indices=[0])
    assert env.env_method("get_images", indices=[0])[0][0].shape == (512, 512, 3)
    # the episode statistics come from SB3's VecMonitor (evaluate_policy reads them)
    assert is_vecenv_wrapped(env, VecMonitor) and isinstance(env, ProcgenMonitor)
    assert env.env_is_wrapped(Monitor) == [False, False]
    assert env.env_is_wrapped(gym.Wrapper) == [False, False]
    assert env.metadata["render_fps"] == 15 and "rgb_array" in env.metadata["render_modes"]
    frames = env.get_images()
    assert len(frames) == 2 and frames[0].shape == (512, 512, 3) and frames[0].dtype == np.uint8
    assert env.render().shape == (1024, 512, 3)  # 2 frames tiled
    env.close()

    env = make(2, render_mode=None)
    obs = env.reset()
    np.testing.assert_array_equal(np.stack(env.get_images()), obs)
    env.close()
