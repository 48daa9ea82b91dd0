"""
The constructors' arguments, declared once. Every algorithm's constructor takes ``policy`` and ``env``, then keyword
arguments: its parent's hyperparameters, with the parent's own defaults (``PPO_EWMA``: SB3's ``PPO``'s), and the
decoupled options, with the defaults of :class:`~sb3_ewma.common.decoupled.options.DecoupledOptions`. Two views of
them, checked against each other by the tests:

- for type checkers and IDEs, a ``TypedDict`` per constructor (PEP 692: ``**kwargs: Unpack[...]``), made of
  :class:`PPOArguments` (what SB3's ``PPO`` and sb3-contrib's ``RecurrentPPO`` and ``MaskablePPO`` share) and
  :class:`DecoupledArguments`, plus the few the parent alone takes;
- at run time (``inspect.signature``, ``help``, the API documentation, the unknown-keyword errors), the signature that
  :func:`keyword_signature` gives the constructor: the parent's parameters in its order and with its defaults (or
  the constructor's own, for ``PPG_EWMA``), then the options, then ``_init_setup_model``, keyword-only after ``env``.

:func:`constructor_arguments` binds a call to that signature: every argument by name, the defaults filled in.
:func:`document_arguments` completes the docstrings the same way: the class's own text, then the text the algorithms
share (:data:`SHARED_ARGUMENTS_DOC`), then the parent's. :func:`learn_arguments` names ``learn``'s arguments given by
position as the parent's ``learn`` does.
"""

import inspect
import re
import textwrap
import typing
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any, TypeVar

import torch as th
from stable_baselines3.common.type_aliases import Schedule
from typing_extensions import TypedDict

from sb3_ewma.common.decoupled.options import DecoupledOptions
from sb3_ewma.common.keywords import check_keywords

Init = TypeVar("Init", bound=Callable[..., None])
AlgorithmClass = TypeVar("AlgorithmClass", bound=type)

SHARED_ARGUMENTS_DOC = """\
    :param n_epochs: Number of epoch when optimizing the surrogate loss (batch size-invariance needs 1)
    :param clip_range: Clipping parameter ``eps`` of the ratio ``pi / pi_prox``, it can be a function of the current
        progress remaining (from 1 to 0). ``None`` turns clipping off (use the KL penalty ``kl_coef`` instead).
    :param normalize_advantage: Whether to normalize or not the advantage (see ``advantage_normalization``)
    :param target_kl: Limit the KL divergence between updates: stop the iteration's epochs when the estimated
        KL from the behavior policy (as in SB3) exceeds ``1.5 * target_kl``. By default, there is no limit.
    :param policy_kwargs: additional arguments to be passed to the policy on creation
    :param ewma_decay: Decay ``beta_prox`` in [0, 1) of the EWMA of the policy parameters that serves as the proximal
        policy, updated after every optimizer step; its center of mass (age in optimizer steps) is
        ``beta / (1 - beta)`` (see :func:`sb3_ewma.ewma_decay_from_center_of_mass`). A name
        (:mod:`sb3_ewma.common.ewma_age`) sets the center of mass from the minibatches per epoch ``M`` and the
        epochs ``E``: ``"paper"`` ``M`` (the paper's setting), ``"max_age"`` ``E * M``, ``"mean_age"`` ``E * M / 2``;
        ``"auto"`` (default) is ``"mean_age"`` with several epochs, ``"paper"`` with one. ``None``: no EWMA, the
        proximal policy is the behavior policy, as in the parent algorithm (SB3's ``PPO`` for ``PPO_EWMA``).
    :param kl_coef: Coefficient ``beta`` of the decoupled KL penalty ``KL[pi_prox, pi]`` (0: no penalty). Use it alone
        with ``clip_range=None`` for the decoupled KL-penalized objective, or together with clipping.
    :param kl_estimator: How the KL penalty is computed: ``"sample"`` (the authors' ``0.5 * mean(log(pi/pi_prox)^2)``
        over the taken actions) or ``"exact"`` (the KL divergence of the two action distributions).
    :param imp_samp_max: Cap on the importance weight ``pi / pi_behav`` (paper: 100), 0 for no cap; must be > 1.
    :param advantage_normalization: ``"minibatch"`` (SB3's, each minibatch by its own statistics; default) or
        ``"ewma"`` (the paper's: each iteration by the mean and std of EWMA moments over iterations). Only used when
        ``normalize_advantage=True``.
    :param advantage_ewma_decay: Decay in [0, 1) per iteration of the advantage moments for
        ``advantage_normalization="ewma"`` (0: the current iteration only; span ``2 / (1 - decay) - 1`` iterations).
    :param distributed: Data-parallel training on ``torch.distributed`` (documentation: "Data-Parallel
        Training"): ``None`` (default) joins, or creates from torchrun's environment, the default process group when
        ``WORLD_SIZE > 1``; ``True`` requires it (also with one rank); ``False`` never (each process trains its own
        model). Hyperparameters are per rank (``n_envs``, ``n_steps``, ``batch_size``); gradients are averaged over
        the ranks; ``num_timesteps`` and ``total_timesteps`` count the environment steps of all ranks; rank 0 alone
        logs, saves and runs the callbacks. Not saved with the model.
"""
"""The ``:param`` text that all the algorithms share, written once: the decoupled options', and that of the parent's
hyperparameters whose meaning the decoupled objective changes (see :func:`document_arguments`)."""


