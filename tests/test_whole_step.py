"""
The whole compiled training step (``sb3_ewma.common.decoupled.step.minibatch_step``): its clipping and Adam step are
torch's, and one step moves the policy, the optimizer's state and the EWMA as the eager loop's step does, within float
tolerance (PPO_EWMA categorical and Gaussian, PPG_EWMA whose auxiliary head it leaves alone, MaskablePPO_EWMA); a
non-finite gradient moves nothing; the settings it does not cover step in pieces.
"""

import copy

import pytest
import torch as th
from sb3_contrib.common.envs import InvalidActionEnvDiscrete
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_ewma import PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA
from sb3_ewma.common.checks import NonFiniteError
from sb3_ewma.common.decoupled import step as step_module
from sb3_ewma.common.decoupled.algorithm import DecoupledAlgorithm
from sb3_ewma.common.decoupled.objective import DecoupledPolicyObjective
from sb3_ewma.common.decoupled.step import AdamSettings, AdamTensors, adam_step_, clip_by_total_norm

needs_compiler = pytest.mark.skipif(
    step_module.compiler_missing(th.device("cpu")) is not None, reason="torch.compile needs a C++ compiler here"
)


def random_tensors(seed: int, shapes=((3, 4), (4,), (1,))) -> list[th.Tensor]:
    generator = th.Generator().manual_seed(seed)
    return [th.randn(shape, generator=generator) for shape in shapes]


@pytest.mark.parametrize("max_norm", [0.05, 0.5, 100.0])
def test_clipping_is_torchs_clip_grad_norm(max_norm):
    """clip_by_total_norm returns what clip_grad_norm_ leaves in .grad, and the same total norm (clipped or not)."""
    gradients = random_tensors(0)
    parameters = [th.nn.Parameter(th.zeros_like(gradient)) for gradient in gradients]
    for parameter, gradient in zip(parameters, gradients):
        parameter.grad = gradient.clone()
    expected_norm = th.nn.utils.clip_grad_norm_(parameters, max_norm)
    clipped, total_norm = clip_by_total_norm(gradients, max_norm)
    th.testing.assert_close(total_norm, expected_norm)
    for value, parameter in zip(clipped, parameters, strict=True):
        th.testing.assert_close(value, parameter.grad)
    # by hand: the norm of the concatenated gradients
    th.testing.assert_close(total_norm, th.cat([gradient.flatten() for gradient in gradients]).norm())


@pytest.mark.parametrize(
    "optimizer_class, weight_decay, implementation",
    [
        (th.optim.Adam, 0.0, {}),
        (th.optim.Adam, 0.1, {}),
        (th.optim.AdamW, 0.1, {}),
        (th.optim.Adam, 0.1, {"fused": True}),
        (th.optim.AdamW, 0.1, {"foreach": True}),
    ],
)
def test_adam_step_is_torchs_adam(optimizer_class, weight_decay, implementation):
    """Three steps of adam_step_ on the optimizer's own state tensors leave the parameters and the state as torch's
    Adam/AdamW leaves them on a copy (its single-tensor, fused and foreach steps); with apply False nothing moves."""
    parameters = [th.nn.Parameter(tensor) for tensor in random_tensors(1)]
    reference = [th.nn.Parameter(tensor.detach().clone()) for tensor in parameters]
    settings = dict(lr=3e-3, betas=(0.8, 0.99), eps=1e-5, weight_decay=weight_decay)
    optimizer = optimizer_class(parameters, **settings)
    reference_optimizer = optimizer_class(reference, **settings, **implementation)
    for parameter in parameters:
        state = optimizer.state[parameter]
        state["step"], state["exp_avg"], state["exp_avg_sq"] = th.zeros(()), th.zeros_like(parameter), th.zeros_like(parameter)
    states = [optimizer.state[parameter] for parameter in parameters]
    adam = AdamTensors(parameters, *([state[key] for state in states] for key in ("exp_avg", "exp_avg_sq", "step")))
    group = optimizer.param_groups[0]
    adam_settings = AdamSettings(th.tensor(3e-3), 0.8, 0.99, 1e-5, weight_decay, group["decoupled_weight_decay"])
    for seed in range(3):
        gradients = random_tensors(10 + seed)
        for parameter, gradient in zip(reference, gradients):
            parameter.grad = gradient.clone()
        reference_optimizer.step()
        adam_step_(adam, gradients, adam_settings, th.tensor(True))
    for parameter, expected in zip(parameters, reference, strict=True):
        th.testing.assert_close(parameter, expected, rtol=1e-6, atol=1e-7)
        for key in ("exp_avg", "exp_avg_sq", "step"):
            state, expected_state = optimizer.state[parameter][key], reference_optimizer.state[expected][key]
            th.testing.assert_close(state, expected_state, rtol=1e-6, atol=1e-8)
    before = copy.deepcopy(optimizer.state_dict()), [parameter.detach().clone() for parameter in parameters]
    adam_step_(adam, random_tensors(20), adam_settings, th.tensor(False))
    for parameter, kept in zip(parameters, before[1]):
        assert th.equal(parameter, kept)
    for index, state in before[0]["state"].items():
        for key, value in state.items():
            assert th.equal(optimizer.state[parameters[index]][key], value)


