"""
The constructors' arguments (sb3_ewma.common.decoupled.arguments): the runtime signature built from the parent's, the
TypedDicts that type checkers read, the binding of a call, the errors before anything is built, and the docstrings
completed from the shared text and the parent's.
"""

import inspect
import re
import typing
import warnings

import pytest
from sb3_contrib import MaskablePPO, RecurrentPPO
from stable_baselines3 import PPO

from sb3_ewma import PPG, PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA
from sb3_ewma.common.decoupled.arguments import (
    DOCUMENTATION_PROBLEMS,
    SHARED_ARGUMENTS_DOC,
    DecoupledArguments,
    constructor_arguments,
    document_arguments,
    keyword_signature,
)
from sb3_ewma.common.decoupled.options import DecoupledOptions
from sb3_ewma.maskable_ppo_ewma.maskable_ppo_ewma import MaskablePPOEWMAArguments
from sb3_ewma.ppo_ewma.ppo_ewma import PPOEWMAArguments
from sb3_ewma.recurrent_ppo_ewma.recurrent_ppo_ewma import RecurrentPPOEWMAArguments

PARENTS = [(PPO_EWMA, PPO, PPOEWMAArguments), (RecurrentPPO_EWMA, RecurrentPPO, RecurrentPPOEWMAArguments)]
PARENTS += [(MaskablePPO_EWMA, MaskablePPO, MaskablePPOEWMAArguments)]
OPTIONS = list(DecoupledOptions.__dataclass_fields__)
SMALL = dict(n_steps=16, batch_size=8, n_epochs=2, device="cpu", seed=0)
ALGORITHMS = [PPO_EWMA, RecurrentPPO_EWMA, MaskablePPO_EWMA, PPG_EWMA, PPG]


def keyword_names(algorithm: type) -> list[str]:
    return [p.name for p in inspect.signature(algorithm).parameters.values() if p.kind is p.KEYWORD_ONLY]


@pytest.mark.parametrize("algorithm, parent, arguments", PARENTS)
def test_the_signature_is_the_parents_then_the_options(algorithm, parent, arguments):
    signature = inspect.signature(algorithm)
    parents = inspect.signature(parent).parameters
    names = list(signature.parameters)
    hyperparameters = [name for name in parents if name not in ("policy", "env", "_init_setup_model")]
    assert names == ["policy", "env", *hyperparameters, *OPTIONS, "_init_setup_model"]
    # the parent's defaults, the options' defaults; everything after env by keyword
    for name in hyperparameters:
        assert signature.parameters[name].default == parents[name].default, name
    for name in OPTIONS:
        assert signature.parameters[name].default == DecoupledOptions.__dataclass_fields__[name].default, name
    assert all(signature.parameters[name].kind is inspect.Parameter.KEYWORD_ONLY for name in names[2:])
    # the TypedDict that type checkers read names the same arguments, with the same annotations
    types = typing.get_type_hints(arguments)
    assert set(types) == set(names[2:])
    assert all(signature.parameters[name].annotation == types[name] for name in names[2:])


def test_ppg_keeps_its_own_parameters_then_the_options():
    names = keyword_names(PPG_EWMA)
    assert names[-len(OPTIONS) - 1 :] == [*OPTIONS, "_init_setup_model"]
    assert names[:3] == ["learning_rate", "n_steps", "batch_size"] and "n_aux_epochs" in names
    assert set(typing.get_type_hints(DecoupledArguments)) == set(OPTIONS)
    assert inspect.signature(PPG_EWMA).parameters["n_epochs"].default == 1
    # PPG: the same arguments, without an EWMA by default
    assert keyword_names(PPG) == names
    assert inspect.signature(PPG).parameters["ewma_decay"].default is None
    assert inspect.signature(PPG_EWMA).parameters["ewma_decay"].default == "auto"


