"""Tests of the batch size-invariance helper ``sb3_ewma.scale``."""

import copy
import math
import os
import pickle
import re
import subprocess
import sys
import warnings
from collections import OrderedDict
from pathlib import Path

import pytest
import torch as th
import yaml
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.utils import LinearSchedule

from sb3_ewma import PPG_EWMA
from sb3_ewma.common.ewma import ewma_decay_from_center_of_mass
from sb3_ewma.scale import ScaledSchedule, algorithm_defaults, main, scale_hyperparams, scale_hyperparams_with_report

REPO_ROOT = Path(__file__).resolve().parents[1]
PROGRESS_POINTS = (1.0, 0.75, 0.5, 0.1, 0.0)
_NUMBER = re.compile(r"-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")


def ppg_settings(**overrides):
    """PPG-EWMA settings tuned with 64 environments, every rescaled hyperparameter explicit."""
    settings = OrderedDict(
        n_envs=64,
        policy="MlpPolicy",
        n_timesteps=1_000_000,
        n_steps=128,
        batch_size=1024,  # 8 minibatches per epoch
        n_epochs=1,
        learning_rate=5e-4,
        aux_learning_rate=5e-4,
        ewma_decay=0.9,  # center of mass 9
        advantage_normalization="ewma",
        advantage_ewma_decay=0.8,  # span 9 iterations
        n_policy_iterations=4,
        n_aux_epochs=6,
        aux_batch_size=256,
        clip_range=0.2,
    )
    settings.update(overrides)
    return settings


def ppo_settings(**overrides):
    settings = OrderedDict(
        n_envs=8, policy="MlpPolicy", n_timesteps=100_000, n_steps=64, batch_size=128, n_epochs=1, learning_rate=1e-3
    )
    settings.update(overrides)
    return settings


