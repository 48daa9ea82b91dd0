"""
Data-parallel training on ``torch.distributed`` (several processes, GPUs or machines started by ``torchrun``).

Every rank runs the same script: it steps its own ``n_envs`` environments, and the ranks train ONE model, as one big
process would with ``world_size * n_envs`` environments. What keeps the ranks identical:

- initial parameters, optimizer states and the proximal EWMA: rank 0's, broadcast after the model is built and after
  every ``set_parameters`` (so after ``load``);
- gradients: averaged over the ranks (one all-reduce of one flat buffer) at every optimizer step of every phase,
  before gradient clipping, so every rank clips the same global gradient and takes the same step;
- advantage normalization moments (in ``"minibatch"`` mode those of every global minibatch of an epoch in one
  reduction), the ``target_kl`` decision, ``VecNormalize`` statistics and the decision to go on
  training (a callback of rank 0 that returns False), all global;
- the EWMA proximal policy then needs no communication of its own (every rank applies the same updates).

Rank 0 alone logs, saves, runs the callbacks (checkpoints, evaluation) and shows the progress bar; episode statistics
of all ranks, and the mean over the ranks of the losses and diagnostics ``train()`` recorded, are gathered on it once
per iteration (in the same collective). Collectives are issued only from the main thread, in ``train()``
and in :meth:`DataParallelTraining.synchronize_iteration` (once per iteration, after the rollout), never while the
environments are being stepped.
"""

from sb3_ewma.common.distributed.collectives import DataParallelContext, RunningStatisticsPool
from sb3_ewma.common.distributed.process_group import (
    DEFAULT_RENDEZVOUS_TIMEOUT_S,
    PER_RANK_SAMPLE_COUNTS,
    RANK_LOCAL_SETTINGS,
    RENDEZVOUS_TIMEOUT_VARIABLE,
    SAME_SETTINGS_ADVICE,
    RendezvousTimeoutError,
    broadcast_from_rank0,
    check_distributed_argument,
    current_rank,
    data_parallel_device,
    init_process_group,
    is_main_process,
    join_torchrun,
    local_world_size,
    per_rank_hyperparams,
    process_group_backend,
    quiet_unless_rank0,
    rank_local_settings,
    ranks_share_a_gpu,
    rendezvous,
    rendezvous_timeout,
    wants_data_parallel,
)
from sb3_ewma.common.distributed.training import (
    DataParallelTraining,
    SingleProcessTraining,
    data_parallel_settings,
    mean_over_ranks,
    previous_world_size_change,
    training_diagnostics,
    warn_world_size_change,
)

__all__ = [
    "DEFAULT_RENDEZVOUS_TIMEOUT_S",
    "PER_RANK_SAMPLE_COUNTS",
    "RANK_LOCAL_SETTINGS",
    "RENDEZVOUS_TIMEOUT_VARIABLE",
    "SAME_SETTINGS_ADVICE",
    "DataParallelContext",
    "DataParallelTraining",
    "RendezvousTimeoutError",
    "RunningStatisticsPool",
    "SingleProcessTraining",
    "broadcast_from_rank0",
    "check_distributed_argument",
    "current_rank",
    "data_parallel_device",
    "data_parallel_settings",
    "init_process_group",
    "is_main_process",
    "join_torchrun",
    "local_world_size",
    "mean_over_ranks",
    "per_rank_hyperparams",
    "previous_world_size_change",
    "process_group_backend",
    "quiet_unless_rank0",
    "rank_local_settings",
    "ranks_share_a_gpu",
    "rendezvous",
    "rendezvous_timeout",
    "training_diagnostics",
    "wants_data_parallel",
    "warn_world_size_change",
]
