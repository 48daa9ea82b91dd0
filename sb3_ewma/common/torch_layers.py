"""Features extractors: the IMPALA CNN used by the PPO-EWMA / PPG-EWMA paper on Procgen, and its weight initialization."""

import math
from collections.abc import Sequence

import gymnasium as gym
import torch as th
from gymnasium import spaces
from stable_baselines3.common.preprocessing import is_image_space, is_image_space_channels_first
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn
from torch.nn import functional as F


@th.no_grad()
def normed_init_(module: nn.Module, scale: float = 1.0) -> nn.Module:
    """
    The authors' "normed" initialization, in place, of every ``nn.Linear`` and ``nn.Conv2d`` in ``module`` (itself
    included): each output unit's weight vector rescaled to L2 norm ``scale`` (its direction kept), biases zero. The
    authors use ``scale=0.1`` for the heads (the policy keyword ``head_init_scale``).

    :param module: the module to re-initialize (its submodules are visited too)
    :param scale: the norm of each output unit's weight vector, ``> 0``
    :return: ``module``, for chaining
    """
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a finite number > 0, got {scale}")
    for layer in module.modules():
        if isinstance(layer, (nn.Linear, nn.Conv2d)):
            weight = layer.weight
            # one weight vector per output unit: dimension 0 is the output dimension for both layer types
            norms = weight.flatten(start_dim=1).norm(dim=1).clamp_min(1e-12)
            weight.mul_((scale / norms).view(-1, *([1] * (weight.dim() - 1))))
            if layer.bias is not None:
                layer.bias.zero_()
    return module


class ImpalaResidualBlock(nn.Module):
    """
    Residual block of the IMPALA CNN: ``x + conv1(relu(conv0(relu(x))))``, 3x3 convolutions with padding 1.

    :param channels: number of input (and output) channels
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)

    def forward(self, x: th.Tensor) -> th.Tensor:
        # not in place: the input is needed for the skip connection
        out = self.conv0(F.relu(x))
        out = self.conv1(F.relu(out))
        return x + out


class ImpalaStack(nn.Module):
    """
    Down-sampling stack of the IMPALA CNN: 3x3 convolution to ``out_channels``, 3x3 max-pooling with stride 2 (halves
    the height and width, rounding up), then ``n_blocks`` residual blocks.

    :param in_channels: number of input channels
    :param out_channels: number of output channels
    :param n_blocks: number of residual blocks
    """

    def __init__(self, in_channels: int, out_channels: int, n_blocks: int = 2) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.blocks = nn.Sequential(*[ImpalaResidualBlock(out_channels) for _ in range(n_blocks)])

    def forward(self, x: th.Tensor) -> th.Tensor:
        return self.blocks(self.pool(self.conv(x)))


class ImpalaCNN(BaseFeaturesExtractor):
    """
    IMPALA CNN (Espeholt et al. 2018) as used on Procgen by Cobbe et al. and Hilton et al.: for each of ``channels`` a
    stack (:class:`ImpalaStack`), then flatten -> relu -> linear ``features_dim`` -> relu. Use it with
    ``net_arch=[]`` and ``ortho_init=False`` (:ref:`procgen`).

    ``normed_init=True`` reproduces the authors' initialization (:func:`normed_init_`) with norms 1.0 for each stack's
    first convolution, ``sqrt(1 / sqrt(n_stacks) / sqrt(n_blocks))`` for the residual blocks' and 1.4 for the linear
    layer.

    :param observation_space: the observation space, a channel-first image ``Box`` (``C x H x W``)
    :param features_dim: number of output features (units of the final linear layer)
    :param channels: output channels of each down-sampling stack
    :param normed_init: use the authors' normed initialization instead of PyTorch's default one
    :param normalize_images: the policy's ``normalize_images``: True needs a uint8 image space with bounds [0, 255];
        False (observations already normalized) checks only the shape
    """

    def __init__(
        self,
        observation_space: gym.Space,
        features_dim: int = 256,
        channels: Sequence[int] = (16, 32, 32),
        normed_init: bool = True,
        normalize_images: bool = True,
    ) -> None:
        if not isinstance(observation_space, spaces.Box) or len(observation_space.shape) != 3:
            raise ValueError(f"ImpalaCNN needs a 3-dimensional Box observation space (C x H x W), got {observation_space}")
        if not is_image_space(observation_space, check_channels=False, normalized_image=not normalize_images):
            raise ValueError(
                "ImpalaCNN with normalize_images=True needs a uint8 image space with bounds [0, 255], "
                f"got {observation_space}; pass normalize_images=False (and the same to the policy) for "
                "observations that are already normalized"
            )
        if normalize_images and not is_image_space_channels_first(observation_space):
            raise ValueError(
                f"ImpalaCNN needs channel-first images (C x H x W), got shape {observation_space.shape}: "
                "wrap the environment with VecTransposeImage (SB3 does it for CNN policies on channel-last images)"
            )
        channels = tuple(int(c) for c in channels)
        if len(channels) == 0 or any(c < 1 for c in channels):
            raise ValueError(f"channels must be a non-empty sequence of positive integers, got {channels}")
        if features_dim < 1:
            raise ValueError(f"features_dim must be >= 1, got {features_dim}")
        super().__init__(observation_space, features_dim)

        self.n_stacks = len(channels)
        self.n_blocks = 2
        in_channels = observation_space.shape[0]
        stacks = []
        for out_channels in channels:
            stacks.append(ImpalaStack(in_channels, out_channels, n_blocks=self.n_blocks))
            in_channels = out_channels
        self.cnn = nn.Sequential(*stacks, nn.Flatten(), nn.ReLU())

        # Compute the flattened size with one forward pass, as SB3's NatureCNN does
        with th.no_grad():
            n_flatten = self.cnn(th.zeros((1, *observation_space.shape), dtype=th.float32)).shape[1]
        self.linear = nn.Sequential(nn.Linear(n_flatten, features_dim), nn.ReLU())

        if normed_init:
            self.normed_init()

    def normed_init(self) -> None:
        """(Re-)apply the authors' normed initialization to all layers."""
        block_scale = math.sqrt(1.0 / math.sqrt(self.n_stacks) / math.sqrt(self.n_blocks))
        for module in self.cnn:
            if isinstance(module, ImpalaStack):
                normed_init_(module.conv, 1.0)
                normed_init_(module.blocks, block_scale)
        normed_init_(self.linear, 1.4)

    def forward(self, observations: th.Tensor) -> th.Tensor:
        return self.linear(self.cnn(observations))
