"""
Every algorithm x every training feature: minibatches of whole rollouts, the gradient noise scale, data-parallel
training and overlapped rollouts (a thread, a process). What an algorithm supports is tested for what it does; what it
cannot do raises a ValueError at construction. The documentation's feature matrix (docs/guide/algos.md) says the same.
(Data-parallel training on 2 ranks: tests/test_distributed.py.)
"""

import copy
import csv
import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from sb3_contrib.common.envs import InvalidActionEnvDiscrete
from sb3_contrib.common.wrappers import ActionMasker
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import Logger, configure

from sb3_ewma import PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA
from sb3_ewma.ablations import StaleMaskablePPO_EWMA, StaleRecurrentPPO_EWMA

ALGORITHMS = (PPO_EWMA, PPG_EWMA, RecurrentPPO_EWMA, MaskablePPO_EWMA)
FEATURES = (
    "minibatch_sampling",
    "log_gradient_noise_scale",
    "distributed",
    "async_rollouts='thread'",
    "async_rollouts='process'",
)
SUPPORTED: dict[str, dict[type, bool | str]] = {feature: {algorithm: True for algorithm in ALGORITHMS} for feature in FEATURES}
"""feature -> algorithm -> True (supported) or the ValueError's message (a regex) at construction. All supported."""
DOCS_ROWS = {
    "minibatch_sampling": "minibatches of whole rollouts (`minibatch_sampling`)",
    "log_gradient_noise_scale": "gradient noise scale (`train/gradient_noise_scale`)",
    "distributed": "data-parallel training (`distributed`, torchrun)",
    "async_rollouts='thread'": "overlapped rollouts, collector thread (`async_rollouts=True`)",
    "async_rollouts='process'": 'overlapped rollouts, collector process (`async_rollouts="process"`)',
}
N_ENVS, N_STEPS = 4, 8
ROLLOUT = N_ENVS * N_STEPS
DOCS = Path(__file__).resolve().parents[1] / "docs" / "guide" / "algos.md"


def masked_env() -> InvalidActionEnvDiscrete:
    return InvalidActionEnvDiscrete(dim=4, ep_length=10, n_invalid_actions=1)


def masked_cartpole() -> gym.Env:
    """CartPole whose action 1 is invalid while the pole leans left: masks that draw nothing from numpy's global RNG."""
    return ActionMasker(gym.make("CartPole-v1"), lambda env: np.array([True, env.unwrapped.state[2] > 0]))


def make_model(algorithm: type, n_envs: int = N_ENVS, env_id: Any = None, **kwargs: Any) -> Any:
    """A small model of ``algorithm`` on CartPole (MaskablePPO_EWMA: an environment with invalid actions), on the CPU."""
    if env_id is None:
        env_id = masked_env if issubclass(algorithm, MaskablePPO_EWMA) else "CartPole-v1"
    policy = "MlpLstmPolicy" if issubclass(algorithm, RecurrentPPO_EWMA) else "MlpPolicy"
    net: dict[str, Any] = {"net_arch": [16]}
    if issubclass(algorithm, RecurrentPPO_EWMA):
        net["lstm_hidden_size"] = 8
    if algorithm is PPG_EWMA:
        kwargs = {"n_policy_iterations": 2, "n_aux_epochs": 1, **kwargs}
    settings = {"n_steps": N_STEPS, "batch_size": 2 * N_STEPS, "n_epochs": 2, "seed": 0, "device": "cpu"}
    return algorithm(policy, make_vec_env(env_id, n_envs=n_envs, seed=0), policy_kwargs=net, **{**settings, **kwargs})


def collected(model: Any) -> Any:
    """The model after one rollout (its buffer full, nothing trained)."""
    model.set_logger(Logger(folder=None, output_formats=[]))
    _, callback = model._setup_learn(ROLLOUT)
    assert model.collect_rollouts(model.env, callback, model.rollout_buffer, N_STEPS)
    return model


def evaluate(model: Any, minibatch: Any) -> th.Tensor:
    """The log-probabilities of a minibatch's actions under ``model.policy``, as ``train()`` evaluates them."""
    actions = minibatch.actions
    if isinstance(model.action_space, spaces.Discrete):
        actions = actions.long().flatten()
    with th.no_grad():
        return model._evaluate_policy(minibatch, actions)[1]