def scale_quietly(hyperparams, n_envs, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return scale_hyperparams(hyperparams, n_envs, **options)


def assert_close(actual, expected, path="settings"):
    """Equal up to float rounding, also inside strings (``lin_`` schedules, policy_kwargs) and for schedules."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), path
        assert list(actual) == list(expected), path
        for key in expected:
            assert_close(actual[key], expected[key], f"{path}[{key!r}]")
    elif isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected) and len(actual) == len(expected), path
        for index, (actual_item, expected_item) in enumerate(zip(actual, expected)):
            assert_close(actual_item, expected_item, f"{path}[{index}]")
    elif isinstance(expected, str):
        assert isinstance(actual, str), path
        assert _NUMBER.sub("#", actual) == _NUMBER.sub("#", expected), path
        actual_numbers = [float(number) for number in _NUMBER.findall(actual)]
        expected_numbers = [float(number) for number in _NUMBER.findall(expected)]
        assert actual_numbers == pytest.approx(expected_numbers, rel=1e-12), path
    elif isinstance(expected, bool) or expected is None or isinstance(expected, type):
        assert actual is expected or actual == expected, path
    elif isinstance(expected, (int, float)):
        assert type(actual) is type(expected), path
        assert actual == pytest.approx(expected, rel=1e-12, abs=1e-15), path
    elif callable(expected):
        assert callable(actual), path
        for progress in PROGRESS_POINTS:
            assert actual(progress) == pytest.approx(expected(progress), rel=1e-12), f"{path}({progress})"
    else:
        assert actual == expected, path


def test_same_number_of_envs_returns_equal_settings():
    settings = ppg_settings(policy_kwargs="dict(optimizer_class=th.optim.Adam, net_arch=[64, 64])")
    original = copy.deepcopy(settings)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaled = scale_hyperparams(settings, 64, scale_adam_betas=True, scale_aux_learning_rate=True)
    assert scaled == settings
    assert scaled is not settings
    assert settings == original
    # the defaults are not written out when nothing changes
    assert scale_hyperparams({"n_envs": 4}, 4) == {"n_envs": 4}


def test_input_not_mutated_and_order_kept():
    settings = ppg_settings(policy_kwargs={"optimizer_class": th.optim.Adam, "optimizer_kwargs": {"eps": 1e-5}})
    original = copy.deepcopy(settings)
    scaled = scale_hyperparams(settings, 16, scale_adam_betas=True)
    assert settings == original
    assert isinstance(scaled, OrderedDict)
    assert list(scaled) == [*settings, "aux_optimizer_kwargs"]  # pinned to the reference ones, at the end
    assert scaled["aux_optimizer_kwargs"] == {"eps": 1e-5}
    assert scaled["policy_kwargs"]["optimizer_kwargs"]["eps"] == 1e-5
    assert scaled["policy_kwargs"]["optimizer_class"] is th.optim.Adam
    assert scaled["n_timesteps"] == settings["n_timesteps"]
    assert scaled["n_steps"] == settings["n_steps"]
    assert scaled["clip_range"] == settings["clip_range"]


def test_paper_setting_256_envs_to_1():
    """Appendix B: 4 workers x 64 envs, 256 steps, 8 minibatches, Adam 5e-4, COM 8, N_pi 32, down to 1 env."""
    settings = {
        "n_envs": 256,
        "n_steps": 256,
        "batch_size": 256 * 256 // 8,
        "n_epochs": 1,
        "learning_rate": 5e-4,
        "ewma_decay": "auto",
        "advantage_normalization": "ewma",
        "advantage_ewma_decay": 0.0,
        "n_policy_iterations": 32,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaled = scale_hyperparams(settings, 1)
    assert scaled["n_envs"] == 1
    assert scaled["learning_rate"] == pytest.approx(5e-4 / 16)
    # center of mass 8 -> 8 * 256 = 2048: beta = COM / (COM + 1)
    assert scaled["ewma_decay"] == pytest.approx(2048 / 2049, rel=1e-12)
    assert scaled["n_policy_iterations"] == 32 * 256 == 8192
    # span 1 iteration (decay 0) -> 256 iterations: d = 1 - 2 / (span + 1)
    assert scaled["advantage_ewma_decay"] == pytest.approx(1 - 2 / 257, rel=1e-12)
    # minibatches per epoch unchanged, n_steps unchanged
    assert scaled["n_steps"] == 256
    assert scaled["batch_size"] == 32
    assert 256 * 256 / settings["batch_size"] == 256 * 1 / scaled["batch_size"] == 8
    # the auxiliary phase keeps the reference step size
    assert scaled["aux_learning_rate"] == 5e-4
    # the same with the float decay of center of mass 8
    explicit = scale_hyperparams({**settings, "ewma_decay": 8 / 9}, 1)
    assert explicit["ewma_decay"] == pytest.approx(2048 / 2049, rel=1e-12)


def test_composition_equals_direct():
    settings = ppg_settings(
        learning_rate=LinearSchedule(1e-3, 1e-4, 0.5),
        policy_kwargs="dict(net_arch=[64, 64], optimizer_kwargs=dict(betas=(0.8, 0.99), eps=1e-5))",
    )
    options = dict(scale_adam_betas=True, scale_aux_learning_rate=True)
    via_16 = scale_hyperparams(scale_hyperparams(settings, 16, **options), 4, **options)
    direct = scale_hyperparams(settings, 4, **options)
    assert_close(via_16, direct)
    assert direct["n_policy_iterations"] == 4 * 16
    assert direct["batch_size"] == 1024 // 16
    # more environments: 4 -> 16 -> 64 equals 4 -> 64
    small = ppg_settings(n_envs=4, batch_size=64, n_policy_iterations=64, advantage_ewma_decay=0.9)  # span 19
    assert_close(scale_hyperparams(scale_hyperparams(small, 16), 64), scale_hyperparams(small, 64))


@pytest.mark.parametrize("n_envs", [4, 256])
def test_there_and_back(n_envs):
    settings = ppg_settings(
        learning_rate="lin_5e-4",
        policy_kwargs={"optimizer_class": th.optim.AdamW, "optimizer_kwargs": {"betas": (0.9, 0.99)}},
    )
    options = dict(scale_adam_betas=True, scale_aux_learning_rate=True)
    there = scale_hyperparams(settings, n_envs, **options)
    back = scale_hyperparams(there, 64, **options)
    # the auxiliary optimizer's settings pinned on the way there, to the reference ones (AdamW: no eps of SB3's)
    assert back.pop("aux_optimizer_kwargs") == {"betas": (0.9, 0.99)}
    assert_close(back, settings)
    # a callable schedule comes back as (a copy of) itself
    schedule = LinearSchedule(1e-3, 0.0, 1.0)
    back = scale_hyperparams(scale_hyperparams(ppg_settings(learning_rate=schedule), n_envs), 64)
    assert type(back["learning_rate"]) is LinearSchedule
    assert_close(back["learning_rate"], schedule)


def test_more_environments():
    # 8 -> 32 envs: c = 1/4
    scaled = scale_hyperparams(
        ppo_settings(ewma_decay=0.8, advantage_normalization="ewma", advantage_ewma_decay=0.9), 32, algo="ppo_ewma"
    )
    assert scaled["learning_rate"] == pytest.approx(1e-3 * 2)
    assert scaled["batch_size"] == 128 * 4
    # center of mass 4 -> 1: decay 1/2
    assert scaled["ewma_decay"] == pytest.approx(0.5)
    # span 19 -> 4.75 iterations: d = 1 - 2 / 5.75
    assert scaled["advantage_ewma_decay"] == pytest.approx(1 - 2 / 5.75)
    # a span below one iteration cannot be represented: clamped to decay 0, with a warning
    with pytest.warns(UserWarning, match="advantage_ewma_decay"):
        clamped = scale_hyperparams(ppo_settings(advantage_normalization="ewma", advantage_ewma_decay=0.0), 32)
    assert clamped["advantage_ewma_decay"] == 0.0


def test_defaults_are_written_out():
    # missing keys take the algorithm's defaults (SB3 PPO's for PPO-EWMA: n_steps 2048, batch_size 64, lr 3e-4)
    defaults = algorithm_defaults("ppo_ewma")
    assert defaults["ewma_decay"] == "auto"
    scaled = scale_quietly({"n_envs": 4, "n_epochs": 1, "policy": "MlpPolicy"}, 1)
    assert scaled["batch_size"] == defaults["batch_size"] // 4
    assert scaled["learning_rate"] == pytest.approx(defaults["learning_rate"] / 2)
    # auto center of mass: ceil(n_steps * 4 / batch_size) minibatches per epoch, times 4
    center_of_mass = math.ceil(defaults["n_steps"] * 4 / defaults["batch_size"]) * 4
    assert scaled["ewma_decay"] == pytest.approx(center_of_mass / (center_of_mass + 1))
    assert "n_policy_iterations" not in scaled
    # PPG (inferred from a PPG key): N_pi default 32
    defaults = algorithm_defaults("ppg_ewma")
    scaled = scale_quietly({"n_envs": 4, "n_aux_epochs": 6}, 2)
    assert scaled["n_policy_iterations"] == defaults["n_policy_iterations"] * 2
    assert scaled["batch_size"] == defaults["batch_size"] // 2
    assert scaled["n_aux_epochs"] == 6
    # the reference number of environments as an option
    assert scale_quietly({"learning_rate": 1e-3, "batch_size": 8}, 1, reference_n_envs=4)["learning_rate"] == 5e-4
    # ewma_decay=None stays None, with a warning
    with pytest.warns(UserWarning, match="ewma_decay=None"):
        assert scale_hyperparams(ppo_settings(ewma_decay=None, advantage_normalization="ewma"), 2)["ewma_decay"] is None


def test_ceil_for_auto_center_of_mass():
    # 3 envs * 10 steps / batch 12 = 2.5 -> 3 minibatches (ceil) = center of mass; 3 -> 1 env: 9, decay 9 / 10
    scaled = scale_quietly({"n_envs": 3, "n_steps": 10, "batch_size": 12, "n_epochs": 1}, 1)
    assert scaled["batch_size"] == 4
    assert scaled["ewma_decay"] == pytest.approx(9 / 10)


def test_schedules():
    # callable: scaled at every progress point, picklable, and rescaling multiplies the factors
    schedule = LinearSchedule(1e-3, 1e-4, 0.5)
    scaled = scale_quietly(ppo_settings(learning_rate=schedule), 2)
    assert isinstance(scaled["learning_rate"], ScaledSchedule)
    for progress in PROGRESS_POINTS:
        assert scaled["learning_rate"](progress) == pytest.approx(schedule(progress) / math.sqrt(4))
    restored = pickle.loads(pickle.dumps(scaled["learning_rate"]))
    assert restored(0.3) == pytest.approx(scaled["learning_rate"](0.3))
    twice = scale_quietly(scaled, 1)["learning_rate"]
    assert isinstance(twice.schedule, LinearSchedule)
    assert twice(0.6) == pytest.approx(schedule(0.6) / math.sqrt(8))

    # rl-zoo3 string: stays a string, read by rl-zoo3's own parser
    exp_manager = pytest.importorskip("rl_zoo3.exp_manager")
    scaled = scale_quietly(ppo_settings(learning_rate="lin_2.5e-4"), 2)
    assert isinstance(scaled["learning_rate"], str) and scaled["learning_rate"].startswith("lin_")
    parsed = exp_manager.ExperimentManager._preprocess_schedules(dict(scaled))["learning_rate"]
    for progress in PROGRESS_POINTS:
        assert parsed(progress) == pytest.approx(2.5e-4 * progress / 2)


def test_sgd_linear_rule():
    for policy_kwargs in (
        {"optimizer_class": th.optim.SGD, "optimizer_kwargs": {"momentum": 0.9}},
        "dict(optimizer_class=th.optim.SGD, net_arch=[64, 64])",
        "{'optimizer_class': torch.optim.SGD}",
    ):
        scaled = scale_quietly(ppo_settings(policy_kwargs=policy_kwargs), 2)
        assert scaled["learning_rate"] == pytest.approx(1e-3 / 4), policy_kwargs
        assert scaled["policy_kwargs"] == policy_kwargs
    # Adam is the default, subclasses are recognized, and the rule can be forced
    assert scale_quietly(ppo_settings(), 2)["learning_rate"] == pytest.approx(1e-3 / 2)
    adamw = {"optimizer_class": th.optim.AdamW}
    assert scale_quietly(ppo_settings(policy_kwargs=adamw), 2)["learning_rate"] == pytest.approx(1e-3 / 2)
    assert scale_quietly(ppo_settings(), 2, lr_rule="linear")["learning_rate"] == pytest.approx(1e-3 / 4)


def test_aux_learning_rate():
    settings = ppg_settings(learning_rate=1e-3, aux_learning_rate=2e-3)
    assert scale_quietly(settings, 16)["aux_learning_rate"] == 2e-3
    assert scale_quietly(settings, 16, scale_aux_learning_rate=True)["aux_learning_rate"] == pytest.approx(2e-3 / 2)
    # None means "same as learning_rate": pinned to the reference value unless asked to rescale
    settings = ppg_settings(learning_rate=1e-3, aux_learning_rate=None)
    assert scale_quietly(settings, 16)["aux_learning_rate"] == 1e-3
    assert scale_quietly(settings, 16, scale_aux_learning_rate=True)["aux_learning_rate"] is None


def test_adam_betas():
    # c = 4: betas ** (1/4)
    expected = (0.9**0.25, 0.999**0.25)
    scaled = scale_quietly(ppo_settings(), 2, scale_adam_betas=True)
    # an rl-zoo3 entry (it has n_timesteps) gets a string policy_kwargs
    assert isinstance(scaled["policy_kwargs"], str)
    # with the eps SB3's policy gives torch's Adam when there is no optimizer_kwargs (which one written would drop)
    written = {"optimizer_kwargs": {"eps": 1e-5, "betas": pytest.approx(expected)}}
    assert eval(scaled["policy_kwargs"], {"th": th}) == written
    constructor_kwargs = {"n_envs": 8, "batch_size": 128, "n_epochs": 1}
    scaled = scale_quietly(constructor_kwargs, 2, scale_adam_betas=True)
    assert scaled["policy_kwargs"] == written
    # strings keep everything else
    for source, expected_betas in (
        ("dict(net_arch=[64, 64], optimizer_kwargs=dict(betas=(0.5, 0.9), eps=1e-5))", (0.5**0.25, 0.9**0.25)),
        ("dict(optimizer_class=th.optim.Adam, optimizer_kwargs=dict(eps=1e-5,),)", expected),
        ("{'net_arch': [64], 'optimizer_kwargs': {}}", expected),
        ("dict()", expected),
        ("  dict(net_arch=dict(pi=[32], vf=[32]))", expected),
    ):
        scaled = scale_quietly(ppo_settings(policy_kwargs=source), 2, scale_adam_betas=True)
        evaluated, original = eval(scaled["policy_kwargs"], {"th": th}), eval(source, {"th": th})
        assert evaluated["optimizer_kwargs"].pop("betas") == pytest.approx(expected_betas), source
        original.setdefault("optimizer_kwargs", {"eps": 1e-5}).pop("betas", None)  # SB3's for no optimizer_kwargs
        assert evaluated == original, source
    # off by default
    assert "policy_kwargs" not in scale_quietly(ppo_settings(), 2)
    with pytest.raises(ValueError, match="scale_adam_betas"):
        scale_quietly(ppo_settings(policy_kwargs={"optimizer_class": th.optim.SGD}), 2, scale_adam_betas=True)


def test_warnings():
    with pytest.warns(UserWarning, match="n_epochs=3"):
        scale_hyperparams(ppo_settings(n_epochs=3, advantage_normalization="ewma"), 2)
    # SB3 PPO's default is 10 epochs
    n_epochs = algorithm_defaults("ppo_ewma")["n_epochs"]
    if n_epochs != 1:
        with pytest.warns(UserWarning, match=rf"n_epochs={n_epochs} \(default\)"):
            scale_hyperparams({"n_envs": 8, "advantage_normalization": "ewma"}, 2)
    with pytest.warns(UserWarning, match="advantage_normalization='minibatch'"):
        scale_hyperparams(ppo_settings(), 2)
    # PPG's policy phase has 1 epoch by default; EWMA advantage normalization; n_steps given: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scale_hyperparams({"n_envs": 8, "n_steps": 256, "n_policy_iterations": 32, "advantage_normalization": "ewma"}, 2)


@pytest.mark.parametrize("algo", ["ppo_ewma", "ppg_ewma"])
def test_an_assumed_n_steps_is_said(algo: str) -> None:
    # the EWMA's age ("auto": M minibatches per epoch) depends on n_steps, which the settings may leave out
    n_steps = 2048
    assert algorithm_defaults(algo)["n_steps"] == n_steps  # SB3's default, the constructors'
    settings = {"n_envs": 8, "batch_size": 64, "n_epochs": 1, "advantage_normalization": "ewma"}
    with pytest.warns(UserWarning) as record:
        scaled = scale_hyperparams(settings, 4, algo=algo)
    minibatches = n_steps * 8 // 64
    assert [str(warning.message) for warning in record] == [
        f"n_steps is not in the settings: the EWMA's center of mass assumes the algorithm's default n_steps={n_steps} "
        f"(M = {minibatches} minibatches per epoch); pass n_steps if training uses another"
    ]
    assert "n_steps" not in scaled
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # given, nothing is assumed; a numeric ewma_decay needs no n_steps
        scale_hyperparams({**settings, "n_steps": n_steps}, 4, algo=algo)
        scale_hyperparams({**settings, "ewma_decay": 0.9}, 4, algo=algo)


def test_errors():
    for n_envs in (0, -1, 2.0, "4", True):
        with pytest.raises(ValueError, match="n_envs"):
            scale_hyperparams(ppo_settings(), n_envs)
    with pytest.raises(ValueError, match="n_envs"):
        scale_hyperparams(ppo_settings(n_envs=0), 2)
    with pytest.raises(ValueError, match="reference_n_envs"):
        scale_hyperparams({"learning_rate": 1e-3}, 2)
    with pytest.raises(ValueError, match="reference_n_envs"):
        scale_hyperparams(ppo_settings(), 2, reference_n_envs=4)
    # unknown optimizer, unless the rule is given
    for policy_kwargs in ({"optimizer_class": th.optim.RMSprop}, "dict(optimizer_class=th.optim.RMSprop)"):
        with pytest.raises(ValueError, match="lr_rule"):
            scale_quietly(ppo_settings(policy_kwargs=policy_kwargs), 2)
        scaled = scale_quietly(ppo_settings(policy_kwargs=policy_kwargs), 2, lr_rule="sqrt")
        assert scaled["learning_rate"] == pytest.approx(1e-3 / 2)
    with pytest.raises(ValueError, match="lr_rule"):
        scale_quietly(ppo_settings(), 2, lr_rule="cubic")
    with pytest.raises(ValueError, match="algo"):
        scale_quietly(ppo_settings(), 2, algo="a2c")
    # batch_size 128 * 3 / 8 = 48 is fine, 128 * 5 / 8 = 80 too, but 128 / 256 is not a whole number
    assert scale_quietly(ppo_settings(), 3)["batch_size"] == 48
    with pytest.raises(ValueError, match="batch_size"):
        scale_quietly(ppo_settings(batch_size=100), 3)
    with pytest.raises(ValueError, match="batch_size"):
        scale_quietly(ppo_settings(n_envs=1024), 1)
    # n_policy_iterations 4 * 64 / 48 is not a whole number; 4 * 64 / 512 < 1
    with pytest.raises(ValueError, match="n_policy_iterations"):
        scale_quietly(ppg_settings(batch_size=3 * 1024), 48)
    with pytest.raises(ValueError, match="n_policy_iterations"):
        scale_quietly(ppg_settings(), 512)
    with pytest.raises(ValueError, match="ewma_decay"):
        scale_quietly(ppo_settings(ewma_decay=1.0), 2)
    with pytest.raises(ValueError, match="learning_rate"):
        scale_quietly(ppo_settings(learning_rate="3e-4"), 2)


def test_report():
    scaled, report = scale_hyperparams_with_report(ppg_settings(), 16)
    assert scaled == scale_hyperparams(ppg_settings(), 16)
    text = "\n".join(report)
    for name in ("n_envs", "learning_rate", "batch_size", "ewma_decay", "advantage_ewma_decay", "n_policy_iterations"):
        assert re.search(rf"^{name}: .* -> ", text, flags=re.M), name
    assert "auxiliary phase unchanged" in text


def write_zoo_file(tmp_path: Path) -> Path:
    path = tmp_path / "ppg_ewma.yml"
    path.write_text("""\
CartPole-v1:
  n_envs: 8
  policy: 'MlpPolicy'
  n_timesteps: !!float 1e5
  n_steps: 32
  batch_size: 64
  n_epochs: 1
  learning_rate: lin_0.001
  aux_learning_rate: !!float 5e-4
  clip_range: lin_0.2
  advantage_normalization: ewma
  policy_kwargs: "dict(optimizer_class=th.optim.Adam,
                       net_arch=[64, 64])"

