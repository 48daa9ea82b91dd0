"""The pieces DecoupledAlgorithm composes: the proximal policy, the options object and the constructors' helpers."""

import pytest
import torch as th
from stable_baselines3.common.callbacks import BaseCallback, CallbackList, ConvertCallback

from sb3_ewma import PPG, PPO_EWMA, MaskablePPO_EWMA
from sb3_ewma.common.decoupled.proximal import ProximalPolicy
from sb3_ewma.common.distributed.training import DataParallelCallback, DataParallelTraining
from sb3_ewma.common.rules import RELATIONS, RULES, check_hyperparameters

SMALL = dict(n_steps=16, batch_size=8, n_epochs=2, device="cpu", seed=0)


def parameters(module: th.nn.Module) -> list[th.Tensor]:
    return [param.detach().clone() for param in module.parameters()]


def move_policy(model: PPO_EWMA) -> None:
    with th.no_grad():
        for param in model.policy.parameters():
            param.add_(0.5)


def test_an_ewma_proximal_policy_moves_only_on_step():
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", ewma_decay=0.5, **SMALL)
    proximal = model.proximal
    assert proximal.kind == "ewma" and proximal.decay == 0.5 and proximal.network is model.proximal_ewma.average
    before = parameters(proximal.network)
    move_policy(model)
    proximal.start_iteration()  # an EWMA is not a snapshot: the start of an iteration leaves it
    assert all(th.equal(a, b) for a, b in zip(before, parameters(proximal.network)))
    proximal.step()
    # bias-corrected EWMA of (theta_0, theta_0 + 0.5) with decay 0.5: weights 0.5 and 1 -> theta_0 + 0.5 / 1.5
    for initial, averaged, name in zip(before, parameters(proximal.network), dict(proximal.network.named_parameters())):
        if not name.startswith(("value_net.", "mlp_extractor.value_net.")):
            th.testing.assert_close(averaged, initial + 0.5 / 1.5)
    proximal.restart()  # PPG's phase start: the EWMA restarts from the policy
    policy_state = model.policy.state_dict()
    for name, value in proximal.network.state_dict().items():
        if not name.startswith(("value_net.", "mlp_extractor.value_net.")):
            th.testing.assert_close(value, policy_state[name])


def test_a_snapshot_proximal_policy_follows_the_start_of_each_iteration():
    # without an EWMA, the exact KL penalty needs the proximal distribution: a snapshot of the policy
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", ewma_decay=None, kl_coef=0.1, kl_estimator="exact", **SMALL)
    proximal = model.proximal
    assert proximal.kind == "snapshot" and proximal.decay is None
    move_policy(model)
    proximal.step()  # no EWMA: a step leaves the snapshot
    assert not th.equal(next(proximal.network.parameters()), next(model.policy.parameters()))
    proximal.start_iteration()
    assert th.equal(next(proximal.network.parameters()), next(model.policy.parameters()))


def test_the_behavior_proximal_policy_is_the_buffers_log_probabilities():
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", ewma_decay=None, **SMALL)
    proximal = model.proximal
    assert proximal.kind == "behavior" and proximal.network is None and model.proximal_ewma is None
    behavior_log_prob = th.tensor([-0.1, -2.0])
    log_prob, distribution = proximal.log_prob(None, th.tensor([0, 1]), behavior_log_prob)
    assert log_prob is behavior_log_prob and distribution is None
    proximal.start_iteration(), proximal.step(), proximal.restart()  # nothing to move, nothing built
    assert proximal.kind == "behavior" and proximal.network is None


def test_the_proximal_log_prob_is_the_networks_with_or_without_its_distribution():
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", ewma_decay=0.5, **SMALL)
    model.learn(16)
    rollout_data = next(model.rollout_buffer.get(8))
    actions = rollout_data.actions.long().flatten()
    lean, none = model.proximal.log_prob(rollout_data, actions, rollout_data.old_log_prob)
    full, distribution = model.proximal.log_prob(rollout_data, actions, rollout_data.old_log_prob, with_distribution=True)
    assert none is None and distribution is not None
    th.testing.assert_close(lean, full, rtol=0, atol=1e-6)
    th.testing.assert_close(full, model.proximal.distribution(rollout_data).log_prob(actions))