def filled(algorithm, env, **kwargs):
    """A model whose rollout buffer holds one rollout, its EWMA moved away from the policy, mid-schedule."""
    settings = dict(n_steps=32, batch_size=64, n_epochs=2, seed=0, ent_coef=0.01, clip_range_vf=0.5, compile_step=False)
    model = algorithm("MlpPolicy", env, **{**settings, **kwargs})
    model.learn(256)
    model._current_progress_remaining = 0.5
    return model


def eager_step(model, data) -> None:
    """One step of the eager train() loop on a minibatch: the loss, backward, SB3's clipping, Adam, the EWMA."""
    clip_range, clip_range_vf = model._current_clip_ranges()
    objective = DecoupledPolicyObjective(clip_range, model.kl_coef, model.kl_estimator, model.imp_samp_max)
    terms = model._minibatch_loss(data, objective, clip_range, clip_range_vf)
    model.policy.optimizer.zero_grad()
    terms.loss.backward()
    model._apply_gradients(model.policy.optimizer, None, "train")
    model.proximal.step()


def whole_step(model, data):
    clip_range, clip_range_vf = model._current_clip_ranges()
    model.compiled_step.active = model.compiled_step.whole = True
    assert model.compiled_step.steps_whole(model._step_in_pieces, clip_range, clip_range_vf) == (True, None)
    objective = DecoupledPolicyObjective(clip_range, model.kl_coef, model.kl_estimator, model.imp_samp_max)
    minibatch = model._compiled_minibatch(data, objective, clip_range_vf)
    ewma = model.proximal.ewma if model.proximal.kind == "ewma" else None
    return model.compiled_step.whole_step(minibatch, ewma, model.max_grad_norm, model._n_updates)


def state_of(model) -> tuple[list[th.Tensor], dict, list[th.Tensor], tuple[float, int]]:
    ewma = model.proximal.ewma
    return (
        [parameter.detach().clone() for parameter in model.policy.parameters()],
        copy.deepcopy(model.policy.optimizer.state_dict()["state"]),
        [parameter.detach().clone() for parameter in ewma.average.parameters()],
        (ewma.weight, ewma.n_updates),
    )


def on(device: str) -> dict:
    """On CUDA, Adam with fused=True: torch's default Adam keeps CUDA parameters' step count on the CPU, which the whole
    step leaves to the steps in pieces."""
    return dict(device=device, policy_kwargs=dict(optimizer_kwargs=dict(fused=True)) if device == "cuda" else None)


MODELS = {
    "ppo_ewma_categorical": lambda device: filled(
        PPO_EWMA, make_vec_env("CartPole-v1", n_envs=4, seed=0), kl_coef=0.1, **on(device)
    ),
    "ppo_ewma_gaussian": lambda device: filled(PPO_EWMA, make_vec_env("Pendulum-v1", n_envs=4, seed=0), **on(device)),
    "ppo_ewma_gsde": lambda device: filled(
        PPO_EWMA, make_vec_env("Pendulum-v1", n_envs=4, seed=0), use_sde=True, sde_sample_freq=4, **on(device)
    ),
    "ppg_ewma": lambda device: filled(
        PPG_EWMA, make_vec_env("CartPole-v1", n_envs=4, seed=0), n_policy_iterations=2, **on(device)
    ),
    "maskable_ppo_ewma": lambda device: filled(
        MaskablePPO_EWMA, DummyVecEnv([lambda: InvalidActionEnvDiscrete(dim=4, n_invalid_actions=1)] * 4), **on(device)
    ),
}