Pendulum-v1:
  n_envs: 4
  policy: 'MlpPolicy'
""")
    return path


def test_cli_end_to_end(tmp_path):
    path = write_zoo_file(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "sb3_ewma.scale", str(path), "CartPole-v1", "--n-envs", "2", "--scale-adam-betas"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    output = yaml.safe_load(result.stdout)
    assert list(output) == ["CartPole-v1"]
    entry = yaml.safe_load(path.read_text())["CartPole-v1"]
    expected = scale_hyperparams(entry, 2, algo="ppg_ewma", scale_adam_betas=True)
    assert output["CartPole-v1"] == expected
    assert list(output["CartPole-v1"]) == list(expected)
    assert output["CartPole-v1"]["learning_rate"] == "lin_0.0005"
    assert "learning_rate: 'lin_0.001' -> 'lin_0.0005'" in result.stderr
    n_policy_iterations = algorithm_defaults("ppg_ewma")["n_policy_iterations"]
    assert f"n_policy_iterations: {n_policy_iterations} (default) -> {n_policy_iterations * 4}" in result.stderr


def test_cli_errors(tmp_path, capsys):
    path = write_zoo_file(tmp_path)
    with pytest.raises(SystemExit) as error:
        main([str(path), "Acrobot-v1", "--n-envs", "2"])
    assert error.value.code != 0
    message = capsys.readouterr().err
    assert "Acrobot-v1" in message and "CartPole-v1" in message and "Pendulum-v1" in message
    with pytest.raises(SystemExit) as error:
        main([str(path), "CartPole-v1", "--n-envs", "3"])
    assert error.value.code != 0
    assert "n_policy_iterations" in capsys.readouterr().err
    # in-process run: the printed YAML reloads to the function's result
    assert main([str(path), "Pendulum-v1", "--n-envs", "1", "--algo", "ppo_ewma"]) == 0
    captured = capsys.readouterr()
    entry = yaml.safe_load(path.read_text())["Pendulum-v1"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert yaml.safe_load(captured.out) == {"Pendulum-v1": scale_hyperparams(entry, 1, algo="ppo_ewma")}
    n_epochs = algorithm_defaults("ppo_ewma")["n_epochs"]
    assert (f"warning: n_epochs={n_epochs} (default)" in captured.err) == (n_epochs != 1)


def test_ppg_default_aux_batch_size_is_kept():
    # PPG's aux_batch_size defaults to batch_size; the auxiliary phase must not change when batch_size does
    reference = {"n_envs": 64, "n_steps": 256, "batch_size": 2048, "learning_rate": 5e-4}
    scaled = scale_hyperparams(reference, 16, algo="ppg_ewma")
    assert scaled["batch_size"] == 2048 // 4  # c = 64 / 16
    assert scaled["aux_batch_size"] == 2048
    explicit = scale_hyperparams({**reference, "aux_batch_size": 1024}, 16, algo="ppg_ewma")
    assert explicit["aux_batch_size"] == 1024


def test_cli_finds_the_packaged_file_from_algo_and_env(capsys):
    assert main(["--algo", "ppg_ewma", "--env", "procgen-starpilot-easy", "--n-envs", "16"]) == 0
    output = yaml.safe_load(capsys.readouterr().out)
    packaged = yaml.safe_load((REPO_ROOT / "sb3_ewma" / "hyperparams" / "ppg_ewma.yml").read_text())
    expected = scale_hyperparams(packaged["procgen-starpilot-easy"], 16, algo="ppg_ewma")
    assert output == {"procgen-starpilot-easy": expected}
    assert expected["n_envs"] == 16 and expected["n_policy_iterations"] == 32 * 4
    # a file and --env work together; the entry cannot be given twice, and without a file --algo is needed
    assert main([str(REPO_ROOT / "sb3_ewma" / "hyperparams" / "ppo_ewma.yml"), "--env", "CartPole-v1", "--n-envs", "4"]) == 0
    for argv in (["--env", "CartPole-v1", "--n-envs", "4"], ["--algo", "ppo_ewma", "--n-envs", "4"]):
        with pytest.raises(SystemExit) as error:
            main(argv)
        assert error.value.code == 2
    # an algorithm without a packaged file (the command line derives its entries): said, not "No such file"
    capsys.readouterr()
    with pytest.raises(SystemExit) as error:
        main(["--algo", "ppo_mask_ewma", "--env", "CartPole-v1", "--n-envs", "4"])
    assert error.value.code == 2
    assert "this package has no hyperparameter file for --algo ppo_mask_ewma" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(
            [
                str(REPO_ROOT / "sb3_ewma" / "hyperparams" / "ppo_ewma.yml"),
                "CartPole-v1",
                "--env",
                "Acrobot-v1",
                "--n-envs",
                "4",
            ]
        )


@pytest.mark.parametrize(
    "policy_kwargs", [None, {"net_arch": [16]}, "dict(net_arch=[16])", "dict(net_arch=[16], optimizer_kwargs=dict(eps=1e-5))"]
)
def test_scaled_betas_keep_ppg_s_auxiliary_optimizer_and_sb3_s_eps(policy_kwargs):
    """
    PPG's auxiliary optimizer follows the policy's optimizer_kwargs when aux_optimizer_kwargs is None: rescaled betas
    would change the auxiliary phase, which stays as the reference's. And an optimizer_kwargs written where there was
    none keeps the eps=1e-5 that SB3's policy gives torch's Adam (an optimizer_kwargs given replaces it).
    """
    reference = {"n_envs": 8, "n_steps": 32, "batch_size": 64, "n_policy_iterations": 4, "n_epochs": 1}
    if policy_kwargs is not None:
        reference["policy_kwargs"] = policy_kwargs
    scaled = scale_hyperparams(reference, 4, algo="ppg_ewma", scale_adam_betas=True)
    models = []
    for settings, n_envs in ((reference, 8), (scaled, 4)):
        settings = {key: value for key, value in settings.items() if key != "n_envs"}
        if isinstance(settings.get("policy_kwargs"), str):  # as rl-zoo3 reads it
            settings["policy_kwargs"] = eval(settings["policy_kwargs"])
        models.append(PPG_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=n_envs), **settings))
    before, after = models
    assert after.aux_optimizer.defaults["betas"] == before.aux_optimizer.defaults["betas"] == (0.9, 0.999)
    assert after.aux_optimizer.defaults["eps"] == before.aux_optimizer.defaults["eps"] == 1e-5
    assert after.policy.optimizer.defaults["eps"] == before.policy.optimizer.defaults["eps"] == 1e-5
    assert after.policy.optimizer.defaults["betas"] == pytest.approx((0.9**0.5, 0.999**0.5))


@pytest.mark.parametrize("algo", ["ppo_lstm_ewma", "ppo_mask_ewma"])
def test_sb3_contrib_s_whole_rollout_batch_passes_through(algo):
    """sb3-contrib's batch_size=None (the whole rollout, one minibatch per epoch) shrinks with the rollout itself."""
    scaled, report = scale_hyperparams_with_report(
        {"n_envs": 8, "n_steps": 256, "batch_size": None, "ewma_decay": "auto"}, 4, algo=algo
    )
    assert scaled["batch_size"] is None
    assert any(line.startswith("batch_size: None (the whole rollout") for line in report)
    # one minibatch per epoch (M = 1) and sb3-contrib's 10 epochs: "auto" is the mean age E x M / 2 = 5, times c = 2
    assert scaled["ewma_decay"] == pytest.approx(ewma_decay_from_center_of_mass(10 * 1 / 2 * 2))


