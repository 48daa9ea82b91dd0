"""
Export to Stable-Baselines3's ``PPO`` (or to sb3-contrib's ``RecurrentPPO`` and ``MaskablePPO``): a model whose
``save`` gives a zip that SB3 (sb3-contrib) alone opens. The proximal (EWMA) policy, the decoupled options and PPG's
auxiliary parts are left out. See :ref:`export`.
"""

import inspect
import math
from typing import Any, Protocol, TypeVar, cast

import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.policies import (
    ActorCriticCnnPolicy,
    ActorCriticPolicy,
    BasePolicy,
    MultiInputActorCriticPolicy,
)
from stable_baselines3.common.type_aliases import GymEnv, Schedule

from sb3_ewma.common.checks import warn_at_caller
from sb3_ewma.common.policies import HeadInitMixin

ParentAlgorithm = TypeVar("ParentAlgorithm", bound=OnPolicyAlgorithm)
_Exported = TypeVar("_Exported", bound=OnPolicyAlgorithm, covariant=True)


class _PPOConstructor(Protocol[_Exported]):
    """
    The constructor of a parent algorithm as :func:`to_parent_algorithm` calls it (``OnPolicyAlgorithm``'s signature
    has no ``clip_range`` and narrower ``policy`` and ``env`` types).
    """

    def __call__(
        self,
        policy: str | type[BasePolicy],
        env: GymEnv | str | None,
        *,
        clip_range: float | Schedule,
        policy_kwargs: dict[str, Any] | None,
        _init_setup_model: bool,
        **hyperparams: Any,
    ) -> _Exported: ...


# parameters of PPO's constructor that are not hyperparameters read from the source model
_NOT_COPIED = ("self", "policy", "env", "policy_kwargs", "clip_range", "_init_setup_model")


def sb3_policy_class(policy: ActorCriticPolicy) -> type[ActorCriticPolicy]:
    """SB3's actor-critic policy class with the same default features extractor as ``policy``'s class."""
    if not isinstance(policy, HeadInitMixin):
        return type(policy)  # a user's own policy class
    # this package's policies: SB3's class, so that the zip opens without sb3_ewma
    if isinstance(policy, MultiInputActorCriticPolicy):
        return MultiInputActorCriticPolicy
    if isinstance(policy, ActorCriticCnnPolicy):
        return ActorCriticCnnPolicy
    return ActorCriticPolicy


