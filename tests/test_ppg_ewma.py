"""Unit tests of PPG_EWMA / PPG: schedule, auxiliary phase, EWMA handling, memory, architectures, spaces, persistence."""

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.distributions import (
    BernoulliDistribution,
    CategoricalDistribution,
    DiagGaussianDistribution,
    MultiCategoricalDistribution,
)
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.envs import (
    FakeImageEnv,
    IdentityEnv,
    IdentityEnvBox,
    IdentityEnvMultiBinary,
    IdentityEnvMultiDiscrete,
    SimpleMultiObsEnv,
)
from stable_baselines3.common.logger import KVWriter, Logger
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.save_util import load_from_zip_file
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_ewma.common.distributions import distribution_kl, distribution_parameters, kl_from_parameters
from sb3_ewma.common.torch_layers import ImpalaCNN
from sb3_ewma.ppg_ewma import PPG, PPG_EWMA, CnnPolicy, MlpPolicy, MultiInputPolicy, PPGPolicy
from sb3_ewma.ppg_ewma.buffers import AuxiliaryBuffer
from sb3_ewma.ppg_ewma.policies import is_ppg_policy_parameter

th.set_num_threads(1)

N_STEPS, N_ENVS = 16, 2
ROLLOUT = N_STEPS * N_ENVS


def make_model(cls=PPG_EWMA, env="CartPole-v1", n_envs=N_ENVS, **kwargs):
    settings = dict(n_steps=N_STEPS, batch_size=16, n_policy_iterations=2, n_aux_epochs=1, seed=0, device="cpu")
    settings.update(kwargs)
    if isinstance(env, str):
        env = make_vec_env(env, n_envs=n_envs, seed=0)
    return cls(settings.pop("policy", "MlpPolicy"), env, **settings)


def flat_params(module: th.nn.Module, names=None) -> th.Tensor:
    return th.cat([p.detach().flatten().clone() for n, p in module.named_parameters() if names is None or n in names])


class CountingEnv(gym.Wrapper):
    """Counts resets and steps of all instances (to check that bad input fails before the environment is used)."""

    calls = 0

    def reset(self, **kwargs):
        CountingEnv.calls += 1
        return super().reset(**kwargs)

    def step(self, action):
        CountingEnv.calls += 1
        return super().step(action)


class Recorder(KVWriter):
    """Keeps every dump of the logger."""

    def __init__(self) -> None:
        self.dumps: list[dict] = []

    def write(self, key_values, key_excluded, step=0) -> None:
        self.dumps.append(dict(key_values))

    def close(self) -> None:
        pass


def spy(obj, name, before=None, after=None):
    """Wrap the method ``name`` of ``obj`` to call ``before(*args)`` and ``after(result, *args)`` around it."""
    original = getattr(obj, name)

    def wrapper(*args, **kwargs):
        if before is not None:
            before(*args, **kwargs)
        result = original(*args, **kwargs)
        if after is not None:
            after(result, *args, **kwargs)
        return result

    setattr(obj, name, wrapper)


# --- construction -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(n_policy_iterations=0), "n_policy_iterations"),
        (dict(n_policy_iterations=1.5), "n_policy_iterations"),
        (dict(n_epochs=-1), "n_epochs"),
        (dict(n_value_epochs=-1), "n_value_epochs"),
        (dict(n_aux_epochs=-2), "n_aux_epochs"),
        (dict(beta_clone=-0.5), "beta_clone"),
        (dict(beta_clone=float("nan")), "beta_clone"),
        (dict(arch="triple"), "arch"),
        (dict(aux_batch_size=2 * ROLLOUT + 1), "aux_batch_size"),  # larger than the buffer of 2 rollouts
        (dict(aux_batch_size=ROLLOUT - 1), "aux_batch_size"),  # does not divide it
        (dict(aux_batch_size=0), "aux_batch_size"),
        (dict(aux_batch_size=8, aux_micro_batch_size=9), "aux_micro_batch_size"),
        (dict(aux_micro_batch_size=0), "aux_micro_batch_size"),
        (dict(aux_learning_rate=-1.0), "aux_learning_rate"),
        (dict(batch_size=1), "batch_size"),
        (dict(ewma_decay=1.0), "ewma_decay"),
        (dict(imp_samp_max=0.5), "imp_samp_max"),
        (dict(clip_range_vf=-0.5), "clip_range_vf"),
        (dict(kl_estimator="exactly"), "kl_estimator"),
        (dict(advantage_normalization="ewma", normalize_advantage=False), "advantage_normalization"),
        (dict(policy_kwargs=dict(arch="shared")), "arch"),
        (dict(arch="shared", policy_kwargs=dict(share_features_extractor=False)), "share_features_extractor"),
    ],
)
@pytest.mark.filterwarnings("ignore:You have specified a mini-batch size")
def test_bad_input_raises_before_the_env_is_used(kwargs, name):
    CountingEnv.calls = 0
    env = DummyVecEnv([lambda: CountingEnv(gym.make("CartPole-v1"))] * N_ENVS)
    with pytest.raises(ValueError, match=name):
        make_model(env=env, **kwargs)
    assert CountingEnv.calls == 0


def test_sb3s_ppo_policy_classes_are_read_as_ppgs_of_the_same_kind():
    # a script written for PPO passes SB3's classes: PPG builds its own policy of the same kind
    from stable_baselines3.ppo import CnnPolicy as SB3CnnPolicy
    from stable_baselines3.ppo import MlpPolicy as SB3MlpPolicy
    from stable_baselines3.ppo import MultiInputPolicy as SB3MultiInputPolicy

    from sb3_ewma.ppg_ewma.policies import ppg_policy_class

    assert type(make_model(policy=SB3MlpPolicy).policy) is MlpPolicy
    assert ppg_policy_class(SB3MlpPolicy) is MlpPolicy
    assert ppg_policy_class(SB3CnnPolicy) is CnnPolicy
    assert ppg_policy_class(SB3MultiInputPolicy) is MultiInputPolicy
    assert ppg_policy_class("CnnPolicy") == "CnnPolicy"


