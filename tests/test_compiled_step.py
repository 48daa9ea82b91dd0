"""
The compiled training step (``compile_step``, sb3_ewma.common.decoupled.step): the same losses and gradients as the
eager step within float tolerance, a bounded number of compilations, the fallbacks, and models that save, load, copy
and pickle as eager ones do.
"""

import copy
import io
import math
import pickle
import warnings
import zipfile

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from learning_cases import maskable_invalid_actions
from sb3_contrib.common.envs import InvalidActionEnvDiscrete, InvalidActionEnvMultiDiscrete
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.envs import FakeImageEnv
from stable_baselines3.common.preprocessing import preprocess_obs
from stable_baselines3.common.vec_env import DummyVecEnv
from torch._dynamo.utils import counters

from sb3_ewma import PPG, PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA
from sb3_ewma.common.decoupled import step as step_module
from sb3_ewma.common.decoupled.algorithm import DecoupledAlgorithm
from sb3_ewma.common.decoupled.objective import DecoupledPolicyObjective
from sb3_ewma.common.decoupled.step import (
    AUTO_MIN_ACTING_STEPS,
    AUTO_MIN_OPTIMIZER_STEPS,
    CompiledStep,
    LossSettings,
    LossTargets,
    minibatch_loss,
    overridden_step,
)
from sb3_ewma.common.distributions import (
    masked_action_dims,
    observation_plan,
    observation_space_plan,
    preprocessed_observations,
)
from sb3_ewma.common.losses import clipped_values, log_clip_bounds
from sb3_ewma.ppg_ewma.auxiliary import auxiliary_losses, lean_auxiliary_losses

needs_compiler = pytest.mark.skipif(
    step_module.compiler_missing(th.device("cpu")) is not None, reason="torch.compile needs a C++ compiler here"
)


def filled_model(env_id: str = "CartPole-v1", **kwargs) -> PPO_EWMA:
    """A PPO_EWMA whose rollout buffer holds one rollout, its EWMA moved away from the policy, mid-schedule."""
    settings = dict(n_steps=32, batch_size=64, n_epochs=2, seed=0, ent_coef=0.01, clip_range_vf=0.5, compile_step=False)
    model = PPO_EWMA("MlpPolicy", make_vec_env(env_id, n_envs=4, seed=0), **{**settings, **kwargs})
    model.learn(256)
    model._current_progress_remaining = 0.5
    return model


def eager_terms(model: PPO_EWMA, data) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
    """The eager train()'s loss of a minibatch, as its loop computes it: loss, policy, value and entropy losses."""
    clip_range, clip_range_vf = model._current_clip_ranges()
    objective = DecoupledPolicyObjective(clip_range, model.kl_coef, model.kl_estimator, model.imp_samp_max)
    values, policy_loss, entropy_loss, _ = model._policy_loss_terms(data, objective)
    value_loss = th.nn.functional.mse_loss(data.returns, clipped_values(values, data.old_values, clip_range_vf))
    return policy_loss + model.ent_coef * entropy_loss + model.vf_coef * value_loss, policy_loss, value_loss, entropy_loss


def function_terms(model: PPO_EWMA, data, function=minibatch_loss, **options):
    """:func:`minibatch_loss` (or a compiled copy) on the same minibatch."""
    clip_range, clip_range_vf = model._current_clip_ranges()
    low, high = log_clip_bounds(clip_range)
    actions = data.actions.long().flatten() if model.action_space.shape == () else data.actions
    return function(
        model.policy,
        model.proximal.network,
        data.observations,
        actions,
        LossTargets(model.advantage_normalizer.minibatch(data.advantages), data.old_log_prob, data.old_values, data.returns),
        LossSettings(
            th.tensor(low),
            th.tensor(high),
            th.tensor(clip_range_vf),
            model.ent_coef,
            model.vf_coef,
            model.kl_coef,
            model.imp_samp_max,
        ),
        observation_plan=observation_plan(model.policy),
        **options,
    )


def gradients(model: PPO_EWMA, loss: th.Tensor) -> list[th.Tensor]:
    model.policy.optimizer.zero_grad()
    loss.backward()
    return [parameter.grad.clone() for parameter in model.policy.parameters() if parameter.grad is not None]


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_the_step_function_is_the_eager_loss(env_id):
    """Uncompiled, minibatch_loss computes the eager train()'s loss (categorical and Gaussian, EWMA and value clip)."""
    model = filled_model(env_id, kl_coef=0.1)
    data = next(iter(model.rollout_buffer.get(64)))
    expected = eager_terms(model, data)
    expected_gradients = gradients(model, expected[0])
    terms = function_terms(model, data)
    assert terms.kl_penalty is not None
    policy_term = terms.policy_loss + model.kl_coef * terms.kl_penalty  # the eager objective returns it with the penalty
    for value, reference in zip((terms.loss, policy_term, terms.value_loss, terms.entropy_loss), expected):
        th.testing.assert_close(value, reference, rtol=1e-6, atol=1e-7)
    for gradient, reference in zip(gradients(model, terms.loss), expected_gradients):
        th.testing.assert_close(gradient, reference, rtol=1e-5, atol=1e-7)


@needs_compiler
@pytest.mark.parametrize("env_id, kwargs", [("CartPole-v1", {}), ("Pendulum-v1", {}), ("Pendulum-v1", {"use_sde": True})])
def test_compiled_gradients_agree_with_eager(env_id, kwargs):
    """Compiled by torch.compile, the same minibatch's loss and gradients agree with the eager ones within 1e-5
    (categorical, diagonal Gaussian, and gSDE; the eager lean evaluation is SB3's bit for bit, test_lean_evaluation)."""
    model = filled_model(env_id, **kwargs)
    data = next(iter(model.rollout_buffer.get(64)))
    expected = eager_terms(model, data)[0]
    expected_gradients = gradients(model, expected)
    compiled = th.compile(minibatch_loss, dynamic=False, fullgraph=True)
    terms = function_terms(model, data, compiled)
    th.testing.assert_close(terms.loss, expected, rtol=1e-5, atol=1e-6)
    for gradient, reference in zip(gradients(model, terms.loss), expected_gradients, strict=True):
        th.testing.assert_close(gradient, reference, rtol=1e-4, atol=1e-6)


