"""Policy options shared by PPO_EWMA's and PPG_EWMA's actor-critic policies, and a copy of a policy (:func:`policy_copy`)."""

import copy
import inspect
import math
import types
from collections.abc import Callable
from typing import Any, Protocol, cast

import torch as th
from stable_baselines3.common.distributions import CategoricalDistribution, Distribution
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import PyTorchObs
from torch import nn

from sb3_ewma.common.distributions import has_lean_evaluation, lean_forward
from sb3_ewma.common.torch_layers import normed_init_

# the output heads of an actor-critic policy (PPG's auxiliary value head included) that ``head_init_scale`` re-initializes
HEAD_NAMES = ("action_net", "value_net", "aux_value_net")


def check_head_init_scale(head_init_scale: object) -> None:
    if head_init_scale is None:
        return
    if (
        isinstance(head_init_scale, bool)
        or not isinstance(head_init_scale, (int, float))
        or not math.isfinite(head_init_scale)
        or head_init_scale <= 0
    ):
        raise ValueError(f"head_init_scale must be None or a finite number > 0, got {head_init_scale!r}")


class _ConstructorParameters(Protocol):
    """What :class:`HeadInitMixin`'s ``super()`` provides: SB3's ``BasePolicy._get_constructor_parameters``."""

    def _get_constructor_parameters(self) -> dict[str, Any]: ...


class HeadInitMixin:
    """
    Adds the policy keyword ``head_init_scale``: after the policy is built, the authors' "normed" initialization with
    that scale (:func:`sb3_ewma.common.torch_layers.normed_init_`; the authors use 0.1) is applied to the action, value
    and (PPG) auxiliary value heads. ``None`` (default): the heads keep SB3's initialization.
    """

    def __init__(self, *args: Any, head_init_scale: float | None = None, **kwargs: Any) -> None:
        check_head_init_scale(head_init_scale)
        super().__init__(*args, **kwargs)
        self.head_init_scale = head_init_scale
        if head_init_scale is not None:
            for name in HEAD_NAMES:
                head = getattr(self, name, None)
                if isinstance(head, nn.Module):
                    normed_init_(head, float(head_init_scale))

    def _get_constructor_parameters(self) -> dict[str, Any]:
        # SB3's BasePolicy's, after this mixin in the policies' bases
        data = cast(_ConstructorParameters, super())._get_constructor_parameters()
        data.update(head_init_scale=self.head_init_scale)
        return data


class _Forward(Protocol):
    """What :class:`LeanActingMixin`'s ``super()`` provides: SB3's ``ActorCriticPolicy.forward``."""

    def forward(self, obs: PyTorchObs, deterministic: bool = False) -> tuple[th.Tensor, th.Tensor, th.Tensor]: ...


class LeanActingMixin:
    """
    The rollout's step (``forward`` with sampled actions) without SB3's distribution objects, where
    :func:`sb3_ewma.common.distributions.lean_forward` applies; SB3's ``forward`` otherwise. ``acting_step``: the
    compiled step during a rollout that compiles it (never saved).
    """

    acting_step: Callable[[Any, PyTorchObs], tuple[th.Tensor, th.Tensor, th.Tensor]] | None = None

    def forward(self, obs: PyTorchObs, deterministic: bool = False) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        if not deterministic and has_lean_evaluation(self):
            actions, values, log_prob = (self.acting_step or lean_forward)(cast(Any, self), obs)
            if not isinstance(getattr(self, "action_dist", None), CategoricalDistribution) and bool(th.isnan(actions).any()):
                # what torch's Normal refuses in SB3's step (the categorical's multinomial refuses it by itself)
                raise ValueError("the policy's Gaussian has a NaN mean or standard deviation (from the observations?)")
            return actions, values, log_prob
        return cast(_Forward, super()).forward(obs, deterministic)

    def __getstate__(self) -> dict[str, Any]:
        # without a rollout's compiled acting step: a copy or a pickle made during a rollout acts eagerly
        state = cast(Any, super()).__getstate__()
        state.pop("acting_step", None)
        return state


def policy_copy(policy: BasePolicy) -> BasePolicy:
    """
    A copy of ``policy`` with its parameters, for acting or averaging beside it: in evaluation mode, without the
    optimizer, made without drawing random numbers. Tensors of an autograd graph that it holds (which
    ``copy.deepcopy`` refuses) are copied detached. The modules' hooks are kept (``weight_norm``'s computes the
    weight); a hook that is, or is bound to, an object outside the policy is shared, not copied.
    """
    memo: dict[int, Any] = {id(policy.optimizer): None} if hasattr(policy, "optimizer") else {}
    own_modules = {id(module) for module in policy.modules()}
    for module in policy.modules():
        _detach_graph_tensors(vars(module), memo, set())
        for name, hooks in vars(module).items():
            if name.endswith("_hooks") and isinstance(hooks, dict):
                for hook in hooks.values():
                    # a user's logger holding the model, say: copying it would copy the model
                    if _outside_hook(hook, own_modules):
                        memo[id(hook)] = hook
    copied = copy.deepcopy(policy, memo)
    copied.set_training_mode(False)
    return copied


def _outside_hook(hook: object, own_modules: set[int]) -> bool:
    """Whether ``hook`` is an object, or a method of one, that is not part of the policy (nor torch's)."""
    if inspect.ismethod(hook):
        return id(hook.__self__) not in own_modules
    return not isinstance(hook, types.FunctionType) and not type(hook).__module__.startswith("torch.")


def _detach_graph_tensors(value: object, memo: dict[int, Any], seen: set[int]) -> None:
    """Map each tensor with a ``grad_fn`` in ``value`` (its containers and distributions) to a detached copy in ``memo``."""
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, th.Tensor):
        if value.grad_fn is not None:
            memo[id(value)] = value.detach().clone()
    elif isinstance(value, (list, tuple)):
        for item in value:
            _detach_graph_tensors(item, memo, seen)
    elif isinstance(value, dict):
        for item in value.values():
            _detach_graph_tensors(item, memo, seen)
    elif isinstance(value, (Distribution, th.distributions.Distribution)):
        _detach_graph_tensors(vars(value), memo, seen)