def test_a_policy_class_ppg_cannot_map_names_where_its_policies_are():
    class CustomPolicy(ActorCriticPolicy):
        pass

    CountingEnv.calls = 0
    with pytest.raises(ValueError, match=r"policy must be a PPG policy: .*got '.*CustomPolicy'.*sb3_ewma.ppg_ewma.policies"):
        make_model(policy=CustomPolicy, env=DummyVecEnv([lambda: CountingEnv(gym.make("CartPole-v1"))]))
    assert CountingEnv.calls == 0


def test_each_policy_has_sb3s_default_features_extractor():
    from stable_baselines3.common.torch_layers import CombinedExtractor, FlattenExtractor, NatureCNN

    lr = lambda _: 1e-3  # noqa: E731
    image = gym.spaces.Box(0, 255, (3, 36, 36), np.uint8)  # channel first, as VecTransposeImage gives it
    discrete = gym.spaces.Discrete(3)
    assert type(MlpPolicy(gym.spaces.Box(-1, 1, (4,)), discrete, lr).pi_features_extractor) is FlattenExtractor
    cnn = CnnPolicy(image, discrete, lr)
    assert type(cnn.pi_features_extractor) is NatureCNN and cnn.net_arch == []  # SB3's CnnPolicy: no MLP after the CNN
    dict_space = gym.spaces.Dict({"image": image, "vector": gym.spaces.Box(-1, 1, (2,))})
    assert type(MultiInputPolicy(dict_space, discrete, lr).pi_features_extractor) is CombinedExtractor
    # an explicit extractor is taken as given
    assert (
        type(CnnPolicy(image, discrete, lr, features_extractor_class=FlattenExtractor).pi_features_extractor)
        is FlattenExtractor
    )


def test_no_aux_buffer_check_without_aux_phase():
    # with E_aux = 0 nothing is stored, so the auxiliary minibatch size is irrelevant
    model = make_model(n_aux_epochs=0, aux_batch_size=10 * ROLLOUT)
    assert model.aux_buffer is None


def test_defaults_and_ppo_compatible_settings():
    model = PPG_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=4), n_steps=128, batch_size=64, device="cpu")
    assert (model.n_steps, model.batch_size, model.n_envs) == (128, 64, 4)
    assert model.rollout_buffer.buffer_size * model.rollout_buffer.n_envs == 512
    assert (model.n_policy_iterations, model.n_epochs, model.n_value_epochs, model.n_aux_epochs) == (32, 1, 1, 6)
    assert (model.beta_clone, model.arch, model.aux_batch_size, model.aux_micro_batch_size) == (1.0, "dual", None, None)
    assert (model._aux_minibatch_size, model._aux_micro_batch_size) == (64, 64)  # batch_size's
    assert model.aux_buffer.capacity == 32 * 512
    # "auto": center of mass = minibatches per epoch = 512 / 64
    assert model.proximal_decay == pytest.approx(8 / 9)
    assert isinstance(model.policy, MlpPolicy)
    plain = PPG("MlpPolicy", make_vec_env("CartPole-v1", n_envs=4), n_steps=128, batch_size=64, device="cpu")
    assert plain.ewma_decay is None and plain.proximal_ewma is None
    assert isinstance(plain, PPG) and not isinstance(plain, PPG_EWMA) and issubclass(PPG_EWMA, PPG)


@pytest.mark.parametrize(
    "setting",
    [{"batch_size": 16}, {"aux_batch_size": 64}, {"aux_micro_batch_size": 8}, {"aux_optimizer_kwargs": {"eps": 1e-3}}],
)
def test_load_keywords_train_as_the_constructors(setting, tmp_path):
    # SB3's load builds the model with the constructor's defaults and sets its keywords afterwards: the auxiliary
    # phase's minibatches (by default batch_size's) and optimizer follow the keywords as they follow the constructor's
    base = dict(n_steps=32, batch_size=32, n_policy_iterations=2, n_aux_epochs=1, seed=0, device="cpu")
    PPG("MlpPolicy", "CartPole-v1", **base).save(tmp_path / "default.zip")
    # each seeded (by its seed), then trained, before the other: the global generators are shared
    constructed = PPG("MlpPolicy", "CartPole-v1", **{**base, **setting}).learn(2 * 32)
    loaded = PPG.load(tmp_path / "default.zip", env="CartPole-v1", **setting).learn(2 * 32)
    assert constructed.n_aux_phases == loaded.n_aux_phases == 1
    sizes = [(model._aux_minibatch_size, model._aux_micro_batch_size) for model in (constructed, loaded)]
    assert sizes[0] == sizes[1]
    groups = [
        {key: value for key, value in model.aux_optimizer.param_groups[0].items() if key != "params"}
        for model in (constructed, loaded)
    ]
    assert groups[0] == groups[1]
    for (name, tensor), other in zip(constructed.policy.state_dict().items(), loaded.policy.state_dict().values()):
        assert th.equal(tensor, other), name