def per_step(buffer: Any, field: str, env: int) -> np.ndarray:
    """A field's values along environment ``env``'s rollout, in time order (the buffer flattened or not)."""
    values = getattr(buffer, field)
    if buffer.generator_ready:  # flattened, environment-major
        return values[env * buffer.buffer_size : (env + 1) * buffer.buffer_size].ravel()
    return values[:, env].ravel()


# ----------------------------------------------------------------------------------------------------------------------
# the matrix


@pytest.mark.parametrize("feature", FEATURES)
@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=lambda algorithm: algorithm.__name__)
def test_every_algorithm_takes_every_feature_or_says_why_not(algorithm, feature):
    name, _, value = feature.partition("=")
    arguments = {"minibatch_sampling": "rollouts", "log_gradient_noise_scale": True, "distributed": False}
    argument = {name: value.strip("'") if value else arguments[name]}
    support = SUPPORTED[feature][algorithm]
    if support is True:
        model = make_model(algorithm, **argument)
        # the feature is set as asked (behaviour: the tests below)
        if name == "async_rollouts":
            assert model.async_rollouts and model.rollout_collector == argument[name]
        else:
            assert getattr(model, name) == argument[name]
    else:
        with pytest.raises(ValueError, match=str(support)):
            make_model(algorithm, **argument)


def test_the_documentation_shows_the_same_matrix():
    rows = {line.split("|")[1].strip(): line for line in DOCS.read_text().splitlines() if line.startswith("| ")}
    header = [cell.strip() for cell in rows[""].split("|")[2:-1]]
    # one column per algorithm class, in this order (PPG_EWMA's column is PPG_EWMA / PPG)
    assert [re.search(r"sb3_ewma\.(\w+)", cell).group(1) for cell in header] == [a.__name__ for a in ALGORITHMS]
    for feature, label in DOCS_ROWS.items():
        cells = [cell.strip() for cell in rows[label].split("|")[2:-1]]
        for algorithm, cell in zip(ALGORITHMS, cells, strict=True):
            supported = SUPPORTED[feature][algorithm] is True
            assert cell.startswith("✔️" if supported else "❌"), (feature, algorithm.__name__, cell)


# ----------------------------------------------------------------------------------------------------------------------
# minibatches of whole rollouts


@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=lambda algorithm: algorithm.__name__)
@pytest.mark.parametrize("envs_per_minibatch", [1, 2])
def test_minibatches_of_whole_rollouts(algorithm, envs_per_minibatch):
    model = collected(make_model(algorithm, batch_size=envs_per_minibatch * N_STEPS, minibatch_sampling="rollouts"))
    buffer = model.rollout_buffer
    returns = {env: per_step(buffer, "returns", env) for env in range(N_ENVS)}
    minibatches = list(model._minibatches(buffer))
    assert len(minibatches) == N_ENVS // envs_per_minibatch == model.minibatches_per_epoch
    seen = []
    for minibatch in minibatches:
        # per-step values (the recurrent one: its valid steps), whole rollouts of environments in time order
        pieces = minibatch.returns.numpy().reshape(envs_per_minibatch, N_STEPS)
        for piece in pieces:
            env = next(env for env, values in returns.items() if np.array_equal(values, piece))
            seen.append(env)
        # the policy evaluated on the minibatch (the recurrent one from the stored LSTM states, the maskable one with
        # the stored masks) gives the log-probabilities stored at collection: the rows' data stayed together
        assert th.allclose(evaluate(model, minibatch), minibatch.old_log_prob, atol=1e-5)
    assert sorted(seen) == list(range(N_ENVS))  # each environment's rollout once (in random order: test_paper_options)