def sb3_policy_kwargs(policy_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``policy_kwargs`` without this package's ``head_init_scale`` (it only matters before the weights are copied)."""
    return {name: value for name, value in policy_kwargs.items() if name != "head_init_scale"}


def _optimizer_state_by_name(source: ActorCriticPolicy, target: ActorCriticPolicy) -> dict[str, Any]:
    """``source.optimizer``'s state dict for ``target.optimizer``, matched by parameter name (target's may be fewer)."""
    source_names = [name for name, _ in source.named_parameters()]
    target_names = [name for name, _ in target.named_parameters()]
    state = source.optimizer.state_dict()
    (group,) = state["param_groups"]  # SB3 policies build their optimizer with one parameter group
    source_index = {name: index for index, name in enumerate(source_names)}
    per_parameter = {
        target_index: state["state"][source_index[name]]
        for target_index, name in enumerate(target_names)
        if source_index[name] in state["state"]
    }
    return {"state": per_parameter, "param_groups": [{**group, "params": list(range(len(target_names)))}]}


def to_sb3_ppo(
    model: OnPolicyAlgorithm,
    *,
    policy_class: type[ActorCriticPolicy] | None = None,
    policy_kwargs: dict[str, Any] | None = None,
    policy_state: dict[str, th.Tensor] | None = None,
) -> PPO:
    """
    A plain SB3 ``PPO`` model with ``model``'s policy network, policy optimizer state, environment, step counters and
    every hyperparameter that ``PPO`` has: :func:`to_parent_algorithm` with ``PPO``.

    :param model: a ``PPO_EWMA`` model (any on-policy algorithm with an ``ActorCriticPolicy``)
    :param policy_class: the SB3 policy class of the export (default: :func:`sb3_policy_class`)
    :param policy_kwargs: its keyword arguments (default: :func:`sb3_policy_kwargs` of the model's)
    :param policy_state: its weights (default: the model's policy's; PPG's export leaves its auxiliary head out)
    :return: the ``PPO`` model
    """
    return to_parent_algorithm(model, PPO, policy_class=policy_class, policy_kwargs=policy_kwargs, policy_state=policy_state)


def to_parent_algorithm(
    model: OnPolicyAlgorithm,
    algorithm_class: type[ParentAlgorithm],
    *,
    policy_class: type[BasePolicy] | None = None,
    policy_kwargs: dict[str, Any] | None = None,
    policy_state: dict[str, th.Tensor] | None = None,
) -> ParentAlgorithm:
    """
    A model of ``algorithm_class`` (SB3's ``PPO``, sb3-contrib's ``RecurrentPPO`` or ``MaskablePPO``) with ``model``'s
    policy network, policy optimizer state, environment, step counters and every hyperparameter that
    ``algorithm_class`` has. ``model`` is not changed; the two models share the environment. Building the export draws
    its policy's initial weights from torch's global generator, as building any SB3 model does (without seeding it).

    :param model: a model of this package whose policy is of a kind that ``algorithm_class`` takes
    :param algorithm_class: the class of the export, a PPO whose constructor takes ``model``'s hyperparameters by name
    :param policy_class: the policy class of the export (default: :func:`sb3_policy_class`)
    :param policy_kwargs: its keyword arguments (default: :func:`sb3_policy_kwargs` of the model's)
    :param policy_state: its weights (default: the model's policy's)
    :return: the exported model
    """
    policy = model.policy
    target = algorithm_class.__name__
    accepted = tuple(algorithm_class.policy_aliases.values())
    if not isinstance(policy, accepted):
        raise ValueError(
            f"Only policies of {target}'s kinds ({', '.join(kind.__name__ for kind in accepted)}) export to {target}, "
            f"got {type(policy).__name__}"
        )
    if policy_kwargs is None:
        policy_kwargs = sb3_policy_kwargs(model.policy_kwargs)
    hyperparams = {
        name: getattr(model, name)
        for name in inspect.signature(algorithm_class.__init__).parameters
        if name not in _NOT_COPIED and hasattr(model, name)
    }
    # a number, or the schedule _setup_model makes of it
    clip_range: float | Schedule | None = getattr(model, "clip_range", None)
    # no clipping: None, or the infinite clip range it is stored as (SB3's spelling, math.inf)
    if clip_range is None or (callable(clip_range) and clip_range(1.0) == math.inf):
        clip_range = math.inf
        if getattr(model, "kl_coef", 0) > 0:
            warn_at_caller(
                f"{type(model).__name__} limits its updates by the KL penalty alone (clip_range=None, kl_coef > 0), which "
                f"{target} cannot take: the exported {target} gets the default clip_range=0.2 (used only if it is "
                "trained further)"
            )
            clip_range = 0.2
    constructor = cast(_PPOConstructor[ParentAlgorithm], algorithm_class)
    exported = constructor(
        policy_class or sb3_policy_class(policy),
        model.env,
        clip_range=clip_range,
        policy_kwargs=policy_kwargs,
        _init_setup_model=False,
        # the seed is set after the build: _setup_model would seed the global generators with it in mid-run
        **{**hyperparams, "seed": None},
    )
    if model.env is None:
        exported.observation_space = model.observation_space
        exported.action_space = model.action_space
        exported.n_envs = model.n_envs
    exported._setup_model()
    exported.seed = model.seed
    exported.policy.load_state_dict(policy.state_dict() if policy_state is None else policy_state)
    exported.policy.optimizer.load_state_dict(_optimizer_state_by_name(policy, exported.policy))
    exported.policy.set_training_mode(False)
    for counter in ("num_timesteps", "_total_timesteps", "_num_timesteps_at_start", "_n_updates", "_episode_num"):
        setattr(exported, counter, getattr(model, counter))
    exported._current_progress_remaining = model._current_progress_remaining
    return exported