def test_a_loaded_auxiliary_optimizer_has_the_settings_it_is_built_with(tmp_path):
    # all of them: a keyword's, and the defaults where the saved model had other settings; the saved moments stay
    base = dict(n_steps=32, batch_size=32, n_policy_iterations=1, n_aux_epochs=1, seed=0, device="cpu")
    model = PPG("MlpPolicy", "CartPole-v1", aux_optimizer_kwargs={"betas": (0.5, 0.6)}, **base).learn(32)
    model.save(tmp_path / "betas.zip")
    loaded = PPG.load(tmp_path / "betas.zip", env="CartPole-v1", aux_optimizer_kwargs={"eps": 1e-3})
    constructed = PPG("MlpPolicy", "CartPole-v1", aux_optimizer_kwargs={"eps": 1e-3}, **base)
    settings = [
        {key: value for key, value in m.aux_optimizer.param_groups[0].items() if key not in ("params", "lr")}
        for m in (constructed, loaded)
    ]
    assert settings[0] == settings[1] and settings[1]["betas"] == (0.9, 0.999) and settings[1]["eps"] == 1e-3
    saved_steps = [state["step"] for state in model.aux_optimizer.state_dict()["state"].values()]
    loaded_steps = [state["step"] for state in loaded.aux_optimizer.state_dict()["state"].values()]
    assert saved_steps and saved_steps == loaded_steps
    # a copy keeps them: nothing is attached to the optimizer
    import copy

    assert copy.deepcopy(loaded).aux_optimizer.param_groups[0]["eps"] == 1e-3


