"""Overlapped rollouts (``async_rollouts=True``): staleness, equivalence with the synchronous loop, callbacks, errors."""

import copy
import gc
import glob
import os
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

from sb3_ewma import PPO_EWMA
from sb3_ewma.ablations import StalePPO_EWMA
from sb3_ewma.common.collection.process import CollectorError, check_process_collector
from sb3_ewma.common.policies import policy_copy
from sb3_ewma.ppg_ewma import PPG, PPG_EWMA

N_ENVS, N_STEPS = 2, 16
ROLLOUT = N_ENVS * N_STEPS
SETTINGS = dict(n_steps=N_STEPS, batch_size=16, n_epochs=2, seed=0)


def child_processes() -> list[int]:
    """
    The live (or unreaped) child processes of this process (Linux's /proc), but multiprocessing's resource tracker,
    which a spawn-context pool of another test in this process (the benchmarks' harness) leaves for the process's life.
    """
    children = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = open(stat).read().rsplit(")", 1)[1].split()
            command = open(stat.replace("/stat", "/cmdline"), "rb").read()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and b"multiprocessing.resource_tracker" not in command:
            children.append(int(stat.split("/")[2]))
    return children


def parameters(module: th.nn.Module) -> list[th.Tensor]:
    return [tensor.detach().clone() for tensor in module.state_dict().values()]


def same(first: list[th.Tensor], second: list[th.Tensor]) -> bool:
    return all(th.equal(a, b) for a, b in zip(first, second, strict=True))


class TrainRecorder:
    """
    Wraps ``model.train`` (in a subclass, so that the model still pickles): the policy's parameters before and after
    each call, and a copy of the buffer trained on.
    """

    def __init__(self, model, fail_at: int | None = None, error: BaseException | None = None) -> None:
        self.before: list[list[th.Tensor]] = []
        self.after: list[list[th.Tensor]] = []
        self.buffers: list[dict[str, np.ndarray]] = []
        self.threads: list[str] = []
        train = type(model).train

        def recorded_train(model) -> None:
            self.threads.append(threading.current_thread().name)
            if fail_at is not None and len(self.before) == fail_at:
                raise error  # type: ignore[misc]
            buffer = model.rollout_buffer
            self.buffers.append(
                {
                    name: copy.deepcopy(getattr(buffer, name))
                    for name in ("observations", "actions", "log_probs", "episode_starts")
                }
            )
            self.before.append(parameters(model.policy))
            train(model)
            self.after.append(parameters(model.policy))

        model.__class__ = type(type(model).__name__, (type(model),), {"train": recorded_train})


def stored_log_probs_match(model, params: list[th.Tensor], buffer: dict[str, np.ndarray]) -> bool:
    """Whether a policy with ``params`` gives the buffer's stored log-probabilities on its data (step by step)."""
    policy = policy_copy(model.policy)
    policy.load_state_dict(dict(zip(model.policy.state_dict(), params, strict=True)))
    policy.set_training_mode(False)
    with th.no_grad():
        for step in range(N_STEPS):
            obs = th.as_tensor(buffer["observations"][step])
            actions = th.as_tensor(buffer["actions"][step]).long().flatten()
            _, log_prob, _ = policy.evaluate_actions(obs, actions)
            if not th.allclose(log_prob, th.as_tensor(buffer["log_probs"][step]), atol=1e-6):
                return False
    return True


@pytest.mark.parametrize("algorithm, mode", [(PPO_EWMA, True), (PPG, True), (PPO_EWMA, "process"), (PPG, "process")])
def test_staleness_is_exactly_one_iteration(algorithm, mode, device):
    kwargs = dict(n_policy_iterations=2, n_aux_epochs=1) if algorithm is PPG else {}
    model = algorithm(
        "MlpPolicy",
        make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=0),
        async_rollouts=mode,
        device=device,
        **SETTINGS,
        **kwargs,
    )
    recorder = TrainRecorder(model)
    model.learn(5 * ROLLOUT)
    assert len(recorder.buffers) == 5 and model.num_timesteps == 5 * ROLLOUT
    # the first rollout of a learn call is fresh: collected by the parameters it is trained from
    assert stored_log_probs_match(model, recorder.before[0], recorder.buffers[0])
    for k in range(1, 5):
        # iteration k's data: collected by the parameters of the start of iteration k - 1, not those of iteration k
        assert stored_log_probs_match(model, recorder.before[k - 1], recorder.buffers[k])
        assert not stored_log_probs_match(model, recorder.before[k], recorder.buffers[k])
    # without an EWMA (PPG) the proximal policy is the policy at the start of the iteration, not the behavior policy
    assert model.proximal_ewma is not None


