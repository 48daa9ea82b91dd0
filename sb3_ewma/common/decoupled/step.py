"""
The compiled training step (``compile_step``, :ref:`compile-step`): :func:`minibatch_step`, one minibatch's loss
(:func:`minibatch_loss`), gradient, clipping, Adam's step and EWMA step as one function, or the loss and the optimizer's
step compiled in pieces; and the rollout's acting step (:func:`~sb3_ewma.common.distributions.lean_forward`).
:class:`CompiledStep` holds one model's compiled functions. The eager ``train()`` does not come here.
"""

import contextlib
import importlib.util
import math
import shutil
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, TypeGuard, cast

import torch as th
import torch._dynamo.config as dynamo_config
import torch._dynamo.exc as dynamo_exc
import torch._functorch.config as aot_autograd_config
import torch._inductor as inductor
import torch._inductor.exc as inductor_exc
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy
from stable_baselines3.common.type_aliases import PyTorchObs
from torch.nn import functional as F
from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

from sb3_ewma.common.decoupled.objective import DecoupledPolicyObjective
from sb3_ewma.common.distributions import (
    ObservationPlan,
    has_lean_evaluation,
    has_lean_log_prob,
    has_lean_masked_evaluation,
    has_lean_recurrent_evaluation,
    lean_action_log_prob,
    lean_evaluate_actions,
    lean_evaluate_latents,
    lean_forward,
    lean_latent_log_prob,
    lean_masked_action_log_prob,
    lean_masked_evaluate_actions,
    masked_action_dims,
    observation_plan,
)
from sb3_ewma.common.ewma import ParameterEWMA
from sb3_ewma.common.finite import check_finite_gradient_norm
from sb3_ewma.common.losses import capped_behavior_log_prob, clipped_surrogate_loss, log_clip_bounds, sampled_kl
from sb3_ewma.common.policies import LeanActingMixin
from sb3_ewma.common.precision import autocast
from sb3_ewma.common.rules import step_budget

COMPILATION_ERRORS = (dynamo_exc.TorchDynamoException, dynamo_exc.FailOnRecompileLimitHit, inductor_exc.InductorError)
"""What a later call's failed compilation (another shape) raises; other errors (out of memory) propagate."""

AUTO_MIN_OPTIMIZER_STEPS = 20_000
"""``compile_step="auto"`` compiles when a ``learn`` call plans at least this many optimizer steps."""

AUTO_MIN_ACTING_STEPS = 100_000
"""``compile_step="auto"`` also compiles the acting step when a ``learn`` call plans this many vectorized env steps."""


class MinibatchTerms(NamedTuple):
    """What the training loop reads of one minibatch's loss: the loss, its value and entropy terms, the approximate KL."""

    loss: th.Tensor
    value_loss: th.Tensor
    entropy_loss: th.Tensor
    approx_kl_div: th.Tensor


class MinibatchLoss(NamedTuple):
    """:func:`minibatch_loss`'s result; only ``loss`` and ``value_loss`` (PPG's value-only steps) keep their graph."""

    loss: th.Tensor
    policy_loss: th.Tensor
    value_loss: th.Tensor
    entropy_loss: th.Tensor
    approx_kl_div: th.Tensor
    kl_penalty: th.Tensor | None
    log_prob: th.Tensor
    proximal_log_prob: th.Tensor


class LossTargets(NamedTuple):
    """A minibatch's data that the decoupled loss compares the policy's evaluation with."""

    advantages: th.Tensor  # normalized
    behavior_log_prob: th.Tensor
    old_values: th.Tensor
    returns: th.Tensor


class LossSettings(NamedTuple):
    """
    The decoupled loss's clip bounds (``log(1 - eps)``, ``log(1 + eps)``) and coefficients. The clip range must be
    positive; ``clip_range_vf=None``: no value clipping; ``kl_coef`` None (or not above 0): no KL penalty. Numbers may
    be 0-dim tensors, so that a new value makes no new graph.
    """

    clip_low: th.Tensor
    clip_high: th.Tensor
    clip_range_vf: th.Tensor | None
    ent_coef: float | th.Tensor
    vf_coef: float | th.Tensor
    kl_coef: float | th.Tensor | None
    imp_samp_max: float


