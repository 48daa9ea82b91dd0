"""
Scenarios of data-parallel training, run by tests/test_distributed.py under torchrun (2 ranks, gloo, CPU):

    torchrun --standalone --nproc-per-node 2 tests/distributed_scenarios.py SCENARIO OUT_DIR

Each check raises on failure (torchrun then ends the job); rank 0 records the checks that passed in
``OUT_DIR/passed.json``, so that each test reports its own check.
"""

import atexit
import contextlib
import gc
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
import torch.distributed as dist
from sb3_contrib.common.envs import InvalidActionEnvDiscrete
from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import VecNormalize

from sb3_ewma import PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA

th.set_num_threads(1)
N_STEPS = 8
SMALL_NET = {"net_arch": [16]}
PPG_NET = {"net_arch": [16]}
BUFFER_FIELDS = ("observations", "actions", "rewards", "returns", "episode_starts", "values", "log_probs", "advantages")
LSTM_NET = {"net_arch": [16], "lstm_hidden_size": 8}
# the recurrent buffer's LSTM states, of shape (n_steps, n_layers, n_envs, hidden_size): environments on axis 2
LSTM_STATE_FIELDS = ("hidden_states_pi", "cell_states_pi", "hidden_states_vf", "cell_states_vf")


def masked_env() -> gym.Env:
    return InvalidActionEnvDiscrete(dim=4, ep_length=10, n_invalid_actions=1)


def setup_of(algo: type) -> tuple[str, Any, dict[str, Any], tuple[str, ...]]:
    """The policy, environment, network and buffer fields (those of a rollout's data) of an algorithm's scenarios."""
    if algo is RecurrentPPO_EWMA:
        return "MlpLstmPolicy", "CartPole-v1", LSTM_NET, BUFFER_FIELDS + LSTM_STATE_FIELDS
    if algo is MaskablePPO_EWMA:
        return "MlpPolicy", masked_env, SMALL_NET, (*BUFFER_FIELDS, "action_masks")
    return "MlpPolicy", "CartPole-v1", SMALL_NET, BUFFER_FIELDS


def envs_of(field: str, values: np.ndarray, first: int, count: int) -> np.ndarray:
    """Environments ``first ... first + count - 1`` of a buffer field."""
    if field in LSTM_STATE_FIELDS:
        return values[:, :, first : first + count]
    return values[:, first : first + count]


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))


def gather(value: Any) -> list[Any]:
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def state_of(model: Any) -> dict[str, th.Tensor]:
    """The policy's and the proximal EWMA's tensors."""
    state = {f"policy.{k}": v.detach().clone() for k, v in model.policy.state_dict().items()}
    if model.proximal_ewma is not None:
        proximal = model.proximal_ewma.state_dict().items()
        state.update({f"proximal.{k}": v.detach().clone() for k, v in proximal if isinstance(v, th.Tensor)})
    return state


def assert_same_on_ranks(model: Any, what: str) -> None:
    states = gather(state_of(model))
    for key, value in states[0].items():
        assert th.equal(value, states[1][key]), f"{what}: {key} differs between ranks"


def assert_close(actual: dict[str, th.Tensor], expected: dict[str, th.Tensor], what: str) -> None:
    assert actual.keys() == expected.keys()
    for key, value in expected.items():
        if value.is_floating_point():
            assert th.allclose(actual[key], value, rtol=1e-4, atol=1e-6), f"{what}: {key} differs from one process"


class Recorder:
    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / "passed.json"
        self.passed: list[str] = []

    def passed_check(self, name: str) -> None:
        dist.barrier()
        self.passed.append(name)
        if rank() == 0:
            self.path.write_text(json.dumps(self.passed))


# ----------------------------------------------------------------------------------------------------------------------
# exact equivalence of one update: 2 ranks x 2 envs == 1 process x 4 envs, same data, one minibatch per epoch


