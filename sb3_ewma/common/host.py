"""
The contract between :class:`~sb3_ewma.common.decoupled.algorithm.DecoupledAlgorithm` and the parent it is put before
in every algorithm's bases (``tests/test_layout.py`` checks them):

- ``PPO_EWMA(DecoupledAlgorithm, PPO)`` and ``PPG_EWMA(DecoupledAlgorithm, OnPolicyAlgorithm)``;
- ``RecurrentPPO_EWMA(DecoupledAlgorithm, RecurrentPPO)`` and ``MaskablePPO_EWMA(DecoupledAlgorithm, MaskablePPO)``.

``DecoupledAlgorithm`` extends the parent's methods through ``super()``, so it comes first.
"""

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.type_aliases import Schedule


@runtime_checkable
class PPOHost(Protocol):
    """
    What ``DecoupledAlgorithm`` uses of its parent beyond SB3's ``OnPolicyAlgorithm``: PPO's hyperparameters, which
    SB3's ``PPO`` and sb3-contrib's ``RecurrentPPO`` and ``MaskablePPO`` set in their constructors (and ``PPG_EWMA`` in
    its own), and a factory of rollout buffers.
    The clip ranges are schedules after ``_setup_model`` (``None``: no clipping); sb3-contrib allows
    ``batch_size=None`` (the whole rollout).
    """

    # read-only here: each host types them its own way (SB3's batch_size is an int, sb3-contrib's may be None)
    @property
    def batch_size(self) -> int | None: ...

    @property
    def n_epochs(self) -> int: ...

    @property
    def clip_range(self) -> float | Schedule | None: ...

    @property
    def clip_range_vf(self) -> float | Schedule | None: ...

    @property
    def normalize_advantage(self) -> bool: ...

    @property
    def target_kl(self) -> float | None: ...

    def _make_rollout_buffer(self) -> RolloutBuffer:
        """A new rollout buffer like ``self.rollout_buffer`` (``DecoupledAlgorithm``'s; the recurrent one builds its own)."""
        ...


if TYPE_CHECKING:

    class HostAlgorithm(OnPolicyAlgorithm, PPOHost):
        """
        The parent as type checkers see it: the base of ``DecoupledAlgorithm``, so that its uses of the parent's
        attributes and its ``super()`` calls are checked against SB3's ``OnPolicyAlgorithm`` and :class:`PPOHost`;
        with the decoupled options (:class:`~sb3_ewma.common.decoupled.options.DecoupledOptions`), which
        ``DecoupledAlgorithm._set_decoupled_options`` stores as attributes.
        """

        ewma_decay: float | str | None
        kl_coef: float
        kl_estimator: str
        imp_samp_max: float
        advantage_normalization: str
        advantage_ewma_decay: float
        minibatch_sampling: str
        log_gradient_noise_scale: bool
        distributed: bool | None
        async_rollouts: bool
        rollout_collector: str  # "thread" or "process"

else:
    # at run time DecoupledAlgorithm derives from object: the parent's methods are reached through the algorithm's MRO
    HostAlgorithm = object
