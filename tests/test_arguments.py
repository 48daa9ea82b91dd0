"""
The constructors as written (explicit, as SB3's and sb3-contrib's): each takes its parent's hyperparameters in the
parent's order, with the parent's defaults and types, by position or keyword, then the decoupled options, then
``_init_setup_model``; each documents every parameter; ``learn`` keeps the parent's positional order.
"""

import inspect
import re
import typing
import warnings

import numpy as np
import pytest
from sb3_contrib import MaskablePPO, RecurrentPPO
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import VecEnv

from sb3_ewma import PPG, PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA
from sb3_ewma.common.decoupled.algorithm import DecoupledAlgorithm

PARENTS = [(PPO_EWMA, PPO), (RecurrentPPO_EWMA, RecurrentPPO), (MaskablePPO_EWMA, MaskablePPO)]
# the options every algorithm adds, in their order, with their defaults (PPG: without ewma_decay)
OPTIONS = {
    "ewma_decay": "auto",
    "kl_coef": 0.0,
    "kl_estimator": "sample",
    "imp_samp_max": 100.0,
    "advantage_normalization": "minibatch",
    "advantage_ewma_decay": 0.0,
    "minibatch_sampling": "steps",
    "log_gradient_noise_scale": False,
    "distributed": None,
    "async_rollouts": False,
    "compile_step": "auto",
}
ALGORITHMS = [PPO_EWMA, RecurrentPPO_EWMA, MaskablePPO_EWMA, PPG_EWMA, PPG]
POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD


def parameters(function: typing.Any) -> dict[str, inspect.Parameter]:
    return {name: p for name, p in inspect.signature(function).parameters.items() if name != "self"}


@pytest.mark.parametrize("algorithm, parent", PARENTS, ids=lambda value: value.__name__)
def test_the_constructor_is_the_parents_then_the_options(algorithm, parent):
    """The drift test: a release of the parent that adds, removes, moves or changes a hyperparameter fails here."""
    own, parents = parameters(algorithm.__init__), parameters(parent.__init__)
    hyperparameters = [name for name in parents if name != "_init_setup_model"]
    assert list(own) == [*hyperparameters, *OPTIONS, "_init_setup_model"]
    for name in hyperparameters:
        assert own[name].kind is POSITIONAL, name
        assert own[name].default == parents[name].default, name
    for name, default in OPTIONS.items():
        assert own[name].kind is POSITIONAL and own[name].default == default, name
    # the parent's types; clip_range may also be None (no clipping), the policy a class of the parent's policy base
    hints = typing.get_type_hints(algorithm.__init__, localns={"VecEnv": VecEnv})
    parent_hints = typing.get_type_hints(parent.__init__, localns={"VecEnv": VecEnv})
    for name in hyperparameters:
        if name == "clip_range":
            assert hints[name] == parent_hints[name] | None
        else:
            assert hints[name] == parent_hints[name], name


def test_ppg_takes_ppos_arguments_its_own_then_the_options():
    ppg, ppg_ewma = parameters(PPG.__init__), parameters(PPG_EWMA.__init__)
    ppo = parameters(PPO.__init__)
    # PPO's policy-phase hyperparameters (n_value_epochs after n_epochs), PPO's defaults but for n_epochs (E_pi = 1)
    shared = [name for name in ppg if name in ppo and name != "_init_setup_model"]
    assert shared == [name for name in ppo if name != "_init_setup_model"]
    assert list(ppg)[:7] == ["policy", "env", "learning_rate", "n_steps", "batch_size", "n_epochs", "n_value_epochs"]
    assert all(ppg[name].default == ppo[name].default for name in shared if name != "n_epochs")
    assert ppg["n_epochs"].default == 1
    # PPG's options are PPO_EWMA's without ewma_decay; PPG_EWMA's are all of them, with PPG's arguments before
    assert list(ppg)[-len(OPTIONS) :] == [*list(OPTIONS)[1:], "_init_setup_model"]
    assert list(ppg_ewma) == [name for name in ppg if name not in OPTIONS and name != "_init_setup_model"] + [
        *OPTIONS,
        "_init_setup_model",
    ]
    assert all(ppg_ewma[name].default == ppg[name].default for name in ppg)
    assert ppg_ewma["ewma_decay"].default == "auto"


@pytest.mark.parametrize("algorithm, parent", PARENTS, ids=lambda value: value.__name__)
def test_a_model_gets_the_parents_defaults(algorithm, parent):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # MaskablePPO_EWMA on CartPole: no action masks
        policy = "MlpLstmPolicy" if algorithm is RecurrentPPO_EWMA else "MlpPolicy"
        model = algorithm(policy, "CartPole-v1", kl_coef=0.25, _init_setup_model=False)
    defaults = parameters(parent.__init__)
    assert model.n_steps == defaults["n_steps"].default and model.batch_size == defaults["batch_size"].default
    assert model.gae_lambda == defaults["gae_lambda"].default and model.ent_coef == defaults["ent_coef"].default
    assert model.kl_coef == 0.25 and model.ewma_decay == "auto"


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_sb3s_positional_call_trains_bit_for_bit_as_ppo(env_id):
    """``PPO_EWMA(policy, env, 3e-4, 64, 32, 2, ewma_decay=None)`` is ``PPO(policy, env, 3e-4, 64, 32, 2)``."""
    ppo = PPO("MlpPolicy", env_id, 3e-4, 64, 32, 2, seed=5, device="cpu").learn(192)
    ppo_ewma = PPO_EWMA("MlpPolicy", env_id, 3e-4, 64, 32, 2, ewma_decay=None, seed=5, device="cpu").learn(192)
    assert (ppo_ewma.learning_rate, ppo_ewma.n_steps, ppo_ewma.batch_size, ppo_ewma.n_epochs) == (3e-4, 64, 32, 2)
    np.testing.assert_array_equal(ppo_ewma.policy.parameters_to_vector(), ppo.policy.parameters_to_vector())