def filled_maskable_model(env, **kwargs) -> MaskablePPO_EWMA:
    """A MaskablePPO_EWMA whose rollout buffer holds one rollout with invalid actions, its EWMA moved away."""
    settings = dict(n_steps=32, batch_size=64, n_epochs=2, seed=0, ent_coef=0.01, clip_range_vf=0.5, compile_step=False)
    model = MaskablePPO_EWMA("MlpPolicy", env, **{**settings, **kwargs})
    model.learn(256)
    model._current_progress_remaining = 0.5
    return model


@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=needs_compiler)])
@pytest.mark.parametrize("env_class", [InvalidActionEnvDiscrete, InvalidActionEnvMultiDiscrete])
def test_the_masked_step_is_the_eager_maskable_loss(env_class, compiled):
    """
    MaskablePPO_EWMA: minibatch_loss with the buffer's action masks computes the eager train()'s loss and gradients
    (sb3-contrib's masked evaluation), uncompiled within float rounding, compiled within 1e-5.
    """
    dims = (
        {"dim": 12, "n_invalid_actions": 6}
        if env_class is InvalidActionEnvDiscrete
        else {"dims": [4, 5], "n_invalid_actions": 4}
    )
    env = DummyVecEnv([lambda: env_class(ep_length=20, **dims) for _ in range(4)])
    model = filled_maskable_model(env, kl_coef=0.1)
    data = next(iter(model.rollout_buffer.get(64)))
    assert (data.action_masks == 0).any()
    expected = eager_terms(model, data)[0]
    expected_gradients = gradients(model, expected)
    function = th.compile(minibatch_loss, dynamic=False, fullgraph=True) if compiled else minibatch_loss
    action_dims = masked_action_dims(model.policy)
    loss = function_terms(model, data, function, action_masks=data.action_masks, action_dims=action_dims).loss
    tolerance = dict(rtol=1e-5, atol=1e-6) if compiled else dict(rtol=1e-6, atol=1e-7)
    th.testing.assert_close(loss, expected, **tolerance)
    for gradient, reference in zip(gradients(model, loss), expected_gradients, strict=True):
        th.testing.assert_close(gradient, reference, rtol=1e-4 if compiled else 1e-5, atol=tolerance["atol"])


@needs_compiler
@pytest.mark.slow
def test_compiled_maskable_learns_and_never_takes_an_invalid_action():
    """The maskable learning case, compiled, on two seeds: as the eager step (after 66-92 over 10 seeds, no invalid
    action)."""
    for seed in (0, 1):
        outcome = maskable_invalid_actions(seed, compile_step=True)
        assert outcome["after"] > 45, outcome
        assert outcome["invalid_actions"] == 0


IMAGE = spaces.Box(0, 255, (3, 8, 8), np.uint8)


@pytest.mark.parametrize(
    "space, normalize_images",
    [
        (IMAGE, True),  # divided by 255
        (IMAGE, False),
        (spaces.Box(0, 1, (3, 8, 8), np.float32), True),  # not an image for SB3 (float): not divided
        (spaces.Box(0, 1, (3, 8, 8), np.uint8), True),  # not an image for SB3 (bounds): not divided
        (spaces.Box(-1, 1, (5,)), True),
        (spaces.Discrete(6), True),
        (spaces.MultiDiscrete([3, 2, 4]), True),
        (spaces.MultiBinary(4), True),
        (spaces.Dict({"image": IMAGE, "state": spaces.Discrete(3)}), True),
    ],
)
def test_the_observation_plan_preprocesses_as_sb3(space, normalize_images):
    """SB3's preprocess_obs, bit for bit, with its decisions on the space taken before (as the compiled step does)."""
    space.seed(0)
    samples = [space.sample() for _ in range(7)]
    if isinstance(space, spaces.Dict):
        obs = {key: th.as_tensor(np.stack([sample[key] for sample in samples])) for key in space.spaces}
    else:
        obs = th.as_tensor(np.stack(samples))
    expected = preprocess_obs(obs, space, normalize_images=normalize_images)
    actual = preprocessed_observations(obs, observation_space_plan(space, normalize_images))
    for key in expected if isinstance(expected, dict) else [None]:
        value, reference = (actual[key], expected[key]) if key is not None else (actual, expected)
        assert value.dtype == reference.dtype and th.equal(value, reference)


@needs_compiler
def test_image_and_discrete_observations_compile_whole(device):
    """SB3's CNN policy on images, and discrete observations: the step compiles as one graph (no fallback) and
    trains, on each device."""
    for env, policy in [
        (FakeImageEnv(screen_height=36, screen_width=36, n_channels=1, discrete=True), "CnnPolicy"),
        (InvalidActionEnvDiscrete(dim=4, n_invalid_actions=1), "MlpPolicy"),
    ]:
        algorithm = MaskablePPO_EWMA if policy == "MlpPolicy" else PPO_EWMA
        policy_kwargs = dict(features_extractor_kwargs=dict(features_dim=16)) if policy == "CnnPolicy" else None
        model = algorithm(policy, DummyVecEnv([lambda env=env: env]), n_steps=16, batch_size=16, n_epochs=1, seed=0,
                          compile_step=True, policy_kwargs=policy_kwargs, device=device)  # fmt: skip
        before = [parameter.detach().clone() for parameter in model.policy.parameters()]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.learn(32)
        assert not [warning for warning in caught if "compilation failed" in str(warning.message)], policy
        assert model.compiled_step.active and model.compiled_step.verified
        assert any(not th.equal(a, b) for a, b in zip(before, model.policy.parameters()))


def squared_norm(tensor: th.Tensor) -> th.Tensor:
    return (tensor * tensor).sum()