class PPOArguments(TypedDict, total=False):
    """The keyword arguments that SB3's ``PPO`` and sb3-contrib's ``RecurrentPPO`` and ``MaskablePPO`` all take."""

    learning_rate: float | Schedule
    n_steps: int
    n_epochs: int
    gamma: float
    gae_lambda: float
    clip_range: float | Schedule | None
    clip_range_vf: float | Schedule | None
    normalize_advantage: bool
    ent_coef: float
    vf_coef: float
    max_grad_norm: float
    target_kl: float | None
    stats_window_size: int
    tensorboard_log: str | None
    policy_kwargs: dict[str, Any] | None
    verbose: int
    seed: int | None
    device: th.device | str
    _init_setup_model: bool


class DecoupledArguments(TypedDict, total=False):
    """The decoupled options as keyword arguments (:class:`~sb3_ewma.common.decoupled.options.DecoupledOptions`)."""

    ewma_decay: float | str | None
    kl_coef: float
    kl_estimator: str
    imp_samp_max: float
    advantage_normalization: str
    advantage_ewma_decay: float
    minibatch_sampling: str
    log_gradient_noise_scale: bool
    distributed: bool | None
    async_rollouts: bool | str


def keyword_signature(arguments: type, parent: type | None = None) -> Callable[[Init], Init]:
    """
    Decorator of a constructor ``__init__(self, policy, env, *, [its own parameters,] **kwargs: Unpack[arguments])``:
    its ``__signature__`` lists ``policy`` and ``env``, then keyword-only the parameters of ``parent``'s constructor
    (in its order, with its defaults; without a parent, the constructor's own), the decoupled options with their
    defaults, and ``_init_setup_model``, each annotated with its type in ``arguments`` where it has one.

    :param arguments: the ``TypedDict`` of the constructor's keyword arguments
    :param parent: the algorithm whose constructor's parameters it takes as keywords
    """

    def decorate(init: Init) -> Init:
        init.__signature__ = _keyword_signature(init, arguments, parent)  # type: ignore[attr-defined]
        return init

    return decorate


def _keyword_signature(init: Callable[..., None], arguments: type, parent: type | None) -> inspect.Signature:
    types = typing.get_type_hints(arguments)
    keyword_only = inspect.Parameter.KEYWORD_ONLY
    first, *own = (p for p in inspect.signature(init).parameters.values() if p.kind is not p.VAR_KEYWORD)
    leading = [first, *(p for p in own if p.name in ("policy", "env"))]
    source = own if parent is None else list(inspect.signature(vars(parent)["__init__"]).parameters.values())[1:]
    hyperparameters = [
        parameter.replace(kind=keyword_only, annotation=types.get(parameter.name, parameter.annotation))
        for parameter in source
        if parameter.name not in ("policy", "env", "_init_setup_model")
    ]
    options = [
        inspect.Parameter(field.name, keyword_only, default=field.default, annotation=types[field.name])
        for field in fields(DecoupledOptions)
    ]
    setup = inspect.Parameter("_init_setup_model", keyword_only, default=True, annotation=bool)
    return inspect.Signature([*leading, *hyperparameters, *options, setup])


