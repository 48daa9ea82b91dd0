"""
Optuna samplers of the hyperparameters of every algorithm of the package for rl-zoo3's hyperparameter search
(``python -m sb3_ewma.train ... -optimize``), registered by :func:`sb3_ewma.zoo.register_zoo`. See :ref:`rl_zoo`.

Each follows rl-zoo3's conventions (``sample_<algo>_params(trial, n_actions, n_envs, additional_args)`` returns
constructor keyword arguments, ``convert_<algo>_params(trial.params)`` turns a trial's raw values back into them) and
samples its parent's space (PPO's, or rl-zoo3's ``ppo_lstm`` sampler for RecurrentPPO-EWMA) plus the EWMA center of
mass, ``kl_coef``, ``imp_samp_max`` and the advantage normalization; PPG adds its phase settings. Only the ``ppo_lstm``
sampler changes ``policy_kwargs``. This module imports without Optuna and rl-zoo3.
"""

from typing import TYPE_CHECKING, Any

from sb3_ewma.common.ewma import ewma_decay_from_center_of_mass, ewma_decay_from_span

if TYPE_CHECKING:
    import optuna

EWMA_CENTER_OF_MASS_CHOICES: tuple[str | int, ...] = ("auto", 1, 2, 4, 8, 16, 32)
"""Center of mass of the proximal EWMA, in optimizer steps; "auto": sb3_ewma.common.ewma_age's default rule."""
KL_COEF_CHOICES: tuple[float, ...] = (0.0, 0.01, 0.1, 1.0)
IMP_SAMP_MAX_CHOICES: tuple[float, ...] = (0.0, 10.0, 100.0)
"""Cap on ``pi / pi_behav`` (0: no cap)."""
ADVANTAGE_EWMA_SPAN_CHOICES: tuple[int, ...] = (1, 4, 16)
"""Span in iterations of the EWMA advantage moments (1: the current iteration only)."""
N_POLICY_ITERATIONS_CHOICES: tuple[int, ...] = (4, 8, 16, 32)
N_AUX_EPOCHS_CHOICES: tuple[int, ...] = (2, 4, 6, 9)
BETA_CLONE_CHOICES: tuple[float, ...] = (0.3, 1.0, 3.0)


def _sample_ppo(trial: "optuna.Trial", n_epochs_choices: tuple[int, ...]) -> dict[str, Any]:
    """The raw values of the PPO hyperparameters (names as stored in the trial)."""
    return {
        # minibatch size from 2**5 = 32 to 2**10 = 1024 samples
        "batch_size_pow": trial.suggest_int("batch_size_pow", 5, 10),
        # steps per environment and iteration from 2**5 = 32 to 2**12 = 4096
        "n_steps_pow": trial.suggest_int("n_steps_pow", 5, 12),
        "one_minus_gamma": trial.suggest_float("one_minus_gamma", 0.0001, 0.03, log=True),
        "one_minus_gae_lambda": trial.suggest_float("one_minus_gae_lambda", 0.001, 0.1, log=True),
        "learning_rate": trial.suggest_float("learning_rate", 1e-5, 0.003, log=True),
        "ent_coef": trial.suggest_float("ent_coef", 1e-8, 0.1, log=True),
        "clip_range": trial.suggest_categorical("clip_range", [0.1, 0.2, 0.3]),
        "n_epochs": trial.suggest_categorical("n_epochs", list(n_epochs_choices)),
        "max_grad_norm": trial.suggest_float("max_grad_norm", 0.3, 5.0, log=True),
    }


def _sample_decoupled(trial: "optuna.Trial") -> dict[str, Any]:
    """The raw values of the EWMA proximal policy and the decoupled objective."""
    sampled: dict[str, Any] = {
        "ewma_center_of_mass": trial.suggest_categorical("ewma_center_of_mass", list(EWMA_CENTER_OF_MASS_CHOICES)),
        "kl_coef": trial.suggest_categorical("kl_coef", list(KL_COEF_CHOICES)),
        "imp_samp_max": trial.suggest_categorical("imp_samp_max", list(IMP_SAMP_MAX_CHOICES)),
    }
    sampled.update(_sample_advantage_normalization(trial))
    return sampled


