"""
:func:`scale_hyperparams` and :func:`scale_hyperparams_with_report`: the checks of the settings, the algorithm's
defaults and the order in which the rules of :mod:`sb3_ewma.scale.rules` apply.
"""

import copy
import difflib
import inspect
import numbers
import warnings
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from sb3_ewma.algorithms import ALGORITHMS
from sb3_ewma.scale.rules import (
    ScaleLog,
    pin_aux_optimizer_kwargs,
    scale_advantage_ewma,
    scale_batch_size,
    scale_betas,
    scale_learning_rates,
    scale_policy_iterations,
    scale_proximal_ewma,
)
from sb3_ewma.scale.zoo_entry import ZOO_ENTRY_KEYS, has_explicit_betas, learning_rate_rule

ALGOS = tuple(ALGORITHMS)
LR_RULES = ("sqrt", "linear")

# keys that only PPG takes: their presence makes ``algo`` default to "ppg_ewma"
PPG_KEYS = ("n_policy_iterations", "n_value_epochs", "n_aux_epochs", "aux_batch_size", "aux_learning_rate")


def _signature_defaults(cls: type) -> dict[str, Any]:
    parameters = inspect.signature(cls).parameters.values()
    return {param.name: param.default for param in parameters if param.default is not inspect.Parameter.empty}


def algorithm_defaults(algo: str) -> dict[str, Any]:
    """
    The constructor defaults of the algorithm registered under ``algo`` in :data:`sb3_ewma.algorithms.ALGORITHMS`, used
    for hyperparameters missing from the settings.

    :param algo: one of :data:`ALGOS`
    :return: a new dict of defaults
    """
    if algo not in ALGOS:
        raise ValueError(f"algo must be one of {ALGOS}, got {algo!r}")
    return _signature_defaults(ALGORITHMS[algo])


def _is_ppg(algo: str) -> bool:
    return "n_policy_iterations" in inspect.signature(ALGORITHMS[algo]).parameters