@needs_compiler
def test_many_models_of_other_shapes_keep_compiling():
    """Each model's compiled functions hold their own graphs: nine models of nine shapes (torch keeps at most 8 graphs
    per function) all run compiled, none falls back."""
    for size in range(1, 10):
        step = CompiledStep(True)
        step.start_learn(1, None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = step.run(squared_norm, th.arange(size, dtype=th.float32))
        assert not [warning for warning in caught if "compilation failed" in str(warning.message)]
        assert step.verified and step.failure is None and step.active
        assert value.item() == sum(index * index for index in range(size))


def test_a_later_compilation_that_fails_falls_back(monkeypatch):
    """A compiled function whose compilation fails at a later call (another shape, torch's recompile limit): one
    warning, the eager result, eager from then on. An error of the computation itself (out of memory) propagates."""
    errors = [None, RuntimeError("out of memory"), th._dynamo.exc.FailOnRecompileLimitHit("recompile limit")]

    def compile_failing_later(function, **kwargs):
        def compiled(*args, **kwargs):
            error = errors.pop(0)
            if error is not None:
                raise error
            return function(*args, **kwargs)

        return compiled

    monkeypatch.setattr(step_module.th, "compile", compile_failing_later)
    step = CompiledStep(True)
    step.start_learn(1, None)
    assert step.run(squared_norm, th.ones(3)).item() == 3
    with pytest.raises(RuntimeError, match="out of memory"):
        step.run(squared_norm, th.ones(3))
    assert step.active
    with pytest.warns(UserWarning, match="compilation failed: FailOnRecompileLimitHit: recompile limit"):
        assert step.run(squared_norm, th.ones(4)).item() == 4
    assert not step.active and "recompile limit" in step.start_learn(10**9, None)


def test_a_first_call_whose_computation_fails_is_no_compilation_failure(monkeypatch):
    """
    At a function's first call any error may be a compilation's: the eager function tells. An error it raises too (a
    NaN that torch's multinomial refuses) propagates, without a warning, and the step stays compiled (the next call
    compiles again); an error of the compiled function alone is a failed compilation (one warning, eager from then on).
    """

    def sampled(probabilities: th.Tensor) -> th.Tensor:
        if th.isnan(probabilities).any():
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        return probabilities.sum()

    broken = [False]

    def compile_as_is(function, **kwargs):
        def compiled(*args, **kwargs):
            if broken[0]:
                raise RuntimeError("a lowering that does not work")
            return function(*args, **kwargs)

        return compiled

    monkeypatch.setattr(step_module.th, "compile", compile_as_is)
    step = CompiledStep(True)
    step.start_learn(1, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "compilation failed" warning
        with pytest.raises(RuntimeError, match="probability tensor contains"):
            step.run(sampled, th.tensor([0.5, math.nan]))
    assert step.active and step.failure is None
    assert step.run(sampled, th.tensor([0.5, 0.5])).item() == 1 and step.verified
    other = CompiledStep(True)
    other.start_learn(1, None)
    broken[0] = True
    with pytest.warns(UserWarning, match="compilation failed: RuntimeError: a lowering that does not work"):
        assert other.run(sampled, th.tensor([0.5, 0.5])).item() == 1
    assert not other.active and other.failure is not None


def test_compile_step_is_read_at_each_learn_and_a_failure_warns_again(capsys):
    """model.compile_step set between learn calls takes effect; with compile_step=True, a model whose compilation
    failed says so with a warning at each learn call, not only at the first."""
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, compile_step=True, verbose=1)
    model.compile_step = False
    model._start_compiled_step(64)
    assert model.compiled_step.setting is False and not model.compiled_step.active
    assert "training step eager (compile_step=False)" in capsys.readouterr().out
    model.compile_step = True
    model.compiled_step.failure = "compilation failed: RuntimeError: a lowering that does not work"
    with pytest.warns(UserWarning, match="training step eager \\(compilation failed: RuntimeError: a lowering"):
        model._start_compiled_step(64)


def test_a_squashed_policy_is_named_for_its_squashing():
    model = PPO_EWMA("MlpPolicy", "Pendulum-v1", use_sde=True, policy_kwargs=dict(squash_output=True), compile_step=True)
    with pytest.warns(UserWarning, match="squashes its actions \\(squash_output=True\\)"):
        model._start_compiled_step(64)


@needs_compiler
def test_with_async_rollouts_the_acting_step_stays_eager(capsys):
    """The collector's copy of the policy acts, eagerly: the line says so, and the first rollout is not compiled for."""
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, compile_step=True, async_rollouts=True, verbose=1)
    model._start_compiled_step(10**9)
    assert model.compiled_step.active and not model.compiled_step.acting_active
    assert "acting step eager (a collector's copy of the policy acts, eagerly)" in capsys.readouterr().out


class _OwnEvaluation(MaskablePPO_EWMA):
    def _evaluate_policy(self, rollout_data, actions):
        return super()._evaluate_policy(rollout_data, actions)


class _EvaluationMixin:
    def _evaluate_policy(self, rollout_data, actions):
        return super()._evaluate_policy(rollout_data, actions)  # type: ignore[misc]


class _MixedInEvaluation(_EvaluationMixin, PPO_EWMA):
    pass