@pytest.mark.parametrize("algorithm, parent, arguments", PARENTS)
def test_a_model_gets_the_parents_defaults(algorithm, parent, arguments):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # MaskablePPO_EWMA on CartPole: no action masks
        policy = "MlpLstmPolicy" if algorithm is RecurrentPPO_EWMA else "MlpPolicy"
        model = algorithm(policy, "CartPole-v1", kl_coef=0.25, _init_setup_model=False)
    defaults = inspect.signature(parent).parameters
    assert model.n_steps == defaults["n_steps"].default and model.batch_size == defaults["batch_size"].default
    assert model.gae_lambda == defaults["gae_lambda"].default and model.ent_coef == defaults["ent_coef"].default
    assert model.kl_coef == 0.25 and model.ewma_decay == "auto" and model.imp_samp_max == 100.0
    assert not hasattr(model, "policy") or model.policy is None  # _init_setup_model=False: nothing built


def test_constructor_arguments_binds_a_call_with_the_defaults():
    arguments = constructor_arguments(PPO_EWMA, {"self": None, "policy": "MlpPolicy", "env": "CartPole-v1"}, {"gamma": 0.9})
    assert arguments["policy"] == "MlpPolicy" and arguments["env"] == "CartPole-v1" and "self" not in arguments
    assert arguments["gamma"] == 0.9 and arguments["n_steps"] == 2048 and arguments["ewma_decay"] == "auto"
    assert list(arguments) == list(inspect.signature(PPO_EWMA).parameters)
    with pytest.raises(TypeError, match=r"PPO_EWMA has no argument n_stepz=3: did you mean 'n_steps'\?"):
        constructor_arguments(PPO_EWMA, {"policy": "MlpPolicy", "env": "CartPole-v1"}, {"n_stepz": 3})


def test_a_subclass_passing_keywords_on_gets_the_same_errors():
    made = []

    class Tuned(PPO_EWMA):
        def __init__(self, policy, env, tag: str = "", **kwargs):
            made.append(tag)
            super().__init__(policy, env, **kwargs)

    model = Tuned("MlpPolicy", "CartPole-v1", tag="a", ewma_decay=0.5, **SMALL)
    assert model.ewma_decay == 0.5 and model.n_steps == 16 and made == ["a"]
    with pytest.raises(TypeError, match=r"PPO_EWMA has no argument ewma_decy=0.5: did you mean 'ewma_decay'\?"):
        Tuned("MlpPolicy", "CartPole-v1", ewma_decy=0.5, **SMALL)
    with pytest.raises(TypeError, match="PPO_EWMA has no argument staleness=2: artificial staleness is an ablation"):
        Tuned("MlpPolicy", "CartPole-v1", staleness=2, **SMALL)


def test_a_hyperparameter_given_by_position_names_its_keyword():
    with pytest.raises(
        TypeError,
        match=r"PPO_EWMA takes policy and env by position and its other arguments by keyword: 2 more given by "
        r"position, pass them as learning_rate=0.001, n_steps=64",
    ):
        PPO_EWMA("MlpPolicy", "CartPole-v1", 0.001, 64)
    with pytest.raises(TypeError, match=r"pass them as learning_rate=0.001$"):
        PPG_EWMA("MlpPolicy", "CartPole-v1", 0.001)

    class Tuned(PPO_EWMA):
        def __init__(self, policy, env, *, tag: str = "", **kwargs):
            super().__init__(policy, env, **kwargs)

    # the subclass's own keyword-only arguments come first; **kwargs is not an argument by position
    with pytest.raises(
        TypeError, match=r"Tuned takes policy and env by position .* 1 more given by position, pass them as tag=5"
    ):
        Tuned("MlpPolicy", "CartPole-v1", 5)


def test_self_and_kwargs_are_no_policy_keywords():
    for name in ("self", "kwargs"):
        with pytest.raises(TypeError, match=rf"PPO_EWMA has no argument {name}=1") as error:
            PPO_EWMA("MlpPolicy", "CartPole-v1", **{name: 1})
        assert "keyword of its policy" not in str(error.value)