def test_a_batch_that_whole_rollout_sampling_cannot_take_is_refused():
    """minibatch_sampling="rollouts" needs a batch_size that is a multiple or a divisor of n_steps: said when rescaling,
    not when the model is built."""
    settings = {"n_envs": 64, "n_steps": 256, "batch_size": 2048, "minibatch_sampling": "rollouts"}
    with pytest.raises(ValueError, match="2048 / c = 96 is neither a multiple nor a divisor of n_steps=256"):
        scale_hyperparams(settings, 3, algo="ppo_ewma")
    assert scale_hyperparams(settings, 16, algo="ppo_ewma")["batch_size"] == 512  # whole rollouts: 2 per minibatch


def test_a_yaml_number_read_as_a_string_gets_a_hint():
    """YAML 1.1 (PyYAML, rl-zoo3) reads 1e-3 as the string '1e-3': the error says how to write it."""
    entry = yaml.safe_load("n_envs: 8\nlearning_rate: 1e-3\n")
    assert entry["learning_rate"] == "1e-3"
    with pytest.raises(ValueError, match=re.escape("(a YAML file reads 1e-3 as a string: write 0.001 or !!float 1e-3)")):
        scale_hyperparams(entry, 4)
    with pytest.raises(ValueError, match=r"cannot read 'fast'; .* like 'lin_2\.5e-4'$"):
        scale_hyperparams({"n_envs": 8, "learning_rate": "fast"}, 4)
