import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.policies import ActorCriticCnnPolicy
from torch import nn

from sb3_ewma.common.torch_layers import ImpalaCNN, ImpalaResidualBlock, ImpalaStack, normed_init_

th.set_num_threads(1)

IMAGE_SPACE = spaces.Box(0, 255, (3, 64, 64), np.uint8)  # channel-first, as SB3 feeds the extractor
BLOCK_SCALE = 6**-0.25  # sqrt(1 / sqrt(3 stacks) / sqrt(2 blocks)), the authors' residual-conv norm


class TinyImageEnv(gym.Env):
    """Procgen-like observations (64 x 64 x 3 uint8, channel-last), reward 1 for action 0, episodes of 8 steps."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0, 255, (64, 64, 3), np.uint8)
        self.action_space = spaces.Discrete(3)
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self._t += 1
        return self.observation_space.sample(), float(action == 0), self._t >= 8, False, {}


def row_norms(layer: nn.Module) -> th.Tensor:
    return layer.weight.detach().flatten(start_dim=1).norm(dim=1)


def layers_with_scales(extractor: ImpalaCNN) -> list[tuple[nn.Module, float]]:
    result = []
    for stack in extractor.cnn:
        if isinstance(stack, ImpalaStack):
            result.append((stack.conv, 1.0))
            for block in stack.blocks:
                result += [(block.conv0, BLOCK_SCALE), (block.conv1, BLOCK_SCALE)]
    result.append((extractor.linear[0], 1.4))
    return result


def test_output_shape_and_architecture():
    extractor = ImpalaCNN(IMAGE_SPACE)
    obs = th.as_tensor(np.stack([IMAGE_SPACE.sample() for _ in range(5)])).float() / 255.0
    features = extractor(obs)
    assert features.shape == (5, 256) and extractor.features_dim == 256
    assert (features >= 0).all()  # final relu
    stacks = [m for m in extractor.cnn if isinstance(m, ImpalaStack)]
    assert [s.conv.out_channels for s in stacks] == [16, 32, 32]
    assert all(len(s.blocks) == 2 and all(isinstance(b, ImpalaResidualBlock) for b in s.blocks) for s in stacks)
    # 64 -> 32 -> 16 -> 8 (max-pool 3, stride 2, padding 1), so 32 * 8 * 8 features before the linear layer
    assert extractor.linear[0].in_features == 32 * 8 * 8
    assert ImpalaCNN(IMAGE_SPACE, features_dim=64, channels=(8, 16))(obs).shape == (5, 64)


def test_parameter_count():
    def conv(c_in: int, c_out: int) -> int:
        return c_in * c_out * 3 * 3 + c_out  # 3x3 kernel + bias

    def stack(c_in: int, c_out: int) -> int:
        return conv(c_in, c_out) + 2 * 2 * conv(c_out, c_out)  # first conv + 2 residual blocks of 2 convs

    # stack 1: 448 + 4 * 2320 = 9728; stack 2: 4640 + 4 * 9248 = 41632; stack 3: 9248 + 4 * 9248 = 46240
    # linear: 2048 * 256 + 256 = 524544; total 622144
    expected = stack(3, 16) + stack(16, 32) + stack(32, 32) + (32 * 8 * 8) * 256 + 256
    assert expected == 9728 + 41632 + 46240 + 524544 == 622144
    extractor = ImpalaCNN(IMAGE_SPACE)
    assert sum(p.numel() for p in extractor.parameters()) == expected


def test_normed_init():
    extractor = ImpalaCNN(IMAGE_SPACE, normed_init=True)
    for layer, scale in layers_with_scales(extractor):
        # one weight vector per output unit (row of the linear layer, kernel of an output channel)
        th.testing.assert_close(row_norms(layer), th.full((layer.weight.shape[0],), scale))
        assert (layer.bias == 0).all()
    # the first convolution of each stack has unit-norm rows
    first_conv = extractor.cnn[0].conv
    th.testing.assert_close(row_norms(first_conv), th.ones(16))

    default = ImpalaCNN(IMAGE_SPACE, normed_init=False)
    assert not th.allclose(row_norms(default.cnn[0].conv), th.ones(16), atol=1e-3)
    assert (default.linear[0].bias != 0).any()


def test_normed_init_helper():
    th.manual_seed(0)
    head = nn.Sequential(nn.Linear(256, 15), nn.ReLU(), nn.Conv2d(3, 4, 3))
    direction = head[0].weight.detach() / row_norms(head[0])[:, None]
    assert normed_init_(head, scale=0.1) is head
    th.testing.assert_close(row_norms(head[0]), th.full((15,), 0.1))
    th.testing.assert_close(row_norms(head[2]), th.full((4,), 0.1))
    assert (head[0].bias == 0).all() and (head[2].bias == 0).all()
    # only rescaled: same direction
    th.testing.assert_close(head[0].weight / 0.1, direction)
    with pytest.raises(ValueError, match="scale"):
        normed_init_(head, scale=0.0)


def test_rejects_non_image_spaces():
    with pytest.raises(ValueError, match="channel-first"):
        ImpalaCNN(spaces.Box(0, 255, (64, 64, 3), np.uint8))
    with pytest.raises(ValueError, match="normalize_images=False"):
        ImpalaCNN(spaces.Box(0.0, 1.0, (3, 64, 64), np.float32))
    with pytest.raises(ValueError, match="3-dimensional"):
        ImpalaCNN(spaces.Box(0, 255, (64, 64), np.uint8))
    # already normalized float images are accepted with normalize_images=False
    assert ImpalaCNN(spaces.Box(0.0, 1.0, (3, 64, 64), np.float32), normalize_images=False).features_dim == 256


@pytest.mark.parametrize("ortho_init", [False, True])
def test_init_survives_sb3_policy_only_without_ortho_init(ortho_init):
    recorded = []

    class RecordingImpalaCNN(ImpalaCNN):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            recorded.append({name: value.clone() for name, value in self.state_dict().items()})

    policy = ActorCriticCnnPolicy(
        IMAGE_SPACE,
        spaces.Discrete(15),
        lr_schedule=lambda _: 5e-4,
        features_extractor_class=RecordingImpalaCNN,
        net_arch=[],
        ortho_init=ortho_init,
    )
    assert len(recorded) == 1  # shared features extractor
    # net_arch=[]: the heads read the 256 features directly
    assert policy.action_net.in_features == 256 and policy.value_net.in_features == 256
    assert not any(isinstance(m, nn.Linear) for m in policy.mlp_extractor.modules())

    state = policy.features_extractor.state_dict()
    same = [th.equal(state[name], value) for name, value in recorded[0].items()]
    if not ortho_init:
        assert all(same)
    else:
        # SB3 re-initializes every Linear/Conv2d of the extractor orthogonally with gain sqrt(2), biases zero
        assert not any(same[i] for i, name in enumerate(recorded[0]) if name.endswith("weight"))
        linear = policy.features_extractor.linear[0].weight.detach()  # 256 x 2048: orthogonal rows of norm sqrt(2)
        th.testing.assert_close(linear @ linear.T, 2 * th.eye(256), atol=1e-4, rtol=1e-4)


def test_ppo_with_impala_cnn(device):
    policy_kwargs = dict(features_extractor_class=ImpalaCNN, net_arch=[], ortho_init=False)
    model = PPO(
        "CnnPolicy", TinyImageEnv(), n_steps=16, batch_size=16, n_epochs=1, policy_kwargs=policy_kwargs, seed=0, device=device
    )
    extractor = model.policy.features_extractor
    assert isinstance(extractor, ImpalaCNN)
    assert model.policy.observation_space.shape == (3, 64, 64)
    for layer, scale in layers_with_scales(extractor):
        th.testing.assert_close(row_norms(layer), th.full((layer.weight.shape[0],), scale, device=layer.weight.device))
    assert layer.weight.device.type == device
    normed_init_(model.policy.action_net, 0.1)
    normed_init_(model.policy.value_net, 0.1)
    before = extractor.linear[0].weight.detach().clone()
    model.learn(32)
    assert model.num_timesteps == 32
    assert not th.equal(before, extractor.linear[0].weight)  # it trained
    action, _ = model.predict(TinyImageEnv().observation_space.sample())
    assert 0 <= int(action) < 3