def test_load_refuses_another_arch_as_sb3_refuses_other_policy_kwargs(tmp_path):
    PPG("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, n_policy_iterations=2).save(tmp_path / "dual.zip")
    with pytest.raises(ValueError, match=r"^arch='shared' differs from the saved policy's arch='dual'"):
        PPG.load(tmp_path / "dual.zip", env="CartPole-v1", arch="shared")
    assert PPG.load(tmp_path / "dual.zip", env="CartPole-v1", arch="dual").policy.arch == "dual"


# --- schedule -----------------------------------------------------------------------------------------------------


def instrument_aux_phases(model):
    """Record, for each auxiliary phase, the iteration it follows, the epochs' indices, rows seen and optimizer steps."""
    record = {"iterations": 0, "phases": []}

    def count_iteration(*args):
        record["iterations"] += 1

    spy(model, "train", before=count_iteration)

    def start_phase(*args):
        record["phases"].append({"after_iteration": record["iterations"], "epochs": [], "rows": 0, "steps": 0})

    spy(model, "_auxiliary_phase", before=start_phase)

    def epoch_indices(result, *args):
        indices = list(result)
        record["phases"][-1]["epochs"].append(np.concatenate(indices))
        return iter(indices)

    original = model.aux_buffer.minibatch_indices
    model.aux_buffer.minibatch_indices = lambda batch_size, rollout_length=None: epoch_indices(
        original(batch_size, rollout_length)
    )

    def count_rows(obs):
        record["phases"][-1]["rows"] += len(obs)
        assert len(obs) <= model._aux_micro_batch_size

    spy(model.policy, "forward_auxiliary", before=count_rows)

    def count_step(*args, **kwargs):
        record["phases"][-1]["steps"] += 1

    spy(model.aux_optimizer, "step", before=count_step)
    return record


@pytest.mark.parametrize("micro_batch_size", [None, 3])
def test_aux_phase_runs_after_every_n_pi_iterations_over_exactly_the_stored_data(micro_batch_size):
    n_pi, e_aux, aux_batch = 3, 2, 8
    model = make_model(
        n_policy_iterations=n_pi, n_aux_epochs=e_aux, aux_batch_size=aux_batch, aux_micro_batch_size=micro_batch_size
    )
    record = instrument_aux_phases(model)
    model.learn(7 * ROLLOUT)
    assert record["iterations"] == 7
    assert [phase["after_iteration"] for phase in record["phases"]] == [3, 6]
    stored = n_pi * ROLLOUT
    for phase in record["phases"]:
        assert len(phase["epochs"]) == e_aux
        for indices in phase["epochs"]:
            # every stored sample exactly once per epoch
            np.testing.assert_array_equal(np.sort(indices), np.arange(stored))
        assert phase["rows"] == e_aux * stored
        assert phase["steps"] == e_aux * stored // aux_batch
    assert (model.phase, model.phase_iteration, model.n_aux_phases) == (2, 1, 2)
    assert model.aux_buffer.size == ROLLOUT


@pytest.mark.parametrize("kwargs", [dict(n_aux_epochs=0), dict(n_policy_iterations=1000)])
def test_aux_phase_never_runs_with_no_epochs_or_long_phases(kwargs):
    model = make_model(**kwargs)
    calls = []
    spy(model, "_auxiliary_phase", before=lambda: calls.append(1))
    model.learn(5 * ROLLOUT)
    assert calls == [] and model.n_aux_phases == 0
    assert model.phase == (2 if kwargs.get("n_aux_epochs") == 0 else 0)


def test_micro_batching_gives_the_same_update():
    """Micro-batches of 5 rows (5, 5, 5, 1 for a minibatch of 16) give the update and the logged losses of whole
    minibatches: each micro-batch counts by its share of the minibatch."""
    params, logged = [], []
    for micro_batch_size in (None, 5):
        model = make_model(aux_batch_size=16, aux_micro_batch_size=micro_batch_size, n_aux_epochs=2)
        model.learn(2 * ROLLOUT)
        assert model.n_aux_phases == 1
        params.append(flat_params(model.policy))
        logged.append({key: value for key, value in model.logger.name_to_value.items() if key.startswith("aux/")})
    assert th.allclose(params[0], params[1], atol=1e-5)
    for key in ("aux/aux_value_loss", "aux/clone_kl", "aux/value_loss", "aux/loss"):
        assert logged[1][key] == pytest.approx(logged[0][key], rel=1e-5, abs=1e-8), key


def test_policy_and_value_epochs():
    model = make_model(n_epochs=2, n_value_epochs=3, batch_size=8, n_aux_epochs=0)
    steps, ewma_updates = [], []
    spy(model.policy.optimizer, "step", before=lambda *a, **k: steps.append(1))
    spy(model.proximal_ewma, "update", before=lambda: ewma_updates.append(1))
    model.learn(ROLLOUT)
    # 3 epochs of 4 minibatches; the EWMA follows the policy steps only (2 epochs)
    assert len(steps) == 12 and len(ewma_updates) == 8
    assert model._n_updates == 3


@pytest.mark.parametrize(
    "n_epochs, n_value_epochs, stop_at, expected",
    [
        # stop at the 2nd policy minibatch of epoch 0: one step on both losses, the other 3 on the value loss alone
        (3, 1, 2, dict(steps=4, ewma_updates=1, policy_minibatches=2, value_minibatches=4, n_updates=1, loss=True)),
        # the same with a second value epoch: it runs in full on the value loss
        (3, 2, 2, dict(steps=8, ewma_updates=1, policy_minibatches=2, value_minibatches=8, n_updates=2, loss=True)),
        # no value epoch, stopped at the very first minibatch: no step, so no total loss to log
        (2, 0, 1, dict(steps=0, ewma_updates=0, policy_minibatches=1, value_minibatches=0, n_updates=1, loss=False)),
    ],
)
def test_target_kl_stops_the_policy_epochs_and_the_value_epochs_go_on(n_epochs, n_value_epochs, stop_at, expected):
    model = make_model(n_epochs=n_epochs, n_value_epochs=n_value_epochs, batch_size=8, n_aux_epochs=0, target_kl=0.01)
    # one iteration of 4 minibatches; the KL check says "reached" at its stop_at-th call
    checks = []
    model._reached_target_kl = lambda approx_kl_div, epoch: checks.append(epoch) or len(checks) == stop_at
    steps, ewma_updates, logged = [], [], {}
    spy(model.policy.optimizer, "step", before=lambda *a, **k: steps.append(1))
    spy(model.proximal_ewma, "update", before=lambda: ewma_updates.append(1))
    spy(model, "_record_train_logs", before=lambda buffer, stats, **losses: logged.update(losses))
    model.learn(ROLLOUT)
    assert len(checks) == stop_at  # no policy minibatch after the stop
    assert len(steps) == expected["steps"] and len(ewma_updates) == expected["ewma_updates"]
    # the entropy and the KL of every policy minibatch computed, the one that reached target_kl included (as PPO's)
    assert len(logged["entropy_losses"]) == len(logged["approx_kl_divs"]) == expected["policy_minibatches"]
    assert len(logged["value_losses"]) == expected["value_minibatches"]
    assert model._n_updates == expected["n_updates"]
    assert (logged["loss"] is not None) == expected["loss"]
    assert ("train/loss" in model.logger.name_to_value) == expected["loss"]


def test_logs_the_last_policy_epochs_kl_and_feeds_the_noise_scale_policy_steps_only():
    # 3 policy epochs, 4 value epochs of 4 minibatches: train/approx_kl is the last policy epoch's mean (as PPO's), and
    # the gradient noise scale sees the 12 policy steps, not the 4 value-only ones
    model = make_model(n_epochs=3, n_value_epochs=4, batch_size=8, n_aux_epochs=0, log_gradient_noise_scale=True)
    checked, logged, observed = [], {}, []
    spy(model, "_reached_target_kl", before=lambda approx_kl_div, epoch: checked.append(approx_kl_div))
    spy(model, "_record_train_logs", before=lambda buffer, stats, **losses: logged.update(losses))
    spy(model.gradient_noise, "observe_optimizer", before=lambda *a, **k: observed.append(1))
    model.learn(ROLLOUT)
    assert len(checked) == 12 and len(observed) == 12
    assert len(logged["approx_kl_divs"]) == 4
    assert all(th.equal(first, second) for first, second in zip(logged["approx_kl_divs"], checked[-4:], strict=True))
    assert len(logged["value_losses"]) == 16 and len(logged["entropy_losses"]) == 12


def test_value_only_epochs_leave_the_dual_policy_unchanged():
    model = make_model(n_epochs=0, n_value_epochs=2, n_aux_epochs=0)
    policy_names = [n for n, _ in model.policy.named_parameters() if is_ppg_policy_parameter(n)]
    before = flat_params(model.policy, policy_names)
    value_before = flat_params(model.policy.value_net)
    model.learn(ROLLOUT)
    assert th.equal(before, flat_params(model.policy, policy_names))
    assert not th.equal(value_before, flat_params(model.policy.value_net))


# --- the auxiliary phase --------------------------------------------------------------------------------------------


def policy_drift_and_aux_error(beta_clone):
    """KL between the policy before and after the first auxiliary phase on the stored states, and the aux head's MSE."""
    # without SB3's orthogonal initialization the policy head (gain 0.01 there) is sensitive to the trunk
    model = make_model(
        arch="shared",
        n_policy_iterations=2,
        n_aux_epochs=4,
        beta_clone=beta_clone,
        aux_learning_rate=3e-3,
        aux_batch_size=8,
        policy_kwargs=dict(ortho_init=False),
    )
    snapshot = {}
    buffer = model.aux_buffer

    def evaluate():
        indices = np.arange(buffer.size)
        obs = buffer.observations(indices)
        with th.no_grad():
            # the policy returns the same distribution object at every call: keep its parameters
            distribution = model.policy.get_distribution(obs)
            parameters = [x.clone() for x in distribution_parameters(distribution)]
            aux_error = th.mean((model.policy.predict_aux_values(obs).flatten() - buffer.value_targets(indices)) ** 2)
        return distribution, parameters, float(aux_error)

    def before():
        _, snapshot["parameters"], snapshot["aux_error"] = evaluate()

    def after(result):
        distribution, _, aux_error = evaluate()
        snapshot["kl"] = float(kl_from_parameters(snapshot["parameters"], distribution).mean())
        snapshot["aux_error_after"] = aux_error

    spy(model, "_auxiliary_phase", before=before, after=after)
    model.learn(2 * ROLLOUT)
    return snapshot


def test_clone_term_holds_the_policy_and_aux_value_error_falls():
    cloned = policy_drift_and_aux_error(beta_clone=1.0)
    free = policy_drift_and_aux_error(beta_clone=0.0)
    assert free["kl"] > 0.01
    assert cloned["kl"] < 0.01 * free["kl"]
    for result in (cloned, free):
        assert result["aux_error_after"] < 0.8 * result["aux_error"]


def test_old_policy_is_the_policy_before_the_phase(monkeypatch):
    from sb3_ewma.ppg_ewma import ppg

    model = make_model()
    captured = {}
    compute_old_policy = ppg.compute_old_policy

    def capture(*args):
        compute_old_policy(*args)
        buffer = model.aux_buffer
        indices = np.arange(buffer.size)
        with th.no_grad():
            distribution = model.policy.get_distribution(buffer.observations(indices))
        captured["kl"] = float(kl_from_parameters(buffer.old_policy(indices), distribution).abs().max())

    monkeypatch.setattr(ppg, "compute_old_policy", capture)
    model.learn(2 * ROLLOUT)
    assert captured["kl"] < 1e-6


# --- the EWMA ------------------------------------------------------------------------------------------------------


def ewma_state(ewma):
    return flat_params(ewma.average, ewma.averaged_names), ewma.weight, ewma.n_updates


def test_ewma_is_reset_at_each_phase_start_and_untouched_by_the_aux_phase():
    model = make_model(n_policy_iterations=2, n_aux_epochs=2)
    ewma = model.proximal_ewma
    resets, aux_checks = [], []

    def after_reset(result):
        resets.append((model.phase, model.phase_iteration))
        assert ewma.weight == 1.0 and ewma.n_updates == 0
        assert th.equal(flat_params(ewma.average, ewma.averaged_names), flat_params(model.policy, ewma.averaged_names))

    spy(ewma, "reset", after=after_reset)
    state = {}
    spy(model, "_auxiliary_phase", before=lambda: state.update(before=ewma_state(ewma)))

    def compare(result):
        params, weight, n_updates = ewma_state(ewma)
        assert th.equal(params, state["before"][0]) and (weight, n_updates) == state["before"][1:]
        # while the policy itself moved
        assert not th.equal(flat_params(model.policy, ewma.averaged_names), params)
        aux_checks.append(n_updates)

    spy(model, "_auxiliary_phase", after=compare)
    model.learn(5 * ROLLOUT)
    # reset when the phases 0, 1, 2 start
    assert resets == [(0, 0), (1, 0), (2, 0)]
    # one update per policy minibatch: 2 iterations of 2 minibatches
    assert aux_checks == [4, 4]


@pytest.mark.parametrize("arch", ["dual", "shared", "detach"])
def test_ewma_averages_the_policy_side_only(arch):
    model = make_model(arch=arch)
    names = set(model.proximal_ewma.averaged_names)
    assert names == {n for n, _ in model.policy.named_parameters() if is_ppg_policy_parameter(n)}
    assert any(n.startswith("action_net.") for n in names)
    assert not any(n.startswith(("value_net.", "aux_value_net.", "mlp_extractor.value_net.", "vf_features")) for n in names)
    if arch != "dual":
        assert any(n.startswith("mlp_extractor.shared_net.") for n in names)


def test_plain_ppg_has_no_proximal_network_unless_the_exact_kl_needs_one():
    assert make_model(PPG).proximal_ewma is None
    model = make_model(PPG, kl_coef=0.5, kl_estimator="exact")
    assert model.proximal_ewma is not None and model.proximal_decay is None
    resets = []
    spy(model.proximal_ewma, "reset", before=lambda: resets.append(1))
    model.learn(3 * ROLLOUT)
    # the snapshot is the policy at the start of every iteration
    assert len(resets) == 3 and model.proximal_ewma.n_updates == 0


# --- memory ----------------------------------------------------------------------------------------------------------


def test_image_observations_are_stored_as_uint8():
    env = make_vec_env(lambda: FakeImageEnv(action_dim=3, screen_height=36, screen_width=36, n_channels=3), n_envs=2)
    model = make_model(env=env, policy="CnnPolicy", n_steps=8, batch_size=8, arch="detach")
    assert isinstance(model.policy, CnnPolicy)
    buffer = model.aux_buffer
    assert buffer.observation_dtypes == {None: np.dtype(np.uint8)}
    # the frame in bytes, a float32 value target
    assert buffer.bytes_per_step == 3 * 36 * 36 + 4
    model.learn(2 * 16)
    assert model.n_aux_phases == 1
    # plus pi_old: 3 float32 logits
    assert buffer.bytes_per_step == 3 * 36 * 36 + 4 + 3 * 4
    assert buffer.nbytes == 2 * 16 * buffer.bytes_per_step
    # SB3's rollout buffer keeps the dtype too
    assert model.rollout_buffer.observations.dtype == np.uint8


def test_procgen_scale_buffer_fits_in_7_gb():
    # the paper's phase: 32 iterations x 64 envs x 256 steps of 64x64x3 uint8 frames, 15 actions (15 logits in pi_old)
    space = gym.spaces.Box(0, 255, (3, 64, 64), np.uint8)
    one_step = AuxiliaryBuffer(1, 1, 1, space)
    one_step.store_old_policy(np.arange(1), [th.zeros(1, 15)])
    assert one_step.bytes_per_step == 12_288 + 4 + 15 * 4
    capacity = 32 * 256 * 64
    assert capacity == 524_288
    assert capacity * one_step.bytes_per_step < 7e9  # 6.48 GB (as float32 frames: 25.8 GB)


# --- architectures --------------------------------------------------------------------------------------------------


def grad_names(policy: PPGPolicy, output: th.Tensor) -> set[str]:
    policy.zero_grad(set_to_none=True)
    output.sum().backward()
    return {n for n, p in policy.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}


def gradients_by_output(arch):
    model = make_model(arch=arch)
    model.learn(2 * ROLLOUT)  # trains, including an auxiliary phase
    assert model.n_aux_phases == 1
    obs = th.as_tensor(np.random.default_rng(0).normal(size=(8, 4)), dtype=th.float32)
    policy = model.policy
    distribution = policy.forward_auxiliary(obs)[0]
    policy_grads = grad_names(policy, distribution.distribution.logits)
    aux_grads = grad_names(policy, policy.forward_auxiliary(obs)[1])
    value_grads = grad_names(policy, policy.predict_values(obs))
    return model, policy_grads, aux_grads, value_grads


def test_dual_architecture_shares_no_parameters():
    model, policy_grads, aux_grads, value_grads = gradients_by_output("dual")
    assert not model.policy.share_features_extractor
    assert policy_grads and value_grads and not (policy_grads & value_grads)
    assert not (aux_grads & value_grads)
    # the auxiliary head sits on the policy trunk
    assert aux_grads - {"aux_value_net.weight", "aux_value_net.bias"} <= policy_grads
    assert any(n.startswith("mlp_extractor.policy_net.") for n in aux_grads)
    policy_ids = {id(p) for n, p in model.policy.named_parameters() if n in policy_grads}
    value_ids = {id(p) for n, p in model.policy.named_parameters() if n in value_grads}
    assert not policy_ids & value_ids


def test_dual_architecture_with_sb3s_shared_features_extractor(tmp_path):
    # SB3's PPO builds one features extractor under separate MLP branches (its default); PPG with
    # share_features_extractor=True too (tests/test_cnn.py of SB3 passes it), and saves and loads it
    from stable_baselines3.common.envs import FakeImageEnv

    env = DummyVecEnv([lambda: FakeImageEnv(screen_height=40, screen_width=40, n_channels=1, discrete=True)])
    kwargs = dict(n_steps=32, batch_size=32, n_policy_iterations=1, device="cpu", seed=0)
    model = PPG_EWMA("CnnPolicy", env, policy_kwargs=dict(share_features_extractor=True), **kwargs).learn(64)
    policy = model.policy
    assert policy.share_features_extractor and policy.arch == "dual"
    assert policy.pi_features_extractor is policy.vf_features_extractor is policy.features_extractor
    assert not any(name.startswith("mlp_extractor.shared_net.") for name, _ in policy.named_parameters())
    obs, _ = policy.obs_to_tensor(model.observation_space.sample()[None])
    value_grads = grad_names(policy, policy.predict_values(obs))
    assert any(name.startswith("features_extractor.") for name in value_grads)  # both losses train it
    model.save(tmp_path / "model.zip")
    loaded = PPG_EWMA.load(tmp_path / "model.zip", env=env, device="cpu")
    assert loaded.policy.share_features_extractor
    loaded.learn(32)


def test_detach_architecture_value_loss_does_not_reach_the_trunk():
    model, policy_grads, aux_grads, value_grads = gradients_by_output("detach")
    assert model.policy.share_features_extractor
    assert value_grads == {"value_net.weight", "value_net.bias"}
    assert any(n.startswith("mlp_extractor.shared_net.") for n in policy_grads)
    assert any(n.startswith("mlp_extractor.shared_net.") for n in aux_grads)
    # the value head reads the same trunk (same values as the shared computation)
    obs = th.zeros((2, 4))
    with th.no_grad():
        assert th.allclose(model.policy.predict_values(obs), model.policy.forward_auxiliary(obs)[2])


def test_shared_architecture_value_loss_trains_the_trunk():
    _, policy_grads, aux_grads, value_grads = gradients_by_output("shared")
    trunk = {n for n in value_grads if n.startswith("mlp_extractor.shared_net.")}
    assert trunk and trunk <= policy_grads and trunk <= aux_grads


@pytest.mark.parametrize("arch", ["dual", "shared", "detach"])
def test_custom_features_extractor(arch):
    env = make_vec_env(lambda: FakeImageEnv(action_dim=2, screen_height=16, screen_width=16, n_channels=3), n_envs=2)
    policy_kwargs = dict(features_extractor_class=ImpalaCNN, features_extractor_kwargs=dict(features_dim=32), net_arch=[])
    model = make_model(env=env, policy="CnnPolicy", policy_kwargs=policy_kwargs, arch=arch, n_steps=8, batch_size=8)
    assert isinstance(model.policy.features_extractor, ImpalaCNN)
    assert (model.policy.vf_features_extractor is model.policy.features_extractor) == (arch != "dual")
    model.learn(2 * 16)
    assert model.n_aux_phases == 1


# --- spaces ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env_fn",
    [
        lambda: IdentityEnv(4),
        lambda: IdentityEnvBox(ep_length=20),
        lambda: IdentityEnvMultiDiscrete(2),
        lambda: IdentityEnvMultiBinary(3),
    ],
    ids=["Discrete", "Box", "MultiDiscrete", "MultiBinary"],
)
@pytest.mark.parametrize("kl_estimator", ["sample", "exact"])
def test_action_spaces(env_fn, kl_estimator):
    env = make_vec_env(env_fn, n_envs=2)
    model = make_model(env=env, kl_coef=0.5, kl_estimator=kl_estimator)
    dumps = Recorder()
    model.set_logger(Logger(None, [dumps]))
    model.learn(3 * ROLLOUT)
    assert model.n_aux_phases == 1
    clone_kl = [d["aux/clone_kl"] for d in dumps.dumps if "aux/clone_kl" in d]
    assert clone_kl and all(np.isfinite(clone_kl)) and min(clone_kl) > -1e-6
    obs = env.reset()
    action, _ = model.predict(obs, deterministic=True)
    assert env.action_space.contains(action[0])


