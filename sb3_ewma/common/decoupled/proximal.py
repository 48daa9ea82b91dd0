"""Building the proximal policy of an SB3 actor-critic policy and handling its persistence."""

import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch as th
from stable_baselines3.common.base_class import maybe_make_env
from stable_baselines3.common.distributions import CategoricalDistribution, DiagGaussianDistribution, Distribution
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.save_util import load_from_zip_file
from stable_baselines3.common.type_aliases import PyTorchObs

from sb3_ewma.common.ewma import ParameterEWMA
from sb3_ewma.common.host import HostAlgorithm
from sb3_ewma.common.saved_files import check_saved_algorithm, read_saved_value

# the attribute (hence ``data`` entry) that holds the proximal policy's state in a saved file
PROXIMAL_STATE_KEY = "proximal_policy_state"
# set while ``save`` writes a file: the proximal policy then goes into ``data``, not among the modules' parameters
_SAVING_TO_FILE: ContextVar[bool] = ContextVar("sb3_ewma_saving_to_file", default=False)
# set while ``load`` rebuilds a model from a file (see :func:`loading_from_file`)
_LOADING_FROM_FILE: ContextVar[bool] = ContextVar("sb3_ewma_loading_from_file", default=False)


@contextmanager
def loading_from_file() -> Iterator[None]:
    """Marks the code run inside it as part of ``Algorithm.load`` (not a user's direct call)."""
    token = _LOADING_FROM_FILE.set(True)
    try:
        yield
    finally:
        _LOADING_FROM_FILE.reset(token)


def is_loading_from_file() -> bool:
    """Whether the caller runs inside ``Algorithm.load`` (see :func:`loading_from_file`)."""
    return _LOADING_FROM_FILE.get()


# parameters of an SB3 ActorCriticPolicy that only the value function uses
VALUE_ONLY_PREFIXES = ("value_net.", "mlp_extractor.value_net.", "vf_features_extractor.")


def is_policy_parameter(name: str) -> bool:
    """Whether a parameter of an ``ActorCriticPolicy`` can change the action distribution."""
    return not name.startswith(VALUE_ONLY_PREFIXES)


def make_proximal_ewma(
    policy: BasePolicy,
    build_policy: Callable[[], BasePolicy],
    decay: float,
    include: Callable[[str], bool] | None = is_policy_parameter,
) -> ParameterEWMA:
    """
    An EWMA of ``policy``'s parameters held in a copy of the policy that receives no gradients, is in evaluation
    mode (like the behavior policy during rollouts) and has no optimizer.

    :param policy: the policy being trained
    :param build_policy: builds a new policy of the same structure (its random initialization is overwritten, and
        it does not advance the global random number generators)
    :param decay: the EWMA decay ``beta_prox``
    :param include: which parameters to average (default: those that the action distribution depends on)
    """
    # a fresh build rather than a deepcopy: gSDE policies hold non-leaf tensors that cannot be deep-copied
    with th.random.fork_rng(devices=[]):
        average = build_policy()
    average = average.to(next(policy.parameters()).device)
    if hasattr(average, "optimizer"):
        # the copy is never optimized; keep no reference to an optimizer (nor, later, its state)
        average.optimizer = None  # type: ignore[assignment]
    average.set_training_mode(False)
    return ParameterEWMA(policy, average, decay, include=include)


@th.no_grad()
def proximal_distribution(proximal: ParameterEWMA, obs: PyTorchObs) -> Distribution:
    """The action distribution of the proximal policy (no gradients)."""
    return proximal.average.get_distribution(obs)  # type: ignore[operator]


@th.no_grad()
def proximal_action_log_prob(proximal: ParameterEWMA, obs: PyTorchObs, actions: th.Tensor) -> th.Tensor:
    """
    The log-probabilities of ``actions`` under the proximal policy (no gradients): what the decoupled objective needs
    when it does not need the whole distribution (the exact KL). For categorical and diagonal Gaussian policies the
    log-probability is computed from the action head's output with the same arithmetic as ``torch.distributions``
    (same values, bit for bit) but without building and validating distribution objects, a large share of the
    proximal pass's time on small networks; other distributions go through ``get_distribution``.
    """
    # Kept because it pays on small networks: in three runs of `python -m benchmarks.timing.proximal_pass` (2 cores,
    # one torch thread), PPO_EWMA's train() on CartPole's MLP with rl-zoo3's shapes took 1% to 17% less time than
    # through a distribution object (1.22 / 1.24, 0.96 / 1.20, 1.10 / 1.15 of SB3 PPO's); on the IMPALA CNN it makes
    # no difference within the noise.
    policy = proximal.average
    action_dist = getattr(policy, "action_dist", None)
    if type(action_dist) not in (CategoricalDistribution, DiagGaussianDistribution):
        return policy.get_distribution(obs).log_prob(actions)  # type: ignore[operator]
    # ActorCriticPolicy.get_distribution up to the distribution
    features = BasePolicy.extract_features(policy, obs, policy.pi_features_extractor)  # type: ignore[arg-type]
    action_head = policy.action_net(policy.mlp_extractor.forward_actor(features))  # type: ignore[operator, union-attr]
    if isinstance(action_dist, CategoricalDistribution):
        # torch.distributions.Categorical: normalized logits, gathered at the actions
        log_pmf = action_head - action_head.logsumexp(dim=-1, keepdim=True)
        return log_pmf.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    # torch.distributions.Normal(mean, ones_like(mean) * exp(log_std)).log_prob, summed over the action dimensions
    std = th.ones_like(action_head) * policy.log_std.exp()  # type: ignore[operator]
    log_prob = -((actions - action_head) ** 2) / (2 * std**2) - std.log() - math.log(math.sqrt(2 * math.pi))
    return log_prob.sum(dim=1) if log_prob.dim() > 1 else log_prob.sum()