@pytest.mark.parametrize("algorithm", [PPO_EWMA, PPG_EWMA])
def test_first_update_is_the_synchronous_one(algorithm, device):
    results = []
    for async_rollouts in (False, True, "process"):
        env = make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=0)
        model = algorithm("MlpPolicy", env, async_rollouts=async_rollouts, device=device, **SETTINGS)
        recorder = TrainRecorder(model)
        # asynchronously, the second rollout is collected during the first update
        model.learn(2 * ROLLOUT)
        results.append((recorder.buffers[0], recorder.after[0], parameters(model.proximal_ewma.average)))
    (sync_buffer, sync_after, _), *overlapped = results
    for async_buffer, async_after, _ in overlapped:
        for name in sync_buffer:
            np.testing.assert_array_equal(sync_buffer[name], async_buffer[name])
        assert same(sync_after, async_after)


def test_staleness_and_bad_values_are_rejected_before_the_environment_is_used(monkeypatch):
    # any step of this environment raises a RuntimeError
    env = DummyVecEnv([lambda: CrashingEnv(crash_at=1)])
    with pytest.raises(ValueError, match=r"async_rollouts must be False, True .*'thread' or 'process'"):
        PPO_EWMA("MlpPolicy", env, async_rollouts="yes")
    with pytest.raises(ValueError, match=r"async_rollouts='thread' trains on data one iteration stale already"):
        StalePPO_EWMA("MlpPolicy", env, async_rollouts=True).set_staleness(1)
    with pytest.raises(ValueError, match=r"async_rollouts='process' .* needs a model with async_rollouts=False"):
        StalePPO_EWMA("MlpPolicy", env, async_rollouts="process").set_staleness(2)
    with pytest.raises(ValueError, match="async_rollouts must be False, True"):
        PPG_EWMA("MlpPolicy", env, async_rollouts=1)
    # a platform without fork has no collector process
    with monkeypatch.context() as patch:
        patch.delattr(os, "fork")
        with pytest.raises(ValueError, match="async_rollouts='process' forks the collector, which this platform cannot do"):
            PPO_EWMA("MlpPolicy", env, async_rollouts="process")
    check_process_collector()
    model = PPG_EWMA("MlpPolicy", env, async_rollouts="process")
    assert model.async_rollouts is True and model.rollout_collector == "process"
    assert PPO_EWMA("MlpPolicy", env, async_rollouts="thread").rollout_collector == "thread"


