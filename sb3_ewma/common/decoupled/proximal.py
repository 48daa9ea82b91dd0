"""Building the proximal policy of an SB3 actor-critic policy and handling its persistence."""

import copy
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import torch as th
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.save_util import load_from_zip_file
from stable_baselines3.common.type_aliases import PyTorchObs

from sb3_ewma.common.distributions import has_lean_log_prob, lean_action_log_prob
from sb3_ewma.common.ewma import ParameterEWMA
from sb3_ewma.common.policies import policy_copy
from sb3_ewma.common.saved_files import read_saved_values, state_on_cpu

# the attribute (hence ``data`` entry) that holds the proximal policy's state in a saved file, and the update count
# those states were saved at (a file saved again by SB3's parent, which keeps them unread, has another count)
PROXIMAL_STATE_KEY = "proximal_policy_state"
STATES_AT_UPDATE_KEY = "saved_states_n_updates"


# parameters of an SB3 ActorCriticPolicy that only the value function uses
VALUE_ONLY_PREFIXES = ("value_net.", "mlp_extractor.value_net.", "vf_features_extractor.")


def is_policy_parameter(name: str) -> bool:
    """Whether a parameter of an ``ActorCriticPolicy`` can change the action distribution."""
    return not name.startswith(VALUE_ONLY_PREFIXES)


def make_proximal_ewma(
    policy: BasePolicy,
    decay: float,
    include: Callable[[str], bool] | None = is_policy_parameter,
) -> ParameterEWMA:
    """
    An EWMA of ``policy``'s parameters held in a copy of the policy that receives no gradients, is in evaluation
    mode (like the behavior policy during rollouts) and has no optimizer.

    :param policy: the policy being trained
    :param decay: the EWMA decay ``beta_prox``
    :param include: which parameters to average (default: those that the action distribution depends on)
    """
    return ParameterEWMA(policy, policy_copy(policy), decay, include=include)


@th.no_grad()
def proximal_action_log_prob(proximal: ParameterEWMA, obs: PyTorchObs, actions: th.Tensor) -> th.Tensor:
    """
    The log-probabilities of ``actions`` under the proximal policy (no gradients): what the decoupled objective needs
    when it does not need the whole distribution (the exact KL). For categorical, diagonal Gaussian and gSDE policies the
    log-probability is computed from the action head's output with the same arithmetic as ``torch.distributions``
    (same values, bit for bit) but without building and validating distribution objects, a large share of the
    proximal pass's time on small networks; other distributions go through ``get_distribution``.
    """
    # Kept because it pays on small networks (`python -m benchmarks.timing.proximal_pass`; the figures are on the
    # benchmarks page, docs/misc/benchmarks.md).
    policy = proximal.average
    if not has_lean_log_prob(policy):
        return policy.get_distribution(obs).log_prob(actions)  # type: ignore[operator]
    return lean_action_log_prob(policy, obs, actions)  # type: ignore[arg-type]


def warn_missing_proximal(algorithm_name: str) -> None:
    warnings.warn(
        f"The loaded parameters have no proximal policy (a file saved without one: by SB3's or sb3-contrib's parent "
        f"algorithm, or by PPG): "
        f"{algorithm_name} starts its EWMA from the loaded policy.",
        UserWarning,
        stacklevel=4,  # the caller of set_parameters
    )