def test_dict_observations():
    env = make_vec_env(SimpleMultiObsEnv, n_envs=2)
    model = make_model(env=env, policy="MultiInputPolicy", n_steps=8, batch_size=8, arch="shared")
    assert isinstance(model.policy, MultiInputPolicy)
    assert model.aux_buffer.observation_dtypes == {"img": np.dtype(np.uint8), "vec": np.dtype(np.float64)}
    model.learn(2 * 16)
    assert model.n_aux_phases == 1
    obs = model.aux_buffer.observations(np.arange(3))
    assert set(obs) == {"img", "vec"} and obs["img"].dtype == th.uint8


def test_distribution_parameters_rebuild_the_exact_kl():
    th.manual_seed(0)
    cases = [
        (lambda: CategoricalDistribution(4), dict(action_logits=th.randn(5, 4))),
        (lambda: MultiCategoricalDistribution([2, 3]), dict(action_logits=th.randn(5, 5))),
        (lambda: BernoulliDistribution(3), dict(action_logits=th.randn(5, 3))),
        (lambda: DiagGaussianDistribution(2), dict(mean_actions=th.randn(5, 2), log_std=th.randn(2))),
    ]
    for make, inputs in cases:
        p = make().proba_distribution(**inputs)
        q = make().proba_distribution(**{k: v + 0.3 * th.randn_like(v) for k, v in inputs.items()})
        params = [x.clone() for x in distribution_parameters(p)]
        expected = distribution_kl(p, q)
        assert th.allclose(kl_from_parameters(params, q), expected, atol=1e-6)
        assert (expected > 0).all()


