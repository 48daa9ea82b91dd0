"""The logs of a training iteration of the decoupled objective."""

from typing import Any

import torch as th
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.type_aliases import Schedule
from stable_baselines3.common.utils import explained_variance

from sb3_ewma.common.decoupled.objective import mean_of
from sb3_ewma.common.ewma import center_of_mass_from_ewma_decay
from sb3_ewma.common.format import without_rounding_noise


def schedule_value(schedule: float | Schedule | None, progress_remaining: float) -> float | None:
    """A clip range at the given progress (``None``: no clipping)."""
    if schedule is None:
        return None
    return float(schedule(progress_remaining)) if callable(schedule) else float(schedule)


def record_train_logs(
    algorithm: Any,
    buffer: RolloutBuffer,
    stats: dict[str, float],
    losses: dict[str, list[th.Tensor]],
    loss: th.Tensor,
    clip_range: float | None,
    clip_range_vf: float | None,
) -> None:
    """
    SB3 PPO's logs of a training iteration, then the decoupled objective's diagnostics, the advantage statistics and
    the EWMA's center of mass.

    :param stats: the decoupled objective's mean diagnostics (``policy_gradient_loss``, ``clip_fraction``, ...)
    :param losses: the per-minibatch ``entropy_loss``, ``value_loss`` and ``approx_kl``; one that no minibatch computed
        (PPG's value-only epochs, a policy phase stopped by ``target_kl``) is not logged
    :param loss: the last minibatch's total loss
    """
    logger = algorithm.logger
    explained_var = explained_variance(buffer.values.flatten(), buffer.returns.flatten())
    if losses["entropy_loss"]:
        logger.record("train/entropy_loss", mean_of(losses["entropy_loss"]))
    if "policy_gradient_loss" in stats:
        logger.record("train/policy_gradient_loss", stats["policy_gradient_loss"])
    if losses["value_loss"]:
        logger.record("train/value_loss", mean_of(losses["value_loss"]))
    if losses["approx_kl"]:
        logger.record("train/approx_kl", mean_of(losses["approx_kl"]))
    if clip_range is not None and "clip_fraction" in stats:
        logger.record("train/clip_fraction", stats["clip_fraction"])
    logger.record("train/loss", loss.item())
    logger.record("train/explained_variance", explained_var)
    if hasattr(algorithm.policy, "log_std"):
        logger.record("train/std", th.exp(algorithm.policy.log_std).mean().item())

    logger.record("train/n_updates", algorithm._n_updates, exclude="tensorboard")
    if clip_range is not None:
        logger.record("train/clip_range", clip_range)
    if clip_range_vf is not None:
        logger.record("train/clip_range_vf", clip_range_vf)

    for key in ("proximal_kl", "imp_samp_capped_fraction", "kl_penalty"):
        if key in stats:
            logger.record(f"train/{key}", stats[key])
    for key, value in algorithm.advantage_normalizer.stats().items():
        logger.record(f"train/{key}", value)
    decay = algorithm.proximal_decay
    if algorithm.proximal.kind == "ewma" and decay is not None:
        logger.record("train/ewma_center_of_mass", without_rounding_noise(center_of_mass_from_ewma_decay(decay)))