class ProximalPolicy:
    """
    The proximal policy ``pi_prox`` of the decoupled objective, of one of three kinds (:attr:`kind`):

    - ``"behavior"``: no network of its own; its log-probabilities are those of the rollout buffer (SB3's PPO);
    - ``"snapshot"``: without an EWMA, a copy of the policy taken at the start of each iteration, when the loss
      needs a network (the exact KL penalty, or data older than the iteration anchored at the recent policy);
    - ``"ewma"``: the EWMA of the policy's parameters (``decay``), moved after every policy optimizer step.

    :param ewma: the network (:func:`make_proximal_ewma`), or None for ``"behavior"``
    :param decay: the EWMA decay, or None (no EWMA)
    :param distribution: ``distribution(network, minibatch)``, the network's action distribution on a minibatch, for
        policies that take more than the observations (LSTM states, action masks); None: the observations alone,
        and the lean log-probability pass (:func:`proximal_action_log_prob`)
    """

    def __init__(
        self,
        ewma: ParameterEWMA | None,
        decay: float | None,
        distribution: Callable[[Any, Any], Distribution] | None = None,
    ) -> None:
        self.ewma = ewma
        self.decay = decay
        self._distribution = distribution

    @classmethod
    def build(
        cls,
        policy: BasePolicy,
        decay: float | None,
        needs_network: bool,
        include: Callable[[str], bool] | None = is_policy_parameter,
        distribution: Callable[[Any, Any], Distribution] | None = None,
    ) -> "ProximalPolicy":
        """
        The proximal policy of ``policy``: its EWMA (``decay``), or without an EWMA a snapshot of the policy when
        ``needs_network`` (``DecoupledAlgorithm._proximal_needs_network``), else the behavior policy.

        :param include: which parameters the network averages (default: those the action distribution depends on)
        :param distribution: ``distribution(network, minibatch)`` for policies that take more than the observations
        """
        ewma = make_proximal_ewma(policy, decay or 0.0, include) if needs_network else None
        return cls(ewma, decay, distribution)

    @property
    def kind(self) -> str:
        if self.ewma is None:
            return "behavior"
        return "snapshot" if self.decay is None else "ewma"

    @property
    def network(self) -> BasePolicy | None:
        """The network that gives the proximal policy's distribution (None: the behavior policy's log-probabilities)."""
        return None if self.ewma is None else cast(BasePolicy, self.ewma.average)

    def start_iteration(self) -> None:
        """At the start of a training iteration: a snapshot proximal policy becomes the current policy."""
        if self.kind == "snapshot":
            self.restart()

    def restart(self) -> None:
        """The network becomes the current policy (an EWMA restarts from it)."""
        if self.ewma is not None:
            self.ewma.reset()

    def step(self) -> None:
        """After each policy optimizer step: the EWMA takes in the new parameters."""
        if self.kind == "ewma":
            assert self.ewma is not None
            self.ewma.update()

    @th.no_grad()
    def distribution(self, minibatch: Any) -> Distribution:
        """The proximal network's action distribution on a minibatch of the rollout buffer (no gradients)."""
        network = self.network
        assert network is not None, "the behavior policy has no network here"
        if self._distribution is None:
            return network.get_distribution(minibatch.observations)  # type: ignore[operator]
        return self._distribution(network, minibatch)

    @th.no_grad()
    def log_prob(
        self, minibatch: Any, actions: th.Tensor, behavior_log_prob: th.Tensor, with_distribution: bool = False
    ) -> tuple[th.Tensor, Distribution | None]:
        """
        The proximal policy's log-probabilities of ``actions`` on a minibatch (the behavior policy's are
        ``behavior_log_prob``), and its distribution when ``with_distribution`` (the exact KL penalty) and it has one.
        """
        if self.ewma is None:
            return behavior_log_prob, None
        if with_distribution or self._distribution is not None:
            distribution = self.distribution(minibatch)
            return distribution.log_prob(actions), distribution if with_distribution else None
        return proximal_action_log_prob(self.ewma, minibatch.observations, actions), None


SelfAlgorithm = TypeVar("SelfAlgorithm", bound=BaseAlgorithm)