@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=needs_compiler)])
@pytest.mark.parametrize("kind", list(MODELS))
def test_the_whole_step_moves_what_the_eager_step_moves(kind, compiled, monkeypatch, device):
    """Two steps, compiled as one function each (or the same function run eagerly), leave the policy, the optimizer's
    state (its first step's state made as torch makes it) and the EWMA where two eager steps of the loop leave them,
    the optimizer's state reloaded between them (``load_state_dict`` makes new tensors: the second step uses them);
    parameters the loss does not reach (PPG's auxiliary head) keep their values and get no optimizer state; on each
    device."""
    model, reference = MODELS[kind](device), MODELS[kind](device)
    reference.policy.load_state_dict(model.policy.state_dict())
    reference.proximal.ewma.load_state_dict(model.proximal.ewma.state_dict())
    if not compiled:
        monkeypatch.setattr(th, "compile", lambda function, **_: function)
    for optimizer in (model.policy.optimizer, reference.policy.optimizer):
        optimizer.state.clear()  # the whole step's first step makes the state
    minibatches = list(model.rollout_buffer.get(64))[:2]
    for data in minibatches:
        eager_step(reference, data)
        terms = whole_step(model, data)
        assert terms.loss.grad_fn is None and th.isfinite(terms.loss)
        for optimizer in (model.policy.optimizer, reference.policy.optimizer):
            optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    parameters, optimizer_state, average, bookkeeping = state_of(model)
    expected_parameters, expected_state, expected_average, expected_bookkeeping = state_of(reference)
    assert bookkeeping == expected_bookkeeping
    for value, expected in zip(parameters, expected_parameters, strict=True):
        th.testing.assert_close(value, expected, rtol=1e-4, atol=1e-6)
    for value, expected in zip(average, expected_average, strict=True):
        th.testing.assert_close(value, expected, rtol=1e-4, atol=1e-6)
    assert optimizer_state.keys() == expected_state.keys()
    for index, state in optimizer_state.items():
        for key, value in state.items():
            th.testing.assert_close(value, expected_state[index][key], rtol=1e-4, atol=1e-8)
    if kind == "ppg_ewma":
        auxiliary = [name for name, _ in model.policy.named_parameters() if "aux" in name]
        assert auxiliary and len(optimizer_state) < len(list(model.policy.parameters()))


@needs_compiler
def test_a_non_finite_gradient_moves_nothing():
    """A minibatch whose returns hold a NaN: NonFiniteError, and the policy, the optimizer's state and the EWMA are
    left as they were (the eager step's promise)."""
    model = MODELS["ppo_ewma_categorical"]("cpu")
    data = next(iter(model.rollout_buffer.get(64)))
    whole_step(model, data)
    before = state_of(model)
    returns = data.returns.clone()
    returns[0] = float("nan")
    with pytest.raises(NonFiniteError, match="gradient"):
        whole_step(model, data._replace(returns=returns))
    after = state_of(model)
    assert after[3] == before[3]
    for values, expected in zip(after[0] + after[2], before[0] + before[2], strict=True):
        assert th.equal(values, expected)
    for index, state in after[1].items():
        for key, value in state.items():
            assert th.equal(value, before[1][index][key])


@needs_compiler
@pytest.mark.parametrize(
    "setting, reason",
    [
        (dict(target_kl=0.01), "target_kl is read before the optimizer step"),
        (dict(log_gradient_noise_scale=True), "the gradient noise scale reads the gradients"),
        (dict(policy_kwargs=dict(optimizer_class=th.optim.SGD)), "the optimizer is SGD, not torch's Adam or AdamW"),
        (dict(policy_kwargs=dict(optimizer_kwargs=dict(amsgrad=True))), "the Adam optimizer's amsgrad=True"),
    ],
)
def test_what_the_whole_step_does_not_cover_steps_in_pieces(setting, reason, capsys):
    """target_kl (read before the step), the gradient noise scale, another optimizer or Adam's amsgrad: compiled in
    pieces, said when learn starts; without them, as one function."""
    env = make_vec_env("CartPole-v1", n_envs=4, seed=0)
    model = PPO_EWMA("MlpPolicy", env, n_steps=32, batch_size=64, n_epochs=1, compile_step=True, verbose=1, **setting)
    model.learn(128)
    assert f"training step compiled (compile_step=True), in pieces ({reason})" in capsys.readouterr().out
    assert model.compiled_step.active and not model.compiled_step.steps_whole(model._step_in_pieces, 0.2, None)[0]
    plain = PPO_EWMA("MlpPolicy", env, n_steps=32, batch_size=64, n_epochs=1, compile_step=True, verbose=1)
    plain.learn(128)
    assert "training step compiled (compile_step=True), as one function" in capsys.readouterr().out
    assert plain.compiled_step.steps_whole(plain._step_in_pieces, 0.2, None) == (True, None)