def minibatch_loss(
    policy: ActorCriticPolicy | MaskableActorCriticPolicy,
    proximal_network: ActorCriticPolicy | MaskableActorCriticPolicy | None,
    observations: PyTorchObs,
    actions: th.Tensor,
    targets: LossTargets,
    settings: LossSettings,
    *,
    autocast_dtype: th.dtype | None = None,
    observation_plan: ObservationPlan | None = None,
    action_masks: th.Tensor | None = None,
    action_dims: tuple[int, ...] = (),
) -> MinibatchLoss:
    """
    PPO-EWMA's loss on one minibatch (advantages normalized) for a policy with the lean evaluation
    (:func:`~sb3_ewma.common.distributions.has_lean_evaluation`, or a maskable policy with ``action_masks``)::

        loss = L_clip(pi, pi_prox, pi_behav) + kl_coef * KL[pi_prox, pi] + ent_coef * L_entropy + vf_coef * L_value

    :param proximal_network: the proximal policy's network, None for the behavior policy (``behavior_log_prob``)
    :param autocast_dtype: the forward passes' ``torch.autocast`` format (None: float32)
    :param observation_plan: the policy's :data:`~sb3_ewma.common.distributions.ObservationPlan`
    :param action_masks: a maskable policy's action masks (None: a policy with the lean evaluation)
    :param action_dims: with ``action_masks``, the policy's :func:`~sb3_ewma.common.distributions.masked_action_dims`
    """
    behavior_log_prob = targets.behavior_log_prob
    with autocast(behavior_log_prob.device.type, autocast_dtype):
        if action_masks is None:
            values, log_prob, entropy = lean_evaluate_actions(
                cast(ActorCriticPolicy, policy), observations, actions, observation_plan
            )
        else:
            masked_policy = cast(MaskableActorCriticPolicy, policy)
            values, log_prob, entropy = lean_masked_evaluate_actions(
                masked_policy, observations, actions, action_masks, action_dims, observation_plan
            )
        with th.no_grad():
            if proximal_network is None:
                proximal_log_prob = behavior_log_prob
            elif action_masks is None:
                proximal_log_prob = lean_action_log_prob(
                    cast(ActorCriticPolicy, proximal_network), observations, actions, observation_plan
                )
            else:
                proximal_log_prob = lean_masked_action_log_prob(
                    cast(MaskableActorCriticPolicy, proximal_network),
                    observations,
                    actions,
                    action_masks,
                    action_dims,
                    observation_plan,
                )
    return _decoupled_loss(values, log_prob, entropy, proximal_log_prob, targets, settings)


def recurrent_minibatch_loss(
    policy: ActorCriticPolicy,
    proximal_network: ActorCriticPolicy | None,
    lstm_pi: th.Tensor,
    lstm_vf: th.Tensor,
    proximal_lstm_pi: th.Tensor | None,
    actions: th.Tensor,
    targets: LossTargets,
    settings: LossSettings,
    *,
    autocast_dtype: th.dtype | None = None,
) -> MinibatchLoss:
    """
    :func:`minibatch_loss` for an sb3-contrib recurrent policy
    (:func:`~sb3_ewma.common.distributions.has_lean_recurrent_evaluation`) from its LSTMs' outputs at the minibatch's
    valid steps (``proximal_lstm_pi``: None without a proximal network): the part after the LSTMs, whose shapes do not
    change with the padded sequences' length.
    """
    behavior_log_prob = targets.behavior_log_prob
    with autocast(behavior_log_prob.device.type, autocast_dtype):
        latent_pi = policy.mlp_extractor.forward_actor(lstm_pi)
        latent_vf = policy.mlp_extractor.forward_critic(lstm_vf)
        values, log_prob, entropy = lean_evaluate_latents(policy, latent_pi, latent_vf, actions)
        with th.no_grad():
            if proximal_network is None or proximal_lstm_pi is None:
                proximal_log_prob = behavior_log_prob
            else:
                proximal_latent_pi = proximal_network.mlp_extractor.forward_actor(proximal_lstm_pi)
                proximal_log_prob = lean_latent_log_prob(proximal_network, proximal_latent_pi, actions)
    return _decoupled_loss(values, log_prob, entropy, proximal_log_prob, targets, settings)


def _decoupled_loss(
    values: th.Tensor,
    log_prob: th.Tensor,
    entropy: th.Tensor,
    proximal_log_prob: th.Tensor,
    targets: LossTargets,
    settings: LossSettings,
) -> MinibatchLoss:
    """The losses of :func:`minibatch_loss` from the policy's evaluation (in float32)."""
    values, log_prob, entropy, proximal_log_prob = values.float(), log_prob.float(), entropy.float(), proximal_log_prob.float()
    advantages, behavior_log_prob, kl_coef = targets.advantages, targets.behavior_log_prob, settings.kl_coef

    # the decoupled clipped surrogate: importance sampling on pi_behav (capped), clipping at pi_prox
    capped_behavior = capped_behavior_log_prob(log_prob, behavior_log_prob, settings.imp_samp_max)
    unclipped = -advantages * th.exp(log_prob - capped_behavior)
    proximal_weight = proximal_log_prob - capped_behavior
    policy_loss = clipped_surrogate_loss(
        advantages, log_prob, proximal_log_prob, unclipped, proximal_weight, settings.clip_low, settings.clip_high
    )
    kl_penalty = None
    policy_loss_with_penalty = policy_loss
    if kl_coef is not None and not (isinstance(kl_coef, (int, float)) and not kl_coef > 0):
        kl_penalty = sampled_kl(log_prob, proximal_log_prob)
        policy_loss_with_penalty = policy_loss + kl_coef * kl_penalty

    values, old_values, clip_range_vf = values.flatten(), targets.old_values, settings.clip_range_vf
    if clip_range_vf is not None:
        values = old_values + th.clamp(values - old_values, -clip_range_vf, clip_range_vf)
    value_loss = F.mse_loss(targets.returns, values)
    entropy_loss = -th.mean(entropy)
    loss = policy_loss_with_penalty + settings.ent_coef * entropy_loss + settings.vf_coef * value_loss
    with th.no_grad():
        log_ratio = log_prob - behavior_log_prob
        approx_kl_div = th.mean((th.exp(log_ratio) - 1) - log_ratio)
    return MinibatchLoss(
        loss,
        policy_loss.detach(),
        value_loss,
        entropy_loss.detach(),
        approx_kl_div,
        None if kl_penalty is None else kl_penalty.detach(),
        log_prob.detach(),
        proximal_log_prob.detach(),
    )


