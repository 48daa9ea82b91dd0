"""
Export to Stable-Baselines3's ``PPO``: a model whose ``save`` gives a zip that ``stable_baselines3.PPO.load`` opens,
for users who deploy or share with SB3 alone (rl-zoo3 and Hugging Face model cards load with SB3 classes).

What carries over: the policy network's weights (the action distribution and the value function), the policy
optimizer's state, every hyperparameter that SB3's ``PPO`` has (same name, same meaning), the environment and the
step counters. What does not: the parts PPO has no place for, i.e. the proximal (EWMA) policy, the decoupled options
(``ewma_decay``, ``kl_coef``, ``imp_samp_max``, the advantage EWMA, staleness) and, for PPG, the auxiliary value head,
the auxiliary optimizer and the phase structure. ``predict`` is the same; training the exported model further is
SB3's PPO.

PPG / PPG-EWMA: their policy is an ``ActorCriticPolicy`` subclass whose MLP part may have a shared trunk
(``shared_net``) and whose auxiliary value head reads the policy latent. SB3's ``ActorCriticPolicy`` has no shared MLP
layers (removed in SB3 1.8), so a PPG policy exports when its shared trunk has no layers: always with ``arch="dual"``
(separate networks, like SB3's ``share_features_extractor=False``), and with ``"shared"`` / ``"detach"`` when
``net_arch`` is a dict of ``pi`` / ``vf`` branches or empty (e.g. the paper's IMPALA CNN with ``net_arch=[]``: the
heads sit on the shared features extractor). ``"detach"`` only changes gradients, so ``predict`` is unaffected.

A policy built with this package's classes (e.g. ``ImpalaCNN`` as features extractor) stores their names in the zip:
loading it needs ``sb3_ewma`` importable, as for any custom class in SB3.
"""

import inspect
import warnings
from typing import Any

import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.policies import ActorCriticCnnPolicy, ActorCriticPolicy, MultiInputActorCriticPolicy

# parameters of PPO's constructor that are not hyperparameters read from the source model
_NOT_COPIED = ("self", "policy", "env", "policy_kwargs", "clip_range", "_init_setup_model")


def _sb3_policy_class(policy: ActorCriticPolicy) -> type[ActorCriticPolicy]:
    """SB3's actor-critic policy class with the same default features extractor as ``policy``'s class."""
    from sb3_ewma.common.policies import HeadInitMixin
    from sb3_ewma.ppg_ewma.policies import PPGCnnPolicy, PPGMultiInputPolicy, PPGPolicy

    if not isinstance(policy, (PPGPolicy, HeadInitMixin)):
        return type(policy)  # a user's own policy class
    # this package's policies (PPO_EWMA's are SB3's with the head_init_scale keyword): SB3's class, so that the zip
    # opens without sb3_ewma
    if isinstance(policy, (PPGMultiInputPolicy, MultiInputActorCriticPolicy)):
        return MultiInputActorCriticPolicy
    if isinstance(policy, (PPGCnnPolicy, ActorCriticCnnPolicy)):
        return ActorCriticCnnPolicy
    return ActorCriticPolicy


def _sb3_policy_kwargs(policy: ActorCriticPolicy, policy_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The ``policy_kwargs`` of an SB3 policy with the same networks as ``policy`` (see the module docstring)."""
    from sb3_ewma.ppg_ewma.policies import PPGPolicy

    # the initialization keyword of this package's policies only matters before the weights are copied
    policy_kwargs = {name: value for name, value in policy_kwargs.items() if name != "head_init_scale"}
    if not isinstance(policy, PPGPolicy):
        return policy_kwargs
    if len(policy.mlp_extractor.shared_net) > 0:
        raise ValueError(
            f"A PPG policy with arch={policy.arch!r} and shared MLP layers (net_arch={policy.net_arch}) cannot be exported "
            "to SB3's PPO, whose ActorCriticPolicy has no shared MLP layers: use arch='dual', or a dict net_arch "
            "(pi / vf branches) or net_arch=[] with arch='shared' or 'detach'"
        )
    net_arch = policy.net_arch
    if isinstance(net_arch, dict):
        net_arch = dict(pi=list(net_arch.get("pi", [])), vf=list(net_arch.get("vf", [])))
    kwargs = {name: value for name, value in policy_kwargs.items() if name != "arch"}
    kwargs.update(net_arch=net_arch, share_features_extractor=policy.share_features_extractor)
    return kwargs


def _exported_policy_state(policy: ActorCriticPolicy) -> dict[str, th.Tensor]:
    """The policy's weights without PPG's auxiliary value head (the shared trunk is empty, see above)."""
    from sb3_ewma.ppg_ewma.policies import AUX_VALUE_PREFIX

    return {name: value for name, value in policy.state_dict().items() if not name.startswith(AUX_VALUE_PREFIX)}


def _optimizer_state_by_name(source: ActorCriticPolicy, target: ActorCriticPolicy) -> dict[str, Any]:
    """
    ``source.optimizer``'s state dict for ``target.optimizer``, matched by parameter name (PPG's optimizer also holds
    the auxiliary value head, which the target has not). Both optimizers were built on ``policy.parameters()``.
    """
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


def to_sb3_ppo(model: OnPolicyAlgorithm) -> PPO:
    """
    A plain SB3 ``PPO`` model with ``model``'s policy network, policy optimizer state, environment, step counters and
    every hyperparameter that ``PPO`` has (see the module docstring for what is left out). ``model`` is not changed;
    the two models share the environment. The global random number generators are not advanced.

    :param model: a ``PPO_EWMA``, ``PPG_EWMA`` or ``PPG`` model (any on-policy algorithm with an ``ActorCriticPolicy``)
    :return: the ``PPO`` model
    """
    policy = model.policy
    if not isinstance(policy, ActorCriticPolicy):
        raise ValueError(f"Only actor-critic policies export to PPO, got {type(policy).__name__}")
    policy_kwargs = _sb3_policy_kwargs(policy, model.policy_kwargs)
    hyperparams = {
        name: getattr(model, name)
        for name in inspect.signature(PPO.__init__).parameters
        if name not in _NOT_COPIED and hasattr(model, name)
    }
    clip_range = getattr(model, "clip_range", None)
    if clip_range is None:
        warnings.warn(
            f"{type(model).__name__} has clip_range=None (KL penalty only), which SB3's PPO cannot take: the exported "
            "PPO gets PPO's default clip_range=0.2 (used only if it is trained further)",
            UserWarning,
            stacklevel=3,
        )
        clip_range = 0.2
    with th.random.fork_rng(devices=[]):
        exported = PPO(
            _sb3_policy_class(policy),
            model.env,  # type: ignore[arg-type]
            clip_range=clip_range,
            policy_kwargs=policy_kwargs,
            _init_setup_model=False,
            **hyperparams,
        )
        if model.env is None:
            exported.observation_space = model.observation_space
            exported.action_space = model.action_space
            exported.n_envs = model.n_envs
        exported._setup_model()
    exported.policy.load_state_dict(_exported_policy_state(policy))
    exported.policy.optimizer.load_state_dict(_optimizer_state_by_name(policy, exported.policy))
    exported.policy.set_training_mode(False)
    for counter in ("num_timesteps", "_total_timesteps", "_num_timesteps_at_start", "_n_updates", "_episode_num"):
        setattr(exported, counter, getattr(model, counter))
    exported._current_progress_remaining = model._current_progress_remaining
    return exported