def test_a_proximal_policy_with_its_own_distribution_uses_it():
    calls = []

    class Network(th.nn.Module):
        pass

    class EWMA:
        average = Network()

    def distribution(network, minibatch):
        calls.append((network, minibatch))
        return th.distributions.Categorical(logits=th.zeros(2, 3))

    proximal = ProximalPolicy(EWMA(), 0.5, distribution)
    log_prob, none = proximal.log_prob("minibatch", th.tensor([0, 2]), th.zeros(2))
    assert none is None and calls == [(EWMA.average, "minibatch")]
    th.testing.assert_close(log_prob, th.log(th.full((2,), 1 / 3)))


def decoupled_options(**changes: object) -> dict:
    options = dict(
        ewma_decay="auto",
        kl_coef=0.0,
        kl_estimator="sample",
        imp_samp_max=100.0,
        normalize_advantage=True,
        advantage_normalization="minibatch",
        advantage_ewma_decay=0.0,
        minibatch_sampling="steps",
        log_gradient_noise_scale=False,
        distributed=None,
        async_rollouts=False,
        batch_size=8,
        n_steps=16,
    )
    return {**options, **changes}


def check_decoupled_options(**options):
    check_hyperparameters(options, RULES, RELATIONS)


def test_the_options_are_checked_with_the_hyperparameters_they_depend_on():
    check_decoupled_options(**decoupled_options(kl_coef=0.1, minibatch_sampling="rollouts"))
    with pytest.raises(ValueError, match=r"kl_estimator must be one of \('sample', 'exact'\), got 'approx'"):
        check_decoupled_options(**decoupled_options(kl_estimator="approx"))
    with pytest.raises(ValueError, match="async_rollouts"):
        check_decoupled_options(**decoupled_options(async_rollouts="yes"))
    with pytest.raises(ValueError, match="log_gradient_noise_scale must be True or False, got 'yes'"):
        check_decoupled_options(**decoupled_options(log_gradient_noise_scale="yes"))
    # minibatch_sampling="rollouts" against the parent's batch_size and n_steps
    with pytest.raises(ValueError, match="minibatch_sampling"):
        check_decoupled_options(**decoupled_options(minibatch_sampling="rollouts", batch_size=24))
    with pytest.raises(ValueError, match="advantage_normalization='ewma' needs normalize_advantage=True"):
        check_decoupled_options(**decoupled_options(advantage_normalization="ewma", normalize_advantage=False))


def test_every_option_is_an_attribute_of_the_model():
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", kl_coef=0.1, minibatch_sampling="rollouts", **SMALL)
    for name, value in decoupled_options(kl_coef=0.1, minibatch_sampling="rollouts").items():
        assert getattr(model, name) == value, name


def test_learn_rejects_an_unknown_keyword_as_python_does():
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", **SMALL)
    with pytest.raises(TypeError, match=r"learn\(\) got an unexpected keyword argument 'use_masking'"):
        model.learn(16, use_masking=False)
    assert model.num_timesteps == 0