def test_recurrent_sequences_of_whole_rollouts_start_at_environments_and_episodes():
    model = collected(make_model(RecurrentPPO_EWMA, batch_size=N_STEPS // 2, minibatch_sampling="rollouts"))
    buffer = model.rollout_buffer
    for minibatch in model._minibatches(buffer):
        # a contiguous piece of one environment's rollout: sequences start at its first row and at episode starts
        rows = np.flatnonzero(np.isin(buffer.returns.ravel(), minibatch.returns.numpy()))
        assert len(rows) == N_STEPS // 2 and np.all(np.diff(rows) == 1)
        expected = [0, *(i for i in range(1, len(rows)) if buffer.episode_starts.ravel()[rows[i]])]
        assert list(buffer.seq_start_indices) == expected


def test_rollout_sampling_checks_the_batch_size_of_the_contrib_algorithms():
    for algorithm in (RecurrentPPO_EWMA, MaskablePPO_EWMA):
        with pytest.raises(ValueError, match=r"minibatch_sampling='rollouts'.*batch_size must be a multiple or a divisor"):
            make_model(algorithm, batch_size=12, minibatch_sampling="rollouts")
        with pytest.raises(ValueError, match=r"minibatch_sampling must be one of"):
            make_model(algorithm, minibatch_sampling="envs")


# ----------------------------------------------------------------------------------------------------------------------
# the gradient noise scale


@pytest.mark.parametrize("algorithm", [RecurrentPPO_EWMA, MaskablePPO_EWMA], ids=lambda algorithm: algorithm.__name__)
def test_gradient_noise_scale_of_the_contrib_algorithms(algorithm, tmp_path):
    params = []
    for flag in (True, False):
        model = make_model(algorithm, batch_size=N_STEPS, log_gradient_noise_scale=flag)
        model.set_logger(configure(str(tmp_path / str(flag)), ["csv"]))
        model.learn(3 * ROLLOUT)
        rows = list(csv.DictReader(open(tmp_path / str(flag) / "progress.csv")))
        logged = [float(row["train/gradient_noise_scale"]) for row in rows if row.get("train/gradient_noise_scale")]
        assert bool(logged) == flag and all(np.isfinite(logged))
        params.append(model.policy.parameters_to_vector())
        if flag:
            # one tracker of the policy phase: minibatches of batch_size (valid) steps, 4 per epoch
            tracker = model.gradient_noise
            assert (tracker.batch_size, tracker.steps_per_epoch) == (N_STEPS, 4)
            assert tracker.latest is not None and np.isfinite(tracker.latest.noise_trace)
    # measuring changes nothing
    np.testing.assert_array_equal(params[0], params[1])


# ----------------------------------------------------------------------------------------------------------------------
# data-parallel training, in one process


@pytest.mark.parametrize("algorithm", [RecurrentPPO_EWMA, MaskablePPO_EWMA], ids=lambda algorithm: algorithm.__name__)
def test_distributed_argument_of_the_contrib_algorithms(algorithm, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    model = make_model(algorithm, distributed=None)
    assert model.world_size == 1 and model.rank == 0 and model._timesteps_per_env_step == N_ENVS
    model.learn(ROLLOUT)
    assert model.num_timesteps == ROLLOUT
    with pytest.raises(ValueError, match="distributed=True needs torchrun"):
        make_model(algorithm, distributed=True)
    with pytest.raises(ValueError, match="distributed must be None"):
        make_model(algorithm, distributed="yes")


# ----------------------------------------------------------------------------------------------------------------------
# overlapped rollouts


class TrainRecorder:
    """Wraps ``model.train``: the policy's state before each call and a copy of the buffer trained on."""

    def __init__(self, model: Any) -> None:
        self.before: list[dict[str, th.Tensor]] = []
        self.after: list[dict[str, th.Tensor]] = []
        self.buffers: list[Any] = []
        train = type(model).train

        def recorded_train(model: Any) -> None:
            self.buffers.append(copy.deepcopy(model.rollout_buffer))
            self.before.append(copy.deepcopy(model.policy.state_dict()))
            train(model)
            self.after.append(copy.deepcopy(model.policy.state_dict()))

        model.__class__ = type(type(model).__name__, (type(model),), {"train": recorded_train})


def collected_by(model: Any, state: dict[str, th.Tensor], buffer: Any) -> bool:
    """Whether the policy with ``state`` gives the buffer's stored log-probabilities on its data (all of it at once)."""
    current = copy.deepcopy(model.policy.state_dict())
    model.policy.load_state_dict(state)
    try:
        minibatch = next(copy.deepcopy(buffer).get(None))
        return bool(th.allclose(evaluate(model, minibatch), minibatch.old_log_prob, atol=1e-5))
    finally:
        model.policy.load_state_dict(current)


class LSTMStatesAtHandOff(BaseCallback):
    """The model's LSTM states of the policy at each rollout's end (the hand-off, on the main thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.states: list[th.Tensor] = []

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        self.states.append(self.model._last_lstm_states.pi[0].clone())


@pytest.mark.parametrize("mode", ["thread", "process"])
@pytest.mark.parametrize("algorithm", [RecurrentPPO_EWMA, MaskablePPO_EWMA], ids=lambda algorithm: algorithm.__name__)
def test_overlapped_rollouts_of_the_contrib_algorithms_are_one_iteration_stale(algorithm, mode):
    model = make_model(algorithm, n_envs=2, async_rollouts=mode)
    recorder = TrainRecorder(model)
    callback = LSTMStatesAtHandOff() if algorithm is RecurrentPPO_EWMA else None
    model.learn(5 * 2 * N_STEPS, callback=callback)
    assert len(recorder.buffers) == 5 and model.num_timesteps == 5 * 2 * N_STEPS
    # the first rollout of a learn call is fresh: collected by the parameters it is trained from
    assert collected_by(model, recorder.before[0], recorder.buffers[0])
    for k in range(1, 5):
        # iteration k's data: collected by the parameters of the start of iteration k - 1, not those of iteration k
        assert collected_by(model, recorder.before[k - 1], recorder.buffers[k])
        assert not collected_by(model, recorder.before[k], recorder.buffers[k])
    # without staleness of its own the EWMA is the proximal policy, as in PPO_EWMA
    assert model.proximal_ewma is not None
    if callback is not None:
        # the collector carries the LSTM states from one rollout to the next (a collector process sends them back):
        # the states at the hand-off are those stored at the first step of the next rollout
        assert len(callback.states) == 5
        for k in range(4):
            stored = th.as_tensor(recorder.buffers[k + 1].hidden_states_pi[0])
            assert th.equal(callback.states[k], stored) and stored.abs().sum() > 0


@pytest.mark.parametrize("algorithm", [RecurrentPPO_EWMA, MaskablePPO_EWMA], ids=lambda algorithm: algorithm.__name__)
def test_first_overlapped_update_is_the_synchronous_one(algorithm):
    results = []
    # InvalidActionEnvDiscrete draws its masks from numpy's global RNG, which train() draws from too (the minibatch
    # permutation): a collector thread stepping it during train() would change the permutation
    env_id = masked_cartpole if algorithm is MaskablePPO_EWMA else None
    for async_rollouts in (False, True, "process"):
        model = make_model(algorithm, n_envs=2, env_id=env_id, async_rollouts=async_rollouts)
        recorder = TrainRecorder(model)
        model.learn(2 * 2 * N_STEPS)
        results.append((recorder.buffers[0], recorder.after[0]))
    (sync_buffer, sync_after), *overlapped = results
    for buffer, after in overlapped:
        for name in ("observations", "actions", "log_probs", "episode_starts"):
            np.testing.assert_array_equal(getattr(sync_buffer, name), getattr(buffer, name))
        assert all(th.equal(sync_after[key], after[key]) for key in sync_after)


def test_overlapped_maskable_rollouts_never_take_an_invalid_action():
    # InvalidActionEnvDiscrete: action 0..3, one invalid action per step, given by the environment's action_masks()
    for mode in ("thread", "process"):
        model = make_model(MaskablePPO_EWMA, n_envs=2, async_rollouts=mode)
        recorder = TrainRecorder(model)
        model.learn(4 * 2 * N_STEPS)
        for buffer in recorder.buffers:
            masks = buffer.action_masks.reshape(N_STEPS, 2, 4)
            actions = buffer.actions.reshape(N_STEPS, 2).astype(int)
            assert masks.sum(axis=-1).max() == 3  # one action masked at each step
            assert np.all(np.take_along_axis(masks, actions[..., None], axis=-1) == 1)


def test_async_rollouts_and_staleness_are_refused_by_the_contrib_algorithms():
    for algorithm, stale in ((RecurrentPPO_EWMA, StaleRecurrentPPO_EWMA), (MaskablePPO_EWMA, StaleMaskablePPO_EWMA)):
        with pytest.raises(ValueError, match="artificial staleness needs a model with async_rollouts=False"):
            make_model(stale, async_rollouts=True).set_staleness(1)
        with pytest.raises(ValueError, match=r"mode must be 'decoupled' or 'behavior' with stale data"):
            make_model(stale).set_staleness(1, "proximal")
        with pytest.raises(ValueError, match="async_rollouts must be False, True"):
            make_model(algorithm, async_rollouts="fork")


@pytest.mark.parametrize("async_rollouts", [False, True, "process"])
def test_learn_without_masking_collects_without_masks(async_rollouts):
    # MaskablePPO's learn(use_masking=False): the environments are not asked, every action is allowed (stored as ones)
    model = make_model(MaskablePPO_EWMA, n_envs=2, async_rollouts=async_rollouts)
    recorder = TrainRecorder(model)
    model.learn(3 * 2 * N_STEPS, use_masking=False)
    assert len(recorder.buffers) == 3
    assert all(np.all(buffer.action_masks == 1) for buffer in recorder.buffers)
    assert model._use_masking is True  # a later learn call masks again