class AdamTensors(NamedTuple):
    """The parameters a loss reaches and their ``Adam``/``AdamW`` state, which :func:`adam_step_` updates in place."""

    params: list[th.Tensor]
    exp_avgs: list[th.Tensor]
    exp_avg_sqs: list[th.Tensor]
    steps: list[th.Tensor]


class AdamSettings(NamedTuple):
    """Torch's ``Adam``/``AdamW`` group settings (``lr`` a 0-dim tensor: a scheduled rate makes no new graph)."""

    lr: th.Tensor
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    decoupled_weight_decay: bool


def clip_by_total_norm(gradients: list[th.Tensor], max_norm: float | th.Tensor) -> tuple[list[th.Tensor], th.Tensor]:
    """``clip_grad_norm_`` out of place: the gradients times ``min(1, max_norm / (total_norm + 1e-6))``, and ``total_norm``."""
    total_norm = th.linalg.vector_norm(th.stack([th.linalg.vector_norm(gradient) for gradient in gradients]))
    scale = th.clamp(max_norm / (total_norm + 1e-6), max=1.0)
    return [gradient * scale for gradient in gradients], total_norm


@th.no_grad()
def adam_step_(adam: AdamTensors, gradients: list[th.Tensor], settings: AdamSettings, apply: th.Tensor) -> None:
    """
    Torch's ``Adam``/``AdamW`` step (no ``amsgrad`` or ``maximize``) on ``adam``'s tensors, in place, where ``apply`` (a
    0-dim boolean) holds; elsewhere nothing moves::

        step += 1;  m = lerp(m, g, 1 - beta1);  v = beta2 v + (1 - beta2) g^2
        theta -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)

    with ``g += weight_decay * theta`` first (Adam), or ``theta *= 1 - lr * weight_decay`` (AdamW); the bias corrections
    in the step count's dtype, as torch's capturable and fused steps.
    """
    params = adam.params
    if settings.weight_decay != 0 and not settings.decoupled_weight_decay:
        gradients = [gradient + settings.weight_decay * param for gradient, param in zip(gradients, params)]
    steps = [th.where(apply, step + 1, step) for step in adam.steps]
    exp_avgs = [th.lerp(exp_avg, gradient, 1 - settings.beta1) for exp_avg, gradient in zip(adam.exp_avgs, gradients)]
    exp_avg_sqs = [
        exp_avg_sq * settings.beta2 + (1 - settings.beta2) * gradient * gradient
        for exp_avg_sq, gradient in zip(adam.exp_avg_sqs, gradients)
    ]
    new_params = []
    for param, exp_avg, exp_avg_sq, step in zip(params, exp_avgs, exp_avg_sqs, steps):
        if settings.weight_decay != 0 and settings.decoupled_weight_decay:
            param = param * (1 - settings.lr * settings.weight_decay)
        step_size = settings.lr / (1 - settings.beta1**step)
        denominator = exp_avg_sq.sqrt() / th.sqrt(1 - settings.beta2**step) + settings.eps
        new_params.append(param - step_size * exp_avg / denominator)
    for olds, news in ((params, new_params), (adam.exp_avgs, exp_avgs), (adam.exp_avg_sqs, exp_avg_sqs), (adam.steps, steps)):
        for old, new in zip(olds, news):
            old.copy_(th.where(apply, new, old))


def minibatch_step(
    adam: AdamTensors,
    settings: AdamSettings,
    max_grad_norm: float | th.Tensor,
    averaged: tuple[list[th.Tensor], list[th.Tensor], th.Tensor] | None,
    *loss_args: Any,
    **loss_kwargs: Any,
) -> tuple[MinibatchLoss, th.Tensor]:
    """
    One training step as one function for ``torch.compile`` (with dynamo's ``trace_autograd_ops``):
    :func:`minibatch_loss`, its gradient with respect to ``adam.params``, SB3's clipping at ``max_grad_norm``,
    :func:`adam_step_` and the EWMA's step; the last two are skipped when the gradient's norm is not finite. Returns
    the losses (detached) and the gradient's norm before clipping.

    :param averaged: the EWMA's averaged parameters, the parameters they follow and the 0-dim fraction they move
        (:attr:`~sb3_ewma.common.ewma.ParameterEWMA.next_fraction`); None: no EWMA step
    """
    terms = minibatch_loss(*loss_args, **loss_kwargs)
    gradients = th.autograd.grad(terms.loss, adam.params)
    clipped, total_norm = clip_by_total_norm(list(gradients), max_grad_norm)
    finite = th.isfinite(total_norm)
    adam_step_(adam, clipped, settings, finite)
    if averaged is not None:
        average, source, fraction = averaged
        with th.no_grad():
            for average_param, source_param in zip(average, source):
                average_param.copy_(th.where(finite, th.lerp(average_param, source_param, fraction), average_param))
    # the loss and the value loss are the terms that carry a graph
    return terms._replace(loss=terms.loss.detach(), value_loss=terms.value_loss.detach()), total_norm