class ThreadLog(BaseCallback):
    """Which thread each callback method runs on, and the order of rollout ends and updates."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, str]] = []

    def _log(self, event: str) -> None:
        self.events.append((event, threading.current_thread().name))

    def _on_rollout_start(self) -> None:
        self._log("rollout_start")

    def _on_step(self) -> bool:
        if not self.events or self.events[-1][0] != "step":
            self._log("step")
        return True

    def _on_rollout_end(self) -> None:
        self._log("rollout_end")


def test_callbacks_vecnormalize_checkpoints_and_continuation(tmp_path):
    env = VecNormalize(make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=0))
    model = PPO_EWMA("MlpPolicy", env, async_rollouts=True, **SETTINGS)
    recorder = TrainRecorder(model)
    log, steps = ThreadLog(), StepCounter()
    checkpoints = CheckpointCallback(save_freq=N_STEPS // 2, save_path=str(tmp_path), save_vecnormalize=True)
    model.learn(4 * ROLLOUT, callback=[log, steps, checkpoints], progress_bar=True)
    main = threading.main_thread().name
    assert recorder.threads == [main] * 4
    # every callback runs on this thread, in SB3's order: the first rollout as it is collected, the others (collected
    # on the collector thread during an update) replayed at the hand-off, with the step counts SB3's loop gives them
    assert [event for event, _ in log.events] == ["rollout_start", "step", "rollout_end"] * 4
    assert all(thread == main for _, thread in log.events)
    assert steps.seen == [N_ENVS * (k + 1) for k in range(4 * N_STEPS)]
    assert steps.dones_seen == 4 * N_STEPS
    assert env.obs_rms.count > 4 * ROLLOUT  # normalization statistics updated by the collector
    # every checkpoint holds the parameters of an iteration boundary
    files = sorted(glob.glob(str(tmp_path / "rl_model_*_steps.zip")))
    assert len(files) == 8  # two per rollout
    boundaries = [recorder.before[0], *recorder.after]
    for path in files:
        loaded = PPO_EWMA.load(path)
        assert loaded.async_rollouts
        assert any(same(parameters(loaded.policy), params) for params in boundaries)
    # continuation: same counters, a fresh first rollout
    model.learn(2 * ROLLOUT, reset_num_timesteps=False)
    assert model.num_timesteps == 6 * ROLLOUT
    assert stored_log_probs_match(model, recorder.before[4], recorder.buffers[4])
    assert not any(thread.name == "rollout-collector" for thread in threading.enumerate())


def test_load_takes_the_collector_as_the_constructor_does(tmp_path):
    # SB3's load sets its keywords after the constructor: the collector is chosen from them, not the defaults
    PPO_EWMA("MlpPolicy", "CartPole-v1", async_rollouts="process", **SETTINGS).save(tmp_path / "process.zip")
    PPO_EWMA("MlpPolicy", "CartPole-v1", **SETTINGS).save(tmp_path / "none.zip")
    cases = [
        ("process.zip", {}, (True, "process")),
        ("process.zip", {"async_rollouts": True}, (True, "thread")),  # True: a thread, as in the constructor
        ("process.zip", {"async_rollouts": False}, (False, "thread")),
        ("none.zip", {"async_rollouts": "process"}, (True, "process")),
        ("none.zip", {"async_rollouts": "thread"}, (True, "thread")),
    ]
    for name, keywords, expected in cases:
        loaded = PPO_EWMA.load(tmp_path / name, env="CartPole-v1", **keywords)
        assert (loaded.async_rollouts, loaded.rollout_collector) == expected, (name, keywords)
    model = PPO_EWMA.load(tmp_path / "none.zip", env=make_vec_env("CartPole-v1", n_envs=N_ENVS), async_rollouts="process")
    model.learn(2 * ROLLOUT)
    assert model.num_timesteps == 2 * ROLLOUT and model._proximal_needs_network()


def test_a_process_collectors_file_loads_where_no_process_can_fork(monkeypatch, tmp_path):
    # to predict on another platform; learning there is refused, with the sentence the constructor gives
    import sb3_ewma.common.collection.overlap as overlap
    import sb3_ewma.common.collection.process as process

    PPO_EWMA("MlpPolicy", "CartPole-v1", async_rollouts="process", **SETTINGS).save(tmp_path / "process.zip")

    def cannot_fork() -> None:
        raise ValueError("async_rollouts='process' forks the collector, which this platform cannot do")

    monkeypatch.setattr(overlap, "check_process_collector", cannot_fork)
    monkeypatch.setattr(process, "check_process_collector", cannot_fork)
    model = PPO_EWMA.load(tmp_path / "process.zip", env="CartPole-v1")
    assert model.rollout_collector == "process"
    model.predict(model.observation_space.sample())
    with pytest.raises(ValueError, match="forks the collector"):
        model.learn(ROLLOUT)
    with pytest.raises(ValueError, match="forks the collector"):
        PPO_EWMA("MlpPolicy", "CartPole-v1", async_rollouts="process", **SETTINGS)


@pytest.mark.parametrize("mode", [True, "process"])
def test_overlap_runs_inside_sb3s_learn_loop(monkeypatch, mode):
    """
    SB3's own learn loop runs (once per learn call), with its collect_rollouts handing off; its stop test sees the
    handed-off counts, so the last rollout is trained on and no collection is left running.
    """
    calls = []
    parent_learn = OnPolicyAlgorithm.learn

    def counted_learn(self, *args, **kwargs):
        calls.append(type(self).__name__)
        return parent_learn(self, *args, **kwargs)

    monkeypatch.setattr(OnPolicyAlgorithm, "learn", counted_learn)
    model = PPO_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=0), async_rollouts=mode, **SETTINGS)
    recorder = TrainRecorder(model)
    model.learn(3 * ROLLOUT - 1)  # the third rollout passes the total: SB3 trains on it, then stops
    assert calls == [type(model).__name__]
    assert len(recorder.buffers) == 3 and model.num_timesteps == 3 * ROLLOUT
    assert model.overlapped_rollouts is None
    assert not any(thread.name == "rollout-collector" for thread in threading.enumerate()) and not child_processes()


def test_process_collector_replays_rollouts_to_callbacks_in_this_process(tmp_path):
    env = VecNormalize(make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=0))
    model = PPO_EWMA("MlpPolicy", env, async_rollouts="process", **SETTINGS)
    recorder = TrainRecorder(model)
    log, steps = ThreadLog(), StepCounter()
    checkpoints = CheckpointCallback(save_freq=N_STEPS // 2, save_path=str(tmp_path))
    model.learn(4 * ROLLOUT, callback=[log, steps, checkpoints], progress_bar=True)
    main = threading.main_thread().name
    # every callback runs here, on the main thread, in SB3's order; the other rollouts are replayed at the hand-off
    assert [event for event, _ in log.events] == ["rollout_start", "step", "rollout_end"] * 4
    assert all(thread == main for _, thread in log.events)
    assert steps.seen == [N_ENVS * (k + 1) for k in range(4 * N_STEPS)]
    assert steps.dones_seen == 4 * N_STEPS
    assert model.num_timesteps == 4 * ROLLOUT and len(model.ep_info_buffer) > 0
    # the child's VecNormalize statistics came back with its rollouts (1 reset + 4 rollouts of observations)
    assert env.obs_rms.count == pytest.approx(1e-4 + N_ENVS * (1 + 4 * N_STEPS))
    # checkpoints, saved here at replayed steps, hold the parameters of an iteration boundary
    boundaries = [recorder.before[0], *recorder.after]
    files = sorted(glob.glob(str(tmp_path / "rl_model_*_steps.zip")))
    assert len(files) == 8
    assert all(any(same(parameters(PPO_EWMA.load(path).policy), params) for params in boundaries) for path in files)
    # the child is gone; the next learn call starts with env.reset() (this process's envs stayed at the fork)
    assert model._last_obs is None and not child_processes()
    model.learn(2 * ROLLOUT, reset_num_timesteps=False)
    assert model.num_timesteps == 6 * ROLLOUT and len(recorder.buffers) == 6
    assert stored_log_probs_match(model, recorder.before[4], recorder.buffers[4])


class StepCounter(BaseCallback):
    """``num_timesteps`` at each ``on_step``, and how many steps had every environment's ``dones`` and ``infos``."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []
        self.dones_seen = 0

    def _on_step(self) -> bool:
        self.seen.append(self.model.num_timesteps)
        self.dones_seen += len(self.locals["dones"]) == len(self.locals["infos"]) == N_ENVS
        return True


