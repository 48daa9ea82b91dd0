"""The authors' choices as options: minibatches of whole rollouts, Adam epsilon, normed head initialization."""

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.env_util import make_vec_env

from sb3_ewma import PPG, PPG_EWMA, PPO_EWMA
from sb3_ewma.common.minibatches import rollout_minibatches
from sb3_ewma.ppg_ewma.buffers import AuxiliaryBuffer

N_STEPS, N_ENVS = 8, 6


def marked_buffer(sample: bool = False) -> RolloutBuffer:
    """A full rollout buffer whose observation at (step, env) is 100 * env + step."""
    buffer = RolloutBuffer(N_STEPS, spaces.Box(-1e6, 1e6, (1,)), spaces.Discrete(2), device="cpu", n_envs=N_ENVS)
    for step in range(N_STEPS):
        obs = (100.0 * np.arange(N_ENVS) + step)[:, None]
        buffer.add(obs, np.zeros((N_ENVS, 1)), np.full(N_ENVS, step), np.zeros(N_ENVS), th.zeros(N_ENVS), th.zeros(N_ENVS))
    buffer.returns[...] = buffer.observations[..., 0]  # the marker again, as the value target
    if sample:
        list(buffer.get(N_STEPS))  # flattened, as after a policy phase
    return buffer