def test_a_subclass_that_evaluates_its_own_way_steps_eagerly():
    """A subclass's _evaluate_policy, or a mixin's placed first, is not what the compiled step computes: eager."""
    model = _OwnEvaluation("MlpPolicy", DummyVecEnv([lambda: InvalidActionEnvDiscrete(dim=4, n_invalid_actions=1)]),
                           n_steps=16, batch_size=16, compile_step=True)  # fmt: skip
    with pytest.warns(UserWarning, match="_OwnEvaluation overrides _evaluate_policy"):
        model.learn(16)
    assert not model.compiled_step.active
    mixed = _MixedInEvaluation("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, compile_step=True)
    with pytest.warns(UserWarning, match="_EvaluationMixin overrides _evaluate_policy"):
        mixed.learn(16)
    assert not mixed.compiled_step.active
    assert overridden_step(PPO_EWMA, ("_evaluate_policy",), DecoupledAlgorithm) is None
    assert overridden_step(MaskablePPO_EWMA, ("_evaluate_policy",), MaskablePPO_EWMA) is None
    assert (
        overridden_step(_OwnEvaluation, ("_evaluate_policy",), MaskablePPO_EWMA) == "_OwnEvaluation overrides _evaluate_policy"
    )


def filled_recurrent_model(env_id: str, layout: dict) -> RecurrentPPO_EWMA:
    """A RecurrentPPO_EWMA whose last rollout holds episode starts (Pendulum's at step 200), its EWMA moved away."""
    settings = dict(n_steps=64, batch_size=64, n_epochs=2, seed=0, ent_coef=0.01, clip_range_vf=0.5, kl_coef=0.1)
    policy_kwargs = dict(lstm_hidden_size=16, net_arch=[16], **layout)
    model = RecurrentPPO_EWMA("MlpLstmPolicy", make_vec_env(env_id, n_envs=4, seed=0), compile_step=False,
                              policy_kwargs=policy_kwargs, **settings)  # fmt: skip
    model.learn(1024)
    model._current_progress_remaining = 0.5
    return model


def recurrent_step_terms(model: RecurrentPPO_EWMA, data, compiled: bool, monkeypatch) -> th.Tensor:
    """The compiled step's loss of a minibatch as train() gets it (the model's compiled minibatch, with its LSTMs'
    outputs, through CompiledStep.minibatch_terms), its function compiled or run eagerly."""
    if not compiled:
        monkeypatch.setattr(CompiledStep, "_call", lambda self, function, args, kwargs, *_: (function(*args, **kwargs), True))
    clip_range, clip_range_vf = model._current_clip_ranges()
    objective = DecoupledPolicyObjective(clip_range, model.kl_coef, model.kl_estimator, model.imp_samp_max)
    minibatch = model._compiled_minibatch(data, objective, clip_range_vf)
    assert minibatch.lstm_outputs is not None and (model.proximal.network is None) == (minibatch.lstm_outputs[2] is None)
    return model.compiled_step.minibatch_terms(minibatch).loss


@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=needs_compiler)])
@pytest.mark.parametrize(
    "env_id, layout",
    [
        ("CartPole-v1", {}),  # an LSTM for the critic
        ("CartPole-v1", {"enable_critic_lstm": False}),  # the critic's linear layer
        ("CartPole-v1", {"enable_critic_lstm": False, "shared_lstm": True}),
        ("Pendulum-v1", {}),
    ],
)
def test_the_recurrent_step_is_the_eager_recurrent_loss(env_id, layout, compiled, monkeypatch):
    """
    RecurrentPPO_EWMA: the LSTMs called once a minibatch, their initial states reset at the sequences' episode starts,
    then recurrent_minibatch_loss (the policy's and the proximal network's outputs), compute the eager train()'s loss
    and gradients (sb3-contrib's step-by-step evaluation, which resets the states inside its loop), uncompiled within
    float rounding, compiled within 1e-5.
    """
    model = filled_recurrent_model(env_id, layout)
    data = next(iter(model.rollout_buffer.get(64)))
    n_sequences = data.lstm_states.pi[0].shape[1]
    first_steps = data.episode_starts.reshape(n_sequences, -1)[:, 0]
    assert first_steps.any() and not first_steps.all()  # some sequences start episodes, some continue them
    expected = eager_terms(model, data)[0]
    expected_gradients = gradients(model, expected)
    loss = recurrent_step_terms(model, data, compiled, monkeypatch)
    tolerance = dict(rtol=1e-5, atol=1e-6) if compiled else dict(rtol=1e-6, atol=1e-7)
    th.testing.assert_close(loss, expected, **tolerance)
    for gradient, reference in zip(gradients(model, loss), expected_gradients, strict=True):
        th.testing.assert_close(gradient, reference, rtol=1e-4 if compiled else 1e-5, atol=tolerance["atol"])


@needs_compiler
def test_recurrent_compiles_in_pieces_a_fixed_number_of_times(capsys, device):
    """
    RecurrentPPO_EWMA compiled: its LSTMs run eagerly between the compiled pieces (said in the learn line); the loss
    after them is one graph per minibatch size (two: a last minibatch shorter than the others), whatever the padded
    lengths of the sequences, and no later call compiles again (on CUDA too: a device test of the GPU check).
    """
    # 4 x 30 = 120 steps in minibatches of 50: two of 50 and one of 20
    model = RecurrentPPO_EWMA("MlpLstmPolicy", make_vec_env("CartPole-v1", n_envs=4, seed=0), n_steps=30, batch_size=50,
                              n_epochs=2, seed=0, compile_step=True, verbose=1, learning_rate=linear_learning_rate,
                              policy_kwargs=dict(lstm_hidden_size=8, net_arch=[16]), device=device)  # fmt: skip
    before = graphs_compiled()
    model.learn(360)
    assert "training step compiled (compile_step=True), in pieces (the LSTMs run eagerly" in capsys.readouterr().out
    after_first = graphs_compiled()
    # on CUDA, Adam's step is compiled too (on the CPU it is torch's fused kernel)
    assert after_first - before == 2 if device == "cpu" else after_first - before >= 3
    assert model.compiled_step.active and model.compiled_step.verified and not model.compiled_step.whole
    model.learn(360, reset_num_timesteps=False)
    assert graphs_compiled() == after_first, "a later iteration compiled again"


def linear_learning_rate(progress_remaining: float) -> float:
    return 1e-3 * progress_remaining


def linear_clip_range(progress_remaining: float) -> float:
    return 0.2 * progress_remaining


def graphs_compiled() -> int:
    return int(counters["stats"]["unique_graphs"])