def warn_missing_proximal(algorithm_name: str) -> None:
    warnings.warn(
        f"The loaded parameters have no proximal policy (a file saved by another algorithm, e.g. SB3 PPO): "
        f"{algorithm_name} starts its EWMA from the loaded policy.",
        UserWarning,
        stacklevel=3,
    )


class ProximalSaveMixin(HostAlgorithm):
    """
    Save/load support for algorithms holding ``self.proximal_ewma`` (a :class:`ParameterEWMA` or ``None``):
    its averaged weights and EWMA weight are saved with the other state dicts.

    Parameters without the proximal policy follow SB3's contract: ``set_parameters(..., exact_match=True)`` raises a
    ``ValueError`` like for any other missing module, and ``exact_match=False`` restarts the EWMA from the given policy
    (with a warning). ``load`` of a file saved by another algorithm (SB3's PPO, for instance) restarts the EWMA from
    the loaded policy with a warning instead of failing.
    """

    proximal_ewma: ParameterEWMA | None
    # modules of saved policy classes that `load` accepts besides those of the algorithm's own policy aliases
    loadable_parent_policy_modules: tuple[str, ...] = ()

    @classmethod
    def load(cls, path: Any, *args: Any, **kwargs: Any) -> Any:
        """
        SB3's ``load`` (same arguments), after checking that the file was saved by an algorithm whose files this one
        opens; ``env`` may also be a registered environment id, made as the constructor makes it (SB3's
        ``maybe_make_env``: ``gym.make``, then the ``Monitor`` and ``DummyVecEnv`` wrappers).
        """
        own_modules = tuple(policy.__module__ for policy in getattr(cls, "policy_aliases", {}).values())
        data = check_saved_algorithm(cls.__name__, (*own_modules, *cls.loadable_parent_policy_modules), path)
        if data is not None:
            cls._check_saved_data(data, path)
        if args and isinstance(args[0], str):
            args = (maybe_make_env(args[0], kwargs.get("verbose", (data or {}).get("verbose", 0))), *args[1:])
        elif isinstance(kwargs.get("env"), str):
            kwargs["env"] = maybe_make_env(kwargs["env"], kwargs.get("verbose", (data or {}).get("verbose", 0)))
        with loading_from_file():
            return super().load(path, *args, **kwargs)

    @classmethod
    def _check_saved_data(cls, data: dict[str, Any], path: Any) -> None:
        """Further checks of a saved file's ``data`` JSON before ``load`` (values serialized); none here."""

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        state_dicts, torch_variables = super()._get_torch_save_params()
        if getattr(self, "proximal_ewma", None) is not None and not _SAVING_TO_FILE.get():
            state_dicts = [*state_dicts, "proximal_ewma"]
        return state_dicts, torch_variables

    def save(self, *args: Any, **kwargs: Any) -> None:
        """
        SB3's ``save``, with the proximal policy's state in the file's ``data`` (``proximal_policy_state``) rather
        than among the modules' parameters, where SB3's parent ``load`` (``stable_baselines3.PPO.load``) would refuse
        an unknown module: SB3 sets unknown ``data`` entries as attributes and ignores them.
        """
        if getattr(self, "proximal_ewma", None) is None:
            super().save(*args, **kwargs)
            return
        state = {name: value.detach().cpu() for name, value in self.proximal_ewma.state_dict().items()}  # type: ignore[union-attr]
        self.__dict__[PROXIMAL_STATE_KEY] = state
        token = _SAVING_TO_FILE.set(True)
        try:
            super().save(*args, **kwargs)
        finally:
            _SAVING_TO_FILE.reset(token)
            del self.__dict__[PROXIMAL_STATE_KEY]

    def set_parameters(self, load_path_or_dict, exact_match: bool = True, device: th.device | str = "auto") -> None:
        # during `load`, the file's data (set as attributes) brings the proximal state; a path given here is read for it
        saved_state = self.__dict__.pop(PROXIMAL_STATE_KEY, None)
        if isinstance(load_path_or_dict, dict):
            params = load_path_or_dict
        else:
            _, params, _ = load_from_zip_file(load_path_or_dict, device=device, load_data=False)
            saved_state = read_saved_value(load_path_or_dict, PROXIMAL_STATE_KEY)
        if "proximal_ewma" not in params and saved_state is not None:
            # the saved proximal policy goes with the modules' parameters, as in files of version 0.1.0
            params = {**params, "proximal_ewma": saved_state}
        if self.proximal_ewma is not None and "proximal_ewma" not in params and "policy" in params:
            if exact_match and not is_loading_from_file():
                raise ValueError(
                    "Names of parameters do not match agents' parameters: the parameters have no 'proximal_ewma' "
                    "(use exact_match=False to restart the EWMA from the given policy)"
                )
            warn_missing_proximal(type(self).__name__)
            params = {**params, "proximal_ewma": self.proximal_ewma.state_dict_from_source(params["policy"])}
        elif self.proximal_ewma is None and "proximal_ewma" in params:
            # e.g. a PPO_EWMA file loaded with ewma_decay=None: this model has no proximal network to fill
            warnings.warn(f"{type(self).__name__} has no proximal policy: the saved one is ignored", UserWarning, stacklevel=2)
            params = {name: value for name, value in params.items() if name != "proximal_ewma"}
        super().set_parameters(params, exact_match=exact_match, device=device)