def constructor_arguments(algorithm: type, named: Mapping[str, Any], keywords: Mapping[str, Any]) -> dict[str, Any]:
    """
    Every argument of a call to ``algorithm``'s constructor by name, with the defaults of its signature
    (:func:`keyword_signature`) for those not given.

    :param algorithm: the class whose ``__init__`` was called
    :param named: the constructor's ``locals()``: its named parameters (``policy``, ``env``, its own)
    :param keywords: its ``**kwargs``; a ``TypeError`` names one that the signature lacks, and says who takes it
        (:func:`~sb3_ewma.common.keywords.check_keywords`)
    """
    check_keywords(algorithm, dict(keywords))  # the keywords of its signature, by __signature__
    signature = inspect.signature(vars(algorithm)["__init__"])
    given = {name: value for name, value in named.items() if name in signature.parameters and name != "self"}
    bound = signature.bind(None, **given, **keywords)
    bound.apply_defaults()
    return {name: value for name, value in bound.arguments.items() if name != "self"}


def _parameter_docs(docstring: str) -> tuple[str, dict[str, str]]:
    """A docstring's text before its first ``:param`` entry, and each entry (dedented) by parameter name."""
    text = inspect.cleandoc(docstring)
    before, *entries = re.split(r"^(?=:param \w+:)", text, flags=re.MULTILINE)
    return before, {entry.split(":")[1].split()[1]: entry.rstrip() for entry in entries}


DOCUMENTATION_PROBLEMS: dict[type, list[str]] = {}
"""What :func:`document_arguments` found wrong in a class's documentation: arguments that neither the class, the shared
text nor the parent describes, entries of the class's docstring that are no arguments (the tests assert none)."""


def document_arguments(docs_of: type) -> Callable[[AlgorithmClass], AlgorithmClass]:
    """
    Class decorator: the class docstring's ``:param`` entries completed and put in the order of its constructor's
    signature (what ``help()`` and the API documentation show). An argument that the docstring does not describe
    takes its entry in :data:`SHARED_ARGUMENTS_DOC` or, failing that, in ``docs_of``'s docstring (SB3's or
    sb3-contrib's own text for the parent's hyperparameters). What is missing or left over is recorded in
    :data:`DOCUMENTATION_PROBLEMS`, not raised: a release of the parent that adds an argument without documenting it
    does not stop the import.

    :param docs_of: the algorithm whose documentation of the parent's hyperparameters the class reuses
    """

    def decorate(cls: AlgorithmClass) -> AlgorithmClass:
        if cls.__doc__ is None:  # python -OO: no docstrings to complete
            return cls
        before, own = _parameter_docs(cls.__doc__)
        shared = _parameter_docs(SHARED_ARGUMENTS_DOC)[1]
        parents = _parameter_docs(docs_of.__doc__ or "")[1]
        names = list(inspect.signature(cls).parameters)
        described = {**parents, **shared, **own}
        problems = [f"{name}: not described" for name in names if name not in described]
        problems += [f"{name}: described, but no argument" for name in own if name not in names]
        if problems:
            DOCUMENTATION_PROBLEMS[cls] = problems
        entries = [described.get(name, f":param {name}: see ``{docs_of.__name__}``") for name in names]
        cls.__doc__ = textwrap.indent("\n" + before.rstrip() + "\n\n" + "\n".join(entries) + "\n", "    ")
        return cls

    return decorate


def learn_arguments(
    parent_learn: Callable[..., Any], parent_args: tuple[Any, ...], progress_bar: bool, parent_kwargs: dict[str, Any]
) -> tuple[bool, dict[str, Any]]:
    """
    ``learn``'s arguments after ``reset_num_timesteps`` given by position, named as the parent's ``learn`` names them
    (SB3's: ``progress_bar``; ``MaskablePPO``'s: ``use_masking``, ``progress_bar``).

    :param parent_learn: the parent's ``learn``, bound to the model (``super().learn``)
    :param parent_args: the arguments given by position after ``reset_num_timesteps``
    :param progress_bar: ``progress_bar`` given by keyword (or its default)
    :param parent_kwargs: the parent's other arguments given by keyword
    :return: ``progress_bar`` and the parent's other arguments by name
    """
    names = list(inspect.signature(parent_learn).parameters)[5:]  # after total_timesteps, ..., reset_num_timesteps
    owner = type(getattr(parent_learn, "__self__", None)).__name__
    if len(parent_args) > len(names):
        most, count = 6 + len(names), 6 + len(parent_args)  # with self, as Python counts them
        raise TypeError(f"{owner}.learn() takes from 2 to {most} positional arguments but {count} were given")
    given = dict(zip(names, parent_args))
    repeated = sorted(set(given) & {*parent_kwargs, *(["progress_bar"] if progress_bar else [])})
    if repeated:
        raise TypeError(f"learn() got multiple values for {', '.join(repeated)}")
    return bool(given.pop("progress_bar", progress_bar)), {**given, **parent_kwargs}