def compile_unsupported(policy: th.nn.Module, device: th.device, evaluation: str, *, needs_distributions: bool) -> str | None:
    """
    Why a model's training step cannot be compiled (None: it can).

    :param evaluation: how the algorithm evaluates its policy: ``"observations"`` (PPO), ``"action_masks"``
        (MaskablePPO), ``"sequences"`` (RecurrentPPO, :func:`recurrent_minibatch_loss`), or why it cannot be compiled
    :param needs_distributions: whether the loss needs whole action distributions (``kl_estimator="exact"``)
    """
    if getattr(policy, "squash_output", False):
        return f"{type(policy).__name__} squashes its actions (squash_output=True), which the compiled step does not cover"
    if evaluation == "observations" and not has_lean_log_prob(policy):
        return f"{type(policy).__name__} is not one of SB3's categorical, diagonal Gaussian or gSDE ActorCriticPolicy"
    if evaluation == "action_masks" and not has_lean_masked_evaluation(policy):
        return f"{type(policy).__name__} is not one of sb3-contrib's masked categorical or multi-categorical policies"
    if evaluation == "sequences" and not has_lean_recurrent_evaluation(policy):
        return f"{type(policy).__name__} is not one of sb3-contrib's recurrent policies with SB3's distributions"
    if evaluation not in ("observations", "action_masks", "sequences"):
        return evaluation
    if needs_distributions:
        return "kl_estimator='exact' needs the action distributions"
    return compiler_missing(device)


def overridden_step(algorithm_class: type, methods: tuple[str, ...], reference: type) -> str | None:
    """
    ``"<class> overrides <method>"`` for the first of ``methods`` (which the compiled step computes its own way) that a
    class placed before ``reference`` in ``algorithm_class``'s method resolution order defines: a user's subclass, or
    a mixin placed first. None: the compiled step does what ``algorithm_class`` does.
    """
    mro = algorithm_class.__mro__
    for name in methods:
        definer = next(klass for klass in mro if name in vars(klass))
        if mro.index(definer) < mro.index(reference):
            return f"{definer.__name__} overrides {name}"
    return None


def planned_iterations(total_timesteps: Any, timesteps_per_iteration: int) -> float:
    """The iterations a ``learn(total_timesteps)`` call plans: SB3's budget (NaN or 0: none; infinity: no end)."""
    budget = step_budget(total_timesteps) / timesteps_per_iteration
    return budget if math.isinf(budget) else 0 if math.isnan(budget) else math.ceil(budget)


def compiler_missing(device: th.device) -> str | None:
    """Why ``torch.compile`` cannot build kernels for ``device`` here (None: it can)."""
    if device.type == "cpu":
        if not any(shutil.which(name) for name in ("g++", "c++", "clang++")):
            return "no C++ compiler (g++, c++ or clang++) on the PATH, which torch.compile needs for CPU kernels"
        return None
    if device.type == "cuda":
        if importlib.util.find_spec("triton") is None:
            return "triton is not installed, which torch.compile needs for CUDA kernels"
        return None
    return f"torch.compile is not used on the {device.type} device"


def fuses_on_cpu(optimizer: th.optim.Optimizer) -> bool:
    """Whether torch's fused CPU kernel steps ``optimizer``: Adam or AdamW on contiguous float32 CPU parameters and state."""
    if type(optimizer) not in (th.optim.Adam, th.optim.AdamW) or "cpu" not in _get_fused_kernels_supported_devices():
        return False
    groups = optimizer.param_groups
    if any(group.get("differentiable") or group.get("capturable") for group in groups):
        return False
    for parameter in (parameter for group in groups for parameter in group["params"]):
        if parameter.device.type != "cpu" or parameter.dtype != th.float32 or not parameter.is_contiguous():
            return False
        moments = optimizer.state.get(parameter, {})
        if any(isinstance(value, th.Tensor) and value.dim() > 0 and not value.is_contiguous() for value in moments.values()):
            return False
    return True