def one_update(algo: type, n_envs: int, seed: int, data: dict[str, np.ndarray] | None, **kwargs: Any) -> Any:
    """A model built with ``seed``; one rollout (or the given data in its buffer), then one ``train()``."""
    size = N_STEPS * n_envs
    if algo is PPG_EWMA:
        kwargs = {"n_policy_iterations": 1, "n_aux_epochs": 2, "aux_batch_size": size, "policy_kwargs": PPG_NET, **kwargs}
    policy, env_id, net, fields = setup_of(algo)
    model = algo(
        policy,
        make_vec_env(env_id, n_envs=n_envs, seed=seed),
        n_steps=N_STEPS,
        batch_size=size,
        **{"n_epochs": 3, "learning_rate": 1e-3, "seed": seed, "policy_kwargs": net, **kwargs},
    )
    model.set_logger(Logger(folder=None, output_formats=[]))
    if data is None:
        _, callback = model._setup_learn(size)
        model.collect_rollouts(model.env, callback, model.rollout_buffer, N_STEPS)
    else:
        buffer = model.rollout_buffer
        for field in fields:
            setattr(buffer, field, data[field].copy())
        buffer.pos, buffer.full, buffer.generator_ready = buffer.buffer_size, True, False
    model.initial_state = state_of(model)
    model.data = {field: getattr(model.rollout_buffer, field).copy() for field in fields}
    model.train()
    return model


def check_equivalence(algo: type, **kwargs: Any) -> None:
    # one process, 4 envs (every rank computes it, identically)
    reference = one_update(algo, 4, 0, None, distributed=False, **kwargs)
    data = {field: envs_of(field, values, 2 * rank(), 2) for field, values in reference.data.items()}
    # rank 1 seeds its model differently: it must start from rank 0's parameters anyway
    model = one_update(algo, 2, 0 if rank() == 0 else 123, data, **kwargs)
    assert model.world_size == 2
    assert_close(model.initial_state, reference.initial_state, "initial parameters")
    assert_close(state_of(model), state_of(reference), f"{algo.__name__} {kwargs}")
    assert_same_on_ranks(model, "after one update")


# ----------------------------------------------------------------------------------------------------------------------
# the whole loop


def local_episodes(model: Any) -> int:
    return sum(len(rewards) for rewards in model.env.env_method("get_episode_rewards"))


def check_iterations_identical(out_dir: Path) -> None:
    for algo, kwargs in (
        (PPO_EWMA, {"advantage_normalization": "ewma", "advantage_ewma_decay": 0.5}),
        (PPO_EWMA, {"ewma_decay": None}),
        (PPG_EWMA, {"n_policy_iterations": 2, "n_aux_epochs": 1, "policy_kwargs": PPG_NET}),
        # overlapped rollouts: the collector thread steps the environments while train() all-reduces gradients
        (PPO_EWMA, {"async_rollouts": True}),
        # a forked collector process per rank: it inherits the process group and never uses it
        (PPO_EWMA, {"async_rollouts": "process"}),
        (PPG_EWMA, {"n_policy_iterations": 2, "n_aux_epochs": 1, "policy_kwargs": PPG_NET, "async_rollouts": True}),
    ):
        model = algo(
            "MlpPolicy",
            make_vec_env("CartPole-v1", n_envs=2),
            n_steps=16,
            batch_size=8,
            n_epochs=2,
            seed=1,
            stats_window_size=10_000,
            **{"policy_kwargs": SMALL_NET, **kwargs},
        )
        model.learn(5 * 16 * 2 * 2)
        assert model.num_timesteps == 5 * 16 * 2 * 2, model.num_timesteps  # global steps: 5 iterations
        assert_same_on_ranks(model, f"{algo.__name__} {kwargs} after 5 iterations")
        # distinct environment seeds: the ranks' first observations differ
        first_obs = gather(model.rollout_buffer.observations[0].tolist())
        assert first_obs[0] != first_obs[1], "the ranks' environments got the same seeds"
        # rank 0 holds the episodes of both ranks (a collector process steps its own copies of the environments)
        counts = gather(local_episodes(model))
        if rank() == 0 and kwargs.get("async_rollouts") != "process":
            assert len(model.ep_info_buffer) == sum(counts) > counts[0], (len(model.ep_info_buffer), counts)
        # the losses rank 0 logs are the mean over the ranks (each rank's own data): averaged at the next iteration
        local_losses = gather(model.logger.name_to_value["train/value_loss"])
        model.data_parallel.synchronize_iteration(
            True, model.num_timesteps, model.logger, model.ep_info_buffer, model.ep_success_buffer, model.env
        )
        if rank() == 0:
            assert local_losses[0] != local_losses[1]
            assert abs(model.logger.name_to_value["train/value_loss"] - np.mean(local_losses)) < 1e-12