def test_maskable_learn_takes_use_masking_where_maskable_ppo_does(monkeypatch):
    """MaskablePPO's positional order (..., reset_num_timesteps, use_masking, progress_bar) means the same here."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # CartPole has no action masks: a warning at construction
        model = MaskablePPO_EWMA("MlpPolicy", "CartPole-v1", **SMALL)
    model.learn(16, None, 1, "run", True, False)  # use_masking=False: trains without the masks CartPole lacks
    assert model.num_timesteps == 16
    with pytest.raises(ValueError, match=r"or call learn\(use_masking=False\) to train without masks"):
        model.learn(16, None, 1, "run", True, True)
    model.learn(16, None, 1, "run", False, False, False)  # and progress_bar after it
    assert model.num_timesteps == 32
    with pytest.raises(TypeError, match=r"learn\(\) takes from 2 to 8 positional arguments but 9 were given"):
        model.learn(16, None, 1, "run", False, False, False, True)
    with pytest.raises(TypeError, match=r"learn\(\) got multiple values for argument 'use_masking'"):
        model.learn(16, None, 1, "run", False, False, use_masking=False)


def test_learn_takes_progress_bar_by_position_as_sb3_does(monkeypatch):
    shown = []
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", **SMALL)
    original = type(model)._init_callback

    def init_callback(self, callback, progress_bar=False):
        shown.append(progress_bar)
        return original(self, callback, False)  # no bar drawn in the test's output

    monkeypatch.setattr(type(model), "_init_callback", init_callback)
    model.learn(16, None, 1, "run", True, True)  # SB3's order: progress_bar after reset_num_timesteps
    model.learn(16, None, 1, "run", False, progress_bar=True)
    model.learn(16, None, 1, "run", False)
    assert shown == [True, True, False]
    with pytest.raises(TypeError, match=r"learn\(\) takes from 2 to 7 positional arguments but 8 were given"):
        model.learn(16, None, 1, "run", False, False, True)
    with pytest.raises(TypeError, match=r"learn\(\) got multiple values for argument 'progress_bar'"):
        model.learn(16, None, 1, "run", False, True, progress_bar=True)


def test_the_tensorboard_run_is_named_after_the_packages_class(monkeypatch):
    from stable_baselines3.common import base_class

    names = []
    configure = base_class.utils.configure_logger

    def record(verbose, tensorboard_log, tb_log_name, *args, **kwargs):
        names.append(tb_log_name)
        return configure(verbose, tensorboard_log, tb_log_name, *args, **kwargs)

    monkeypatch.setattr(base_class.utils, "configure_logger", record)

    class MyPPO(PPO_EWMA):
        pass

    MyPPO("MlpPolicy", "CartPole-v1", **SMALL).learn(16)
    PPG("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu").learn(16)
    PPO_EWMA("MlpPolicy", "CartPole-v1", **SMALL).learn(16, tb_log_name="mine")
    assert names == ["PPO_EWMA", "PPG", "mine"]


class FakeContext:
    """The collectives of a data-parallel context, recorded instead of run (rank 0 of 2 unless told)."""

    world_size = 2

    def __init__(self, rank: int = 0, stop_after_checks: int | None = None) -> None:
        self.rank = rank
        self.checked: list[dict] = []
        self.averaged: list[list[th.Tensor]] = []
        self.stop_after_checks = stop_after_checks

    def check_same_settings(self, settings, advice=""):
        self.checked.append(settings)
        if len(self.checked) == self.stop_after_checks:
            raise RuntimeError("stopped by the test")

    def average_gradients(self, parameters):
        # what the all-reduce would average: the gradients there when it runs
        self.averaged.append([parameter for parameter in parameters if parameter.grad is not None])


def fake_data_parallel(context: FakeContext) -> DataParallelTraining:
    data_parallel = object.__new__(DataParallelTraining)
    data_parallel.context = context
    data_parallel._gradient_hooks = []
    data_parallel._accumulating = False
    return data_parallel


def test_ranks_must_agree_on_the_budget_then_on_staleness_when_learn_starts():
    from sb3_ewma.ablations import StalePPO_EWMA

    context = FakeContext(stop_after_checks=2)
    model = StalePPO_EWMA("MlpPolicy", "CartPole-v1", **SMALL).set_staleness(2, "behavior")
    model.data_parallel = fake_data_parallel(context)
    with pytest.raises(RuntimeError, match="stopped by the test"):
        model.learn(64)
    assert context.checked[0]["total_timesteps (learn)"] == 64  # learn's, before SB3's _setup_learn
    assert context.checked[1] == {"staleness": 2, "staleness_mode": "behavior"}  # StalePPO_EWMA's _setup_learn
    assert model.num_timesteps == 0  # nothing collected


@pytest.mark.parametrize("reset_num_timesteps", [True, False])
def test_ranks_compare_the_count_learn_continues_from(reset_num_timesteps):
    """
    A learn call that counts from 0 again is refused by no rank for the counts an earlier call stopped at (a callback
    of rank 0 that stops training mid-rollout leaves the ranks at different counts); one that continues the count
    compares it.
    """
    context = FakeContext(stop_after_checks=1)
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", **SMALL)
    model.num_timesteps = 140  # where this rank stopped
    model.data_parallel = fake_data_parallel(context)
    with pytest.raises(RuntimeError, match="stopped by the test"):
        model.learn(64, reset_num_timesteps=reset_num_timesteps)
    assert context.checked[0] == {
        "total_timesteps (learn)": 64,
        "num_timesteps (start of learn)": 0 if reset_num_timesteps else 140,
    }


def test_gradients_are_averaged_once_at_the_end_of_each_backward_pass():
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", **SMALL)
    context = FakeContext()
    data_parallel = fake_data_parallel(context)
    data_parallel._average_gradients_after_backward(model.policy)
    data_parallel._average_gradients_after_backward(model.policy)  # again (a reload): the old hooks are removed
    observations = th.zeros((4, 4))
    values = model.policy.predict_values(observations)
    values.sum().backward()
    # once, after the pass: with every gradient it computed (the value function's)
    value_parameters = [*model.policy.mlp_extractor.value_net.parameters(), *model.policy.value_net.parameters()]
    assert len(context.averaged) == 1
    assert {id(parameter) for parameter in context.averaged[0]} == {id(parameter) for parameter in value_parameters}

    # a pass that raises after its first gradient (its averaging queued, then dropped by torch) leaves no stale
    # state: the next pass averages once
    def fail(parameter: th.Tensor) -> None:
        raise RuntimeError("a failing pass")

    handle = model.policy.value_net.bias.register_post_accumulate_grad_hook(fail)
    with pytest.raises(RuntimeError, match="a failing pass"):
        model.policy.predict_values(observations).sum().backward()
    handle.remove()
    context.averaged.clear()
    model.policy.predict_values(observations).sum().backward()
    assert len(context.averaged) == 1


def test_ppg_averages_an_accumulated_auxiliary_gradient_once():
    """
    PPG's auxiliary minibatch of 128 rows in micro-batches of 32: its gradient, accumulated over the four backward
    passes, is averaged over the ranks once, after the last (DistributedDataParallel's ``no_sync``), per optimizer step.
    """
    model = PPG("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, n_policy_iterations=4, n_aux_epochs=2,
                aux_batch_size=128, aux_micro_batch_size=32, device="cpu", seed=0)  # fmt: skip
    model.learn(128)  # one policy phase of four iterations, then its auxiliary phase (the buffer keeps the 128 rows)
    assert model.aux_buffer is not None and model.aux_buffer.size == 128 and model.n_aux_phases == 1
    context = FakeContext()
    model.data_parallel = data_parallel = fake_data_parallel(context)
    data_parallel._average_gradients_after_backward(model.policy)
    updates = []
    step = model.aux_optimizer.step
    model.aux_optimizer.step = lambda *args, **kwargs: (updates.append(len(context.averaged)), step(*args, **kwargs))[1]
    model._auxiliary_phase()
    assert updates == [1, 2]  # one averaging before each of the two epochs' steps (4 micro-batches each)
    with data_parallel.accumulating():
        model.policy.predict_values(th.zeros((4, 4))).sum().backward()
    assert len(context.averaged) == 2


@pytest.mark.parametrize("given", ["none", "callback", "list", "function"])
def test_rank_0_runs_the_data_parallel_callback_before_the_users(given):
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", **SMALL)
    data_parallel = fake_data_parallel(FakeContext(rank=0))

    class Mine(BaseCallback):
        def _on_step(self) -> bool:
            return True

    user = {"none": None, "callback": Mine(), "list": [Mine(), Mine()], "function": lambda _locals, _globals: True}[given]
    callback, progress_bar = data_parallel.start_learn(64, 0, user, True, model.set_logger)
    assert isinstance(callback, CallbackList) and progress_bar
    assert isinstance(callback.callbacks[0], DataParallelCallback)
    expected = {"none": 0, "callback": 1, "list": 2, "function": 1}[given]
    assert len(callback.callbacks) == 1 + expected
    if given == "function":
        assert isinstance(callback.callbacks[1], ConvertCallback)
    elif given != "none":
        assert callback.callbacks[1:] == (user if isinstance(user, list) else [user])


def test_other_ranks_run_the_data_parallel_callback_alone_without_progress_bar():
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", **SMALL)
    callback, progress_bar = fake_data_parallel(FakeContext(rank=1)).start_learn(
        64, 0, [ConvertCallback(None)], True, model.set_logger
    )
    assert isinstance(callback, DataParallelCallback) and not progress_bar
    assert model.logger.output_formats == []  # this rank writes no log
