from typing import Any, ClassVar

from stable_baselines3 import PPO
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv
from typing_extensions import Unpack

from sb3_ewma.common.decoupled.algorithm import DecoupledAlgorithm
from sb3_ewma.common.decoupled.arguments import (
    DecoupledArguments,
    PPOArguments,
    constructor_arguments,
    document_arguments,
    keyword_signature,
)
from sb3_ewma.common.decoupled.options import DecoupledOptions, parent_arguments
from sb3_ewma.common.export import to_sb3_ppo
from sb3_ewma.ppo_ewma.policies import CnnPolicy, MlpPolicy, MultiInputPolicy


class PPOEWMAArguments(PPOArguments, DecoupledArguments, total=False):
    """The keyword arguments of :class:`PPO_EWMA`: SB3's ``PPO``'s and the decoupled options."""

    batch_size: int
    use_sde: bool
    sde_sample_freq: int
    rollout_buffer_class: type[RolloutBuffer] | None
    rollout_buffer_kwargs: dict[str, Any] | None


@document_arguments(PPO)
class PPO_EWMA(DecoupledAlgorithm, PPO):
    """
    PPO-EWMA: Proximal Policy Optimization with an exponentially weighted moving average (EWMA) of the policy as
    the proximal policy, and the decoupled objectives (Hilton, Cobbe & Schulman 2021,
    https://arxiv.org/abs/2110.00641). The behavior policy (which collected the data) is used only for
    importance sampling; the proximal policy, an EWMA of the policy's parameters updated after every optimizer step,
    limits how fast the policy moves (through clipping and/or a KL penalty). This makes PPO batch size-invariant
    (see :func:`sb3_ewma.scale_hyperparams`) and robust to stale data.

    A drop-in replacement for SB3's ``PPO``: same arguments with the same defaults and meaning, then the new ones.
    With ``ewma_decay=None`` it is SB3's PPO, up to the importance-sampling cap ``imp_samp_max``
    (which only acts on samples whose ratio ``pi / pi_behav`` exceeds it; ``imp_samp_max=0`` removes it).

    :param minibatch_sampling: How each epoch is split into minibatches: ``"steps"`` (default, SB3's: random steps)
        or ``"rollouts"`` (the authors': whole ``n_steps``-step rollouts of ``batch_size / n_steps`` environments per
        minibatch, environments in random order; ``batch_size`` must be a multiple of ``n_steps``, or divide it:
        then each minibatch is a contiguous piece of one environment's rollout).
    :param log_gradient_noise_scale: Log the gradient noise scale ``B_simple`` (McCandlish et al. 2018) as
        ``train/gradient_noise_scale``, estimated after every epoch from the minibatch gradients of the epoch and their
        mean, smoothed with EMAs (see :mod:`sb3_ewma.common.gradient_noise`). It approximates the critical batch size,
        below which the batch size-invariance rules hold. Needs at least 2 minibatches per epoch; costs one copy of the
        gradient and one norm per optimizer step, so it is off by default.
    :param async_rollouts: Overlap rollouts with training: iteration ``k`` trains on the rollout collected by the
        parameters of iteration ``k - 1`` while a collector collects rollout ``k + 1`` with a snapshot of the
        current parameters (staleness of exactly one iteration; the first rollout of each ``learn`` call is fresh).
        The behavior log-probabilities are those stored at collection; the proximal policy is the EWMA (EWMA off: the
        policy at the start of the iteration). ``True`` or
        ``"thread"``: a collector thread, on which the callbacks' ``on_step`` runs (it overlaps where torch and the
        environments release the GIL: larger networks, C++ environments); ``"process"``: a forked collector process
        (CPU policies; for Python-heavy loops such as CartPole with a small MLP), whose rollouts are replayed to the
        callbacks at the hand-off, the next ``learn`` call starting with ``env.reset()`` (documentation: "Overlapped
        Rollouts"). Not with artificial staleness (:func:`sb3_ewma.ablations.with_staleness`).
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpPolicy": MlpPolicy,
        "CnnPolicy": CnnPolicy,
        "MultiInputPolicy": MultiInputPolicy,
    }
    # files of SB3's PPO load too (the EWMA starts from the loaded policy)
    loadable_parent_policy_modules = ("stable_baselines3.common.policies",)

    @keyword_signature(PPOEWMAArguments, parent=PPO)
    def __init__(self, policy: str | type[MlpPolicy], env: GymEnv | str, **kwargs: Unpack[PPOEWMAArguments]) -> None:
        # PPO's arguments (with its defaults) and the decoupled options, checked before anything is built
        arguments = constructor_arguments(PPO_EWMA, locals(), kwargs)
        options = DecoupledOptions.from_arguments(arguments)
        super().__init__(**parent_arguments(PPO, arguments))
        self._set_decoupled_options(options)
        if arguments["_init_setup_model"]:
            self._setup_model()

    def to_sb3(self) -> PPO:
        """
        This model as a plain SB3 ``PPO`` (same policy network and optimizer state, same ``predict``; the EWMA and the
        decoupled options are left out), whose ``save`` gives a zip that ``stable_baselines3.PPO.load`` opens.
        See :mod:`sb3_ewma.common.export`.
        """
        return to_sb3_ppo(self)