def _check_keys(hyperparams: dict[str, Any], algo: str) -> None:
    """Raise a ``ValueError`` for a key that is neither an argument of the algorithm nor an rl-zoo3 entry key."""
    known = {*inspect.signature(ALGORITHMS[algo]).parameters, *ZOO_ENTRY_KEYS} - {"self", "env", "_init_setup_model"}
    for key in hyperparams:
        if key not in known:
            close = difflib.get_close_matches(str(key), sorted(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"unknown hyperparameter {key!r} for {ALGORITHMS[algo].__name__}{hint}: the keys are the algorithm's "
                f"arguments and rl-zoo3's entry keys {ZOO_ENTRY_KEYS}"
            )


def _check_n_envs(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _resolve_algo(hyperparams: dict[str, Any], algo: str | None, log: ScaleLog) -> str:
    if algo is not None:
        if algo not in ALGOS:
            raise ValueError(f"algo must be one of {ALGOS}, got {algo!r}")
        log.lines.append(f"algo: {algo}")
        return algo
    ppg_keys = [key for key in PPG_KEYS if key in hyperparams]
    inferred = "ppg_ewma" if ppg_keys else "ppo_ewma"
    reason = f"PPG keys {ppg_keys}" if ppg_keys else f"no PPG key among {list(PPG_KEYS)}"
    log.lines.append(f"algo: {inferred} (inferred: {reason}; pass algo= to choose)")
    return inferred


def scale_with_log(
    hyperparams: dict[str, Any],
    n_envs: int,
    reference_n_envs: int | None,
    algo: str | None,
    lr_rule: str | None,
    scale_adam_betas: bool,
    scale_aux_learning_rate: bool,
) -> tuple[dict[str, Any], ScaleLog]:
    """:func:`scale_hyperparams` with positional arguments, returning ``(rescaled settings, log)`` instead of warning."""
    if not isinstance(hyperparams, Mapping):
        raise ValueError(
            "hyperparams must be a dict of an rl-zoo3 entry's settings ({'n_envs': 8, 'batch_size': 256, ...}), got "
            f"{hyperparams!r}"
        )
    n_envs = _check_n_envs("n_envs", n_envs)
    if "n_envs" in hyperparams:
        reference = _check_n_envs("the reference n_envs (hyperparams['n_envs'])", hyperparams["n_envs"])
        if reference_n_envs is not None and _check_n_envs("reference_n_envs", reference_n_envs) != reference:
            raise ValueError(f"reference_n_envs={reference_n_envs} differs from hyperparams['n_envs']={hyperparams['n_envs']}")
    elif reference_n_envs is not None:
        reference = _check_n_envs("reference_n_envs", reference_n_envs)
    else:
        raise ValueError(
            "The reference number of environments is unknown: the settings have no 'n_envs' key and reference_n_envs "
            "was not given (rl-zoo3 uses n_envs=1 when the key is absent)"
        )
    if lr_rule is not None and lr_rule not in LR_RULES:
        raise ValueError(f"lr_rule must be None (detect from the optimizer) or one of {LR_RULES}, got {lr_rule!r}")
    log = ScaleLog()
    algo = _resolve_algo(hyperparams, algo, log)
    _check_keys(hyperparams, algo)
    is_ppg = _is_ppg(algo)

    scaled = copy.deepcopy(hyperparams)
    scaled["n_envs"] = n_envs
    c = Fraction(reference, n_envs)
    log.lines.append(f"n_envs: {reference} -> {n_envs} (c = reference / target = {float(c):.6g})")
    if c == 1:
        log.lines.append("c = 1: nothing else to rescale")
        return scaled, log

    defaults = algorithm_defaults(algo)
    rule, description, adam_like = learning_rate_rule(scaled.get("policy_kwargs"), lr_rule)
    if scale_adam_betas and not adam_like and not has_explicit_betas(scaled.get("policy_kwargs")):
        raise ValueError(f"scale_adam_betas=True needs an Adam-type optimizer (with betas), got {description}")

    # the rules that may raise come first, those that may only warn last
    reference_batch_size = scale_batch_size(scaled, defaults, c, reference, log)
    if is_ppg:
        scale_policy_iterations(scaled, defaults, c, log)
        if scaled.get("aux_batch_size") is None:
            # PPG's default auxiliary minibatch is batch_size, which just changed: keep the reference one
            scaled["aux_batch_size"] = reference_batch_size
            log.lines.append(
                f"aux_batch_size: None -> {reference_batch_size} (the reference batch_size: auxiliary phase unchanged)"
            )
    if scale_adam_betas:
        if is_ppg:
            pin_aux_optimizer_kwargs(scaled, log)
        scale_betas(scaled, float(c), log)
    scale_learning_rates(scaled, defaults, c, is_ppg, rule, description, scale_aux_learning_rate, log)
    scale_proximal_ewma(scaled, defaults, c, reference, reference_batch_size, log)
    scale_advantage_ewma(scaled, defaults, c, log)
    if is_ppg:
        changed = (
            "n_aux_epochs, aux_batch_size; aux_learning_rate rescaled as asked"
            if scale_aux_learning_rate
            else "n_aux_epochs, aux_batch_size, aux_learning_rate"
        )
        log.lines.append(
            f"auxiliary phase unchanged ({changed}): its buffer n_policy_iterations * n_envs * n_steps is constant"
        )

    n_epochs = scaled.get("n_epochs", defaults.get("n_epochs", 1))
    if n_epochs != 1:
        log.caveats.append(
            f"n_epochs={n_epochs}{'' if 'n_epochs' in scaled else ' (default)'}: batch size-invariance needs 1 policy "
            "epoch; with several epochs the rescaled settings will not reproduce the reference behavior"
        )
    return scaled, log


def scale_hyperparams_with_report(
    hyperparams: dict[str, Any],
    n_envs: int,
    *,
    reference_n_envs: int | None = None,
    algo: str | None = None,
    lr_rule: str | None = None,
    scale_adam_betas: bool = False,
    scale_aux_learning_rate: bool = False,
) -> tuple[dict[str, Any], list[str]]:
    """
    Same as :func:`scale_hyperparams`, also returning the report: one line per rescaled hyperparameter,
    ``"name: old -> new (rule)"``.

    :return: ``(rescaled settings, report lines)``
    """
    scaled, log = scale_with_log(
        hyperparams, n_envs, reference_n_envs, algo, lr_rule, scale_adam_betas, scale_aux_learning_rate
    )
    for caveat in log.caveats:
        warnings.warn(caveat, UserWarning, stacklevel=2)
    return scaled, log.lines


def scale_hyperparams(
    hyperparams: dict[str, Any],
    n_envs: int,
    *,
    reference_n_envs: int | None = None,
    algo: str | None = None,
    lr_rule: str | None = None,
    scale_adam_betas: bool = False,
    scale_aux_learning_rate: bool = False,
) -> dict[str, Any]:
    """
    Rescale PPO-EWMA / PPG-EWMA hyperparameters tuned with ``reference_n_envs`` environments for ``n_envs``
    environments, following the batch size-invariance rules of Hilton, Cobbe & Schulman (2021)
    (:ref:`batch_size_invariance`). With ``c = reference_n_envs / n_envs``:

    - ``learning_rate`` (a number, an rl-zoo3 ``"lin_<value>"`` string or a schedule) ``/ sqrt(c)`` for Adam-type
      optimizers, ``/ c`` for ``SGD`` (detected from ``policy_kwargs["optimizer_class"]``);
    - ``batch_size / c`` (must stay a whole number); ``n_steps`` unchanged;
    - ``ewma_decay``: center of mass ``* c``; a rule's name (``"auto"``, ...) is resolved with
      :mod:`sb3_ewma.common.ewma_age` and written as an explicit decay;
    - ``advantage_ewma_decay`` when ``advantage_normalization == "ewma"``: span in iterations ``* c`` (at least 1);
    - PPG: ``n_policy_iterations * c`` (must stay a whole number); the auxiliary phase is unchanged (an
      ``aux_learning_rate`` of ``None`` is pinned to the reference ``learning_rate`` when it is not a ``"lin_<value>"``
      string);
    - optionally Adam's ``betas ** (1 / c)``;
    - ``n_envs`` is set to the target (pop it before passing the settings to a constructor); every other setting passes
      through unchanged.

    Missing hyperparameters that a rule needs take the algorithm's defaults (:func:`algorithm_defaults`) and are written
    explicitly. A ``UserWarning`` says when the result cannot be batch size-invariant (``n_epochs > 1``, per-minibatch
    advantage normalization, no EWMA) or when ``"auto"`` is resolved with the default ``n_steps``.

    :param hyperparams: one algorithm's settings (an rl-zoo3 entry or constructor kwargs) with the reference number of
        environments in ``n_envs``; not modified
    :param n_envs: the target TOTAL number of environments, across all processes
    :param reference_n_envs: the number of environments the settings were tuned with, when ``hyperparams`` has no
        ``n_envs`` key (if both are given they must agree)
    :param algo: ``"ppo_ewma"``, ``"ppg_ewma"``, ``"ppg"``, ``"ppo_lstm_ewma"`` or ``"ppo_mask_ewma"``; by default
        ``"ppg_ewma"`` if ``n_policy_iterations``, ``n_value_epochs``, ``n_aux_epochs``, ``aux_batch_size`` or
        ``aux_learning_rate`` is present, else ``"ppo_ewma"``
    :param lr_rule: ``"sqrt"`` or ``"linear"`` to override the rule detected from the optimizer (required for an
        optimizer other than Adam, AdamW, NAdam, RAdam, Adamax, SGD or their subclasses)
    :param scale_adam_betas: also raise Adam's ``beta1`` and ``beta2`` to the power ``1 / c``
    :param scale_aux_learning_rate: PPG: also rescale ``aux_learning_rate``
    :return: the rescaled settings, a deep copy (keys added at the end)
    :raises ValueError: for invalid settings, or a size that stops being a whole number
    """
    scaled, log = scale_with_log(
        hyperparams, n_envs, reference_n_envs, algo, lr_rule, scale_adam_betas, scale_aux_learning_rate
    )
    for caveat in log.caveats:
        warnings.warn(caveat, UserWarning, stacklevel=2)
    return scaled