@pytest.mark.parametrize("algorithm", [PPO_EWMA, RecurrentPPO_EWMA, MaskablePPO_EWMA, PPG_EWMA])
def test_the_docstring_documents_every_argument_once_in_the_signatures_order(algorithm):
    documented = re.findall(r"^    :param (\w+):", algorithm.__doc__, flags=re.MULTILINE)
    assert documented == list(inspect.signature(algorithm).parameters)


def entry(algorithm: type, name: str) -> str:
    return " ".join(re.search(rf":param {name}:(.*?)(?=:param |\Z)", algorithm.__doc__ or "", flags=re.S).group(1).split())


def test_the_docstrings_take_their_own_text_then_the_shared_then_the_parents():
    # PPO_EWMA: gamma as SB3's PPO says it; n_epochs and the KL penalty as all this package's algorithms say it
    assert entry(PPO_EWMA, "gamma") == entry(PPO, "gamma") == "Discount factor"
    assert entry(PPO_EWMA, "n_epochs") == entry(RecurrentPPO_EWMA, "n_epochs") != entry(PPO, "n_epochs")
    assert "(batch size-invariance needs 1)" in entry(PPO_EWMA, "n_epochs")
    assert entry(MaskablePPO_EWMA, "kl_coef") == " ".join(
        entry(type("Shared", (), {"__doc__": SHARED_ARGUMENTS_DOC}), "kl_coef").split()
    )
    # sb3-contrib's own text for its own hyperparameters, the class's own where its meaning differs
    assert entry(RecurrentPPO_EWMA, "verbose") == entry(RecurrentPPO, "verbose")
    assert entry(PPG_EWMA, "n_epochs").startswith("Number of policy epochs ``E_pi``")
    assert "LSTM" in entry(RecurrentPPO_EWMA, "async_rollouts")


def test_no_algorithm_has_a_documentation_problem():
    assert {cls: DOCUMENTATION_PROBLEMS[cls] for cls in ALGORITHMS if cls in DOCUMENTATION_PROBLEMS} == {}


def test_document_arguments_records_a_missing_or_an_unknown_entry():
    class Options:
        @keyword_signature(DecoupledArguments)
        def __init__(self, policy: str, env: str, *, own_setting: int = 0, **options) -> None:
            pass

    def documented(doc: str | None) -> type:
        return type("Documented", (Options,), {"__doc__": doc, "__init__": Options.__init__})

    # each algorithm describes these options itself (their text differs between the algorithms)
    own_options = "".join(
        f":param {name}: How {name} acts here\n"
        for name in ("minibatch_sampling", "log_gradient_noise_scale", "async_rollouts")
    )
    complete = "Intro.\n\n:param own_setting: What it sets\n" + own_options
    cls = document_arguments(PPO)(documented(complete))
    assert re.findall(r":param (\w+):", cls.__doc__) == list(inspect.signature(cls).parameters)
    assert "Intro." in cls.__doc__ and ":param own_setting: What it sets" in cls.__doc__
    assert cls not in DOCUMENTATION_PROBLEMS
    # not raised (a parent's release must not stop the import): recorded, and the entry points to the parent
    missing = document_arguments(PPO)(documented("Intro.\n" + own_options))
    assert DOCUMENTATION_PROBLEMS.pop(missing) == ["own_setting: not described"]
    assert ":param own_setting: see ``PPO``" in missing.__doc__
    unknown = document_arguments(PPO)(documented(complete + ":param gone: Nothing\n"))
    assert DOCUMENTATION_PROBLEMS.pop(unknown) == ["gone: described, but no argument"]
    assert ":param gone:" not in unknown.__doc__
    # python -OO: no docstring, nothing to complete
    assert document_arguments(PPO)(documented(None)).__doc__ is None


def test_the_package_imports_without_docstrings():
    """``python -OO`` strips the docstrings that document_arguments completes: the import must not depend on them."""
    import subprocess
    import sys

    code = "import sb3_ewma, sb3_ewma.recurrent_ppo_ewma, sb3_ewma.maskable_ppo_ewma; assert sb3_ewma.PPO_EWMA.__doc__ is None"
    subprocess.run([sys.executable, "-OO", "-c", code], check=True, timeout=120)