@needs_compiler
def test_a_run_compiles_a_fixed_number_of_times_and_saves_as_eager(tmp_path):
    """
    Scheduled learning rate and clip range, and a last minibatch shorter than the others: three graphs (the acting
    step, the loss at two minibatch sizes; Adam steps by torch's fused kernel) are made in the first iteration and no
    later one adds any. Then the model saves (no compiled names, the learning rates numbers),
    loads, deep-copies and pickles.
    """
    schedule = {"learning_rate": linear_learning_rate, "clip_range": linear_clip_range}
    # 4 x 30 = 120 samples in minibatches of 50: two of 50 and one of 20
    model = PPO_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=4, seed=0), n_steps=30, batch_size=50, n_epochs=2,
                     seed=0, compile_step=True, **schedule)  # fmt: skip
    before = graphs_compiled()
    model.learn(600)  # the acting step, the loss at two minibatch sizes (its last iteration eager: clip range 0)
    after_first = graphs_compiled()
    assert after_first - before == 3
    model.ent_coef, model.vf_coef, model.max_grad_norm = 0.01, 0.4, 0.3  # as a callback may: no new graph either
    model.learn(600, reset_num_timesteps=False)
    assert model.compiled_step.active, model.compiled_step.reason
    assert graphs_compiled() == after_first, "a later iteration compiled again"
    assert all(isinstance(group["lr"], float) for group in model.policy.optimizer.param_groups)

    path = tmp_path / "model.zip"
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        text = "".join(archive.read(name).decode("latin-1") for name in names)
    assert "_orig_mod" not in text and "compiled_step" not in text
    loaded = PPO_EWMA.load(path)
    for (name, value), (_, original) in zip(loaded.policy.state_dict().items(), model.policy.state_dict().items()):
        th.testing.assert_close(value, original, msg=name)
    assert loaded.compile_step is True and not loaded.compiled_step.active
    copied = copy.deepcopy(model)
    unpickled = pickle.loads(pickle.dumps(model))
    observation = model.env.reset()
    for other in (loaded, copied, unpickled):
        np.testing.assert_array_equal(
            other.predict(observation, deterministic=True)[0], model.predict(observation, deterministic=True)[0]
        )
    copied.learn(120)  # a copy compiles its own step
    model.to_sb3().save(io.BytesIO())


@needs_compiler
@pytest.mark.slow
def test_compiled_ppo_ewma_learns_cartpole():
    """
    rl-zoo3's CartPole settings, compiled, on three seeds: every seed learns (the last 100 episodes' mean return far
    above a random policy's 22) and their mean is high, as the eager step's is (350-480 on most seeds at 60,000 steps,
    compiled or not, and about 200 on a seed still mid-way: the thresholds leave room for two such seeds).
    """
    returns = []
    for seed in (0, 1, 2):
        model = PPO_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=8, seed=seed), n_steps=32, batch_size=256,
                         n_epochs=20, gae_lambda=0.8, gamma=0.98, ent_coef=0.0, learning_rate=lambda p: 1e-3 * p,
                         clip_range=lambda p: 0.2 * p, seed=seed, compile_step=True)  # fmt: skip
        model.learn(60_000)
        assert model.compiled_step.active
        returns.append(np.mean([episode["r"] for episode in model.ep_info_buffer]))
    assert min(returns) > 100 and np.mean(returns) > 250, returns


@needs_compiler
def test_ppg_policy_phase_and_optimizers_compile():
    """PPG_EWMA's policy-phase minibatches run compiled, both optimizers (RMSprop here) step compiled, and it trains."""
    model = PPG_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=4, seed=0), n_steps=32, batch_size=64, seed=0,
                     n_policy_iterations=2, n_aux_epochs=1, compile_step=True,
                     policy_kwargs=dict(optimizer_class=th.optim.RMSprop))  # fmt: skip
    before = [parameter.detach().clone() for parameter in model.policy.parameters()]
    model.learn(512)
    assert model.compiled_step.active, model.compiled_step.reason
    assert model.compiled_step.verified
    assert len(model.compiled_step._steps) == 2  # the policy and auxiliary optimizers
    assert any(not th.equal(a, b) for a, b in zip(before, model.policy.parameters()))


@needs_compiler
@pytest.mark.parametrize("algorithm", [PPO_EWMA, PPG_EWMA])
def test_gsde_trains_and_acts_compiled(algorithm, capsys):
    """gSDE (rl-zoo3's Pendulum entry): the training step compiles whole (PPG's auxiliary losses too), the acting step
    compiles, and the learn line says both."""
    settings = dict(n_policy_iterations=2, n_aux_epochs=1) if algorithm is PPG_EWMA else {}
    model = algorithm("MlpPolicy", make_vec_env("Pendulum-v1", n_envs=4, seed=0), n_steps=32, batch_size=64, seed=0,
                      use_sde=True, sde_sample_freq=4, compile_step=True, verbose=1, **settings)  # fmt: skip
    before = [parameter.detach().clone() for parameter in model.policy.parameters()]
    model.learn(256)
    assert "training step compiled (compile_step=True), as one function, acting step compiled" in capsys.readouterr().out
    assert model.compiled_step.verified and model.compiled_step.whole
    if algorithm is PPG_EWMA:
        from sb3_ewma.ppg_ewma.auxiliary import lean_auxiliary_losses as auxiliary

        assert auxiliary in model.compiled_step._compiled
    moved = [not th.equal(a, b) for a, b in zip(before, model.policy.parameters(), strict=True)]
    assert all(th.isfinite(parameter).all() for parameter in model.policy.parameters()) and any(moved)


def auxiliary_rows(env_id: str, **kwargs) -> tuple[PPG_EWMA, np.ndarray]:
    """A PPG_EWMA whose auxiliary buffer holds two rollouts and pi_old, its policy moved since, and 48 rows of it."""
    from sb3_ewma.ppg_ewma.auxiliary import compute_old_policy

    model = PPG_EWMA("MlpPolicy", make_vec_env(env_id, n_envs=4, seed=0), n_steps=32, batch_size=64, seed=0,
                     n_policy_iterations=2, n_aux_epochs=1, compile_step=False, **kwargs)  # fmt: skip
    model.learn(256)  # the last iteration's rollout stays in the auxiliary buffer
    compute_old_policy(model.policy, model.aux_buffer, 64)
    with th.no_grad():  # the policy moves away from pi_old: the cloning KL is not 0
        for parameter in model.policy.parameters():
            parameter.add_(0.05 * th.randn_like(parameter))
    return model, np.arange(48)