class StopAfter(BaseCallback):
    def __init__(self, calls: int) -> None:
        super().__init__()
        self.calls = calls

    def _on_step(self) -> bool:
        return self.n_calls < self.calls


@pytest.mark.parametrize("mode", [True, "process"])
def test_a_callback_returning_false_stops_training(mode):
    model = PPG_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=0), async_rollouts=mode, **SETTINGS)
    recorder = TrainRecorder(model)
    model.learn(10 * ROLLOUT, callback=StopAfter(2 * N_STEPS + 3))
    # rollouts 1 and 2 trained on; rollout 3 stopped by the callback at its hand-off (replayed after the second
    # update), not trained on
    assert len(recorder.buffers) == 2
    assert model.num_timesteps == 2 * ROLLOUT + 3 * N_ENVS


class CrashingEnv(gym.Env):
    """CartPole-like spaces; raises at a given step, and records that it was closed."""

    closed = 0

    def __init__(self, crash_at: int) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.crash_at = crash_at
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.steps == self.crash_at:
            raise RuntimeError("the environment crashed")
        return self.observation_space.sample(), 1.0, self.steps % 10 == 0, False, {}

    def close(self) -> None:
        CrashingEnv.closed += 1


def test_an_env_error_in_the_collector_ends_learn_with_it_and_closes_the_env():
    CrashingEnv.closed = 0
    env = DummyVecEnv([lambda: CrashingEnv(crash_at=2 * N_STEPS + 5) for _ in range(N_ENVS)])
    model = PPO_EWMA("MlpPolicy", env, async_rollouts=True, **SETTINGS)
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="the environment crashed") as error:
        model.learn(10 * ROLLOUT)
    assert time.perf_counter() - start < 60
    # the traceback reaches the environment's step, on the collector thread
    assert any(entry.name == "step" and "test_async_rollouts" in str(entry.path) for entry in error.traceback)
    assert CrashingEnv.closed == N_ENVS
    assert not any(thread.name == "rollout-collector" for thread in threading.enumerate())


class FailsAtTrainingStart(BaseCallback):
    def _on_training_start(self) -> None:
        raise RuntimeError("the callback failed")

    def _on_step(self) -> bool:
        return True