def check_contrib_iterations_identical() -> None:
    """The ranks of RecurrentPPO_EWMA and MaskablePPO_EWMA stay identical over iterations, also with overlapped rollouts."""
    for algo, kwargs in (
        (RecurrentPPO_EWMA, {}),
        (RecurrentPPO_EWMA, {"minibatch_sampling": "rollouts", "ewma_decay": None}),
        (RecurrentPPO_EWMA, {"async_rollouts": True}),
        (RecurrentPPO_EWMA, {"async_rollouts": "process"}),
        (MaskablePPO_EWMA, {}),
        (MaskablePPO_EWMA, {"async_rollouts": "process"}),
    ):
        policy, env_id, net, _ = setup_of(algo)
        model = algo(
            policy,
            make_vec_env(env_id, n_envs=2),
            n_steps=16,
            batch_size=8,
            n_epochs=2,
            seed=1,
            stats_window_size=10_000,
            **{"policy_kwargs": net, **kwargs},
        )
        model.learn(5 * 16 * 2 * 2)
        assert model.num_timesteps == 5 * 16 * 2 * 2, model.num_timesteps  # global steps: 5 iterations
        assert_same_on_ranks(model, f"{algo.__name__} {kwargs} after 5 iterations")
        first_obs = gather(model.rollout_buffer.observations[0].tolist())
        assert first_obs[0] != first_obs[1], "the ranks' environments got the same seeds"
        counts = gather(local_episodes(model))
        if rank() == 0 and kwargs.get("async_rollouts") != "process":
            assert len(model.ep_info_buffer) == sum(counts) > counts[0], (len(model.ep_info_buffer), counts)


def check_target_kl() -> None:
    model = PPO_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=2), n_steps=8, batch_size=16, seed=0, target_kl=0.01)
    # rank 0 alone is under 1.5 * target_kl, the mean is over it: both ranks stop
    local_kl = 0.0 if rank() == 0 else 0.04
    assert model._reached_target_kl(th.tensor(local_kl), 0) is True
    local_kl = 0.0 if rank() == 0 else 0.02
    assert model._reached_target_kl(th.tensor(local_kl), 0) is False
    # in training: a tiny target stops early, at the same minibatch on both ranks
    model = PPO_EWMA(
        "MlpPolicy",
        make_vec_env("CartPole-v1", n_envs=2),
        n_steps=32,
        batch_size=8,
        n_epochs=10,
        learning_rate=3e-3,
        seed=0,
        target_kl=1e-4,
        policy_kwargs=SMALL_NET,
    )
    model.learn(3 * 32 * 2 * 2)
    assert model._n_updates < 3 * 10, "target_kl did not stop any epoch"
    assert len(set(gather(model._n_updates))) == 1
    assert_same_on_ranks(model, "after early stops")


def check_rank0_writer(out_dir: Path) -> None:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        model = PPO_EWMA(
            "MlpPolicy",
            make_vec_env("CartPole-v1", n_envs=2),
            n_steps=16,
            batch_size=16,
            seed=0,
            verbose=1,
            tensorboard_log=str(out_dir / "tensorboard"),
            policy_kwargs=SMALL_NET,
        )
        checkpoints = CheckpointCallback(save_freq=16, save_path=str(out_dir / f"checkpoints_rank{rank()}"))
        model.learn(3 * 16 * 2 * 2, callback=checkpoints, progress_bar=False)
        model.save(out_dir / f"model_rank{rank()}")
    outputs = gather(stdout.getvalue())
    if rank() == 0:
        assert "rollout/" in outputs[0] and "ep_len_mean" in outputs[0] and "communication_s" in outputs[0]
        assert outputs[1] == "", f"rank 1 printed {outputs[1][:200]!r}"
        assert (out_dir / "model_rank0.zip").exists() and not (out_dir / "model_rank1.zip").exists()
        assert any((out_dir / "checkpoints_rank0").iterdir()) and not (out_dir / "checkpoints_rank1").exists()
        assert [p.name for p in (out_dir / "tensorboard").iterdir()] == ["PPO_EWMA_1"]