@pytest.mark.parametrize("env_id, kwargs", [("CartPole-v1", {}), ("Pendulum-v1", {}), ("Pendulum-v1", {"use_sde": True})])
def test_the_auxiliary_function_is_the_eager_auxiliary_loss(env_id, kwargs):
    """lean_auxiliary_losses (no distribution objects) computes PPG's auxiliary losses and their gradients
    (categorical, diagonal Gaussian and gSDE)."""
    model, rows = auxiliary_rows(env_id, **kwargs)
    buffer = model.aux_buffer
    expected = auxiliary_losses(model.policy, buffer, rows, model.beta_clone)
    expected_gradients = gradients(model, expected[-1])
    terms = lean_auxiliary_losses(model.policy, buffer.observations(rows), buffer.value_targets(rows),
                                  buffer.old_policy(rows), model.beta_clone)  # fmt: skip
    assert terms[1] > 1e-4  # the cloning KL is exercised
    for value, reference in zip(terms, expected, strict=True):
        th.testing.assert_close(value, reference, rtol=1e-5, atol=1e-7)
    for gradient, reference in zip(gradients(model, terms[-1]), expected_gradients, strict=True):
        th.testing.assert_close(gradient, reference, rtol=1e-4, atol=1e-7)


@needs_compiler
def test_ppg_auxiliary_phase_compiles():
    """With compile_step, PPG's auxiliary losses and their gradients are the eager ones within float tolerance."""
    model, rows = auxiliary_rows("CartPole-v1")
    buffer = model.aux_buffer
    expected = auxiliary_losses(model.policy, buffer, rows, model.beta_clone)
    expected_gradients = gradients(model, expected[-1])
    model.compiled_step.active = True
    terms = model._auxiliary_losses(buffer, rows)
    assert lean_auxiliary_losses in model.compiled_step._compiled
    for value, reference in zip(terms, expected, strict=True):
        th.testing.assert_close(value, reference, rtol=1e-5, atol=1e-6)
    for gradient, reference in zip(gradients(model, terms[-1]), expected_gradients, strict=True):
        th.testing.assert_close(gradient, reference, rtol=1e-4, atol=1e-6)


def failing_compile(function, **kwargs):
    """``torch.compile`` for a graph that does not compile: the compiled function fails at its first call."""

    def compiled(*args, **kwargs):
        raise RuntimeError("backend exploded")

    return compiled


def test_an_auxiliary_loss_that_does_not_compile_falls_back(monkeypatch):
    """A failing compilation of the auxiliary losses: one warning, the eager losses, eager from then on."""
    monkeypatch.setattr(step_module.th, "compile", failing_compile)
    model, rows = auxiliary_rows("CartPole-v1")
    model.compiled_step.setting, model.compiled_step.active = True, True
    with pytest.warns(UserWarning, match="compilation failed: RuntimeError: backend exploded"):
        terms = model._auxiliary_losses(model.aux_buffer, rows)
    for value, reference in zip(terms, auxiliary_losses(model.policy, model.aux_buffer, rows, model.beta_clone)):
        th.testing.assert_close(value, reference)
    assert not model.compiled_step.active
    assert "compilation failed" in model.compiled_step.start_learn(10**9, None)  # and in the next learn call


def test_auto_compiles_only_long_runs():
    step = CompiledStep("auto")
    assert "eager" in step.start_learn(AUTO_MIN_OPTIMIZER_STEPS - 1, None) and not step.active
    assert "compiled" in step.start_learn(AUTO_MIN_OPTIMIZER_STEPS, None) and step.active
    assert not CompiledStep(False).start_learn(10**9, None).startswith("training step compiled")
    assert "no compiler" in CompiledStep(True).start_learn(10**9, "no compiler")
    # the acting step: compiled with compile_step=True, or "auto" from AUTO_MIN_ACTING_STEPS steps on
    assert "acting step eager" in step.start_learn(AUTO_MIN_OPTIMIZER_STEPS, None, AUTO_MIN_ACTING_STEPS - 1)
    assert step.active and not step.acting_active
    assert "acting step compiled" in step.start_learn(AUTO_MIN_OPTIMIZER_STEPS, None, AUTO_MIN_ACTING_STEPS)
    assert step.acting_active
    assert "eager" in step.start_learn(AUTO_MIN_OPTIMIZER_STEPS - 1, None, 10**9) and not step.acting_active
    assert CompiledStep(True).start_learn(1, None, 1).endswith("acting step compiled")


def test_auto_compiles_recurrent_runs_from_fewer_steps(capsys):
    """RecurrentPPO_EWMA's compiled step saves more a step: "auto" compiles from 2,000 planned optimizer steps."""
    model = RecurrentPPO_EWMA("MlpLstmPolicy", "CartPole-v1", n_steps=16, batch_size=16, n_epochs=1, verbose=1,
                              policy_kwargs=dict(lstm_hidden_size=8, net_arch=[8]), device="cpu")  # fmt: skip
    model._start_compiled_step(16 * 1_999)
    assert "1999 optimizer steps planned, fewer than the 2000" in capsys.readouterr().out
    assert not model.compiled_step.active
    model._start_compiled_step(16 * 2_000)
    assert model.compiled_step.active == (step_module.compiler_missing(th.device("cpu")) is None)
    assert PPO_EWMA._auto_compile_min_steps == AUTO_MIN_OPTIMIZER_STEPS > 2_000


def test_short_runs_stay_eager_and_say_so(capsys):
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, verbose=1)
    model.learn(64)
    assert not model.compiled_step.active
    assert "training step eager (compile_step='auto' and 20 optimizer steps planned" in capsys.readouterr().out