def _sample_advantage_normalization(trial: "optuna.Trial") -> dict[str, Any]:
    normalization = trial.suggest_categorical("advantage_normalization", ["minibatch", "ewma"])
    sampled: dict[str, Any] = {"advantage_normalization": normalization}
    if normalization == "ewma":
        sampled["advantage_ewma_span"] = trial.suggest_categorical("advantage_ewma_span", list(ADVANTAGE_EWMA_SPAN_CHOICES))
    return sampled


def _sample_ppg(trial: "optuna.Trial") -> dict[str, Any]:
    """The raw values of the PPG phase structure and auxiliary phase."""
    return {
        "n_policy_iterations": trial.suggest_categorical("n_policy_iterations", list(N_POLICY_ITERATIONS_CHOICES)),
        "n_value_epochs": trial.suggest_categorical("n_value_epochs", [1, 2, 3]),
        "n_aux_epochs": trial.suggest_categorical("n_aux_epochs", list(N_AUX_EPOCHS_CHOICES)),
        "beta_clone": trial.suggest_categorical("beta_clone", list(BETA_CLONE_CHOICES)),
    }


def convert_ewma_params(sampled_params: dict[str, Any]) -> dict[str, Any]:
    """
    Turn the raw values of a trial of the ``ppo_ewma``, ``ppg_ewma``, ``ppg`` or ``ppo_mask_ewma`` sampler into
    constructor keyword arguments (``*_pow`` -> ``2 ** value``, ``one_minus_*`` -> ``1 - value``,
    ``ewma_center_of_mass`` -> ``ewma_decay``, ``advantage_ewma_span`` -> ``advantage_ewma_decay``).

    :param sampled_params: the raw values (``trial.params``)
    :return: the keyword arguments
    """
    hyperparams = dict(sampled_params)
    for name in ("batch_size", "n_steps"):
        if f"{name}_pow" in hyperparams:
            hyperparams[name] = 2 ** int(hyperparams.pop(f"{name}_pow"))
    for name in ("gamma", "gae_lambda"):
        if f"one_minus_{name}" in hyperparams:
            hyperparams[name] = 1.0 - float(hyperparams.pop(f"one_minus_{name}"))
    if "ewma_center_of_mass" in hyperparams:
        center_of_mass = hyperparams.pop("ewma_center_of_mass")
        hyperparams["ewma_decay"] = "auto" if center_of_mass == "auto" else ewma_decay_from_center_of_mass(center_of_mass)
    if "advantage_ewma_span" in hyperparams:
        hyperparams["advantage_ewma_decay"] = ewma_decay_from_span(hyperparams.pop("advantage_ewma_span"))
    return hyperparams


def _finalize(trial: "optuna.Trial", hyperparams: dict[str, Any], n_envs: int) -> dict[str, Any]:
    """Bound the minibatch size of the converted keyword arguments and show the actual values in the trial."""
    # a minibatch cannot be larger than the iteration's batch (SB3 would silently use the whole batch)
    if "batch_size" in hyperparams and "n_steps" in hyperparams:
        hyperparams["batch_size"] = min(hyperparams["batch_size"], hyperparams["n_steps"] * max(int(n_envs), 1))
    # show the actual values in Optuna's reports
    for key in ("gamma", "gae_lambda", "n_steps", "batch_size", "ewma_decay", "advantage_ewma_decay"):
        if key in hyperparams:
            trial.set_user_attr(key, hyperparams[key])
    return hyperparams