def test_a_frozen_parameter_or_an_overridden_step_keeps_the_step_in_pieces():
    """A policy parameter frozen after the optimizer was built (the optimizer's group is no longer the trainable
    parameters, whose norm SB3 clips), or a subclass that overrides a step the whole function replaces."""
    model = PPO_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=2, seed=0), n_steps=16, batch_size=32)
    assert model._step_in_pieces() is None
    model.policy.action_net.weight.requires_grad_(False)
    assert model._step_in_pieces() == "the Adam optimizer's parameters are not the policy's trainable parameters"

    class ClippedOtherwise(PPO_EWMA):
        def _apply_gradients(self, optimizer, gradient_noise, log_prefix):
            super()._apply_gradients(optimizer, gradient_noise, log_prefix)

    other = ClippedOtherwise("MlpPolicy", make_vec_env("CartPole-v1", n_envs=2, seed=0), n_steps=16, batch_size=32)
    assert other._step_in_pieces() == "ClippedOtherwise overrides _apply_gradients, which the whole step does not call"

    # the same class saying how the compiled step evaluates its policy, or a mixin placed after the algorithm
    class OwnLoss(PPO_EWMA):
        _compiled_evaluation = "observations"

        def _minibatch_loss(self, rollout_data, policy_objective, clip_range, clip_range_vf):
            return super()._minibatch_loss(rollout_data, policy_objective, clip_range, clip_range_vf)

    own = OwnLoss("MlpPolicy", make_vec_env("CartPole-v1", n_envs=2, seed=0), n_steps=16, batch_size=32)
    assert own._step_in_pieces() == "OwnLoss overrides _minibatch_loss, which the whole step does not call"

    class GradientsMixin(DecoupledAlgorithm):
        def _apply_gradients(self, optimizer, gradient_noise, log_prefix):
            super()._apply_gradients(optimizer, gradient_noise, log_prefix)

    class MaskedMixedIn(MaskablePPO_EWMA, GradientsMixin):
        pass

    masked = MaskedMixedIn("MlpPolicy", InvalidActionEnvDiscrete(dim=4, n_invalid_actions=1), n_steps=16, batch_size=16)
    assert masked._step_in_pieces() == "GradientsMixin overrides _apply_gradients, which the whole step does not call"


@needs_compiler
def test_an_iteration_stepped_whole_trains_as_the_eager_loop(capsys):
    """Two learn calls of two iterations each (a scheduled learning rate and clip range, the EWMA, value clipping): the
    whole step's model ends where the eager loop's does within float tolerance, with the same train/ logs."""
    models = []
    for compile_step in (False, True):
        model = PPO_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=4, seed=3), n_steps=32, batch_size=64, n_epochs=2,
                         learning_rate=lambda progress: 1e-3 * progress, clip_range=lambda progress: 0.2 * progress,
                         clip_range_vf=0.5, ent_coef=0.01, seed=3, compile_step=compile_step, verbose=1)  # fmt: skip
        for _ in range(2):
            model.learn(256, reset_num_timesteps=False)
        models.append(model)
    eager, whole = models
    assert "as one function" in capsys.readouterr().out and whole.compiled_step._whole_plans
    for value, expected in zip(whole.policy.parameters(), eager.policy.parameters(), strict=True):
        th.testing.assert_close(value, expected, rtol=1e-3, atol=1e-5)
    for value, expected in zip(whole.proximal.ewma.average.parameters(), eager.proximal.ewma.average.parameters()):
        th.testing.assert_close(value, expected, rtol=1e-3, atol=1e-5)
    logged, expected_logs = whole.logger.name_to_value, eager.logger.name_to_value
    train_keys = {key for key in expected_logs if key.startswith("train/")}
    assert train_keys == {key for key in logged if key.startswith("train/")} and "train/loss" in train_keys
    for key in train_keys:
        assert logged[key] == pytest.approx(expected_logs[key], rel=1e-3, abs=1e-5), key