@pytest.mark.parametrize("mode", [True, "process"])
def test_a_failure_before_any_collection_leaves_the_environments_open(mode):
    CrashingEnv.closed = 0
    env = DummyVecEnv([lambda: CrashingEnv(crash_at=10**6) for _ in range(N_ENVS)])
    model = PPO_EWMA("MlpPolicy", env, async_rollouts=mode, **SETTINGS)
    with pytest.raises(RuntimeError, match="the callback failed"):
        model.learn(4 * ROLLOUT, callback=FailsAtTrainingStart())
    assert CrashingEnv.closed == 0 and model.overlapped_rollouts is None
    model.learn(2 * ROLLOUT)  # the environments still step
    assert model.num_timesteps == 2 * ROLLOUT


def test_an_env_error_in_the_collector_process_ends_learn_with_it():
    CrashingEnv.closed = 0
    env = DummyVecEnv([lambda: CrashingEnv(crash_at=2 * N_STEPS + 5) for _ in range(N_ENVS)])
    model = PPO_EWMA("MlpPolicy", env, async_rollouts="process", **SETTINGS)
    with pytest.raises(RuntimeError, match="the environment crashed") as error:
        model.learn(10 * ROLLOUT)
    # the child's traceback, as text, is chained to the exception: it reaches the environment's step
    assert isinstance(error.value.__cause__, CollectorError)
    assert "in step" in str(error.value.__cause__) and "test_async_rollouts" in str(error.value.__cause__)
    assert CrashingEnv.closed == N_ENVS  # this process's environments
    assert not child_processes()