def sample_ppo_ewma_params(trial: "optuna.Trial", n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
    """
    Sampler for PPO-EWMA (and MaskablePPO-EWMA) hyperparameters, with rl-zoo3's signature.

    :param trial: the Optuna trial
    :param n_actions: number of continuous actions (unused)
    :param n_envs: number of environments, to bound ``batch_size`` by ``n_steps * n_envs``
    :param additional_args: rl-zoo3's extra arguments (unused)
    :return: the keyword arguments of ``PPO_EWMA`` (or ``MaskablePPO_EWMA``)
    """
    sampled = _sample_ppo(trial, n_epochs_choices=(1, 2, 3, 5, 10))
    sampled.update(_sample_decoupled(trial))
    return _finalize(trial, convert_ewma_params(sampled), n_envs)


def sample_ppg_ewma_params(trial: "optuna.Trial", n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
    """Sampler for PPG-EWMA hyperparameters (as :func:`sample_ppo_ewma_params`); ``n_epochs`` is ``E_pi``."""
    sampled = _sample_ppo(trial, n_epochs_choices=(1, 2, 3))
    sampled.update(_sample_decoupled(trial))
    sampled.update(_sample_ppg(trial))
    return _finalize(trial, convert_ewma_params(sampled), n_envs)


def sample_ppg_params(trial: "optuna.Trial", n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
    """
    Sampler for plain PPG hyperparameters (as :func:`sample_ppo_ewma_params`): PPG-EWMA's without the EWMA and the
    decoupled objective.
    """
    sampled = _sample_ppo(trial, n_epochs_choices=(1, 2, 3))
    sampled.update(_sample_advantage_normalization(trial))
    sampled.update(_sample_ppg(trial))
    return _finalize(trial, convert_ewma_params(sampled), n_envs)


def sample_ppo_lstm_ewma_params(trial: "optuna.Trial", n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
    """
    Sampler for RecurrentPPO-EWMA hyperparameters (as :func:`sample_ppo_ewma_params`, ``n_actions`` and
    ``additional_args`` passed on): rl-zoo3's ``ppo_lstm`` sampler plus the decoupled options. Needs rl-zoo3.
    """
    from rl_zoo3.hyperparams_opt import HYPERPARAMS_SAMPLER as ZOO_SAMPLERS

    hyperparams = ZOO_SAMPLERS["ppo_lstm"](trial, n_actions, n_envs, additional_args)
    hyperparams.update(convert_ewma_params(_sample_decoupled(trial)))
    return _finalize(trial, hyperparams, n_envs)


def convert_ppo_lstm_ewma_params(sampled_params: dict[str, Any]) -> dict[str, Any]:
    """
    Turn the raw values of a trial of :func:`sample_ppo_lstm_ewma_params` into constructor keyword arguments: rl-zoo3's
    ``ppo_lstm`` converter, then :func:`convert_ewma_params`. Needs rl-zoo3.
    """
    from rl_zoo3.hyperparams_opt import HYPERPARAMS_CONVERTER as ZOO_CONVERTERS

    return convert_ewma_params(ZOO_CONVERTERS["ppo_lstm"](sampled_params))


HYPERPARAMS_SAMPLER = {
    "ppo_ewma": sample_ppo_ewma_params,
    "ppg_ewma": sample_ppg_ewma_params,
    "ppg": sample_ppg_params,
    "ppo_lstm_ewma": sample_ppo_lstm_ewma_params,
    "ppo_mask_ewma": sample_ppo_ewma_params,
}
"""The samplers, by rl-zoo3 algorithm name."""

HYPERPARAMS_CONVERTER = {
    "ppo_ewma": convert_ewma_params,
    "ppg_ewma": convert_ewma_params,
    "ppg": convert_ewma_params,
    "ppo_lstm_ewma": convert_ppo_lstm_ewma_params,
    "ppo_mask_ewma": convert_ewma_params,
}
"""The converters of raw trial values, by rl-zoo3 algorithm name."""