def with_states_in_data(algorithm: SelfAlgorithm, modules_in_data: Mapping[str, str]) -> SelfAlgorithm:
    """
    What SB3's ``save`` writes for ``algorithm``: a shallow copy of it (the same policy, optimizers and attributes)
    whose proximal network is no module but the attribute, hence ``data`` entry, ``proximal_policy_state``, and
    likewise each of ``modules_in_data`` (attribute: ``data`` entry). SB3's parent ``load``
    (``stable_baselines3.PPO.load``) refuses an unknown module among a file's parameters, but sets unknown ``data``
    entries as attributes and ignores them. ``algorithm`` itself is left as it is: its ``get_parameters()`` keeps its
    modules.
    """
    saved = copy.copy(algorithm)  # a new __dict__ holding the same objects
    moved = False
    proximal: ProximalPolicy | None = getattr(algorithm, "proximal", None)
    if proximal is not None and proximal.ewma is not None and proximal.kind == "ewma":  # a snapshot is not saved
        # no proximal network: ``_get_torch_save_params``, hence SB3's ``get_parameters``, names the parent's modules
        vars(saved).update({"proximal": None, PROXIMAL_STATE_KEY: state_on_cpu(proximal.ewma.state_dict())})
        moved = True
    for attribute, key in modules_in_data.items():
        module = getattr(algorithm, attribute, None)
        if module is not None:
            vars(saved).update({attribute: None, key: state_on_cpu(module.state_dict())})
            moved = True
    if moved:
        vars(saved)[STATES_AT_UPDATE_KEY] = algorithm._n_updates
    return saved


def _with_tuples(state: Any) -> Any:
    """An optimizer's state dict as saved: SB3 writes one without tensors as JSON, which reads its tuples (Adam's
    ``betas``) back as lists."""
    if not isinstance(state, dict) or "param_groups" not in state:
        return state
    groups = [
        {name: tuple(value) if isinstance(value, list) and name != "params" else value for name, value in group.items()}
        for group in state["param_groups"]
    ]
    return {**state, "param_groups": groups}