class StopAt(BaseCallback):
    """Rank 0's callback that stops training in the middle of a rollout."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps = steps

    def _on_step(self) -> bool:
        return self.num_timesteps < self.steps


def check_rank0_stop() -> None:
    """A rank-0 callback that stops in the middle of a rollout: every rank keeps rank 0's count and can continue."""
    model = PPO_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=2), n_steps=16, batch_size=32, seed=0)
    model.learn(2_000, callback=StopAt(200))
    assert gather(model.num_timesteps) == [200, 200], gather(model.num_timesteps)
    model.learn(256, reset_num_timesteps=False)
    assert len(set(gather(model.num_timesteps))) == 1
    assert_same_on_ranks(model, "after a stop and a continuation")


def check_settings_differ() -> None:
    n_steps = 8 if rank() == 0 else 16
    try:
        PPO_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=2), n_steps=n_steps, batch_size=16)
    except ValueError as error:
        assert "n_steps differs (rank 0: 8, rank 1: 16)" in str(error), error
    else:
        raise AssertionError("different n_steps on the ranks were not detected")


def check_vec_normalize() -> None:
    env = VecNormalize(make_vec_env("Pendulum-v1", n_envs=2))
    model = PPO_EWMA("MlpPolicy", env, n_steps=16, batch_size=32, n_epochs=1, seed=0, policy_kwargs=SMALL_NET)
    model.learn(3 * 16 * 2 * 2)
    stats = gather((env.obs_rms.mean, env.obs_rms.var, env.obs_rms.count, env.ret_rms.var, env.ret_rms.count))
    for first, second in zip(stats[0], stats[1]):
        assert np.array_equal(first, second), "VecNormalize statistics differ between ranks"
    # rank 0's start (1e-4 + its 2 reset observations) and every step of both ranks
    assert np.isclose(stats[0][2], 1e-4 + 2 + 3 * 16 * 2 * 2), stats[0][2]


def check_resume(out_dir: Path) -> None:
    """
    A model saved by one process continues on 2 ranks (rank 0 warns about c when training continues, not on the load),
    then saves for one process again.
    """
    import warnings

    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = PPG_EWMA.load(out_dir / "single.zip", env=make_vec_env("CartPole-v1", n_envs=2))
    assert not any("continues on 2" in str(w.message) for w in caught), [str(w.message) for w in caught]
    start = model.num_timesteps
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.learn(2 * 16 * 2 * 2, reset_num_timesteps=False)
    warned = [w for w in caught if "trained on 1 rank(s) and continues on 2" in str(w.message)]
    assert len(warned) == (1 if rank() == 0 else 0), [str(w.message) for w in caught]
    assert all(w.filename == __file__ for w in warned)  # the user's line
    assert model.num_timesteps == start + 2 * 16 * 2 * 2
    assert_same_on_ranks(model, "after resuming")
    model.save(out_dir / "from_two_ranks")


def thread_names() -> list[str]:
    """The names of this process's threads (Linux): gloo's are ``gloo_tcp_loop`` and ``pt_gloo_runloop``."""
    return sorted(Path(f"/proc/self/task/{task}/comm").read_text().strip() for task in os.listdir("/proc/self/task"))


def check_exit(out_dir: Path) -> None:
    """
    A script that never calls destroy_process_group(): the group that the library created is destroyed by its exit
    handler, and gloo's threads end with it, before the interpreter shuts down (a gloo thread still freeing a
    collective's tensors then aborts the process). The check runs as an exit handler registered before the library's,
    hence run after it.
    """

    def record_threads() -> None:
        gc.collect()
        (out_dir / f"threads_at_exit_{os.environ['RANK']}.json").write_text(json.dumps(thread_names()))

    atexit.register(record_threads)
    model = PPO_EWMA(
        "MlpPolicy", make_vec_env("CartPole-v1", n_envs=2), n_steps=N_STEPS, batch_size=16, policy_kwargs=SMALL_NET
    )
    model.learn(4 * N_STEPS * 2 * 2)
    assert any("gloo" in name for name in thread_names()), "gloo's threads run while the group exists"