# --- persistence, callbacks, logs -----------------------------------------------------------------------------------


def test_save_load_round_trip(tmp_path):
    model = make_model(n_policy_iterations=3, n_aux_epochs=2, aux_learning_rate=1e-3)
    model.learn(4 * ROLLOUT)
    assert (model.phase, model.phase_iteration, model.n_aux_phases) == (1, 1, 1)
    path = tmp_path / "ppg.zip"
    model.save(path)
    # the auxiliary buffer is not saved
    data, params, _ = load_from_zip_file(path)
    # the proximal policy's and the auxiliary optimizer's states are in the data, where SB3's own loader sets them aside
    assert "aux_buffer" not in data and "_policy_phase_time" not in data
    assert "aux_optimizer" not in params and "aux_optimizer_state" in data and "proximal_policy_state" in data

    env = make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=1)
    loaded = PPG_EWMA.load(path, env=env, device="cpu")
    # the phase index is kept, the unfinished policy phase restarts (its data was not saved)
    assert (loaded.phase, loaded.phase_iteration, loaded.n_aux_phases) == (1, 0, 1)
    assert loaded.aux_buffer.size == 0
    assert loaded.aux_learning_rate == 1e-3 and loaded.aux_lr_schedule(1) == 1e-3
    assert th.equal(flat_params(loaded.policy), flat_params(model.policy))
    # the auxiliary optimizer's moments
    saved_state, loaded_state = model.aux_optimizer.state_dict(), loaded.aux_optimizer.state_dict()
    assert saved_state["state"] and saved_state["state"].keys() == loaded_state["state"].keys()
    for key, state in saved_state["state"].items():
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert th.equal(th.as_tensor(state[name]), th.as_tensor(loaded_state["state"][key][name]))
    # the EWMA: averaged weights, weight sum and update count
    assert ewma_state(loaded.proximal_ewma)[1:] == ewma_state(model.proximal_ewma)[1:]
    assert ewma_state(model.proximal_ewma)[1] > 1
    assert th.equal(ewma_state(loaded.proximal_ewma)[0], ewma_state(model.proximal_ewma)[0])

    # training continues with a fresh, whole phase: the EWMA restarts at its first iteration and the auxiliary phase
    # sees all 3 iterations
    dumps = Recorder()
    loaded.set_logger(Logger(None, [dumps]))
    resets = []
    spy(loaded.proximal_ewma, "reset", before=lambda: resets.append(loaded.num_timesteps))
    loaded.learn(4 * ROLLOUT, reset_num_timesteps=False)  # (logs of an iteration are written at the next one)
    assert (loaded.phase, loaded.phase_iteration, loaded.n_aux_phases) == (2, 1, 2)
    assert [d["aux/n_samples"] for d in dumps.dumps if "aux/n_samples" in d] == [3 * ROLLOUT]
    assert resets == [5 * ROLLOUT, 8 * ROLLOUT]
    assert loaded.proximal_ewma.n_updates == 2  # 1 iteration of 2 minibatches since the last phase started