def test_positional_arguments_reach_the_same_attributes_as_keywords():
    by_position = PPG_EWMA("MlpPolicy", "CartPole-v1", 1e-3, 32, 16, 2, 3, 0.9, _init_setup_model=False)
    assert (by_position.learning_rate, by_position.n_steps, by_position.batch_size) == (1e-3, 32, 16)
    assert (by_position.n_epochs, by_position.n_value_epochs, by_position.gamma) == (2, 3, 0.9)
    recurrent = RecurrentPPO_EWMA("MlpLstmPolicy", "CartPole-v1", 1e-3, 32, None, _init_setup_model=False)
    assert recurrent.batch_size is None and recurrent.n_steps == 32


def test_an_unknown_keyword_is_pythons_type_error():
    with pytest.raises(TypeError, match="unexpected keyword argument 'n_stepz'"):
        PPO_EWMA("MlpPolicy", "CartPole-v1", n_stepz=3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'ewma_decay'"):
        PPG("MlpPolicy", "CartPole-v1", ewma_decay=0.9)


@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=lambda value: value.__name__)
def test_the_docstring_documents_every_parameter_once_in_the_signatures_order(algorithm):
    documented = re.findall(r"^    :param (\w+):", algorithm.__doc__, flags=re.MULTILINE)
    assert documented == list(parameters(algorithm.__init__))


def entry(algorithm: type, name: str) -> str:
    return " ".join(re.search(rf":param {name}:(.*?)(?=:param |\Z)", algorithm.__doc__ or "", flags=re.S).group(1).split())


def test_the_docstrings_say_what_the_decoupled_objective_changes():
    # SB3's own text where the meaning is SB3's; the changed meaning where the decoupled objective changes it
    assert entry(PPO_EWMA, "gamma") == entry(PPO, "gamma") == "Discount factor"
    assert entry(RecurrentPPO_EWMA, "verbose") == entry(RecurrentPPO, "verbose")
    assert "(batch size-invariance needs 1)" in entry(PPO_EWMA, "n_epochs")
    assert "``None`` turns clipping off" in entry(MaskablePPO_EWMA, "clip_range")
    assert entry(PPG_EWMA, "n_epochs").startswith("Number of policy epochs ``E_pi``")
    assert "LSTM" in entry(RecurrentPPO_EWMA, "async_rollouts")
    assert "the proximal policy is the policy at the start of the iteration" in entry(PPG, "async_rollouts")
    assert "the proximal policy is the EWMA" in entry(PPG_EWMA, "async_rollouts")


def test_the_lifecycle_is_defined_once_below_the_parents():
    """``save``, ``load``, ``set_parameters`` are DecoupledAlgorithm's; ``learn`` is also MaskablePPO_EWMA's own."""
    for method in ("save", "load", "set_parameters", "_excluded_save_params"):
        for algorithm in ALGORITHMS:
            own = [klass for klass in algorithm.__mro__ if klass.__module__.startswith("sb3_ewma.")]
            assert [klass for klass in own if method in vars(klass)] == [DecoupledAlgorithm], (algorithm, method)
    assert "learn" in vars(MaskablePPO_EWMA) and list(parameters(MaskablePPO_EWMA.learn)) == list(
        parameters(MaskablePPO.learn)
    )
    assert list(parameters(DecoupledAlgorithm.learn)) == list(parameters(PPO.learn))


def test_learn_takes_the_parents_positional_order():
    import gymnasium as gym

    from sb3_ewma.envs.action_masks import ActionMaskOrAllValid

    model = MaskablePPO_EWMA("MlpPolicy", ActionMaskOrAllValid(gym.make("CartPole-v1")), n_steps=16, batch_size=8, seed=0)
    seen = []
    collect = model.collect_rollouts

    def recording(*args, **kwargs):
        seen.append(model._use_masking)
        return collect(*args, **kwargs)

    model.collect_rollouts = recording  # type: ignore[method-assign]
    # MaskablePPO's order: ..., reset_num_timesteps, use_masking, progress_bar
    assert model.learn(16, None, 1, "run", True, False) is model
    assert seen == [False] and model._use_masking is True  # back to the default after learn
    ppo = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=8, device="cpu")
    assert ppo.learn(16, None, 1, "run", True, False) is ppo  # SB3's: ..., reset_num_timesteps, progress_bar


def test_the_package_imports_without_docstrings():
    """``python -OO`` strips the docstrings: the import must not depend on them."""
    import subprocess
    import sys

    code = "import sb3_ewma, sb3_ewma.recurrent_ppo_ewma, sb3_ewma.maskable_ppo_ewma; assert sb3_ewma.PPO_EWMA.__doc__ is None"
    subprocess.run([sys.executable, "-OO", "-c", code], check=True, timeout=120)


def test_clip_range_none_is_an_infinite_clip_range():
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=8, clip_range=None, kl_coef=1.0, device="cpu")
    assert model.clip_range(1.0) == float("inf") and model._current_clip_ranges() == (None, None)
    model.learn(16)
    assert "train/clip_range" not in model.logger.name_to_value and "train/clip_fraction" not in model.logger.name_to_value
    assert np.isfinite(model.policy.parameters_to_vector()).all()