def _with_settings_of(optimizer: th.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` (an optimizer's state dict) with ``optimizer``'s settings but its learning rate (a schedule sets it)."""
    if len(state["param_groups"]) != len(optimizer.param_groups):
        return state  # torch's load_state_dict says what does not match
    groups = [
        {**saved, **{name: value for name, value in group.items() if name not in ("params", "lr", "initial_lr")}}
        for saved, group in zip(state["param_groups"], optimizer.param_groups)
    ]
    return {**state, "param_groups": groups}


def _saved_parameters(
    algorithm: BaseAlgorithm, load_path_or_dict: str | dict[str, Any], keys: tuple[str, ...], device: th.device | str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """
    The parameters for SB3's ``set_parameters`` and the ``data`` entries ``keys`` with the model's ``_n_updates``: those
    ``load`` set as attributes of ``algorithm`` (used once, here), or read from the path or stream given (the others
    left serialized).
    """
    data = {key: vars(algorithm).pop(key, None) for key in keys}
    if isinstance(load_path_or_dict, dict):
        return load_path_or_dict, {**data, "_n_updates": getattr(algorithm, "_n_updates", None)}
    data = read_saved_values(load_path_or_dict, (*keys, "_n_updates"))
    _, params, _ = load_from_zip_file(load_path_or_dict, device=device, load_data=False)
    return params, data


def parameters_with_proximal_state(
    algorithm: BaseAlgorithm,
    ewma: ParameterEWMA | None,
    load_path_or_dict: str | dict[str, Any],
    exact_match: bool,
    device: th.device | str,
    modules_in_data: Mapping[str, str] | None = None,
    loading: bool = False,
    has_snapshot: bool = False,
) -> dict[str, Any]:
    """
    The parameters for SB3's ``set_parameters``, with the proximal policy's state (and those of ``modules_in_data``,
    by ``data`` entry; see :func:`with_states_in_data`): from the file's ``data`` (set as an attribute during
    ``load``, or read from the path given), or restarted from the given policy.

    Parameters without the proximal policy follow SB3's contract: ``exact_match=True`` raises a ``ValueError`` like
    for any other missing module, and ``exact_match=False`` restarts the EWMA from the given policy (with a warning).
    ``load`` of a file saved by another algorithm (SB3's PPO) restarts the EWMA with a warning instead of failing.

    :param algorithm: the model whose parameters are set (``load`` left the file's proximal state on it)
    :param ewma: its proximal EWMA, or None (no proximal network to fill)
    :param loading: whether ``load`` sets them (a file of another algorithm then restarts the states), not a user's call
    :param has_snapshot: the model's proximal network is a snapshot of the policy (retaken at each iteration's start: a
        saved proximal state is not needed)
    """
    entries = {"proximal_ewma": PROXIMAL_STATE_KEY, **(modules_in_data or {})}
    params, data = _saved_parameters(algorithm, load_path_or_dict, (*entries.values(), STATES_AT_UPDATE_KEY), device)
    name = type(algorithm).__name__
    saved_at, n_updates = data.get(STATES_AT_UPDATE_KEY), data.get("_n_updates")
    stale = saved_at is not None and saved_at != n_updates
    if stale:
        # the file was trained on and saved again by an algorithm that kept these states unread (SB3's PPO)
        names = ", ".join(module for module, key in entries.items() if data.get(key) is not None)
        warnings.warn(
            f"The saved states of {names} are stale (saved at update {saved_at}, the file's model is at "
            f"update {n_updates}: trained on and saved again by another algorithm, e.g. SB3's PPO): "
            f"{name} starts them afresh from the loaded policy",
            UserWarning,
            stacklevel=3,
        )
    else:
        # the states saved in the data go with the modules' parameters (where older files hold them: the proximal
        # policy in those of version 0.1.0, PPG's auxiliary optimizer in those of 0.2.0 and before)
        states = {module: _with_tuples(data.get(key)) for module, key in entries.items()}
        params = {**{module: state for module, state in states.items() if state is not None}, **params}
    # the states the parameters lack, beside a policy: refused for a user's exact match, otherwise started afresh
    for module in (*(modules_in_data or {}), "proximal_ewma"):
        if module in params or "policy" not in params:
            continue
        if module == "proximal_ewma":
            # a module's state dict (SB3's load_from_zip_file types the modules' entries as tensors)
            fresh = None if ewma is None else ewma.state_dict_from_source(cast(dict[str, th.Tensor], params["policy"]))
        else:
            current = getattr(algorithm, module, None)
            fresh = None if current is None else current.state_dict()
        if fresh is None:
            continue
        if exact_match and not stale and not loading:
            hint = " (use exact_match=False to restart the EWMA from the given policy)" if module == "proximal_ewma" else ""
            raise ValueError(f"Names of parameters do not match agents' parameters: the parameters have no '{module}'{hint}")
        if not stale and module == "proximal_ewma":
            warn_missing_proximal(name)
        elif not stale:
            warnings.warn(f"The loaded parameters have no {module} state: {name} starts it afresh", UserWarning, stacklevel=3)
        params = {**params, module: fresh}
    if loading:
        # an optimizer's saved state brings the settings it was saved with: the model's own stay (load's keywords,
        # PPG's aux_optimizer_kwargs, made them), its moments and step counts are the saved ones
        for module in modules_in_data or {}:
            optimizer, state = getattr(algorithm, module, None), params.get(module)
            if isinstance(optimizer, th.optim.Optimizer) and isinstance(state, dict) and "param_groups" in state:
                params = {**params, module: _with_settings_of(optimizer, state)}
    if ewma is None and "proximal_ewma" in params:
        # e.g. a PPO_EWMA file loaded with ewma_decay=None: this model has no proximal EWMA to fill
        if not has_snapshot:
            warnings.warn(f"{name} has no proximal policy: the saved one is ignored", UserWarning, stacklevel=3)
        params = {module: value for module, value in params.items() if module != "proximal_ewma"}
    return params