def test_ppg_counts_its_value_and_auxiliary_steps_for_auto(capsys):
    """PPG's planned steps: 10 iterations x 2 epochs (policy 1, value 2) x 2 minibatches, and 5 auxiliary phases x 6
    epochs x 4 minibatches (2 rollouts of 32 x 4 steps in minibatches of 64)."""
    model = PPG("MlpPolicy", make_vec_env("CartPole-v1", n_envs=4, seed=0), n_steps=32, batch_size=64, n_epochs=1,
                n_value_epochs=2, n_policy_iterations=2, n_aux_epochs=6, aux_batch_size=64, verbose=1)  # fmt: skip
    assert model._planned_optimizer_steps(10) == 10 * 2 * 2 + 5 * 6 * 4
    model.learn(128)
    assert "compile_step='auto' and 4 optimizer steps planned" in capsys.readouterr().out


def test_no_compiler_falls_back_before_training(monkeypatch):
    monkeypatch.setattr(step_module.shutil, "which", lambda name: None)
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, compile_step=True)
    with pytest.warns(UserWarning, match="training step eager .*no C\\+\\+ compiler"):
        model.learn(64)
    assert not model.compiled_step.active


def test_unsupported_settings_train_eagerly():
    model = PPO_EWMA(
        "MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, kl_coef=0.1, kl_estimator="exact", compile_step=True
    )
    with pytest.warns(UserWarning, match="kl_estimator='exact'"):
        model.learn(64)
    assert not model.compiled_step.active


def test_a_graph_that_does_not_compile_falls_back(monkeypatch):
    """A compilation error at the first step: one warning, and the run goes on eagerly with the same losses."""

    monkeypatch.setattr(step_module.shutil, "which", lambda name: "/usr/bin/g++")
    monkeypatch.setattr(step_module.th, "compile", failing_compile)
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, seed=0, compile_step=True)
    with pytest.warns(UserWarning, match="compilation failed: RuntimeError: backend exploded"):
        model.learn(128)
    reference = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, seed=0, compile_step=False)
    reference.learn(128)
    assert not model.compiled_step.active
    for parameter, expected in zip(model.policy.parameters(), reference.policy.parameters()):
        th.testing.assert_close(parameter, expected)


@pytest.mark.parametrize("value", ["yes", 1, None, "True"])
def test_compile_step_is_checked_first(value):
    with pytest.raises(ValueError, match="compile_step must be True, False or 'auto', got"):
        PPO_EWMA("MlpPolicy", "CartPole-v1", compile_step=value)


def test_copies_of_the_collaborator_hold_no_compiled_function():
    step = CompiledStep(True)
    step._compiled[minibatch_loss] = lambda: None
    step.verified = True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pickle.loads(pickle.dumps(step))._compiled == {}
    copied = copy.deepcopy(step)
    assert copied._compiled == {} and not copied.verified
    assert step._compiled  # the original keeps its own


@pytest.mark.parametrize("optimizer_class", [th.optim.Adam, th.optim.AdamW])
def test_the_fused_optimizer_step_is_the_eager_step(optimizer_class):
    """
    Adam and AdamW on the CPU step by torch's fused kernel under compile_step (nothing compiled): after three steps the
    parameters and the optimizer's state agree with the eager step's within float tolerance, and the groups' settings
    (what a checkpoint saves) are the user's.
    """
    model = filled_model(policy_kwargs=dict(optimizer_class=optimizer_class, optimizer_kwargs=dict(weight_decay=0.01)))
    data = next(iter(model.rollout_buffer.get(64)))
    fused = copy.deepcopy(model)
    assert step_module.fuses_on_cpu(fused.policy.optimizer)
    assert not step_module.fuses_on_cpu(th.optim.SGD([th.zeros(1)], lr=0.1))
    # a channels_last weight (the fast formats') is not flat memory: the compiled step takes it
    convolution = th.nn.Conv2d(3, 4, 3).to(memory_format=th.channels_last)
    assert not step_module.fuses_on_cpu(th.optim.Adam(convolution.parameters()))
    groups_before = copy.deepcopy(model.policy.optimizer.state_dict()["param_groups"])
    compiled_step = CompiledStep(True)
    initial = [parameter.detach().clone() for parameter in model.policy.parameters()]
    fused_calls = []
    fused_kernel = th._fused_adamw_ if optimizer_class is th.optim.AdamW else th._fused_adam_
    spy = lambda *args, **kwargs: fused_calls.append(1) or fused_kernel(*args, **kwargs)  # noqa: E731
    for _ in range(3):
        for trained in (model, fused):
            trained.policy.optimizer.zero_grad()
            eager_terms(trained, data)[0].backward()
        model.policy.optimizer.step()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(th, "_fused_adamw_" if optimizer_class is th.optim.AdamW else "_fused_adam_", spy)
            compiled_step.optimizer_step(fused.policy.optimizer)
    assert len(fused_calls) == 3  # torch's fused kernel took each step
    assert fused.policy.optimizer.state_dict()["param_groups"] == groups_before
    assert compiled_step._steps == {}
    assert any(not th.equal(a, b) for a, b in zip(initial, fused.policy.parameters()))
    for parameter, reference in zip(fused.policy.parameters(), model.policy.parameters(), strict=True):
        th.testing.assert_close(parameter, reference, rtol=1e-5, atol=1e-7)
    fused_state, eager_state = fused.policy.optimizer.state.values(), model.policy.optimizer.state.values()
    for state, reference in zip(fused_state, eager_state, strict=True):
        th.testing.assert_close(state["exp_avg_sq"], reference["exp_avg_sq"], rtol=1e-5, atol=1e-12)
        assert state["step"] == reference["step"]


GSDE = {"use_sde": True, "sde_sample_freq": 4}
"""rl-zoo3's Pendulum entry's gSDE."""