class SimulatorLost(Exception):
    """An exception that pickles but cannot be rebuilt from its args (its constructor takes two)."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"code={code}: {detail}")
        self.code = code


class LosingEnv(CrashingEnv):
    def step(self, action):
        if self.steps + 1 == self.crash_at:
            raise SimulatorLost(7, "simulator lost")
        return super().step(action)


def test_an_env_error_that_does_not_unpickle_still_names_itself():
    """The child sends its type and message when the exception would not come back from pickle (a TypeError of its
    constructor in the parent hid the environment's error and the child's traceback)."""
    env = DummyVecEnv([lambda: LosingEnv(crash_at=2 * N_STEPS + 5) for _ in range(N_ENVS)])
    model = PPO_EWMA("MlpPolicy", env, async_rollouts="process", **SETTINGS)
    with pytest.raises(RuntimeError, match="SimulatorLost: code=7: simulator lost") as error:
        model.learn(10 * ROLLOUT)
    assert isinstance(error.value.__cause__, CollectorError) and "in step" in str(error.value.__cause__)
    assert not child_processes()


class RaisingCallback(BaseCallback):
    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def _on_step(self) -> bool:
        if self.n_calls == self.at:
            raise ValueError("callback failed")
        return True


@pytest.mark.parametrize("failure, mode", [("callback", True), ("train", True), ("callback", "process"), ("train", "process")])
def test_callback_errors_and_interrupts_surface_on_the_caller_thread(failure, mode):
    CrashingEnv.closed = 0
    env = DummyVecEnv([lambda: CrashingEnv(crash_at=10**9) for _ in range(N_ENVS)])
    model = PPO_EWMA("MlpPolicy", env, async_rollouts=mode, **SETTINGS)
    if failure == "callback":
        expected, callback = ValueError, RaisingCallback(at=N_STEPS + 3)
    else:
        # Ctrl-C arrives on the main thread, here during the second update (while the third rollout is collected)
        expected, callback = KeyboardInterrupt, None
        TrainRecorder(model, fail_at=1, error=KeyboardInterrupt())
    with pytest.raises(expected):
        model.learn(10 * ROLLOUT, callback=callback)
    # a collection abandoned during an update leaves the environments mid-rollout: closed; a callback fails at a
    # replayed step, the collector joined: they stay open
    assert CrashingEnv.closed == (N_ENVS if failure == "train" else 0)
    assert not any(thread.name == "rollout-collector" for thread in threading.enumerate())
    assert not child_processes()


def test_benchmarks_run_the_async_variants(tmp_path):
    from benchmarks.learning import overlapped_rollouts as async_rollouts
    from benchmarks.timing import throughput

    assert throughput.base_algorithm("ppo_ewma_async") == ("ppo_ewma", True)
    assert throughput.base_algorithm("ppo") == ("ppo", False)
    assert throughput.base_algorithm("ppg_process") == ("ppg", "process")
    config = throughput.parse_args(["--preset", "cartpole", "--algos", "all"])
    assert config["algos"] == list(throughput.ALL_ALGORITHMS) and "ppo_async" not in config["algos"]
    assert "ppo_ewma_process" in config["algos"] and "ppo_process" not in config["algos"]
    assert throughput.settings_for("ppo_ewma_process", config)["async_rollouts"] == "process"
    settings = throughput.settings_for("ppg_ewma_async", config)
    assert settings["async_rollouts"] and settings["gamma"] == 0.98 and settings["batch_size"] == 256
    assert "async_rollouts" not in throughput.settings_for("ppo", config)
    minatar = throughput.parse_args(["--preset", "minatar", "--algos", "ppo,ppo_ewma_process"])
    assert minatar["env"] == "MinAtar/Breakout-v1" and minatar["n_envs"] == 64
    settings = throughput.settings_for("ppo_ewma_process", minatar)
    assert (settings["batch_size"], settings["n_epochs"], settings["gamma"]) == (1024, 3, 0.99)
    # the learning comparison, end to end at its smoke scale
    out_dir = async_rollouts.main(["--preset", "smoke", "--out", str(tmp_path), "--workers", "1"])
    text = (out_dir / "results.md").read_text()
    assert "| sync |" in text and "| async |" in text and (out_dir / "async_rollouts.png").stat().st_size > 0
    # the cpu preset: CartPole with every variant, MinAtar Breakout at the learning benchmarks' settings; --envs picks
    specs = async_rollouts.build_specs("cpu", {})
    breakout = [spec for spec in specs if spec.env == "MinAtar/Breakout-v1"]
    assert {spec.variant for spec in breakout} == {"sync", "async", "async_process"} and len(breakout) == 9
    assert {spec.hyperparams["async_rollouts"] for spec in breakout} == {False, True, "process"}
    assert all(spec.n_envs == 64 and spec.hyperparams["batch_size"] == 1024 for spec in breakout)
    assert len(specs) == 9 + 3 * len(async_rollouts.VARIANTS)
    assert {spec.env for spec in async_rollouts.build_specs("cpu", {"envs": ("CartPole-v1",)})} == {"CartPole-v1"}
    with pytest.raises(ValueError, match="has the environments"):
        async_rollouts.build_specs("cpu", {"envs": ("Pendulum-v1",)})


def _learn_in_a_daemonic_worker(mode: str) -> int:
    # on the CPU: a process forked after its parent has used CUDA cannot use CUDA (torch's rule), and pytest's worker
    # may have
    env = make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=0)
    model = PPO_EWMA("MlpPolicy", env, async_rollouts=mode, device="cpu", **SETTINGS)
    model.learn(3 * ROLLOUT)
    return model.num_timesteps


def test_the_collector_process_acts_with_a_cpu_copy_of_a_learner_on_another_device(monkeypatch):
    """
    A learner on a GPU: the collector process's behavior policy is a CPU copy, in shared memory, that each snapshot
    fills from the learner's device, and the child collects with it without touching the learner's device. Here the
    learner's device is made to read as CUDA (its tensors stay on the CPU), so that a CPU machine shows the mechanism.
    """
    from sb3_ewma.common.collection.process import ProcessRolloutCollector

    model = PPO_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=0), device="cpu", **SETTINGS)
    model.device = th.device("cuda", 0)
    _, callback = model._setup_learn(4 * ROLLOUT, None)
    collector = ProcessRolloutCollector(model, callback)
    behavior = collector.behavior_policy
    assert {tensor.device.type for tensor in behavior.state_dict().values()} == {"cpu"}
    assert all(tensor.is_shared() for tensor in behavior.parameters())
    with th.no_grad():
        for param in model.policy.parameters():
            param.add_(0.5)
    buffer = model._make_rollout_buffer()
    try:
        collector.start(model.env, buffer)  # snapshot, fork, collect in the child
        assert same(parameters(behavior), parameters(model.policy))
        assert collector.hand_off()
    finally:
        collector.close()
    assert buffer.full and model.num_timesteps == ROLLOUT
    # the child acted with the snapshot: its log-probabilities are those of the learner's parameters
    data = {name: getattr(buffer, name) for name in ("observations", "actions", "log_probs", "episode_starts")}
    assert stored_log_probs_match(model, parameters(model.policy), data)
    assert not child_processes()


def test_the_collector_process_moves_the_carried_state_to_its_device():
    """The LSTM states a recurrent rollout carries go to the collector's device before the fork (a tree of tensors)."""
    from sb3_contrib.common.recurrent.type_aliases import RNNStates

    from sb3_ewma.common.collection.rollout import tensors_to

    states = RNNStates((th.ones(1, 2, 3), th.zeros(1, 2, 3)), (th.ones(1, 2, 3), th.zeros(1, 2, 3)))
    moved = tensors_to({"lstm": states, "obs": np.zeros(2), "n": [th.ones(1)]}, th.device("meta"))
    assert isinstance(moved["lstm"], RNNStates) and isinstance(moved["lstm"].pi, tuple)
    assert {tensor.device.type for tensor in (*moved["lstm"].pi, *moved["lstm"].vf, *moved["n"])} == {"meta"}
    assert isinstance(moved["obs"], np.ndarray)
    assert states.pi[0].device.type == "cpu"  # a copy: the original stays where it was