def as_rollouts(markers: np.ndarray, length: int) -> list[tuple[int, list[int]]]:
    """(environment, steps) of each consecutive piece of ``length`` markers."""
    pieces = markers.reshape(-1, length)
    return [(int(piece[0] // 100), [int(m % 100) for m in piece]) for piece in pieces]


@pytest.mark.parametrize("envs_per_minibatch", [1, 2, 3])
def test_policy_minibatches_of_whole_rollouts(envs_per_minibatch):
    def epoch(seed: int) -> list[np.ndarray]:
        np.random.seed(seed)
        return [data.observations[:, 0].numpy() for data in rollout_minibatches(marked_buffer(), envs_per_minibatch * N_STEPS)]

    minibatches = epoch(0)
    assert len(minibatches) == N_ENVS // envs_per_minibatch
    # the order is drawn from numpy's global generator, as SB3's sampling is: reproducible under a seed, and random
    np.testing.assert_array_equal(np.concatenate(epoch(0)), np.concatenate(minibatches))
    assert len({tuple(int(m[0]) // 100 for m in epoch(seed)) for seed in range(10)}) > 1
    seen = []
    for minibatch in minibatches:
        rollouts = as_rollouts(minibatch, N_STEPS)
        assert len(rollouts) == envs_per_minibatch
        for env, steps in rollouts:
            assert steps == list(range(N_STEPS))  # a whole rollout, in time order
            seen.append(env)
    assert sorted(seen) == list(range(N_ENVS))  # each environment's rollout once


def test_policy_minibatches_smaller_than_a_rollout_are_contiguous_pieces():
    pieces = [data.observations[:, 0].numpy() for data in rollout_minibatches(marked_buffer(), N_STEPS // 2)]
    assert len(pieces) == 2 * N_ENVS
    for first, second in zip(pieces[::2], pieces[1::2]):
        assert as_rollouts(np.concatenate([first, second]), N_STEPS)[0][1] == list(range(N_STEPS))


@pytest.mark.parametrize("sampled", [False, True])
def test_aux_minibatches_of_whole_rollouts(sampled):
    aux = AuxiliaryBuffer(2, N_STEPS, N_ENVS, spaces.Box(-1e6, 1e6, (1,)), device="cpu")
    for iteration in range(2):
        buffer = marked_buffer(sample=sampled)
        buffer.returns += 10_000 * iteration
        aux.add(buffer)
    # observations and targets stay aligned
    np.testing.assert_array_equal(
        aux.observations(np.arange(aux.size))[:, 0].numpy() + 10_000 * (np.arange(aux.size) >= 48),
        aux.value_targets(np.arange(aux.size)).numpy(),
    )
    segments = set()
    for indices in aux.minibatch_indices(4 * N_STEPS, rollout_length=N_STEPS):
        targets = aux.value_targets(indices).numpy()
        for piece in targets.reshape(-1, N_STEPS):
            assert list(piece % 100) == list(range(N_STEPS)) and len(set(piece // 100)) == 1
            segments.add(int(piece[0] // 100))
    assert len(segments) == 2 * N_ENVS


def test_rollout_sampling_trains_and_checks_its_batch_size():
    PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=8, minibatch_sampling="rollouts", device="cpu").learn(64)
    model = PPG_EWMA(
        "MlpPolicy",
        make_vec_env("CartPole-v1", n_envs=4),
        n_steps=16,
        batch_size=32,
        n_policy_iterations=2,
        aux_batch_size=32,
        minibatch_sampling="rollouts",
        aux_minibatch_sampling="rollouts",
        device="cpu",
    )
    model.learn(2 * 64)
    assert model.n_aux_phases == 1
    with pytest.raises(ValueError, match=r"minibatch_sampling='rollouts'.*batch_size must be a multiple or a divisor"):
        PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=24, minibatch_sampling="rollouts")
    with pytest.raises(ValueError, match=r"aux_minibatch_sampling='rollouts'.*aux_batch_size"):
        PPG_EWMA("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, aux_batch_size=24, aux_minibatch_sampling="rollouts")
    with pytest.raises(ValueError, match=r"minibatch_sampling must be one of \('steps', 'rollouts'\)"):
        PPO_EWMA("MlpPolicy", "CartPole-v1", minibatch_sampling="envs")


def row_norms(layer):
    return layer.weight.detach().norm(dim=1)


@pytest.mark.parametrize("cls", [PPO_EWMA, PPG_EWMA])
def test_head_init_scale(tmp_path, cls):
    model = cls("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=16, policy_kwargs=dict(head_init_scale=0.1), device="cpu")
    heads = [model.policy.action_net, model.policy.value_net]
    if cls is PPG_EWMA:
        heads.append(model.policy.aux_value_net)
    for head in heads:
        th.testing.assert_close(row_norms(head), th.full((head.out_features,), 0.1))
        assert not head.bias.any()
    # the proximal copy starts from the same weights, and the keyword is saved with the policy
    th.testing.assert_close(model.proximal_ewma.average.action_net.weight, model.policy.action_net.weight)
    model.save(tmp_path / "model.zip")
    loaded = cls.load(tmp_path / "model.zip", device="cpu")
    assert loaded.policy.head_init_scale == 0.1
    with pytest.raises(ValueError, match="head_init_scale must be None or a finite number > 0"):
        cls("MlpPolicy", "CartPole-v1", policy_kwargs=dict(head_init_scale=0.0))


def test_without_head_init_scale_the_policy_is_sb3s():
    ppo = PPO("MlpPolicy", "CartPole-v1", seed=3, device="cpu")
    ewma = PPO_EWMA("MlpPolicy", "CartPole-v1", seed=3, device="cpu")
    np.testing.assert_array_equal(ppo.policy.parameters_to_vector(), ewma.policy.parameters_to_vector())
    assert ewma.policy.head_init_scale is None


@pytest.mark.parametrize("cls", [PPG_EWMA, PPG])
def test_adam_epsilon_of_both_optimizers(cls):
    sb3 = cls("MlpPolicy", "CartPole-v1", device="cpu")
    assert sb3.policy.optimizer.defaults["eps"] == sb3.aux_optimizer.defaults["eps"] == 1e-5  # SB3's default, copied
    authors = cls("MlpPolicy", "CartPole-v1", policy_kwargs=dict(optimizer_kwargs=dict(eps=1e-8)), device="cpu")
    assert authors.policy.optimizer.defaults["eps"] == authors.aux_optimizer.defaults["eps"] == 1e-8
    own = cls("MlpPolicy", "CartPole-v1", aux_optimizer_kwargs=dict(eps=1e-7, betas=(0.5, 0.9)), device="cpu")
    assert own.policy.optimizer.defaults["eps"] == 1e-5
    assert own.aux_optimizer.defaults["eps"] == 1e-7 and own.aux_optimizer.defaults["betas"] == (0.5, 0.9)
    with pytest.raises(ValueError, match="aux_optimizer_kwargs must be None or a dict"):
        cls("MlpPolicy", "CartPole-v1", aux_optimizer_kwargs="eps=1e-8")