def first_rollout(env_id: str, compile_step: bool, device: str = "cpu", **kwargs) -> PPO_EWMA:
    """A PPO_EWMA after one iteration (one rollout of 4 x 32 steps, then its training) on a fixed seed."""
    model = PPO_EWMA("MlpPolicy", make_vec_env(env_id, n_envs=4, seed=0), n_steps=32, batch_size=64, n_epochs=1, seed=0,
                     compile_step=compile_step, device=device, **kwargs)  # fmt: skip
    model.learn(128)
    return model


@needs_compiler
@pytest.mark.parametrize("env_id, kwargs", [("CartPole-v1", {}), ("Pendulum-v1", {}), ("Pendulum-v1", GSDE)])
def test_the_compiled_acting_step_collects_what_the_eager_step_collects(env_id, kwargs, device):
    """
    On one seed, a rollout acted by the compiled acting step holds what the eager step's holds: the same random draws
    (the generator's state after the rollout), the same discrete actions and what follows from them; continuous actions,
    observations, values and log-probabilities within float tolerance (compiled kernels round differently). The policy
    keeps no trace of it, and pickles and copies as before.
    """
    eager = first_rollout(env_id, False, device, **kwargs)
    eager_generator = th.get_rng_state(), th.cuda.get_rng_state() if device == "cuda" else None
    before = graphs_compiled()
    compiled = first_rollout(env_id, True, device, **kwargs)
    generator = th.get_rng_state(), th.cuda.get_rng_state() if device == "cuda" else None
    assert compiled.compiled_step.acting_active and step_module.lean_forward in compiled.compiled_step._compiled
    # the acting step and the training step; gSDE's exploration matrices, resampled every 4 steps, make no new graph
    assert graphs_compiled() - before == 2
    assert "acting_step" not in vars(compiled.policy) and compiled.policy.acting_step is None
    assert all(a is None or th.equal(a, b) for a, b in zip(generator, eager_generator))
    buffer, reference = compiled.rollout_buffer, eager.rollout_buffer
    exact = ("actions", "observations", "rewards") if env_id == "CartPole-v1" else ()
    for name in ("observations", "actions", "rewards", "episode_starts", "values", "log_probs"):
        if name in exact or name == "episode_starts":
            np.testing.assert_array_equal(getattr(buffer, name), getattr(reference, name), err_msg=name)
        else:
            np.testing.assert_allclose(getattr(buffer, name), getattr(reference, name), rtol=1e-5, atol=1e-5, err_msg=name)
    pickle.loads(pickle.dumps(compiled.policy))
    if not kwargs:  # SB3's reset_noise leaves gSDE's exploration matrices in the policy's graph: no deepcopy (as SB3's)
        copy.deepcopy(compiled).learn(128)


@needs_compiler
def test_the_compiled_acting_step_draws_as_eager_after_a_recompilation(device):
    """
    A second batch size compiles a second graph, which draws its Gaussian noise with torch's generator too (on CUDA,
    inductor's own generator would draw other numbers): on a seed, the eager step's actions at both sizes; a copy or a
    pickle of the policy made during a rollout acts eagerly.
    """
    model = first_rollout("Pendulum-v1", False, device)
    step = CompiledStep(True)
    step.start_learn(1, None, 1)
    observations = th.as_tensor(model.env.reset(), device=model.device)
    for rows in (4, 3):
        th.manual_seed(rows)
        with th.no_grad():
            actions = step.act(model.policy, observations[:rows])[0]
        th.manual_seed(rows)
        with th.no_grad():
            expected = step_module.lean_forward(model.policy, observations[:rows])[0]
        th.testing.assert_close(actions, expected, rtol=1e-5, atol=1e-6)
    with step.acting(model.policy):
        assert model.policy.acting_step is not None
        for other in (copy.deepcopy(model.policy), pickle.loads(pickle.dumps(model.policy))):
            assert "acting_step" not in vars(other) and other.acting_step is None
    assert "acting_step" not in vars(model.policy)


@needs_compiler
def test_the_cuda_graphs_acting_step_collects_what_the_eager_step_collects(device):
    """
    The acting step compiled with ``mode="reduce-overhead"`` (CUDA graphs on CUDA, what the GPU stage's throughput
    measures; the CPU runs it without them): the same rollout as the eager step's.
    """
    eager = first_rollout("CartPole-v1", False, device)
    model = PPO_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=4, seed=0), n_steps=32, batch_size=64, n_epochs=1,
                     seed=0, compile_step=True, device=device)  # fmt: skip
    model.compiled_step.acting_mode = "reduce-overhead"
    model.learn(128)
    assert step_module.lean_forward in model.compiled_step._compiled
    for name in ("observations", "actions", "rewards"):
        np.testing.assert_array_equal(getattr(model.rollout_buffer, name), getattr(eager.rollout_buffer, name), err_msg=name)
    for name in ("values", "log_probs"):
        np.testing.assert_allclose(
            getattr(model.rollout_buffer, name), getattr(eager.rollout_buffer, name), rtol=1e-5, atol=1e-6, err_msg=name
        )


def test_an_acting_step_that_does_not_compile_falls_back(monkeypatch):
    """A failing compilation of the acting step: one warning, the eager step's actions, eager from then on."""
    model = first_rollout("CartPole-v1", False)
    observations = th.as_tensor(model.env.reset())
    step = CompiledStep(True)
    step.start_learn(1, None, 1)
    compilations = []
    monkeypatch.setattr(
        step_module.th, "compile", lambda function, **kwargs: compilations.append(1) or failing_compile(function)
    )
    th.manual_seed(0)
    with pytest.warns(UserWarning, match="compilation failed: RuntimeError: backend exploded"):
        actions, values, log_prob = step.act(model.policy, observations)
    th.manual_seed(0)
    expected = step_module.lean_forward(model.policy, observations)
    for value, reference in zip((actions, values, log_prob), expected, strict=True):
        th.testing.assert_close(value, reference)
    assert not step.active and not step.acting_active
    step.act(model.policy, observations)  # the rest of the rollout: eager, no new attempt
    assert len(compilations) == 1