class CrashAfter(gym.Wrapper):
    """An environment that breaks after 100 steps."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.steps > 100:
            raise RuntimeError("the environment crashed")
        return self.env.step(action)


def main() -> None:
    scenario, out_dir = sys.argv[1], Path(sys.argv[2])
    recorder = Recorder(out_dir)
    if scenario == "core":
        for algo, kwargs in (
            (PPO_EWMA, {}),
            (PPO_EWMA, {"advantage_normalization": "ewma"}),
            (PPO_EWMA, {"ewma_decay": None, "max_grad_norm": 0.05}),
            (PPG_EWMA, {}),
        ):
            check_equivalence(algo, **kwargs)
        recorder.passed_check("equivalence")
        check_iterations_identical(out_dir)
        recorder.passed_check("iterations")
        check_target_kl()
        recorder.passed_check("target_kl")
        check_rank0_writer(out_dir)
        recorder.passed_check("rank0_writer")
        check_settings_differ()
        recorder.passed_check("settings_differ")
        check_rank0_stop()
        recorder.passed_check("rank0_stop")
        check_vec_normalize()
        recorder.passed_check("vec_normalize")
        check_resume(out_dir)
        recorder.passed_check("resume")
    elif scenario == "contrib":
        for algo, kwargs in (
            # whole rollouts: the LSTM runs (and backpropagates) on the same sequences in both runs. sb3-contrib's
            # "steps" sampling cuts the steps at a random split point, which differs between the two runs, and a cut
            # stops the gradient through the LSTM states: equal in distribution only, as PPO_EWMA's random minibatches.
            (RecurrentPPO_EWMA, {"minibatch_sampling": "rollouts"}),
            (RecurrentPPO_EWMA, {"minibatch_sampling": "rollouts", "ewma_decay": None, "advantage_normalization": "ewma"}),
            (MaskablePPO_EWMA, {}),
            (MaskablePPO_EWMA, {"minibatch_sampling": "rollouts", "ewma_decay": None}),
        ):
            check_equivalence(algo, **kwargs)
        recorder.passed_check("contrib_equivalence")
        check_contrib_iterations_identical()
        recorder.passed_check("contrib_iterations")
    elif scenario == "bad_input":
        # rank 1 alone gets a bad hyperparameter
        PPO_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=2), n_steps=8, kl_coef=0.0 if rank() == 0 else -1.0)
        PPO_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=2), n_steps=8, batch_size=16).learn(10_000)
    elif scenario == "steps_mismatch":
        # rank 1 alone asks for more steps: both ranks stop with the same error before collecting anything
        model = PPO_EWMA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=2), n_steps=8, batch_size=16, target_kl=None)
        model.learn(64 if rank() == 0 else 128)
    elif scenario == "long_learn":
        # a long training with checkpoints (rank 0 writes them), for a test that kills one rank in the middle
        (out_dir / f"pid_{rank()}").write_text(str(os.getpid()))
        model = PPO_EWMA(
            "MlpPolicy", make_vec_env("CartPole-v1", n_envs=2), n_steps=16, batch_size=32, policy_kwargs=SMALL_NET
        )
        model.learn(10_000_000, callback=CheckpointCallback(64, str(out_dir / "checkpoints")))
    elif scenario == "env_crash":
        # rank 1's environment raises in the middle of training, while rank 0 waits in a collective
        wrapper = CrashAfter if rank() == 1 else None
        env = make_vec_env("CartPole-v1", n_envs=2, wrapper_class=wrapper)
        PPO_EWMA("MlpPolicy", env, n_steps=8, batch_size=16, policy_kwargs=SMALL_NET).learn(10_000)
    elif scenario == "exit":
        check_exit(out_dir)
        return  # no destroy_process_group(): the library's exit handler destroys the group it created
    elif scenario == "learn":
        model = PPO_EWMA(
            "MlpPolicy",
            make_vec_env("CartPole-v1", n_envs=4),
            n_steps=128,
            batch_size=128,
            n_epochs=4,
            learning_rate=1e-3,
            seed=int(os.environ.get("SCENARIO_SEED", "0")),
        )
        model.learn(30_720)
        assert_same_on_ranks(model, "after learning")
        returns = gather([info["r"] for info in model.ep_info_buffer])[0]
        if rank() == 0:
            (out_dir / "returns.json").write_text(json.dumps(returns))
        recorder.passed_check("learn")
    else:
        raise ValueError(f"unknown scenario {scenario!r}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
