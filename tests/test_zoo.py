"""
rl-zoo3 integration: ``python -m sb3_ewma.train`` / ``enjoy`` end to end, the hyperparameter files, the samplers,
``--scale-n-envs``, the native Procgen VecEnv and the errors for missing extras.
"""

import argparse
import copy
import importlib
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import yaml

pytest.importorskip("rl_zoo3")

import optuna
import rl_zoo3
import rl_zoo3.hyperparams_opt
from stable_baselines3.common.env_util import make_vec_env

from sb3_ewma import zoo
from sb3_ewma._quiet import import_without_pkg_resources_warning
from sb3_ewma.common.torch_layers import ImpalaCNN
from sb3_ewma.envs import PROCGEN_GAMES, ProcgenMonitor, ProcgenVecEnv
from sb3_ewma.hyperparams_opt import (
    HYPERPARAMS_CONVERTER,
    HYPERPARAMS_SAMPLER,
    convert_ewma_params,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
# the algorithms whose packaged files hold the paper's Procgen entries (and classic-control ones)
PAPER_ALGOS = ("ppo_ewma", "ppg_ewma", "ppg")
ALGO_FILES = {algo: zoo.HYPERPARAMS_DIR / f"{algo}.yml" for algo in PAPER_ALGOS}
CLASSIC_ENVS = ("CartPole-v1", "Acrobot-v1", "LunarLander-v3", "Pendulum-v1")
PPG_KEYS = {"n_policy_iterations", "n_value_epochs", "n_aux_epochs", "beta_clone"}
EWMA_KEYS = {"ewma_decay", "kl_coef", "imp_samp_max"}

try:
    import procgen  # noqa: F401

    HAS_PROCGEN = True
except ImportError:
    HAS_PROCGEN = False

try:
    import Box2D  # noqa: F401

    HAS_BOX2D = True
except ImportError:
    HAS_BOX2D = False

needs_procgen = pytest.mark.skipif(not HAS_PROCGEN, reason="procgen is not installed (pip install -e '.[procgen]')")


def run_module(module: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``python -m module args`` with one thread, failing with its output if it fails."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{module} {args} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return result


def train_in_process(*args: str) -> None:
    """``python -m sb3_ewma.train args`` in this process (one thread, no evaluation, quiet)."""
    from sb3_ewma.train import main

    main(["--num-threads", "1", "--eval-freq", "-1", "--verbose", "0", "--seed", "0", *args])


def saved_run(log_folder: Path, algo: str, env_id: str) -> Path:
    runs = sorted((log_folder / algo).glob(f"{env_id}_*"))
    assert len(runs) == 1, runs
    return runs[0]


def load_entries(algo: str) -> dict[str, Any]:
    with open(ALGO_FILES[algo]) as file:
        return yaml.safe_load(file)


# ----------------------------------------------------------------------------------------------------------------------
# end to end (subprocesses)


@pytest.fixture(scope="module")
def cartpole_log_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log folder with a PPO-EWMA agent trained on CartPole-v1 by ``python -m sb3_ewma.train``."""
    log_folder = tmp_path_factory.mktemp("logs")
    run_module(
        "sb3_ewma.train",
        *("--algo", "ppo_ewma", "--env", "CartPole-v1", "-n", "1000", "-f", str(log_folder)),
        *("--num-threads", "1", "--eval-freq", "-1", "--seed", "0"),
    )
    return log_folder


def test_train_enjoy_cartpole_ppo_ewma(cartpole_log_folder: Path) -> None:
    run_dir = saved_run(cartpole_log_folder, "ppo_ewma", "CartPole-v1")
    assert (run_dir / "CartPole-v1.zip").is_file()
    # without -conf, the package's own file is used (and recorded in args.yml)
    args = yaml.load((run_dir / "CartPole-v1" / "args.yml").read_text(), Loader=yaml.UnsafeLoader)
    assert Path(args["conf_file"]) == ALGO_FILES["ppo_ewma"]
    result = run_module(
        "sb3_ewma.enjoy",
        *("--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(cartpole_log_folder), "-n", "200", "--no-render"),
        *("--num-threads", "1", "--deterministic"),
    )
    assert "Loading" in result.stdout and "Episode Reward" in result.stdout, result.stdout[-2000:]


def test_record_video(cartpole_log_folder: Path, tmp_path: Path) -> None:
    try:
        # as the command does: without imageio_ffmpeg's pkg_resources warning
        import_without_pkg_resources_warning("imageio_ffmpeg")
        import moviepy  # noqa: F401
    except Exception as error:  # moviepy fails with ImportError, or other errors from its ffmpeg helpers
        pytest.skip(f"recording videos needs a working moviepy: {error!r}")
    run_module(
        "sb3_ewma.record_video",
        *("--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(cartpole_log_folder), "-n", "20", "-o", str(tmp_path)),
    )
    assert len(list(tmp_path.glob("*.mp4"))) == 1


def test_train_enjoy_cartpole_ppg_ewma(tmp_path: Path) -> None:
    # 8 policy iterations of 256 steps, then an auxiliary phase
    result = run_module(
        "sb3_ewma.train",
        *("--algo", "ppg_ewma", "--env", "CartPole-v1", "-n", "2100", "-f", str(tmp_path)),
        *("--num-threads", "1", "--eval-freq", "-1", "--seed", "0"),
    )
    assert "phase" in result.stdout
    run_module(
        "sb3_ewma.enjoy",
        *("--algo", "ppg_ewma", "--env", "CartPole-v1", "-f", str(tmp_path), "-n", "100", "--no-render"),
        *(
            "--num-threads",
            "1",
        ),
    )


@needs_procgen
def test_train_enjoy_procgen(tmp_path: Path) -> None:
    run_module(
        "sb3_ewma.train",
        *("--algo", "ppo_ewma", "--env", "procgen-starpilot-easy", "-n", "256", "-f", str(tmp_path)),
        *("--num-threads", "1", "--seed", "0", "--eval-freq", "128", "--eval-episodes", "1"),
        *("-params", "n_envs:4", "n_steps:32", "batch_size:64", "n_epochs:1"),
        *("--env-kwargs", "num_levels:10", "start_level:3"),
    )
    run_dir = saved_run(tmp_path, "ppo_ewma", "procgen-starpilot-easy")
    assert (run_dir / "procgen-starpilot-easy.zip").is_file()
    # rewards normalized by rl-zoo3's VecNormalize with the paper's gamma 0.99 (not the algorithm's 0.999)
    with open(run_dir / "procgen-starpilot-easy" / "vecnormalize.pkl", "rb") as file:
        vec_normalize = pickle.load(file)
    assert (vec_normalize.gamma, vec_normalize.norm_obs, vec_normalize.norm_reward) == (0.99, False, True)
    # the native VecEnv writes the monitor file of the run
    monitor_files = list(run_dir.glob("*.monitor.csv"))
    assert [path.name for path in monitor_files] == ["0.monitor.csv"]
    assert "level_complete" in monitor_files[0].read_text().splitlines()[1]
    result = run_module(
        "sb3_ewma.enjoy",
        *("--algo", "ppo_ewma", "--env", "procgen-starpilot-easy", "-f", str(tmp_path), "-n", "100", "--no-render"),
        *("--num-threads", "1", "--stochastic"),
    )
    assert "Loading running average" in result.stdout


# ----------------------------------------------------------------------------------------------------------------------
# registration and the native Procgen VecEnv


def test_register_zoo() -> None:
    zoo.register_zoo()
    algorithms = zoo.zoo_algorithms()
    for algo in PAPER_ALGOS:
        assert rl_zoo3.ALGOS[algo] is algorithms[algo]
        assert rl_zoo3.hyperparams_opt.HYPERPARAMS_SAMPLER[algo] is HYPERPARAMS_SAMPLER[algo]
        assert rl_zoo3.hyperparams_opt.HYPERPARAMS_CONVERTER[algo] is HYPERPARAMS_CONVERTER[algo]
    assert "procgen-starpilot-hard" in gym.registry
    assert zoo.default_conf_file("ppg") == str(ALGO_FILES["ppg"])
    assert zoo.default_conf_file("ppo") is None
    # the repository-root `hyperparams` is the package's folder
    assert (REPO_ROOT / "hyperparams").resolve() == zoo.HYPERPARAMS_DIR.resolve()


@needs_procgen
def test_make_procgen_vec_env(tmp_path: Path) -> None:
    spec = gym.spec("procgen-coinrun-easy")
    venv = make_vec_env(
        lambda **kwargs: spec.make(**kwargs),
        n_envs=3,
        seed=7,
        env_kwargs={"num_levels": 2, "start_level": 5},
        monitor_dir=str(tmp_path),
        vec_env_cls=zoo.make_procgen_vec_env,  # type: ignore[arg-type]
    )
    assert isinstance(venv, ProcgenMonitor)
    inner = venv.venv
    assert isinstance(inner, ProcgenVecEnv)
    assert (inner.num_envs, inner.env_name, inner.distribution_mode) == (3, "coinrun", "easy")
    assert (inner.num_levels, inner.start_level) == (2, 5)
    obs = venv.reset()
    assert obs.shape == (3, 64, 64, 3)
    for _ in range(5):
        venv.step(np.zeros(3, dtype=np.int64))
    venv.close()
    assert (tmp_path / "0.monitor.csv").is_file()

    # single-environment wrappers cannot be applied to the native VecEnv
    with pytest.raises(ValueError, match="vec_env_wrapper"):
        make_vec_env(
            lambda **kwargs: spec.make(**kwargs),
            n_envs=2,
            wrapper_class=gym.wrappers.ClipReward,  # type: ignore[arg-type]
            wrapper_kwargs={"min_reward": -1.0, "max_reward": 1.0},
            vec_env_cls=zoo.make_procgen_vec_env,  # type: ignore[arg-type]
        )

    # enjoy's create_test_env builds Procgen ids natively, and other ids as rl-zoo3 does
    test_env = zoo.create_test_env(
        "procgen-coinrun-easy", n_envs=2, stats_path=None, seed=0, should_render=False, hyperparams={}
    )
    assert isinstance(test_env.unwrapped, ProcgenVecEnv) and test_env.num_envs == 2
    test_env.close()
    cartpole = zoo.create_test_env("CartPole-v1", n_envs=1, seed=0, should_render=False, hyperparams={})
    assert type(cartpole).__name__ == "DummyVecEnv"
    cartpole.close()


# ----------------------------------------------------------------------------------------------------------------------
# hyperparameter files


@pytest.mark.parametrize("algo", PAPER_ALGOS)
def test_yaml_entries(algo: str) -> None:
    entries = load_entries(algo)
    procgen_ids = {f"procgen-{game}-{mode}" for game in PROCGEN_GAMES for mode in ("easy", "hard")}
    assert procgen_ids <= set(entries)
    assert {"atari", *CLASSIC_ENVS} <= set(entries)
    # besides: ppo_ewma's Swimmer-v4 and Ant-v4, the derived entries with ewma_decay "max_age" (test_zoo_derivation)
    measured = {"Swimmer-v4", "Ant-v4"} if algo == "ppo_ewma" else set()
    assert set(entries) == procgen_ids | {"atari", *CLASSIC_ENVS} | measured

    easy = entries["procgen-bigfish-easy"]
    hard = entries["procgen-bigfish-hard"]
    for game in PROCGEN_GAMES:
        # one anchor per mode: every game has the same settings
        assert entries[f"procgen-{game}-easy"] is easy
        assert entries[f"procgen-{game}-hard"] is hard
    assert {key: value for key, value in hard.items() if key != "n_timesteps"} == {
        key: value for key, value in easy.items() if key != "n_timesteps"
    }
    assert (easy["n_timesteps"], hard["n_timesteps"]) == (25e6, 1e8)
    # the paper's settings (appendix B)
    expected = {
        "policy": "CnnPolicy",
        "n_envs": 64,
        "n_steps": 256,
        "batch_size": 2048,
        "learning_rate": 5e-4,
        "gamma": 0.999,
        "gae_lambda": 0.95,
        "ent_coef": 0.01,
        "vf_coef": 0.5,
        "clip_range": 0.2,
        "max_grad_norm": float("inf"),
        "normalize_advantage": True,
        "advantage_normalization": "ewma",
        "n_epochs": 3 if algo == "ppo_ewma" else 1,
    }
    assert {key: easy[key] for key in expected} == expected
    normalize = eval(easy["normalize"])
    assert normalize == {"norm_obs": False, "norm_reward": True, "gamma": 0.99, "clip_reward": 10.0}
    policy_kwargs = eval(easy["policy_kwargs"], {"ImpalaCNN": ImpalaCNN})
    assert policy_kwargs == {
        "features_extractor_class": ImpalaCNN,
        "net_arch": [],
        "ortho_init": False,
        "head_init_scale": 0.1,
        "optimizer_kwargs": {"eps": 1e-8},
    }
    assert easy["minibatch_sampling"] == "rollouts"
    if algo == "ppo_ewma":
        # the paper's PPO-EWMA age, named: "auto" would give E x M / 2 = 12 with these 3 epochs of 8 minibatches
        assert easy["ewma_decay"] == "paper" and not PPG_KEYS & set(easy)
    else:
        ppg = {"n_policy_iterations": 32, "n_value_epochs": 1, "n_aux_epochs": 6, "beta_clone": 1.0, "aux_batch_size": 1024}
        assert {key: easy[key] for key in ppg} == ppg
        assert easy["aux_minibatch_sampling"] == "rollouts" and easy["aux_optimizer_kwargs"] == {"eps": 1e-8}
        assert easy.get("ewma_decay") == ("auto" if algo == "ppg_ewma" else None)
        for env_id in ("atari", *CLASSIC_ENVS):
            assert PPG_KEYS <= set(entries[env_id]), env_id


@pytest.mark.parametrize("algo", PAPER_ALGOS)
@pytest.mark.parametrize("env_id", CLASSIC_ENVS)
def test_classic_control_entries_train(algo: str, env_id: str, tmp_path: Path) -> None:
    if env_id.startswith("LunarLander") and not HAS_BOX2D:
        pytest.skip("LunarLander needs Box2D: pip install 'gymnasium[box2d]' (in the zoo extra)")
    # one iteration of 32 steps per environment (the entries' n_steps are up to 1024)
    train_in_process("--algo", algo, "--env", env_id, "-n", "100", "-f", str(tmp_path), "-params", "n_steps:32")
    run_dir = saved_run(tmp_path, algo, env_id)
    model = zoo.zoo_algorithms()[algo].load(run_dir / f"{env_id}.zip", device="cpu")
    entry = load_entries(algo)[env_id]
    assert model.n_envs == entry["n_envs"] and model.n_steps == 32
    assert model.num_timesteps == 32 * entry["n_envs"]


@pytest.mark.parametrize("algo", PAPER_ALGOS)
def test_atari_entry_trains(algo: str, tmp_path: Path) -> None:
    pytest.importorskip("ale_py", reason="Atari needs ale-py")
    # rl-zoo3 uses the `atari` entry for every Atari id; shrunk to 2 environments and one 16-step iteration
    shrink = ["n_envs:2", "n_steps:16", "batch_size:16"]
    if algo != "ppo_ewma":
        shrink += ["n_policy_iterations:1", "aux_batch_size:16"]
    env_id = "BreakoutNoFrameskip-v4"
    train_in_process("--algo", algo, "--env", env_id, "-n", "32", "-f", str(tmp_path), "-params", *shrink)
    model = zoo.zoo_algorithms()[algo].load(saved_run(tmp_path, algo, env_id) / f"{env_id}.zip", device="cpu")
    assert model.observation_space.shape == (4, 84, 84) and model.num_timesteps == 32


@needs_procgen
@pytest.mark.parametrize("algo", PAPER_ALGOS)
def test_procgen_entry_builds(algo: str, tmp_path: Path) -> None:
    # the shared hard-mode entry (with the merge key), shrunk: 2 environments, one 16-step iteration
    # (PPG: one policy iteration per phase, so the auxiliary phase runs too)
    shrink = ["n_envs:2", "n_steps:16", "batch_size:16"]
    if algo != "ppo_ewma":
        shrink += ["n_policy_iterations:1", "aux_batch_size:16"]
    env_id = "procgen-bigfish-hard"
    train_in_process("--algo", algo, "--env", env_id, "-n", "32", "-f", str(tmp_path), "-params", *shrink)
    run_dir = saved_run(tmp_path, algo, env_id)
    model = zoo.zoo_algorithms()[algo].load(run_dir / f"{env_id}.zip", device="cpu")
    assert isinstance(model.policy.features_extractor, ImpalaCNN)
    assert model.policy.net_arch == [] and model.policy.ortho_init is False
    assert model.max_grad_norm == float("inf") and model.gamma == 0.999 and model.n_envs == 2
    assert model.advantage_normalization == "ewma"
    assert model.num_timesteps == 32
    # the authors' Adam epsilon, head initialization and minibatches
    assert model.policy.optimizer.defaults["eps"] == 1e-8 and model.policy.head_init_scale == 0.1
    assert model.minibatch_sampling == "rollouts"
    if algo != "ppo_ewma":
        assert model.aux_optimizer.defaults["eps"] == 1e-8 and model.aux_minibatch_sampling == "rollouts"
    if algo == "ppo_ewma":
        assert model.n_epochs == 3
    else:
        assert (model.n_aux_epochs, model.beta_clone, model.arch) == (6, 1.0, "dual")
    assert (model.ewma_decay is None) == (algo == "ppg")
    with open(run_dir / env_id / "vecnormalize.pkl", "rb") as file:
        assert pickle.load(file).gamma == 0.99


# ----------------------------------------------------------------------------------------------------------------------
# hyperparameter search


@pytest.mark.parametrize("algo", PAPER_ALGOS)
def test_samplers(algo: str) -> None:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(3):
        trial = study.ask()
        hyperparams = HYPERPARAMS_SAMPLER[algo](trial, 0, 1, {})
        assert {"batch_size", "n_steps", "gamma", "gae_lambda", "learning_rate", "clip_range", "n_epochs"} <= set(hyperparams)
        assert hyperparams["batch_size"] <= hyperparams["n_steps"]
        assert (EWMA_KEYS <= set(hyperparams)) == (algo != "ppg")
        assert (PPG_KEYS <= set(hyperparams)) == (algo != "ppo_ewma")
        assert "policy_kwargs" not in hyperparams
        # the converter turns the stored raw values into the same settings (up to the batch size bound)
        converted = convert_ewma_params(trial.params)
        converted["batch_size"] = min(converted["batch_size"], converted["n_steps"])
        assert converted == hyperparams
        # the sampled settings are valid constructor arguments
        model = zoo.zoo_algorithms()[algo]("MlpPolicy", "CartPole-v1", device="cpu", **hyperparams)
        assert model.n_steps == hyperparams["n_steps"]
        study.tell(trial, 0.0)


def test_recurrent_sampler_is_rl_zoo3_ppo_lstm_sampler_plus_the_decoupled_options() -> None:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(3):
        trial = study.ask()
        hyperparams = HYPERPARAMS_SAMPLER["ppo_lstm_ewma"](trial, 0, 1, {})
        # rl-zoo3's own sampler, given the same raw values
        parent = rl_zoo3.hyperparams_opt.HYPERPARAMS_SAMPLER["ppo_lstm"](optuna.trial.FixedTrial(trial.params), 0, 1, {})
        assert set(hyperparams) == set(parent) | EWMA_KEYS | {"advantage_normalization"} | (
            {"advantage_ewma_decay"} if trial.params["advantage_normalization"] == "ewma" else set()
        )
        assert hyperparams["batch_size"] == min(parent.pop("batch_size"), hyperparams["n_steps"])
        assert all(hyperparams[key] == value for key, value in parent.items())
        unbounded_batch_size = 2 ** trial.params["batch_size_pow"]
        assert HYPERPARAMS_CONVERTER["ppo_lstm_ewma"](trial.params) == {**hyperparams, "batch_size": unbounded_batch_size}
        model = zoo.zoo_algorithms()["ppo_lstm_ewma"]("MlpLstmPolicy", "CartPole-v1", device="cpu", **hyperparams)
        assert model.n_steps == hyperparams["n_steps"]
        study.tell(trial, 0.0)
    # MaskablePPO_EWMA has PPO_EWMA's hyperparameters
    assert HYPERPARAMS_SAMPLER["ppo_mask_ewma"] is HYPERPARAMS_SAMPLER["ppo_ewma"]


# a task of each algorithm's packaged or derived entries (ppo_mask_ewma: CartPole-v1's derived entry, whose wrapper
# declares every action valid), and the names of the raw values its sampler adds to the PPO space
OPTIMIZE_CASES = {
    "ppo_ewma": ("CartPole-v1", ("ewma_center_of_mass", "kl_coef", "imp_samp_max", "advantage_normalization")),
    "ppg_ewma": ("CartPole-v1", ("ewma_center_of_mass", "kl_coef", "n_policy_iterations", "beta_clone")),
    "ppg": ("CartPole-v1", ("advantage_normalization", "n_policy_iterations", "n_aux_epochs", "beta_clone")),
    # rl-zoo3's ppo_lstm space has the network's size and activation
    "ppo_lstm_ewma": ("CartPoleNoVel-v1", ("net_arch", "activation_fn", "ewma_center_of_mass", "kl_coef")),
    "ppo_mask_ewma": ("CartPole-v1", ("ewma_center_of_mass", "kl_coef", "imp_samp_max", "advantage_normalization")),
}


def test_optimize_covers_every_algorithm() -> None:
    assert set(OPTIMIZE_CASES) == set(zoo.ZOO_ALGOS) == set(HYPERPARAMS_SAMPLER) == set(HYPERPARAMS_CONVERTER)


@pytest.mark.parametrize("algo", OPTIMIZE_CASES)
def test_optimize(algo: str, tmp_path: Path) -> None:
    """Two trials of ``-optimize`` through the command line complete."""
    env_id, sampled_names = OPTIMIZE_CASES[algo]
    # the study is made first, with the size of the rollout and the number of epochs of both trials fixed to small
    # values (everything else is sampled): each trial then takes about a second
    storage = str(tmp_path / "study.log")
    journal = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(storage))
    study = optuna.create_study(storage=journal, study_name="search", direction="maximize")
    for _ in range(2):
        study.enqueue_trial({"n_steps_pow": 6, "batch_size_pow": 6, "n_epochs": 1}, skip_if_exists=False)
    train_in_process(
        *("--algo", algo, "--env", env_id, "-n", "128", "-f", str(tmp_path), "-params", "n_envs:1"),
        *("-optimize", "--n-trials", "2", "--n-jobs", "1", "--eval-episodes", "1", "--n-evaluations", "1"),
        *("--sampler", "random", "--pruner", "none", "--no-optim-plots", "--storage", storage, "--study-name", "search"),
    )
    trials = optuna.load_study(study_name="search", storage=journal).trials
    assert [trial.state for trial in trials] == [optuna.trial.TrialState.COMPLETE] * 2
    for trial in trials:
        assert set(sampled_names) <= set(trial.params) and trial.params["n_steps_pow"] == 6
        assert trial.user_attrs["n_steps"] == 64
        # rl-zoo3 reloads a trial's settings with the converter
        assert HYPERPARAMS_CONVERTER[algo](trial.params)["n_steps"] == 64
    (report,) = (tmp_path / algo).glob(f"report_{env_id}_2-trials-128-random-none_*.csv")
    header = report.read_text().splitlines()[0]
    assert all(f"params_{name}" in header for name in sampled_names)


# ----------------------------------------------------------------------------------------------------------------------
# --scale-n-envs


def test_scale_n_envs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # the ppg_ewma CartPole-v1 entry: 8 envs, batch_size 64, lr lin_0.001, N_pi 8, ewma "auto" with 4 epochs of 4
    # minibatches (center of mass E x M / 2 = 8)
    train_in_process(
        *("--algo", "ppg_ewma", "--env", "CartPole-v1", "-n", "300", "-f", str(tmp_path)),
        *("--scale-n-envs", "2"),
    )
    output = capsys.readouterr().out
    assert "Rescaling the hyperparameters for n_envs=2" in output
    for line in ("n_envs: 8 -> 2", "batch_size: 64 -> 16", "n_policy_iterations: 8 -> 32", "'lin_0.001' -> 'lin_0.0005'"):
        assert line in output
    run_dir = saved_run(tmp_path, "ppg_ewma", "CartPole-v1")
    model = zoo.zoo_algorithms()["ppg_ewma"].load(run_dir / "CartPole-v1.zip", device="cpu")
    assert (model.n_envs, model.batch_size, model.n_policy_iterations, model.n_steps) == (2, 16, 32, 32)
    assert model.ewma_decay == pytest.approx(32 / 33)  # center of mass 8 * c = 32
    config = yaml.load((run_dir / "CartPole-v1" / "config.yml").read_text(), Loader=yaml.UnsafeLoader)
    assert (config["n_envs"], config["learning_rate"]) == (2, "lin_0.0005")


def test_scale_flags_are_parsed_with_rl_zoo3_flags() -> None:
    parser = zoo.TrainArgumentParser(prog="train")
    parser.add_argument("--algo")
    args = parser.parse_args(["--algo", "ppg_ewma", "--scale-n-envs", "4", "--scale-adam-betas"])
    assert args.algo == "ppg_ewma"
    assert zoo.scale_options_from_args(args) == zoo.ScaleOptions(n_envs=4, scale_adam_betas=True)
    assert zoo.scale_options_from_args(parser.parse_args(["--algo", "ppo_ewma"])) is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--scale-adam-betas"])
    with pytest.raises(SystemExit):
        parser.parse_args(["--scale-n-envs", "0"])


@pytest.mark.parametrize("flag, calls", [((), 1), (("--no-keep-freed-memory",), 0)])
def test_train_keeps_freed_memory_unless_told_not_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: tuple[str, ...], calls: int
) -> None:
    made: list[tuple] = []
    monkeypatch.setattr(zoo.experiment, "keep_freed_memory", lambda *args: made.append(args) or True)
    train_in_process(*("--algo", "ppo_ewma", "--env", "CartPole-v1", "-n", "64", "-f", str(tmp_path)), *flag)
    assert len(made) == calls
    assert (saved_run(tmp_path, "ppo_ewma", "CartPole-v1") / "CartPole-v1.zip").exists()


def test_train_help_is_one_usage_block_with_both_option_sets(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        train_in_process("-h")
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.count("usage:") == 1
    for option in ("--algo", "--env", "-params", "--scale-n-envs", "--scale-lr-rule", "--scale-aux-learning-rate"):
        assert option in out
    # rl-zoo3's module is left as it was
    import rl_zoo3.train

    assert rl_zoo3.train.argparse is argparse and rl_zoo3.train.ExperimentManager is rl_zoo3.exp_manager.ExperimentManager


def test_train_and_enjoy_parse_the_arguments_given_not_sys_argv(
    cartpole_log_folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["elsewhere", "--not-a-flag"])
    with pytest.raises(SystemExit) as exit_info:
        train_in_process("-h")
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("usage: python -m sb3_ewma.train ")
    zoo.enjoy(
        ["--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(cartpole_log_folder), "-n", "20", "--no-render"],
        prog="enjoy",
    )
    assert "Loading" in capsys.readouterr().out
    assert sys.argv == ["elsewhere", "--not-a-flag"]
    # rl-zoo3's modules are left as they were
    import rl_zoo3.enjoy
    import rl_zoo3.utils

    assert vars(rl_zoo3.enjoy)["argparse"] is argparse
    assert vars(rl_zoo3.enjoy)["create_test_env"] is rl_zoo3.utils.create_test_env


def test_zoo_parser_checks_rl_zoo3_key_value_pairs() -> None:
    from rl_zoo3.utils import StoreDict

    from sb3_ewma.zoo.arguments import ZooArgumentParser

    parser = ZooArgumentParser(prog="enjoy", argv=["--env-kwargs", "mode:'hard'"], exit_on_error=False)
    parser.add_argument("--env-kwargs", nargs="+", action=StoreDict)
    assert parser.parse_args().env_kwargs == {"mode": "hard"}
    with pytest.raises(argparse.ArgumentError, match="is read as Python and gives NameError"):
        parser.parse_args(["--env-kwargs", "mode:hard"])


@pytest.mark.parametrize("module", ["sb3_ewma.train", "sb3_ewma.enjoy", "sb3_ewma.record_video", "sb3_ewma.scale"])
def test_commands_are_quiet(module: str) -> None:
    # no Gym banner (procgen installs the legacy gym, which SB3 imports), no runpy RuntimeWarning, no other warning
    result = subprocess.run(
        [sys.executable, "-W", "default", "-m", module, "-h"], capture_output=True, text=True, cwd=REPO_ROOT, check=True
    )
    assert result.stdout.count("usage:") == 1
    assert result.stderr == ""


def test_video_writer_imports_without_pkg_resources_warning() -> None:
    pytest.importorskip("imageio_ffmpeg")
    code = "from sb3_ewma._quiet import import_without_pkg_resources_warning as q; q('imageio_ffmpeg'); import moviepy"
    result = subprocess.run(
        [sys.executable, "-W", "error::UserWarning", "-c", code], capture_output=True, text=True, cwd=REPO_ROOT
    )
    assert result.returncode == 0, result.stderr
    assert "pkg_resources" not in result.stderr


@pytest.mark.parametrize("flag, expected", [("off", False), ("on", True), ("auto", "auto")])
def test_compile_step_flag_sets_the_models_compile_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str, expected: bool | str
) -> None:
    built: list[Any] = []
    original = zoo.experiment.ExperimentManager.setup_experiment

    def setup_experiment(self: Any) -> Any:
        result = original(self)
        built.append(result[0] if result else None)
        return result

    monkeypatch.setattr(zoo.experiment.ExperimentManager, "setup_experiment", setup_experiment)
    # no compilation in a test: the compiler "missing" makes "on" train eagerly, with its warning
    monkeypatch.setattr("sb3_ewma.common.decoupled.step.compiler_missing", lambda device: "no compiler in this test")
    train_in_process("--algo", "ppo_ewma", "--env", "CartPole-v1", "-n", "64", "-f", str(tmp_path), "--compile-step", flag)
    assert built[0].compile_step == expected and type(built[0].compile_step) is type(expected)
    assert not built[0].compiled_step.active
    with pytest.raises(ValueError, match="--compile-step sets the compile_step of"):
        train_in_process("--algo", "ppo", "--env", "CartPole-v1", "-n", "64", "-f", str(tmp_path), "--compile-step", flag)


def test_scale_n_envs_refuses_other_algorithms(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--scale-n-envs"):
        train_in_process("--algo", "ppo", "--env", "CartPole-v1", "-n", "64", "-f", str(tmp_path), "--scale-n-envs", "2")


# ----------------------------------------------------------------------------------------------------------------------
# missing extras


def test_missing_rl_zoo3(monkeypatch: pytest.MonkeyPatch) -> None:
    import sb3_ewma

    monkeypatch.setitem(sys.modules, "rl_zoo3", None)
    # a fresh import of the module
    monkeypatch.delitem(sys.modules, "sb3_ewma.zoo")
    monkeypatch.delattr(sb3_ewma, "zoo")
    with pytest.raises(ImportError, match=r'pip install -e "\.\[zoo\]"'):
        importlib.import_module("sb3_ewma.zoo")
    from sb3_ewma.train import main

    with pytest.raises(ImportError, match=r'pip install -e "\.\[zoo\]"'):
        main(["--algo", "ppo_ewma"])


def test_missing_procgen(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "procgen", None)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[procgen\]"'):
        train_in_process("--algo", "ppo_ewma", "--env", "procgen-starpilot-easy", "-n", "64", "-f", str(tmp_path))


# ----------------------------------------------------------------------------------------------------------------------
# the experiment manager's preprocessing


def _bare_manager() -> zoo.ExperimentManager:
    manager = zoo.ExperimentManager.__new__(zoo.ExperimentManager)
    manager.normalize, manager.normalize_kwargs = False, {}
    return manager


@pytest.mark.parametrize(
    "normalize", ["dict(norm_obs=False, norm_reward=True, gamma=0.99)", {"norm_reward": True, "gamma": 0.99}]
)
def test_normalize_gamma_kept(normalize: Any) -> None:
    manager = _bare_manager()
    hyperparams = {"gamma": 0.999, "normalize": copy.deepcopy(normalize)}
    assert manager._preprocess_normalization(hyperparams) == {"gamma": 0.999}
    assert manager.normalize and manager.normalize_kwargs["gamma"] == 0.99
    # without an explicit gamma, rl-zoo3's behavior: the algorithm's discount
    manager = _bare_manager()
    manager._preprocess_normalization({"gamma": 0.999, "normalize": True})
    assert manager.normalize_kwargs == {"gamma": 0.999}


# ----------------------------------------------------------------------------------------------------------------------
# short budgets, checks before the run folder, help text


@pytest.mark.parametrize(
    "algo, env_id",
    [
        ("ppo_ewma", "CartPole-v1"),
        ("ppg_ewma", "CartPole-v1"),
        ("ppg", "CartPole-v1"),
        ("ppo_lstm_ewma", "CartPoleNoVel-v1"),
        ("ppo_mask_ewma", "CartPole-v1"),
    ],
)
def test_budget_shorter_than_one_rollout_trains(algo: str, env_id: str, tmp_path: Path) -> None:
    # the entries' clip_range lin_0.2 and learning_rate lin_0.001, one rollout of 8 x 32 steps for a budget of 10:
    # the progress remaining is 1 - 256 / 10 and the clip range -4.92 (log(1 + eps) is undefined below -1)
    train_in_process("--algo", algo, "--env", env_id, "-n", "10", "-f", str(tmp_path), "-params", "n_epochs:1")
    model = zoo.zoo_algorithms()[algo].load(saved_run(tmp_path, algo, env_id) / f"{env_id}.zip", device="cpu")
    assert model.num_timesteps == 256
    assert model.clip_range(model._current_progress_remaining) == pytest.approx(0.2 * (1 - 256 / 10))


def test_num_threads_below_minus_one_is_refused() -> None:
    with pytest.raises(SystemExit):
        train_in_process("--algo", "ppo_ewma", "--env", "CartPole-v1", "--num-threads", "-2")
    parser = zoo.TrainArgumentParser(prog="train")
    parser.add_argument("--num-threads", type=int, default=-1)
    assert parser.parse_args(["--num-threads", "0"]).num_threads == 0  # the default: one thread unless images
    assert parser.parse_args(["--num-threads", "-1"]).num_threads == -1


def test_num_threads_and_scale_help_say_what_they_do(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        train_in_process("-h")
    out = " ".join(capsys.readouterr().out.split())
    assert "0 (the default: one thread" in out and "-1 (torch's default" in out
    assert f"For every algorithm of this package: {', '.join(zoo.ZOO_ALGOS)}." in out


def _no_run_folder(log_folder: Path) -> bool:
    return not any(log_folder.glob("*/*_*"))


@pytest.mark.parametrize(
    "params, message",
    [
        (["foo_bar:1"], r"-params or the hyperparameter entry of --algo ppo_ewma: PPO_EWMA has no argument foo_bar=1"),
        (["learnin_rate:0.1"], r"has no argument learnin_rate=0.1: did you mean 'learning_rate'\?"),
        (["n_env:4"], r"has no argument n_env=4: did you mean 'n_envs'\?"),
        (["head_init_scale:0.1"], r"it is a keyword of its policy, pass policy_kwargs=dict\(head_init_scale=0.1\)"),
        (["n_aux_epochs:2"], r"it is an argument of PPG_EWMA and PPG"),
        (["seed:3"], r"rl-zoo3 sets seed itself, from --seed"),
    ],
)
def test_unknown_params_key_fails_before_anything_is_written(params: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=message):
        train_in_process("--algo", "ppo_ewma", "--env", "CartPole-v1", "-n", "64", "-f", str(tmp_path), "-params", *params)
    assert list(tmp_path.iterdir()) == []


def test_algorithm_is_checked_against_the_environment_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"--algo ppo_mask_ewma \(MaskablePPO_EWMA\) acts in Discrete, MultiDiscrete, "):
        train_in_process("--algo", "ppo_mask_ewma", "--env", "Pendulum-v1", "-n", "64", "-f", str(tmp_path))
    # an entry without the mask wrapper, on an environment without masks
    with pytest.raises(ValueError, match=r"CartPole-v1 \(with the entry's env_wrapper\) has no action_masks\(\) method"):
        train_in_process(
            "--algo", "ppo_mask_ewma", "--env", "CartPole-v1", "-n", "64", "-f", str(tmp_path), "-params", "env_wrapper:None"
        )
    assert list(tmp_path.iterdir()) == []


class DictObservationEnv(gym.Env):
    observation_space = gym.spaces.Dict({"position": gym.spaces.Box(-1, 1, (2,))})
    action_space = gym.spaces.Discrete(2)


def test_dict_observations_need_a_multi_input_policy() -> None:
    from sb3_ewma.zoo.checks import check_env_spaces

    env_id = "Sb3EwmaTestDictObservations-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=DictObservationEnv)
    algorithm = zoo.zoo_algorithms()["ppo_lstm_ewma"]
    with pytest.raises(ValueError, match=r"Dict observations, which need the policy MultiInputLstmPolicy.*'MlpLstmPolicy'"):
        check_env_spaces("ppo_lstm_ewma", algorithm, env_id, None, None, "MlpLstmPolicy")
    check_env_spaces("ppo_lstm_ewma", algorithm, env_id, None, None, "MultiInputLstmPolicy")
    # an environment that cannot be made here is left to rl-zoo3
    check_env_spaces("ppo_lstm_ewma", algorithm, "NoSuchEnvironment-v0", None, None, "MlpLstmPolicy")


def test_a_failed_start_removes_the_run_folder_it_created(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("the user's")
    log_folder = tmp_path / "logs" / "deeper"
    # the constructor refuses batch_size 1, after rl-zoo3 created the run folder and the monitor files
    with pytest.raises(ValueError, match="batch_size must be an integer >= 2, got 1"):
        train_in_process(
            "--algo", "ppo_ewma", "--env", "CartPole-v1", "-n", "64", "-f", str(log_folder), "-params", "batch_size:1"
        )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["notes.txt"]
    # with earlier runs of the algorithm, their folders stay
    train_in_process("--algo", "ppo_ewma", "--env", "CartPole-v1", "-n", "64", "-f", str(tmp_path))
    with pytest.raises(ValueError, match="batch_size must be an integer >= 2, got 1"):
        train_in_process(
            "--algo", "ppo_ewma", "--env", "CartPole-v1", "-n", "64", "-f", str(tmp_path), "-params", "batch_size:1"
        )
    assert [path.name for path in (tmp_path / "ppo_ewma").iterdir()] == ["CartPole-v1_1"]
    assert (tmp_path / "ppo_ewma" / "CartPole-v1_1" / "CartPole-v1.zip").is_file()


def test_only_an_unused_run_folder_is_removed(tmp_path: Path) -> None:
    from sb3_ewma.zoo.checks import missing_folders, remove_unused_run_folder

    run = tmp_path / "algo" / "Env_1"
    assert missing_folders(str(run)) == (str(run), str(tmp_path / "algo"))
    (run / "Env").mkdir(parents=True)
    (run / "0.monitor.csv").write_text('#{"t_start": 0, "env_id": "Env"}\nr,l,t\n')
    (run / "1.monitor.csv").write_text('#{"t_start": 0, "env_id": "Env"}\nr,l,t\n10.0,10,0.1\n')  # an episode
    assert not remove_unused_run_folder(str(run)) and (run / "1.monitor.csv").is_file()
    (run / "1.monitor.csv").unlink()
    (run / "Env" / "model.zip").write_bytes(b"")  # any other file
    assert not remove_unused_run_folder(str(run)) and (run / "Env" / "model.zip").is_file()
    (run / "Env" / "model.zip").unlink()
    assert remove_unused_run_folder(str(run), created_parents=(str(tmp_path / "algo"),))
    assert list(tmp_path.iterdir()) == []