def _own_code(function: Callable[..., Any]) -> Callable[..., Any]:
    """
    ``function`` with a code object of its own: ``torch.compile`` keeps at most ``recompile_limit`` (8) graphs per code
    object, so each model's copy holds its own few (one per minibatch size) and a process training many never hits it.
    """
    copy = types.FunctionType(
        function.__code__.replace(), function.__globals__, function.__name__, function.__defaults__, function.__closure__
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    return copy


@contextlib.contextmanager
def group_settings(optimizer: th.optim.Optimizer, **settings: Any) -> Iterator[None]:
    """The optimizer's groups with ``settings`` (a list: one value per group) for the duration, their own put back after."""
    saved = [{key: group[key] for key in settings if key in group} for group in optimizer.param_groups]
    try:
        for index, group in enumerate(optimizer.param_groups):
            for key, value in settings.items():
                if key in group or key == "lr":
                    group[key] = value[index] if isinstance(value, list) else value
        yield
    finally:
        for group, values in zip(optimizer.param_groups, saved):
            group.update(values)


class CompiledMinibatch(NamedTuple):
    """One minibatch and what the compiled steps need of the model to compute its loss (:func:`minibatch_loss`)."""

    policy: ActorCriticPolicy | MaskableActorCriticPolicy
    proximal_network: ActorCriticPolicy | MaskableActorCriticPolicy | None  # None: the behavior policy
    rollout_data: Any
    actions: th.Tensor  # as the policy evaluates them (a Discrete space's as long integers)
    advantages: th.Tensor  # normalized
    policy_objective: DecoupledPolicyObjective  # its clip range, KL coefficient and cap; it records the diagnostics
    clip_range_vf: float | None
    ent_coef: float
    vf_coef: float
    autocast_dtype: th.dtype | None
    action_masks: th.Tensor | None  # a maskable policy's, from the rollout buffer
    # a recurrent policy's LSTM outputs at the valid steps: the actor's, the critic's, the proximal network's (or None)
    lstm_outputs: tuple[th.Tensor, th.Tensor, th.Tensor | None] | None = None


class WholeStepPlan(NamedTuple):
    """What :meth:`CompiledStep.whole_step` reuses for one policy through a ``learn`` call."""

    policy: th.nn.Module
    optimizer: th.optim.Optimizer
    adam: AdamTensors  # the parameters the loss reaches and their optimizer state
    group: dict[str, Any]  # the optimizer's parameter group (its learning rate read at every step)
    rate: th.Tensor  # the learning rate as a 0-dim tensor
    max_norm: th.Tensor  # the gradient clipping's max_grad_norm as a 0-dim tensor (a callback may change it)
    fraction: th.Tensor  # the EWMA's fraction as a 0-dim tensor

    def current(self, policy: Any) -> bool:
        """Whether the plan still holds the policy's optimizer state (``load_state_dict`` replaces it: a new plan)."""
        optimizer = policy.optimizer
        if self.policy is not policy or self.optimizer is not optimizer or self.group is not optimizer.param_groups[0]:
            return False
        first = self.adam.params[0] if self.adam.params else None
        return first is None or optimizer.state.get(first, {}).get("exp_avg") is self.adam.exp_avgs[0]


def _scalar_dtype() -> th.dtype:
    """The dtype of torch's Adam step count (torch.optim's own rule: float64 under a float64 default dtype)."""
    return th.float64 if th.get_default_dtype() == th.float64 else th.float32


class CompiledStep:
    """
    The compiled functions of one model's training and acting steps (``compile_step``), built at the first step that
    needs them; neither copied nor saved.

    :param setting: ``True`` (compile), ``False`` (eager) or ``"auto"`` (compile from :data:`AUTO_MIN_OPTIMIZER_STEPS`
        planned optimizer steps)
    :param acting_mode: ``torch.compile``'s ``mode`` for the acting step (None: its default)
    """

    def __init__(self, setting: bool | str, acting_mode: str | None = None) -> None:
        self.setting = setting
        self.acting_mode = acting_mode
        self.active = False
        self.acting_active = False  # the rollout's acting step compiled too
        self.whole = False  # the training step compiled as one function (minibatch_step)
        self.verified = False  # a compiled loss has run
        self.reason = "not started"
        self.failure: str | None = None  # why a compilation failed: eager from then on
        self._compiled: dict[Callable[..., Any], Callable[..., Any]] = {}
        self._steps: dict[int, tuple[Callable[[], Any], list[th.Tensor]]] = {}
        self._constants: tuple[Any, Any] = (None, None)
        # decided once a learn call: whether each optimizer takes the fused step, each policy's observation plan
        self._fused_steps: dict[int, tuple[th.optim.Optimizer, bool]] = {}
        self._plans: dict[int, tuple[th.nn.Module, ObservationPlan | None]] = {}
        self._whole_plans: dict[int, WholeStepPlan] = {}

    def start_learn(
        self,
        planned_optimizer_steps: float,
        unsupported: str | None,
        planned_acting_steps: float = 0,
        acting_covered: bool = True,
        in_pieces: str | None = None,
        auto_min_optimizer_steps: int = AUTO_MIN_OPTIMIZER_STEPS,
        acting_elsewhere: str | None = None,
    ) -> str:
        """
        Decide whether this ``learn`` call's training and acting steps run compiled; returns the sentence that says so.

        :param planned_optimizer_steps: iterations x epochs x minibatches (infinity: until a callback stops training)
        :param unsupported: why this model cannot be compiled (None: it can)
        :param planned_acting_steps: iterations x ``n_steps``
        :param acting_covered: whether the policy's acting step compiles (:meth:`covers_acting`)
        :param in_pieces: why the training step cannot be one function (:func:`minibatch_step`) in this call (None: it can)
        :param auto_min_optimizer_steps: the optimizer steps from which ``"auto"`` compiles
        :param acting_elsewhere: why the rollouts act with another policy than the model's (a collector's copy, which
            acts eagerly); None: they act with the model's
        """
        self._fused_steps, self._plans, self._whole_plans = {}, {}, {}
        if self.setting is False:
            self.active, self.reason = False, "compile_step=False"
        elif self.failure is not None:
            self.active, self.reason = False, self.failure
        elif unsupported is not None:
            self.active, self.reason = False, unsupported
        elif self.setting == "auto" and planned_optimizer_steps < auto_min_optimizer_steps:
            self.active = False
            self.reason = (
                f"compile_step='auto' and {planned_optimizer_steps} optimizer steps planned, fewer than the "
                f"{auto_min_optimizer_steps} that earn back the compilation"
            )
        else:
            self.active = True
            planned = "no end" if math.isinf(planned_optimizer_steps) else f"{planned_optimizer_steps} optimizer steps"
            self.reason = "compile_step=True" if self.setting is True else f"{planned} planned"
        long_enough = self.setting is True or planned_acting_steps >= AUTO_MIN_ACTING_STEPS
        self.acting_active = self.active and acting_covered and long_enough and acting_elsewhere is None
        self.whole = self.active and in_pieces is None
        sentence = f"training step {'compiled' if self.active else 'eager'} ({self.reason})"
        if self.active:
            sentence += ", as one function" if self.whole else f", in pieces ({in_pieces})"
            sentence += f", acting step {'compiled' if self.acting_active else 'eager'}"
            if acting_elsewhere is not None:
                sentence += f" ({acting_elsewhere})"
            elif not acting_covered:
                sentence += " (the policy acts its own way)"
            elif not self.acting_active:
                sentence += f" ({planned_acting_steps} steps planned, fewer than {AUTO_MIN_ACTING_STEPS})"
        return sentence

    @staticmethod
    def covers_acting(policy: th.nn.Module) -> TypeGuard[LeanActingMixin]:
        """Whether ``policy`` acts through the compiled acting step: the package's policies
        (:class:`~sb3_ewma.common.policies.LeanActingMixin`) with a categorical, diagonal Gaussian or gSDE distribution."""
        return isinstance(policy, LeanActingMixin) and has_lean_evaluation(policy)

    def fall_back(self, error: BaseException) -> str:
        """After a failed compilation: eager from now on, later ``learn`` calls too; returns the sentence that says why."""
        self.active, self.acting_active, self.whole, self._compiled, self._steps = False, False, False, {}, {}
        self.failure = self.reason = self._failure_sentence(error)
        return f"training step eager ({self.reason})"

    @staticmethod
    def _failure_sentence(error: BaseException) -> str:
        return f"compilation failed: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"

    def constants(self, values: tuple[float | None, ...], device: th.device) -> tuple[th.Tensor | None, ...]:
        """Numbers as 0-dim tensors (None stays None), made once per set of values: as numbers, each would be a new graph."""
        key = (values, device)
        if self._constants[0] != key:
            tensors = tuple(None if value is None else th.tensor(value, device=device) for value in values)
            self._constants = (key, tensors)
        return self._constants[1]

    def observation_plan(self, policy: th.nn.Module) -> ObservationPlan | None:
        """``policy``'s :func:`~sb3_ewma.common.distributions.observation_plan`, read once a ``learn`` call."""
        entry = self._plans.get(id(policy))
        if entry is None or entry[0] is not policy:
            entry = self._plans[id(policy)] = (policy, observation_plan(cast(BasePolicy, policy)))
        return entry[1]

    def covers(self, clip_range: float | None, clip_range_vf: float | None) -> bool:
        """Whether an iteration with these clip ranges steps compiled (:func:`minibatch_loss` assumes positive ranges)."""
        positive = (clip_range is None or clip_range > 0) and (clip_range_vf is None or clip_range_vf > 0)
        return self.active and positive

    def run(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """
        ``function(*args, **kwargs)`` compiled, a pure loss function whose backward pass compiles with it; after a failed
        compilation, ``function``'s eager result, and the training steps eager from then on (one warning).
        """
        result, compiled = self._call(function, args, kwargs)
        self.verified = self.verified or compiled
        return result

    def _call(
        self,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        options: dict[str, Any] | None = None,
        with_backward: bool = True,
    ) -> tuple[Any, bool]:
        """
        ``function``'s result, compiled (a copy, whole, with inductor's ``options``) or eager after a failed compilation
        (:meth:`fall_back`; at a later call only :data:`COMPILATION_ERRORS`), and whether it ran compiled.
        ``with_backward=False``: a function run without gradients (the acting step).
        """
        compiled = self._compiled.get(function)
        first_call = compiled is None
        if compiled is None:
            # the whole function or nothing: a graph break would leave it running in pieces, slower and unsaid
            compiled = th.compile(_own_code(function), dynamic=False, fullgraph=True, options=options)
        # compile the backward pass here too, inside the fallback (torch otherwise leaves it to the first backward())
        caught = (Exception,) if first_call else COMPILATION_ERRORS
        previous_lowering = aot_autograd_config.force_non_lazy_backward_lowering if with_backward else False
        if with_backward:
            aot_autograd_config.force_non_lazy_backward_lowering = True
        # minibatch_step's torch.autograd.grad becomes part of its graph (dynamo's trace_autograd_ops)
        tracing = dynamo_config.patch(trace_autograd_ops=True) if function is minibatch_step else contextlib.nullcontext()
        try:
            with tracing:
                result = compiled(*args, **kwargs)
        except caught as error:  # a graph that does not compile, or (a first call's) an error of the computation
            # the eager function tells which: an error of its own (a NaN that torch's multinomial refuses, an input
            # of the wrong shape) propagates, and the next call compiles again
            result = function(*args, **kwargs)
            if function is minibatch_step:  # the steps in pieces from now on (their own compilation may still work)
                self.whole = False
                self._compiled.pop(function, None)
                sentence = f"training step compiled in pieces ({self._failure_sentence(error)})"
                warnings.warn(sentence, UserWarning, stacklevel=5)
            else:
                warnings.warn(self.fall_back(error), UserWarning, stacklevel=5)
            return result, False
        finally:
            if with_backward:
                aot_autograd_config.force_non_lazy_backward_lowering = previous_lowering
        self._compiled[function] = compiled
        return result, True

    @contextlib.contextmanager
    def acting(self, policy: th.nn.Module) -> Iterator[None]:
        """For the length of a rollout, ``policy`` acts through :meth:`act` if the acting step is compiled and covers it."""
        if not (self.acting_active and self.covers_acting(policy)):
            yield
            return
        policy.acting_step = self.act
        try:
            yield
        finally:
            vars(policy).pop("acting_step", None)

    def act(self, policy: ActorCriticPolicy, obs: PyTorchObs) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """:func:`lean_forward` compiled; inductor's ``fallback_random`` makes a seed draw the same actions as eagerly."""
        if not self.acting_active:  # a compilation failed during this rollout
            return lean_forward(policy, obs)
        options = {"fallback_random": True, **(inductor.list_mode_options(self.acting_mode) if self.acting_mode else {})}
        return self._call(lean_forward, (policy, obs, self.observation_plan(policy)), {}, options, with_backward=False)[0]

    def minibatch_terms(self, minibatch: CompiledMinibatch) -> MinibatchTerms:
        """One minibatch's loss by the compiled :func:`minibatch_loss`, recorded by its ``policy_objective``."""
        args, kwargs = self._loss_inputs(minibatch)
        if minibatch.lstm_outputs is None:
            terms: MinibatchLoss = self.run(minibatch_loss, *args, **kwargs)
        else:
            # the observations' place taken by the LSTMs' outputs, which carry what the policy made of them
            policy, proximal_network, _, actions, targets, settings = args
            lstm_args = (policy, proximal_network, *minibatch.lstm_outputs, actions, targets, settings)
            terms = self.run(recurrent_minibatch_loss, *lstm_args, autocast_dtype=kwargs["autocast_dtype"])
        return self._recorded(terms, minibatch)

    def _loss_inputs(self, minibatch: CompiledMinibatch) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """:func:`minibatch_loss`'s arguments for a minibatch, its numbers as the 0-dim tensors of :meth:`constants`."""
        objective, data, masks = minibatch.policy_objective, minibatch.rollout_data, minibatch.action_masks
        clip_range = objective.clip_range
        low, high = (-math.inf, math.inf) if clip_range is None else log_clip_bounds(clip_range)
        kl_coef = float(objective.kl_coef)
        kl_coef_or_none = kl_coef if kl_coef > 0 else None  # as the eager objective: a penalty for a positive kl_coef
        numbers = (low, high, minibatch.clip_range_vf, float(minibatch.ent_coef), float(minibatch.vf_coef), kl_coef_or_none)
        clip_low, clip_high, clip_vf, ent, vf, kl = self.constants(numbers, data.returns.device)
        targets = LossTargets(minibatch.advantages, data.old_log_prob, data.old_values, data.returns)
        # (None only for clip_range_vf and kl_coef)
        clip_low, clip_high, ent, vf = cast(tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor], (clip_low, clip_high, ent, vf))
        settings = LossSettings(clip_low, clip_high, clip_vf, ent, vf, kl, float(objective.imp_samp_max))
        args = (minibatch.policy, minibatch.proximal_network, data.observations, minibatch.actions, targets, settings)
        kwargs = dict(
            autocast_dtype=minibatch.autocast_dtype,
            observation_plan=self.observation_plan(minibatch.policy),
            action_masks=masks,
            action_dims=() if masks is None else masked_action_dims(cast(MaskableActorCriticPolicy, minibatch.policy)),
        )
        return args, kwargs

    @staticmethod
    def _recorded(terms: MinibatchLoss, minibatch: CompiledMinibatch) -> MinibatchTerms:
        behavior_log_prob = minibatch.rollout_data.old_log_prob
        minibatch.policy_objective.record(
            terms.policy_loss, terms.log_prob, terms.proximal_log_prob, behavior_log_prob, terms.kl_penalty
        )
        return MinibatchTerms(terms.loss, terms.value_loss, terms.entropy_loss, terms.approx_kl_div)

    @staticmethod
    def not_whole(policy: th.nn.Module, optimizer: th.optim.Optimizer) -> str | None:
        """
        Why :func:`minibatch_step` cannot take ``optimizer``'s step on ``policy`` (None: it can): it needs torch's Adam
        or AdamW, one group of the policy's trainable parameters, number settings, its step count on the parameters' device.
        """
        if not hasattr(dynamo_config, "trace_autograd_ops"):
            return f"torch {th.__version__}'s torch.compile cannot trace torch.autograd.grad"
        name = type(optimizer).__name__
        if type(optimizer) not in (th.optim.Adam, th.optim.AdamW):
            return f"the optimizer is {name}, not torch's Adam or AdamW"
        if len(optimizer.param_groups) != 1:
            return f"the {name} optimizer has {len(optimizer.param_groups)} parameter groups"
        group = optimizer.param_groups[0]
        trainable = {id(param) for param in policy.parameters() if param.requires_grad}
        if {id(param) for param in group["params"]} != trainable:
            return f"the {name} optimizer's parameters are not the policy's trainable parameters"
        options = [key for key in ("amsgrad", "maximize", "differentiable") if group.get(key)]
        if options:
            return f"the {name} optimizer's {options[0]}=True"
        settings = (group["lr"], group["eps"], group["weight_decay"], *group["betas"])
        if any(isinstance(value, th.Tensor) for value in settings):
            return f"the {name} optimizer's settings are tensors"
        on_cpu = all(param.device.type == "cpu" for param in group["params"])
        if not (on_cpu or group.get("fused") or group.get("capturable")):
            return f"the {name} optimizer keeps its step count on the CPU (fused=True steps it whole)"
        return None

    def steps_whole(
        self, in_pieces: Callable[[], str | None], clip_range: float | None, clip_range_vf: float | None
    ) -> tuple[bool, str | None]:
        """
        Whether an iteration with these clip ranges steps as one function (:meth:`whole_step`), as decided at ``learn``'s
        start unless ``in_pieces()`` now says why not (a callback replaced the optimizer): then in pieces for the rest of
        the call. Returns the decision and, when it changed, the sentence that says so.
        """
        if not self.whole:
            return False, None
        reason = in_pieces()
        if reason is not None:
            self.whole = False
            return False, f"training step compiled in pieces from now on ({reason})"
        return self.covers(clip_range, clip_range_vf), None

    def whole_step(
        self, minibatch: CompiledMinibatch, ewma: ParameterEWMA | None, max_grad_norm: float, n_updates: int
    ) -> MinibatchTerms:
        """One minibatch's step by the compiled :func:`minibatch_step`; a non-finite gradient stops training, as eagerly."""
        policy = minibatch.policy
        if minibatch.lstm_outputs is not None:
            raise ValueError("a recurrent policy's step runs in pieces: its LSTMs run eagerly (minibatch_terms)")
        args, kwargs = self._loss_inputs(minibatch)
        plan = self._whole_plans.get(id(policy))
        if plan is None or not plan.current(policy):
            plan = self._whole_plans[id(policy)] = self._plan_whole_step(policy, args, kwargs)
        group = plan.group
        plan.rate.fill_(group["lr"])
        plan.max_norm.fill_(max_grad_norm)
        beta1, beta2 = group["betas"]
        decoupled = group.get("decoupled_weight_decay", type(policy.optimizer) is th.optim.AdamW)
        settings = AdamSettings(plan.rate, beta1, beta2, group["eps"], group["weight_decay"], decoupled)
        averaged = None
        if ewma is not None:
            plan.fraction.fill_(ewma.next_fraction)
            averaged = (*ewma.averaged_pairs, plan.fraction)
        terms, total_norm = self.run(minibatch_step, plan.adam, settings, plan.max_norm, averaged, *args, **kwargs)
        check_finite_gradient_norm(total_norm, "train", n_updates)
        if ewma is not None:
            ewma.advance()
        return self._recorded(terms, minibatch)

    @staticmethod
    def _plan_whole_step(
        policy: ActorCriticPolicy | MaskableActorCriticPolicy, loss_args: tuple[Any, ...], loss_kwargs: dict[str, Any]
    ) -> "WholeStepPlan":
        """What :meth:`whole_step` reuses: the parameters the loss reaches (by one eager pass) and their optimizer state."""
        optimizer = policy.optimizer
        (group,) = optimizer.param_groups
        # the group's (not_whole: the policy's trainable parameters), in the policy's order
        in_group = {id(param) for param in group["params"]}
        parameters: list[th.Tensor] = [param for param in policy.parameters() if id(param) in in_group]
        # which parameters the loss reaches, by an eager pass in evaluation mode (no batch-norm statistics moved)
        training = policy.training
        policy.set_training_mode(False)
        try:
            loss = minibatch_loss(*loss_args, **loss_kwargs).loss
            gradients = th.autograd.grad(loss, parameters, allow_unused=True)
        finally:
            policy.set_training_mode(training)
        reached: list[th.Tensor] = [param for param, gradient in zip(parameters, gradients) if gradient is not None]
        on_device = bool(group.get("fused") or group.get("capturable"))
        for param in reached:
            state = optimizer.state[param]
            if not state:  # as torch's Adam makes it at its first step
                state["step"] = th.zeros((), dtype=_scalar_dtype(), device=param.device if on_device else "cpu")
                state["exp_avg"] = th.zeros_like(param, memory_format=th.preserve_format)
                state["exp_avg_sq"] = th.zeros_like(param, memory_format=th.preserve_format)
        states = [optimizer.state[param] for param in reached]
        adam = AdamTensors(
            reached,
            [state["exp_avg"] for state in states],
            [state["exp_avg_sq"] for state in states],
            [state["step"] for state in states],
        )
        device = policy.device
        rate, max_norm, fraction = (th.zeros((), device=device) for _ in range(3))
        return WholeStepPlan(policy, optimizer, adam, group, rate, max_norm, fraction)

    def optimizer_step(self, optimizer: th.optim.Optimizer) -> None:
        """``optimizer.step()`` by torch's fused kernel (Adam and AdamW on the CPU) or compiled; the groups' settings kept."""
        entry = self._fused_steps.get(id(optimizer))
        if entry is None or entry[0] is not optimizer:
            entry = self._fused_steps[id(optimizer)] = (optimizer, fuses_on_cpu(optimizer))
        if entry[1]:
            with group_settings(optimizer, foreach=False, fused=True):
                optimizer.step()
            return
        if any(group["lr"] == 0 for group in optimizer.param_groups):
            # the end of a linear schedule: torch's step with a tensor rate divides by it (its capturable form)
            optimizer.step()
            return
        step, rates = self._steps.get(id(optimizer), (None, []))
        if step is None:
            # torch's own function: all optimizers share its graphs; past 8 shapes a further one runs eagerly (torch logs it)
            step = th.compile(optimizer.step, dynamic=False)
            device = optimizer.param_groups[0]["params"][0].device
            rates = [th.zeros((), dtype=th.float32, device=device) for _ in optimizer.param_groups]
            self._steps[id(optimizer)] = (step, rates)
        # the rates as 0-dim tensors (a number would be a new graph every iteration); torch refuses them with foreach=True
        for rate, group in zip(rates, optimizer.param_groups):
            rate.fill_(group["lr"])
        with group_settings(optimizer, lr=rates, foreach=False):
            step()

    def __getstate__(self) -> dict[str, Any]:
        # compiled functions are neither pickled nor deep-copied: a copy compiles its own when it trains
        return {
            **self.__dict__,
            "verified": False,
            "_compiled": {},
            "_steps": {},
            "_fused_steps": {},
            "_plans": {},
            "_whole_plans": {},
        }