@needs_compiler
def test_a_whole_step_that_does_not_compile_steps_in_pieces(monkeypatch):
    """The whole function fails to compile: one warning, and the training steps go on compiled in pieces (the loss and
    the optimizer's step still compile), not eagerly."""
    compile_function = th.compile

    def failing(*args, **kwargs):
        raise RuntimeError("no graph for this one")

    def compile_or_fail(function, **kwargs):
        return failing if function.__name__ == "minibatch_step" else compile_function(function, **kwargs)

    monkeypatch.setattr(th, "compile", compile_or_fail)
    model = PPO_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=2, seed=0), n_steps=16, batch_size=16, n_epochs=2,
                     compile_step=True)  # fmt: skip
    with pytest.warns(UserWarning, match="training step compiled in pieces .compilation failed: RuntimeError") as caught:
        model.learn(64)
    assert len([warning for warning in caught if "in pieces" in str(warning.message)]) == 1
    assert model.compiled_step.active and model.compiled_step.verified and not model.compiled_step.whole


class _ChangeAtSecondRollout(BaseCallback):
    """A callback that changes the model between the first and the second iteration (before the second train())."""

    def __init__(self, change):
        super().__init__()
        self.change, self.rollouts = change, 0

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        self.rollouts += 1
        if self.rollouts == 2:
            self.change(self.model)


def _heads(policy) -> list[th.nn.Parameter]:
    return [*policy.action_net.parameters(), *policy.value_net.parameters()]


MIDWAY_CHANGES = {
    "another optimizer class": lambda model: setattr(
        model.policy, "optimizer", th.optim.SGD(model.policy.parameters(), lr=1e-3)
    ),
    "amsgrad": lambda model: setattr(model.policy, "optimizer", th.optim.Adam(model.policy.parameters(), amsgrad=True)),
    "an optimizer of the heads only": lambda model: setattr(model.policy, "optimizer", th.optim.Adam(_heads(model.policy))),
    "a frozen parameter": lambda model: model.policy.action_net.weight.requires_grad_(False),
}


@needs_compiler
@pytest.mark.parametrize("change", list(MIDWAY_CHANGES))
def test_a_callback_that_changes_the_optimizer_or_freezes_a_parameter_midway_steps_in_pieces(change, capsys, tmp_path):
    """What a callback changes between two iterations of one learn call (the optimizer replaced, a parameter frozen):
    the rest of the call steps in pieces, said in one line, and ends where the eager loop does; what the new optimizer
    leaves out does not move; the model saves."""
    models, midway = [], {}
    for compile_step in (False, True):  # each model built and trained in turn (SB3 seeds the global generators)
        model = PPO_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=4, seed=3), n_steps=32, batch_size=64, n_epochs=2,
                         seed=3, compile_step=compile_step, verbose=1)  # fmt: skip

        def change_and_remember(model, compile_step=compile_step):
            MIDWAY_CHANGES[change](model)
            midway[compile_step] = [parameter.detach().clone() for parameter in model.policy.mlp_extractor.parameters()]

        model.learn(4 * 128, callback=_ChangeAtSecondRollout(change_and_remember))
        models.append(model)
    eager, compiled = models
    assert "as one function" in capsys.readouterr().out  # then in pieces from the second iteration on
    assert not compiled.compiled_step.whole
    for value, expected in zip(compiled.policy.parameters(), eager.policy.parameters(), strict=True):
        th.testing.assert_close(value, expected, rtol=1e-3, atol=1e-4)  # four iterations of float noise
    if change == "an optimizer of the heads only":
        for model, compile_step in ((eager, False), (compiled, True)):
            assert all(th.equal(a, b) for a, b in zip(model.policy.mlp_extractor.parameters(), midway[compile_step]))
    compiled.save(tmp_path / "model.zip")
