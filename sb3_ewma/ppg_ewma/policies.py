"""
Policies for PPG / PPG-EWMA: SB3 actor-critic policies with an auxiliary value head on the policy trunk and one of the
architectures of Phasic Policy Gradient (Cobbe et al. 2020), ``"dual"``, ``"shared"`` or ``"detach"``.
"""

from functools import partial
from typing import Any

import torch as th
from gymnasium import spaces
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import ActorCriticCnnPolicy, ActorCriticPolicy, BasePolicy, MultiInputActorCriticPolicy
from stable_baselines3.common.torch_layers import (
    BaseFeaturesExtractor,
    CombinedExtractor,
    FlattenExtractor,
    MlpExtractor,
    NatureCNN,
)
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from stable_baselines3.common.utils import get_device
from torch import nn

from sb3_ewma.common.checks import HyperparameterError
from sb3_ewma.common.decoupled.proximal import is_policy_parameter
from sb3_ewma.common.distributions import policy_latents
from sb3_ewma.common.policies import HeadInitMixin, LeanActingMixin

ARCHITECTURES = ("dual", "shared", "detach")
AUX_VALUE_PREFIX = "aux_value_net."


def check_arch(arch: str) -> None:
    """Raise a ``ValueError`` unless ``arch`` is one of ``"dual"``, ``"shared"``, ``"detach"``."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"arch must be one of {ARCHITECTURES}, got {arch!r}")


def is_ppg_policy_parameter(name: str) -> bool:
    """Whether a parameter of a :class:`PPGPolicy` can change the action distribution (those the proximal EWMA averages)."""
    return is_policy_parameter(name) and not name.startswith(AUX_VALUE_PREFIX)


class PPGMlpExtractor(MlpExtractor):
    """
    The MLP part of a PPG network: SB3's ``MlpExtractor`` (branches ``policy_net`` and ``value_net``) behind an
    optional shared trunk ``shared_net``, with the same interface.

    :param feature_dim: dimension of the features
    :param net_arch: layer sizes: with ``arch="dual"`` as in SB3; with ``"shared"`` or ``"detach"`` a list gives the
        shared trunk's layers, a dict ``pi`` / ``vf`` branches on the shared features
    :param activation_fn: activation after each layer
    :param arch: ``"dual"``, ``"shared"`` or ``"detach"`` (the value branch reads the trunk's output detached)
    :param device: PyTorch device
    """

    def __init__(
        self,
        feature_dim: int,
        net_arch: list[int] | dict[str, list[int]],
        activation_fn: type[nn.Module],
        arch: str = "dual",
        device: th.device | str = "auto",
    ) -> None:
        check_arch(arch)
        if isinstance(net_arch, dict):
            shared_dims: list[int] = []
            branches = dict(pi=list(net_arch.get("pi", [])), vf=list(net_arch.get("vf", [])))
        elif arch == "dual":
            shared_dims, branches = [], dict(pi=list(net_arch), vf=list(net_arch))
        else:
            shared_dims, branches = list(net_arch), dict(pi=[], vf=[])
        super().__init__(shared_dims[-1] if shared_dims else feature_dim, branches, activation_fn, device=device)
        layers: list[nn.Module] = []
        for in_dim, out_dim in zip([feature_dim, *shared_dims], shared_dims):
            layers += [nn.Linear(in_dim, out_dim), activation_fn()]
        self.shared_net = nn.Sequential(*layers).to(get_device(device))
        self.detach_value = arch == "detach"

    def _value_input(self, shared: th.Tensor) -> th.Tensor:
        return shared.detach() if self.detach_value else shared

    def forward(self, features: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """:return: the policy latent and the value latent"""
        shared = self.shared_net(features)
        return self.policy_net(shared), self.value_net(self._value_input(shared))

    def forward_actor(self, features: th.Tensor) -> th.Tensor:
        return self.policy_net(self.shared_net(features))

    def forward_critic(self, features: th.Tensor) -> th.Tensor:
        return self.value_net(self._value_input(self.shared_net(features)))


class PPGPolicy(HeadInitMixin, LeanActingMixin, ActorCriticPolicy):
    """
    Actor-critic policy for PPG / PPG-EWMA: SB3's ``ActorCriticPolicy`` with a PPG architecture (``arch``) and an
    auxiliary value head ``aux_value_net`` (a linear layer on the policy latent), trained in the auxiliary phase.

    :param observation_space: Observation space
    :param action_space: Action space
    :param lr_schedule: Learning rate schedule (could be constant)
    :param net_arch: The specification of the networks (see :class:`PPGMlpExtractor`). Default: ``[]`` with
        ``NatureCNN``, else ``dict(pi=[64, 64], vf=[64, 64])`` for ``"dual"`` and ``[64, 64]`` otherwise
    :param activation_fn: Activation function
    :param ortho_init: Whether to use or not orthogonal initialization
    :param use_sde: Whether to use State Dependent Exploration or not
    :param log_std_init: Initial value for the log standard deviation
    :param full_std: Whether to use (n_features x n_actions) parameters
        for the std instead of only (n_features,) when using gSDE
    :param use_expln: Use ``expln()`` function instead of ``exp()`` to ensure
        a positive standard deviation (cf paper)
    :param squash_output: Whether to squash the output using a tanh function,
        this allows to ensure boundaries when using gSDE.
    :param features_extractor_class: Features extractor to use; ``None``: the policy's
        :attr:`default_features_extractor_class`
    :param features_extractor_kwargs: Keyword arguments
        to pass to the features extractor.
    :param share_features_extractor: ``None`` (default): ``False`` for ``"dual"``, ``True`` otherwise; ``True`` with
        ``"dual"`` is SB3's ``PPO`` layout; ``False`` with ``"shared"`` or ``"detach"`` raises a ``ValueError``
    :param normalize_images: Whether to normalize images or not,
         dividing by 255.0 (True by default)
    :param optimizer_class: The optimizer to use,
        ``th.optim.Adam`` by default
    :param optimizer_kwargs: Additional keyword arguments,
        excluding the learning rate, to pass to the optimizer
    :param arch: ``"dual"`` (separate policy and value networks), ``"shared"`` (one network) or ``"detach"`` (one
        network, the value head on the detached trunk)
    :param head_init_scale: The authors' normed initialization of the heads with this scale (they use 0.1); None:
        SB3's initialization only (see :class:`sb3_ewma.common.policies.HeadInitMixin`)
    """

    mlp_extractor: PPGMlpExtractor
    default_features_extractor_class: type[BaseFeaturesExtractor] = FlattenExtractor

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        net_arch: list[int] | dict[str, list[int]] | None = None,
        activation_fn: type[nn.Module] = nn.Tanh,
        ortho_init: bool = True,
        use_sde: bool = False,
        log_std_init: float = 0.0,
        full_std: bool = True,
        use_expln: bool = False,
        squash_output: bool = False,
        features_extractor_class: type[BaseFeaturesExtractor] | None = None,
        features_extractor_kwargs: dict[str, Any] | None = None,
        share_features_extractor: bool | None = None,
        normalize_images: bool = True,
        optimizer_class: type[th.optim.Optimizer] = th.optim.Adam,
        optimizer_kwargs: dict[str, Any] | None = None,
        arch: str = "dual",
        head_init_scale: float | None = None,
    ):
        check_arch(arch)
        features_extractor_class = features_extractor_class or self.default_features_extractor_class
        shared = arch != "dual"
        if shared and share_features_extractor is not None and not share_features_extractor:
            raise ValueError(
                f"share_features_extractor={share_features_extractor} contradicts arch={arch!r} ('shared' and "
                "'detach' have one trunk, so one features extractor): leave it unset, or use arch='dual'"
            )
        if net_arch is None:
            if features_extractor_class == NatureCNN:
                net_arch = []
            else:
                net_arch = [64, 64] if shared else dict(pi=[64, 64], vf=[64, 64])
        # read by _build_mlp_extractor, which the parent's constructor calls
        self.arch = arch
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            net_arch=net_arch,
            activation_fn=activation_fn,
            ortho_init=ortho_init,
            use_sde=use_sde,
            log_std_init=log_std_init,
            full_std=full_std,
            use_expln=use_expln,
            squash_output=squash_output,
            features_extractor_class=features_extractor_class,
            features_extractor_kwargs=features_extractor_kwargs,
            # "dual" with SB3's share_features_extractor=True: one features extractor, separate MLP branches (SB3's PPO)
            share_features_extractor=shared or bool(share_features_extractor),
            normalize_images=normalize_images,
            optimizer_class=optimizer_class,
            optimizer_kwargs=optimizer_kwargs,
            head_init_scale=head_init_scale,
        )

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(arch=self.arch)
        return data

    def _build_mlp_extractor(self) -> None:
        self.mlp_extractor = PPGMlpExtractor(
            self.features_dim, net_arch=self.net_arch, activation_fn=self.activation_fn, arch=self.arch, device=self.device
        )
        # created here so that the optimizer built at the end of `_build` includes it
        self.aux_value_net = nn.Linear(self.mlp_extractor.latent_dim_pi, 1)

    def _build(self, lr_schedule: Schedule) -> None:
        super()._build(lr_schedule)
        if self.ortho_init:
            self.aux_value_net.apply(partial(self.init_weights, gain=1))

    def forward_auxiliary(self, obs: PyTorchObs) -> tuple[Distribution, th.Tensor, th.Tensor]:
        """
        :param obs: Observation
        :return: the action distribution, the auxiliary value and the value, for the auxiliary phase
        """
        latent_pi, latent_vf = policy_latents(self, obs)
        return self._get_action_dist_from_latent(latent_pi), self.aux_value_net(latent_pi), self.value_net(latent_vf)

    def predict_aux_values(self, obs: PyTorchObs) -> th.Tensor:
        """The auxiliary value head's estimates (on the policy trunk) for the given observations."""
        features = super(ActorCriticPolicy, self).extract_features(obs, self.pi_features_extractor)
        return self.aux_value_net(self.mlp_extractor.forward_actor(features))


class PPGCnnPolicy(PPGPolicy):
    """:class:`PPGPolicy` with SB3's ``NatureCNN`` features extractor by default (same parameters)."""

    default_features_extractor_class = NatureCNN


class PPGMultiInputPolicy(PPGPolicy):
    """:class:`PPGPolicy` for ``Dict`` observation spaces, with SB3's ``CombinedExtractor`` by default (same parameters)."""

    default_features_extractor_class = CombinedExtractor


MlpPolicy = PPGPolicy
CnnPolicy = PPGCnnPolicy
MultiInputPolicy = PPGMultiInputPolicy

SB3_POLICY_KINDS: dict[type[BasePolicy], type[PPGPolicy]] = {
    ActorCriticPolicy: PPGPolicy,
    ActorCriticCnnPolicy: PPGCnnPolicy,
    MultiInputActorCriticPolicy: PPGMultiInputPolicy,
}
"""SB3's PPO policy classes (``stable_baselines3.ppo.MlpPolicy``, ...) and the PPG policy of the same kind."""


def ppg_policy_class(policy: str | type[BasePolicy]) -> str | type[PPGPolicy]:
    """
    The policy PPG builds for ``policy``: a name or a :class:`PPGPolicy` subclass as given, SB3's PPO policy classes
    as the PPG policy of the same kind (:data:`SB3_POLICY_KINDS`); any other class raises a ``HyperparameterError``.
    """
    if isinstance(policy, str) or (isinstance(policy, type) and issubclass(policy, PPGPolicy)):
        return policy
    if policy in SB3_POLICY_KINDS:
        return SB3_POLICY_KINDS[policy]
    raise HyperparameterError(
        f"policy must be a PPG policy: 'MlpPolicy', 'CnnPolicy', 'MultiInputPolicy', SB3's PPO policy classes of these "
        f"names, or a subclass of sb3_ewma.ppg_ewma.policies.PPGPolicy (PPG needs its auxiliary value head), got "
        f"{getattr(policy, '__qualname__', policy)!r}; PPG's policies are in sb3_ewma.ppg_ewma.policies"
    )


__all__ = [
    "SB3_POLICY_KINDS",
    "CnnPolicy",
    "MlpPolicy",
    "MultiInputPolicy",
    "PPGCnnPolicy",
    "PPGMlpExtractor",
    "PPGMultiInputPolicy",
    "PPGPolicy",
    "is_ppg_policy_parameter",
    "ppg_policy_class",
]