def test_without_auxiliary_phase_a_loaded_model_goes_on_where_it_was_saved(tmp_path):
    # n_aux_epochs=0: no auxiliary buffer to refill, so the phase position (and its logs) continue as without the save
    model = make_model(n_policy_iterations=2, n_aux_epochs=0)
    model.learn(3 * ROLLOUT)
    assert (model.phase, model.phase_iteration) == (1, 1)
    model.save(tmp_path / "ppg.zip")
    loaded = PPG_EWMA.load(tmp_path / "ppg.zip", env=make_vec_env("CartPole-v1", n_envs=N_ENVS), device="cpu")
    assert (loaded.phase, loaded.phase_iteration) == (1, 1)
    for continued in (model, loaded):
        continued.learn(2 * ROLLOUT, reset_num_timesteps=False)
    assert (loaded.phase, loaded.phase_iteration) == (model.phase, model.phase_iteration) == (2, 1)


def test_load_plain_ppg_and_predict(tmp_path):
    model = make_model(PPG, arch="detach")
    model.learn(2 * ROLLOUT)
    model.save(tmp_path / "ppg")
    loaded = PPG.load(tmp_path / "ppg", device="cpu")
    assert loaded.arch == "detach" and loaded.policy.arch == "detach" and loaded.proximal_ewma is None
    obs = np.zeros((3, 4), dtype=np.float32)
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0])
    action, state = model.predict(obs[0])
    assert action.shape == () and state is None


