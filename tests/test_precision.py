"""The numeric format of train(): bfloat16 autocast of the forward passes and channels_last weights (off by default)."""

import pytest
import torch as th
from minibatch import policy_terms
from stable_baselines3.common.envs import FakeImageEnv
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_ewma import PPG_EWMA, PPO_EWMA
from sb3_ewma.common.decoupled.objective import DecoupledPolicyObjective
from sb3_ewma.common.precision import FLOAT32, TrainingPrecision

SMALL = dict(n_steps=16, batch_size=16, n_epochs=2, seed=0)


def image_env() -> DummyVecEnv:
    return DummyVecEnv([lambda: FakeImageEnv(screen_height=36, screen_width=36, n_channels=1, discrete=True)] * 2)


def build(algorithm, precision: TrainingPrecision, device: str, **kwargs):
    """A model built with ``precision`` (set before its networks are, as a default of the class would be)."""
    model = algorithm("CnnPolicy", image_env(), device=device, _init_setup_model=False, **SMALL, **kwargs)
    model.training_precision = precision
    model._setup_model()
    return model


def conv_weights(module: th.nn.Module) -> list[th.Tensor]:
    return [param for param in module.parameters() if param.dim() == 4]


def test_the_default_is_float32_and_contiguous():
    model = PPO_EWMA("CnnPolicy", image_env(), device="cpu", **SMALL)
    assert model.training_precision is FLOAT32 and FLOAT32.autocast_dtype is None and not FLOAT32.channels_last
    assert all(weight.is_contiguous() for weight in conv_weights(model.policy))
    with pytest.raises(ValueError, match=r"autocast_dtype must be None, torch.bfloat16 or torch.float16, got torch.float64"):
        TrainingPrecision(th.float64)


def test_channels_last_computes_the_same_gradients(device, monkeypatch):
    # float32 convolutions on CUDA (cuDNN's default is TensorFloat-32, which rounds differently in each memory format)
    monkeypatch.setattr(th.backends.cudnn, "allow_tf32", False)
    contiguous = build(PPO_EWMA, FLOAT32, device, ewma_decay=0.5)
    channels_last = build(PPO_EWMA, TrainingPrecision(channels_last=True), device, ewma_decay=0.5)
    contiguous.learn(32)  # a filled buffer (and one update)
    channels_last.policy.load_state_dict(contiguous.policy.state_dict())  # copied into the channels_last weights
    rollout_data = next(contiguous.rollout_buffer.get(16))
    gradients = []
    for model in (contiguous, channels_last):
        model.proximal.restart()
        model.policy.optimizer.zero_grad()
        policy_loss, _, values = policy_terms(model, rollout_data, DecoupledPolicyObjective(0.2))
        (policy_loss + ((values - rollout_data.returns) ** 2).mean()).backward()
        gradients.append([param.grad.clone() for param in model.policy.parameters()])
    # the same numbers, up to the order of the convolutions' floating-point sums (relative to each gradient's scale:
    # cuDNN's algorithms for the two formats sum in other orders)
    for a, b in zip(*gradients):
        th.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * a.abs().max().item())
    optimized = list(channels_last.policy.optimizer.param_groups[0]["params"])
    channels_last.learn(64)
    # the policy's and the EWMA's convolutions stay channels_last through the optimizer steps, as the same Parameters
    for module in (channels_last.policy, channels_last.proximal.network):
        assert conv_weights(module) and all(w.is_contiguous(memory_format=th.channels_last) for w in conv_weights(module))
    assert all(a is b for a, b in zip(optimized, channels_last.policy.parameters()))


def test_bfloat16_autocast_runs_the_forward_passes_in_bfloat16(device):
    model = build(PPO_EWMA, TrainingPrecision(th.bfloat16), device)
    model.learn(32)  # a filled buffer (and one update)
    rollout_data = next(model.rollout_buffer.get(16))
    objective = DecoupledPolicyObjective(0.2)
    exact = policy_terms(model, rollout_data, objective)
    with model.training_precision.forward(model.device):
        approximate = policy_terms(model, rollout_data, objective)
    assert exact[2].dtype == th.float32 and approximate[2].dtype == th.bfloat16  # the values' linear layer ran in bf16
    # bfloat16 keeps 8 bits of mantissa: the losses agree to about 1e-2
    for exact_term, approximate_term in zip(exact, approximate):
        th.testing.assert_close(approximate_term.float(), exact_term, rtol=5e-2, atol=5e-2)
    before = [param.detach().clone() for param in model.policy.parameters()]
    model.learn(32, reset_num_timesteps=False)
    after = list(model.policy.parameters())
    assert all(param.dtype == th.float32 for param in after)  # the optimizer steps float32 parameters
    assert any(not th.equal(a, b) for a, b in zip(before, after))


@pytest.mark.parametrize("algorithm", [PPO_EWMA, PPG_EWMA])
def test_the_losses_are_float32_when_the_forward_passes_run_in_bfloat16(algorithm, device):
    model = build(algorithm, TrainingPrecision(th.bfloat16), device)
    model.learn(32)
    rollout_data = next(model.rollout_buffer.get(16))
    terms = model._policy_loss_terms(rollout_data, DecoupledPolicyObjective(0.2))
    assert [term.dtype for term in terms] == [th.float32] * 4
    # the value loss as train() computes it: a float32 target against float32 values, with a backward on every device
    loss = terms.policy_loss + th.nn.functional.mse_loss(rollout_data.returns, terms.values)
    loss.backward()
    assert all(param.grad is None or param.grad.dtype == th.float32 for param in model.policy.parameters())


def test_ppg_trains_both_phases_under_autocast(device):
    model = build(PPG_EWMA, TrainingPrecision(th.bfloat16, channels_last=True), device, n_policy_iterations=2, n_aux_epochs=1)
    model.learn(2 * 2 * 16)
    assert model.n_aux_phases == 1 and model.logger.name_to_value["aux/n_updates"] > 0
    assert all(th.isfinite(param).all() for param in model.policy.parameters())


def test_set_training_precision_applies_to_a_built_model(device):
    model = PPO_EWMA("CnnPolicy", image_env(), device=device, ewma_decay=0.5, **SMALL)
    assert model.training_precision is FLOAT32
    optimized = list(model.policy.optimizer.param_groups[0]["params"])
    model.set_training_precision(TrainingPrecision(channels_last=True))
    assert model.training_precision.channels_last
    for module in (model.policy, model.proximal.network):
        assert conv_weights(module) and all(w.is_contiguous(memory_format=th.channels_last) for w in conv_weights(module))
    # the same Parameters: the optimizer keeps stepping them
    assert all(a is b for a, b in zip(optimized, model.policy.parameters()))