def test_collector_process_inside_a_pool_worker():
    """multiprocessing.Pool workers are daemonic, and multiprocessing.Process refuses them children: os.fork does not."""
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(_learn_in_a_daemonic_worker, ("process",)) == 3 * ROLLOUT


def test_collector_process_trains_the_model_a_thread_trains():
    """
    The same computation: CartPole's environments draw from their own seeded generators, training from none of torch's.
    On the CPU: with a learner on a GPU the thread acts on the GPU and the process with a CPU copy, whose numbers and
    random generator differ.
    """
    trained = []
    for mode in (True, "process"):
        env = make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=0)
        model = PPO_EWMA("MlpPolicy", env, async_rollouts=mode, device="cpu", **SETTINGS)
        model.learn(5 * ROLLOUT)
        trained.append(parameters(model.policy))
    assert same(*trained)


def test_collector_process_with_dict_observations():
    from stable_baselines3.common.envs import SimpleMultiObsEnv

    env = DummyVecEnv([lambda: SimpleMultiObsEnv(random_start=True) for _ in range(N_ENVS)])
    model = PPO_EWMA("MultiInputPolicy", env, async_rollouts="process", **SETTINGS)
    recorder = TrainRecorder(model)
    model.learn(3 * ROLLOUT)
    assert model.num_timesteps == 3 * ROLLOUT and len(recorder.after) == 3
    # the rollouts collected by the child arrived whole: every observation key, every step
    observations = model.rollout_buffer.observations
    assert set(observations) == set(env.observation_space.spaces)
    assert all(len(values) == N_STEPS * N_ENVS or len(values) == N_STEPS for values in observations.values())
    assert np.abs(model.rollout_buffer.log_probs).sum() > 0


def test_collector_process_with_return_normalization_only():
    """VecNormalize(norm_obs=False), as the Procgen environments use it, has no observation statistics to send."""
    env = VecNormalize(make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=0), norm_obs=False, norm_reward=True)
    model = PPO_EWMA("MlpPolicy", env, async_rollouts="process", **SETTINGS)
    model.learn(3 * ROLLOUT)
    assert "obs_rms" not in vars(env)
    assert env.ret_rms.count == pytest.approx(1e-4 + 3 * ROLLOUT)


def test_collector_process_refuses_environments_that_step_in_threads():
    """Procgen steps its environments in threads of its own, which a forked child lacks: it would hang at its first step."""
    pytest.importorskip("procgen")
    from sb3_ewma.envs import make_procgen_env

    threaded = make_procgen_env("starpilot", n_envs=2, distribution_mode="easy", seed=0)
    with pytest.raises(ValueError, match="async_rollouts='process' forks the environments, and ProcgenVecEnv"):
        PPO_EWMA("CnnPolicy", threaded, async_rollouts="process")
    # set after construction: checked again when learn() starts the collector, before any step
    model = PPO_EWMA(
        "CnnPolicy",
        make_procgen_env("starpilot", n_envs=2, distribution_mode="easy", seed=0, num_threads=0),
        n_steps=8,
        batch_size=16,
        async_rollouts="process",
    )
    model.env = threaded
    with pytest.raises(ValueError, match="async_rollouts='process' forks the environments"):
        model.learn(64)
    # procgen's num_threads=0 steps on the calling thread: forkable
    single_threaded = make_procgen_env("starpilot", n_envs=2, distribution_mode="easy", seed=0, num_threads=0)
    model = PPO_EWMA("CnnPolicy", single_threaded, n_steps=8, batch_size=16, n_epochs=1, async_rollouts="process", seed=0)
    model.learn(4 * 16)
    assert model.num_timesteps == 4 * 16
    threaded.close()