def test_callbacks():
    class Counter(BaseCallback):
        def __init__(self, stop_after=None):
            super().__init__()
            self.steps = self.rollouts = 0
            self.started = self.ended = False
            self.stop_after = stop_after

        def _on_training_start(self):
            self.started = True

        def _on_rollout_end(self):
            self.rollouts += 1

        def _on_step(self):
            self.steps += 1
            return self.stop_after is None or self.steps < self.stop_after

        def _on_training_end(self):
            self.ended = True

    model = make_model()
    counter = Counter()
    model.learn(3 * ROLLOUT, callback=counter)
    assert counter.started and counter.ended
    assert counter.steps == 3 * N_STEPS and counter.rollouts == 3
    stopper = Counter(stop_after=N_STEPS + 3)
    model.learn(10 * ROLLOUT, callback=stopper)
    assert stopper.steps == N_STEPS + 3 and stopper.ended


def test_logged_keys():
    model = make_model(n_policy_iterations=2)
    dumps = Recorder()
    model.set_logger(Logger(None, [dumps]))
    model.learn(4 * ROLLOUT)
    keys = set().union(*dumps.dumps)
    expected = {
        "train/phase",
        "train/phase_iteration",
        "aux/aux_value_loss",
        "aux/clone_kl",
        "aux/value_loss",
        "aux/loss",
        "aux/learning_rate",
        "time/policy_phase_s",
        "time/aux_phase_s",
        "train/policy_gradient_loss",
        "train/value_loss",
        "train/entropy_loss",
        "train/approx_kl",
        "train/clip_fraction",
        "train/proximal_kl",
        "train/imp_samp_capped_fraction",
        "train/ewma_center_of_mass",
        "train/explained_variance",
        "train/learning_rate",
    }
    assert expected <= keys
    phases = [(d["train/phase"], d["train/phase_iteration"]) for d in dumps.dumps if "train/phase" in d]
    assert phases == [(0, 1), (0, 2), (1, 1)]
    aux_dumps = [d for d in dumps.dumps if "aux/n_updates" in d]
    assert len(aux_dumps) == 1 and aux_dumps[0]["aux/n_updates"] == 2 * ROLLOUT // 16


@pytest.mark.parametrize("arch", ["dual", "detach", "shared"])
def test_ewma_follows_the_policy_loss_steps_only(arch):
    # one policy epoch and two value epochs of 2 minibatches: as the authors, value-only steps never update the EWMA,
    # even where (shared trunk) they move the policy
    model = make_model(arch=arch, n_epochs=1, n_value_epochs=2, n_policy_iterations=4)
    steps = []
    spy(model.policy.optimizer, "step", before=lambda *a, **k: steps.append(1))
    model.learn(ROLLOUT)
    assert len(steps) == 4 and model.proximal_ewma.n_updates == 2


def test_ewma_is_not_reset_between_phases_without_an_auxiliary_phase():
    model = make_model(n_policy_iterations=2, n_aux_epochs=0)
    resets = []
    spy(model.proximal_ewma, "reset", before=lambda: resets.append(1))
    model.learn(5 * ROLLOUT)
    # 3 phases started, nothing moved the policy between them: one EWMA over all 5 iterations of 2 minibatches
    assert model.phase == 2 and resets == [] and model.proximal_ewma.n_updates == 10


def test_ppg_ewma_without_the_ewma_trains_as_ppg():
    """PPG_EWMA(PPG) only adds the EWMA: with ``ewma_decay=None`` its policy and auxiliary phases are PPG's, bit for bit."""
    ppg = make_model(PPG).learn(3 * ROLLOUT)  # a policy phase, its auxiliary phase, and an iteration of the next
    ppg_ewma = make_model(PPG_EWMA, ewma_decay=None).learn(3 * ROLLOUT)
    assert ppg.proximal.kind == ppg_ewma.proximal.kind == "behavior" and ppg.n_aux_phases == ppg_ewma.n_aux_phases == 1
    th.testing.assert_close(flat_params(ppg_ewma.policy), flat_params(ppg.policy), rtol=0, atol=0)
