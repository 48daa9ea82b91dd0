"""
The contract between the mixins of ``sb3_ewma.common`` and the algorithm class they are mixed into.

Every algorithm of this package is an SB3 ``OnPolicyAlgorithm`` with PPO's hyperparameters, preceded in its bases by
mixins (the training core :class:`~sb3_ewma.common.decoupled.mixin.DecoupledAlgorithmMixin`, data-parallel training,
overlapped rollouts), in the order that ``tests/test_layout.py`` checks:

- ``PPO_EWMA(DataParallelMixin, AsyncRolloutMixin, RolloutCollectionMixin, DecoupledTrainingMixin, PPO)``;
- ``PPG_EWMA(DataParallelMixin, AsyncRolloutMixin, RolloutCollectionMixin, DecoupledAlgorithmMixin, OnPolicyAlgorithm)``;
- ``RecurrentPPO_EWMA(DataParallelMixin, AsyncRolloutMixin, RolloutCollectionMixin, ContribDecoupledMixin, RecurrentPPO)``
  and the same for ``MaskablePPO_EWMA`` with ``MaskablePPO`` (their rollout loops are their parents', with an explicit
  policy: ``_collect_rollout_with``).

The mixins extend the host's methods through ``super()``, so each must come before the host, and the outer ones
(data-parallel training, then overlapped rollouts) see the calls first.
"""

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.type_aliases import Schedule


@runtime_checkable
class PPOHost(Protocol):
    """
    What the mixins use of their host beyond SB3's ``OnPolicyAlgorithm``: PPO's hyperparameters, which SB3's ``PPO``
    and sb3-contrib's ``RecurrentPPO`` and ``MaskablePPO`` set in their constructors (and ``PPG_EWMA`` in its own),
    and a factory of rollout buffers.
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
        """A new rollout buffer like ``self.rollout_buffer`` (the training core's; the recurrent one builds its own)."""
        ...


if TYPE_CHECKING:

    class HostAlgorithm(OnPolicyAlgorithm, PPOHost):
        """
        The host as type checkers see it: the base class of the mixins, so that their uses of the host's attributes
        and their ``super()`` calls of its methods are checked against SB3's ``OnPolicyAlgorithm`` and
        :class:`PPOHost`.
        """

else:
    # at run time the mixins derive from object: the host's methods are reached through the MRO of the algorithm
    HostAlgorithm = object
