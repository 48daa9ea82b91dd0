"""
Export of PPG / PPG-EWMA to Stable-Baselines3's ``PPO`` (see :mod:`sb3_ewma.common.export` for what carries over).

Their policy is an ``ActorCriticPolicy`` subclass whose MLP part may have a shared trunk (``shared_net``) and whose
auxiliary value head reads the policy latent. SB3's ``ActorCriticPolicy`` has no shared MLP layers (removed in SB3
1.8), so a PPG policy exports when its shared trunk has no layers: always with ``arch="dual"`` (separate networks,
like SB3's ``share_features_extractor=False``), and with ``"shared"`` / ``"detach"`` when ``net_arch`` is a dict of
``pi`` / ``vf`` branches or empty (e.g. the paper's IMPALA CNN with ``net_arch=[]``: the heads sit on the shared
features extractor). ``"detach"`` only changes gradients, so ``predict`` is unaffected. The auxiliary value head,
the auxiliary optimizer and the phase structure are left out.
"""

from typing import Any

import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.policies import ActorCriticCnnPolicy, ActorCriticPolicy, MultiInputActorCriticPolicy

from sb3_ewma.common.export import sb3_policy_kwargs, to_sb3_ppo
from sb3_ewma.ppg_ewma.policies import AUX_VALUE_PREFIX, PPGCnnPolicy, PPGMultiInputPolicy, PPGPolicy


def ppg_sb3_policy_class(policy: PPGPolicy) -> type[ActorCriticPolicy]:
    """SB3's actor-critic policy class with the same default features extractor as the PPG policy's class."""
    if isinstance(policy, PPGMultiInputPolicy):
        return MultiInputActorCriticPolicy
    if isinstance(policy, PPGCnnPolicy):
        return ActorCriticCnnPolicy
    return ActorCriticPolicy


def ppg_sb3_policy_kwargs(policy: PPGPolicy, policy_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The ``policy_kwargs`` of an SB3 policy with the same networks as the PPG policy (see the module docstring)."""
    if len(policy.mlp_extractor.shared_net) > 0:
        raise ValueError(
            f"A PPG policy with arch={policy.arch!r} and shared MLP layers (net_arch={policy.net_arch}) cannot be exported "
            "to SB3's PPO, whose ActorCriticPolicy has no shared MLP layers: use arch='dual', or a dict net_arch "
            "(pi / vf branches) or net_arch=[] with arch='shared' or 'detach'"
        )
    net_arch = policy.net_arch
    if isinstance(net_arch, dict):
        net_arch = dict(pi=list(net_arch.get("pi", [])), vf=list(net_arch.get("vf", [])))
    kwargs = {name: value for name, value in sb3_policy_kwargs(policy_kwargs).items() if name != "arch"}
    kwargs.update(net_arch=net_arch, share_features_extractor=policy.share_features_extractor)
    return kwargs


def ppg_policy_state(policy: PPGPolicy) -> dict[str, th.Tensor]:
    """The policy's weights without PPG's auxiliary value head (the shared trunk is empty, see above)."""
    return {name: value for name, value in policy.state_dict().items() if not name.startswith(AUX_VALUE_PREFIX)}


def ppg_to_sb3_ppo(model: OnPolicyAlgorithm) -> PPO:
    """
    A plain SB3 ``PPO`` model with a ``PPG_EWMA`` or ``PPG`` model's policy network (without its auxiliary value head),
    policy optimizer state, environment, step counters and hyperparameters (:func:`sb3_ewma.common.export.to_sb3_ppo`).

    :param model: a ``PPG_EWMA`` or ``PPG`` model
    :return: the ``PPO`` model
    """
    policy = model.policy
    if not isinstance(policy, PPGPolicy):
        return to_sb3_ppo(model)
    return to_sb3_ppo(
        model,
        policy_class=ppg_sb3_policy_class(policy),
        policy_kwargs=ppg_sb3_policy_kwargs(policy, model.policy_kwargs),
        policy_state=ppg_policy_state(policy),
    )