class ActsInForkedChild(CrashingEnv):
    """Steps normally in the process that made it; in a forked child, calls :meth:`in_forked_child` first."""

    def __init__(self) -> None:
        super().__init__(crash_at=10**9)
        self.owner = os.getpid()

    def in_forked_child(self) -> None:
        raise NotImplementedError

    def step(self, action):
        if os.getpid() != self.owner:
            self.in_forked_child()
        return super().step(action)


class BlocksInForkedChild(ActsInForkedChild):
    """In a forked child, waits forever (as threaded environments do)."""

    def in_forked_child(self) -> None:
        threading.Event().wait()


class WaitsWhenFinalizedInForkedChild:
    """Garbage (a reference cycle) whose finalizer, run in a forked child, waits forever (as one waiting on threads
    that only the parent has would)."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        self.cycle = self

    def __del__(self) -> None:
        if os.getpid() != self.owner:
            threading.Event().wait()


class CollectsGarbageInForkedChild(ActsInForkedChild):
    """In a forked child, runs the garbage collector at every step (as any allocation may)."""

    def in_forked_child(self) -> None:
        gc.collect()


def test_the_collector_process_never_finalizes_the_parents_garbage(monkeypatch):
    from sb3_ewma.common.collection import process as process_collector

    monkeypatch.setattr(process_collector, "STALL_TIMEOUT_S", 5.0)
    env = DummyVecEnv([CollectsGarbageInForkedChild for _ in range(N_ENVS)])
    model = PPO_EWMA("MlpPolicy", env, async_rollouts="process", **SETTINGS)
    gc.disable()  # the garbage outlives the fork
    try:
        WaitsWhenFinalizedInForkedChild()
        model.learn(4 * ROLLOUT)
    finally:
        gc.enable()
        gc.collect()  # finalized here, in the parent
    assert model.num_timesteps == 4 * ROLLOUT
    assert not child_processes()


@pytest.mark.parametrize("collecting", [True, False])
def test_the_collector_process_is_forked_with_the_garbage_collector_off(monkeypatch, collecting):
    # the child freezes the parent's objects before anything runs in it; until then no collection may start there
    fork, at_fork = os.fork, []

    def recording_fork() -> int:
        at_fork.append(gc.isenabled())
        return fork()

    monkeypatch.setattr(os, "fork", recording_fork)
    model = PPO_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=N_ENVS), async_rollouts="process", **SETTINGS)
    if not collecting:
        gc.disable()
    try:
        model.learn(3 * ROLLOUT)
        assert at_fork == [False]
        assert gc.isenabled() is collecting  # the parent's setting, back after the fork
    finally:
        gc.enable()
    assert model.num_timesteps == 3 * ROLLOUT


def test_a_stuck_collector_process_is_killed_not_waited_for(monkeypatch, capfd):
    from sb3_ewma.common.collection import process as process_collector

    monkeypatch.setattr(process_collector, "STALL_TIMEOUT_S", 2.0)
    env = DummyVecEnv([BlocksInForkedChild for _ in range(N_ENVS)])
    model = PPO_EWMA("MlpPolicy", env, async_rollouts="process", **SETTINGS)
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="used no CPU time for 2 s"):
        model.learn(10 * ROLLOUT)
    assert time.perf_counter() - start < 30
    assert not child_processes()
    # before it was killed, the child printed where it waited: the environment's step
    stderr = capfd.readouterr().err
    assert "Current thread" in stderr and 'test_async_rollouts.py", line' in stderr and "in step" in stderr, stderr


class MaskingSeen(BaseCallback):
    """The rollout loop's use_masking, as the callbacks see it at each step."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def _on_step(self):
        self.seen.append(self.locals.get("use_masking"))
        return True


@pytest.mark.parametrize("async_rollouts", [True, "process"])
@pytest.mark.parametrize("use_masking", [True, False])
def test_a_replayed_rollout_gives_the_callbacks_maskable_ppos_use_masking(async_rollouts, use_masking):
    from sb3_contrib.common.envs import InvalidActionEnvDiscrete

    from sb3_ewma import MaskablePPO_EWMA

    env = DummyVecEnv([lambda: InvalidActionEnvDiscrete(dim=4, n_invalid_actions=2)])
    model = MaskablePPO_EWMA("MlpPolicy", env, n_steps=16, batch_size=16, n_epochs=1, async_rollouts=async_rollouts)
    callback = MaskingSeen()
    model.learn(64, callback=callback, use_masking=use_masking)
    # MaskablePPO's loop has it as an argument: every step, also of the rollouts replayed at the hand-off (3 of 4)
    assert callback.seen == [use_masking] * 64
