"""
Data-parallel training (sb3_ewma.common.distributed) on 2 ranks, gloo on the CPU, started by torchrun in a subprocess
(tests/distributed_scenarios.py holds the scenarios). Every launch has a timeout: a hang fails the test.
"""

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from devices import available_devices, subprocess_environment
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

from sb3_ewma import PPG_EWMA, PPO_EWMA
from sb3_ewma.common.decoupled.advantages import AdvantageNormalizer
from sb3_ewma.common.distributed import RunningStatisticsPool, mean_over_ranks, training_diagnostics, wants_data_parallel

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = Path(__file__).with_name("distributed_scenarios.py")
pytestmark = pytest.mark.skipif(not th.distributed.is_available(), reason="torch.distributed is not available")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


def torchrun(
    scenario: str, out_dir: Path, rendezvous: str = "standalone", timeout: float = 240, device: str | None = None
) -> tuple[int, str, float]:
    """
    Run a scenario on 2 ranks (whose ``device="auto"`` is ``device``, by default the suite's); returns the exit
    status, the output and the duration.
    """
    if rendezvous == "c10d":
        launch = ["--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"localhost:{free_port()}"]
    else:
        launch = ["--standalone"]
    command = [sys.executable, "-m", "torch.distributed.run", *launch, "--nproc-per-node", "2", str(SCENARIOS)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
        **(subprocess_environment(device) if device is not None else {}),
    }
    start = time.perf_counter()
    result = subprocess.run(
        [*command, scenario, str(out_dir)], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    return result.returncode, result.stdout + result.stderr, time.perf_counter() - start


@pytest.fixture(scope="module", params=available_devices())
def core_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    """
    One c10d-rendezvous launch for the checks of the "core" scenario, per device (2 ranks share a single GPU); a
    model saved by one process to resume.
    """
    device = request.param
    out_dir = tmp_path_factory.mktemp("distributed")
    model = PPG_EWMA(
        "MlpPolicy",
        make_vec_env("CartPole-v1", n_envs=2),
        n_steps=16,
        batch_size=16,
        n_policy_iterations=2,
        seed=0,
        policy_kwargs={"net_arch": [16]},
        device=device,
    )
    model.learn(2 * 16 * 2)
    model.save(out_dir / "single")
    returncode, output, _ = torchrun("core", out_dir, rendezvous="c10d", device=device)
    return out_dir, returncode, output


# the lines of the stacks that faulthandler prints (a stuck collector process's, before it is killed), whatever prefix
# torchrun puts before a rank's output; a traceback's lines ("line 3, in f") are not among them
FAULTHANDLER_LINE = re.compile(r'^(\[[^]]*\]:)?((Current thread|Thread) 0x[0-9a-f]+|  File ".*", line \d+ in )')


def _assert_passed(core_run: tuple[Path, int, str], check: str) -> None:
    out_dir, returncode, output = core_run
    passed_file = out_dir / "passed.json"
    passed = json.loads(passed_file.read_text()) if passed_file.exists() else []
    stacks = "\n".join(line for line in output.splitlines() if FAULTHANDLER_LINE.match(line))
    assert check in passed, f"check {check!r} failed (exit status {returncode}):\n{output[-6000:]}" + (
        f"\n\nstacks printed by faulthandler:\n{stacks[-6000:]}" if stacks else ""
    )


def test_one_update_equals_one_process(core_run: tuple[Path, int, str]) -> None:
    # PPO_EWMA (minibatch and ewma advantage normalization), PPO, PPG_EWMA with an auxiliary phase
    _assert_passed(core_run, "equivalence")


def test_ranks_stay_identical(core_run: tuple[Path, int, str]) -> None:
    # params and EWMA bitwise equal after 5 iterations; global num_timesteps; distinct env seeds; episodes gathered
    _assert_passed(core_run, "iterations")


def test_target_kl_stops_every_rank(core_run: tuple[Path, int, str]) -> None:
    _assert_passed(core_run, "target_kl")


def test_rank0_alone_writes(core_run: tuple[Path, int, str]) -> None:
    _assert_passed(core_run, "rank0_writer")


def test_different_settings_are_named(core_run: tuple[Path, int, str]) -> None:
    _assert_passed(core_run, "settings_differ")


def test_a_rank0_callback_stop_leaves_every_rank_with_its_count(core_run: tuple[Path, int, str]) -> None:
    # rank 0 stops at the step its callback says, the others at the end of the rollout: they take rank 0's count
    _assert_passed(core_run, "rank0_stop")


def test_vec_normalize_pooled(core_run: tuple[Path, int, str]) -> None:
    _assert_passed(core_run, "vec_normalize")


def test_save_on_two_ranks_continue_in_one(core_run: tuple[Path, int, str]) -> None:
    # one process -> 2 ranks (scenario), then 2 ranks -> one process (here)
    _assert_passed(core_run, "resume")
    out_dir = core_run[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = PPG_EWMA.load(out_dir / "from_two_ranks.zip", env=make_vec_env("CartPole-v1", n_envs=2))
    assert not any("continues on 1" in str(w.message) for w in caught)  # a load for prediction: no warning
    assert model.world_size == 1
    start = model.num_timesteps
    assert start == 2 * 16 * 2 + 2 * 16 * 2 * 2
    with pytest.warns(UserWarning, match=r"trained on 2 rank\(s\) and continues on 1") as record:
        model.learn(16 * 2, reset_num_timesteps=False)
    assert any(warning.filename == __file__ for warning in record)  # at the user's line
    assert model.num_timesteps == start + 16 * 2


@pytest.fixture(scope="module", params=available_devices())
def contrib_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    """One launch for the checks of RecurrentPPO_EWMA and MaskablePPO_EWMA (the "contrib" scenario), per device."""
    out_dir = tmp_path_factory.mktemp("distributed_contrib")
    returncode, output, _ = torchrun("contrib", out_dir, device=request.param)
    return out_dir, returncode, output


def test_contrib_one_update_equals_one_process(contrib_run: tuple[Path, int, str]) -> None:
    # RecurrentPPO_EWMA (minibatches of whole rollouts, over 3 epochs) and MaskablePPO_EWMA: 2 ranks x 2 envs give the
    # parameters and EWMA of 1 process x 4 envs
    _assert_passed(contrib_run, "contrib_equivalence")


def test_contrib_ranks_stay_identical(contrib_run: tuple[Path, int, str]) -> None:
    # also with overlapped rollouts (a collector thread, a collector process carrying the LSTM states)
    _assert_passed(contrib_run, "contrib_iterations")


def test_bad_input_on_one_rank_ends_the_job(tmp_path: Path) -> None:
    returncode, output, duration = torchrun("bad_input", tmp_path, timeout=120)
    assert returncode != 0
    assert "kl_coef must be a finite number >= 0, got -1.0" in output, output[-3000:]
    assert duration < 100


def test_different_total_timesteps_per_rank_end_the_job_with_a_clear_error(tmp_path: Path) -> None:
    returncode, output, duration = torchrun("steps_mismatch", tmp_path, timeout=120)
    assert returncode != 0
    # both ranks raise the same error, naming the setting and each rank's value
    expected = "total_timesteps (learn) differs (rank 0: 64, rank 1: 128)"
    assert output.count(expected) >= 2, output[-3000:]
    assert "Connection closed by peer" not in output
    assert duration < 100


def test_env_crash_on_one_rank_ends_the_job(tmp_path: Path) -> None:
    returncode, output, duration = torchrun("env_crash", tmp_path, timeout=120)
    assert returncode != 0
    assert "RuntimeError: the environment crashed" in output, output[-3000:]
    assert duration < 100


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="thread names are read from /proc (Linux)")
def test_exit_without_destroy_process_group_ends_gloo_threads(tmp_path: Path) -> None:
    returncode, output, _ = torchrun("exit", tmp_path, timeout=120)
    assert returncode == 0, output[-6000:]
    for rank in (0, 1):
        names = json.loads((tmp_path / f"threads_at_exit_{rank}.json").read_text())
        assert not [name for name in names if "gloo" in name], names


@pytest.mark.slow
def test_cartpole_learns_on_two_ranks(tmp_path: Path) -> None:
    returncode, output, _ = torchrun("learn", tmp_path, timeout=400)
    assert returncode == 0, output[-6000:]
    returns = json.loads((tmp_path / "returns.json").read_text())
    # from about 20 (random actions): the mean of the last 20 episodes after 30k global steps was 188 to 347 over 10
    # seeds (SCENARIO_SEED=0..9; 284 with seed 0)
    assert len(returns) > 20 and sum(returns[-20:]) / 20 > 60, returns[-20:]


# ----------------------------------------------------------------------------------------------------------------------
# in one process


def test_single_process_is_not_data_parallel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not wants_data_parallel(None) and not wants_data_parallel(False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert wants_data_parallel(None) and not wants_data_parallel(False)
    model = PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, distributed=False)
    assert model.world_size == 1 and model.rank == 0 and model._timesteps_per_env_step == 1


def test_load_takes_distributed_as_the_constructor_does(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # SB3's load sets distributed=False after the constructor: the process group must not be joined before
    import torch.distributed as dist

    PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16).save(tmp_path / "model.zip")
    for name, value in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="1").items():
        monkeypatch.setenv(name, value)
    model = PPO_EWMA.load(tmp_path / "model.zip", env="CartPole-v1", distributed=False)
    assert model.world_size == 1 and model.distributed is False and not dist.is_initialized()
    model.learn(32)
    assert model.num_timesteps == 32


def test_a_loaded_model_prints_on_rank_0_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # load sets the saved verbose after the constructor, whose rule (ranks other than 0 print nothing) applies after it
    import sb3_ewma.common.decoupled.algorithm as core
    from sb3_ewma.common.distributed import SingleProcessTraining

    PPO_EWMA("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, verbose=1).save(tmp_path / "model.zip")
    assert PPO_EWMA.load(tmp_path / "model.zip").verbose == 1

    class SecondRank(SingleProcessTraining):
        rank = 1

    monkeypatch.setattr(core, "SingleProcessTraining", SecondRank)
    assert PPO_EWMA.load(tmp_path / "model.zip").verbose == 0


def test_bad_distributed_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(ValueError, match="distributed must be None"):
        PPO_EWMA("MlpPolicy", "CartPole-v1", distributed="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="distributed=True needs torchrun"):
        PPO_EWMA("MlpPolicy", "CartPole-v1", distributed=True)


def test_pooled_advantage_moments_equal_one_process() -> None:
    """Two halves pooled by a reducer (summing the halves' sums) give the moments of the whole."""
    values = th.randn(64, dtype=th.float64) * 3 + 1
    halves = [values[:32], values[32:]]
    for mode in ("minibatch", "ewma"):
        whole = AdvantageNormalizer(True, mode)
        expected = whole.minibatch(values) if mode == "minibatch" else th.as_tensor(whole.start_iteration(values.numpy()))
        for index, half in enumerate(halves):
            other = halves[1 - index]

            def reducer(sums: th.Tensor, other: th.Tensor = other) -> th.Tensor:
                other_sums = th.stack([th.tensor(float(other.numel()), dtype=th.float64), other.sum(), (other**2).sum()])
                return sums + other_sums

            pooled = AdvantageNormalizer(True, mode, reducer=reducer)
            got = pooled.minibatch(half) if mode == "minibatch" else th.as_tensor(pooled.start_iteration(half.numpy()))
            assert th.allclose(got, expected[index * 32 : (index + 1) * 32], atol=1e-10)


def test_advantage_moments_of_an_epoch_pooled_in_one_reduction() -> None:
    """Every global minibatch of an epoch normalized by its own pooled moments, from one call of the reducer."""
    rng = th.Generator().manual_seed(0)
    minibatches = [th.randn(16, generator=rng, dtype=th.float64) * (k + 1) for k in range(3)] + [th.ones(1, dtype=th.float64)]
    others = [th.randn(16, generator=rng, dtype=th.float64) + k for k in range(3)] + [th.ones(1, dtype=th.float64)]
    calls = []

    def reducer(sums: th.Tensor) -> th.Tensor:
        calls.append(sums.shape)
        other = th.stack([th.stack([th.tensor(16.0, dtype=th.float64), o.sum(), (o**2).sum()]) for o in others[:3]])
        return sums + other

    normalizer = AdvantageNormalizer(True, "minibatch", reducer=reducer)
    assert normalizer.pools_minibatches
    normalizer.pool_epoch(minibatches)
    assert calls == [(3, 3)]  # one reduction; the one-sample minibatch is skipped, as minibatch() skips it
    for mine, other in zip(minibatches[:3], others[:3]):
        whole = th.cat([mine, other])
        expected = (mine - whole.mean()) / (whole.std() + 1e-8)
        assert th.allclose(normalizer.minibatch(mine), expected, atol=1e-12)
    assert th.equal(normalizer.minibatch(minibatches[3]), minibatches[3])
    assert calls == [(3, 3)]
    assert not AdvantageNormalizer(True, "ewma", reducer=reducer).pools_minibatches
    assert not AdvantageNormalizer(True, "minibatch").pools_minibatches


def test_training_diagnostics_are_averaged_over_ranks() -> None:
    values = {"train/value_loss": 2.0, "train/n_updates": 10, "aux/loss": 1.0, "rollout/ep_rew_mean": 5.0, "train/x": "text"}
    assert training_diagnostics(values) == {"train/value_loss": 2.0, "train/n_updates": 10.0, "aux/loss": 1.0}
    ranks = [
        {"train/value_loss": 2.0, "train/n_updates": 10.0, "aux/loss": 1.0},
        {"train/value_loss": 4.0, "train/n_updates": 10.0},
    ]
    # equal values keep theirs; a key a rank lacks is left to rank 0's value
    assert mean_over_ranks(ranks) == {"train/value_loss": 3.0}


class TwoThreadSum:
    """Stands for the collectives of two ranks run as two threads: sums what both threads pass."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2)
        self.slots: list[th.Tensor | None] = [None, None]
        self.thread_rank = threading.local()

    def all_reduce_sum(self, tensor: th.Tensor) -> th.Tensor:
        self.slots[self.thread_rank.value] = tensor
        self.barrier.wait()
        total = self.slots[0] + self.slots[1]  # type: ignore[operator]
        self.barrier.wait()
        return total

    def broadcast_object(self, value: object) -> object:
        return value  # both ranks start from the same statistics here


def test_vec_normalize_pool_is_exact() -> None:
    """Pooling, at each iteration, what each rank added gives one running statistic over every rank's samples."""
    rng = np.random.default_rng(0)
    start = rng.normal(size=(10, 3))
    batches = [rng.normal(size=(7, 3)) * (2 + i) + i for i in range(6)]  # rank 0: even batches, rank 1: odd ones
    whole = RunningMeanStd(shape=(3,))
    for batch in [start, *batches]:
        whole.update(batch)

    ranks = [VecNormalize(DummyVecEnv([lambda: gym.make("Pendulum-v1")]), norm_reward=False) for _ in range(2)]
    for venv in ranks:
        venv.obs_rms.update(start)
    context = TwoThreadSum()

    def run(rank: int) -> None:
        context.thread_rank.value = rank
        pool = RunningStatisticsPool()
        pool.start(ranks[rank], context)  # type: ignore[arg-type]
        for iteration in range(3):
            ranks[rank].obs_rms.update(batches[2 * iteration + rank])
            pool.pool(ranks[rank], context)  # type: ignore[arg-type]

    threads = [threading.Thread(target=run, args=(rank,)) for rank in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    for venv in ranks:
        assert venv.obs_rms.count == pytest.approx(whole.count)
        np.testing.assert_allclose(venv.obs_rms.mean, whole.mean, rtol=1e-10)
        np.testing.assert_allclose(venv.obs_rms.var, whole.var, rtol=1e-10)


def test_zoo_train_under_torchrun(tmp_path: Path) -> None:
    """rl-zoo3 on 2 ranks: one run folder written by rank 0, --scale-n-envs takes the total number of environments."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "sb3_ewma.train"]
    args = ["--algo", "ppo_ewma", "--env", "CartPole-v1", "-n", "512", "-f", str(tmp_path), "--seed", "3"]
    args += ["--scale-n-envs", "4", "--save-freq", "256"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([*command, *args], env=env, capture_output=True, text=True, timeout=240, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert output.count("Saving to") == 1  # rank 0 alone prints
    assert "Data-parallel training on 2 ranks" in output and "n_envs=2 and batch_size" in output
    (run,) = (tmp_path / "ppo_ewma").iterdir()
    assert run.name == "CartPole-v1_1"
    # rank 0's monitor files (its 2 environments), its checkpoints every 256 global steps and the model
    assert sorted(p.name for p in run.glob("*.monitor.csv")) == ["0.monitor.csv", "1.monitor.csv"]
    assert sorted(p.name for p in run.glob("rl_model_*_steps.zip")) == ["rl_model_256_steps.zip", "rl_model_512_steps.zip"]
    assert (run / "CartPole-v1.zip").exists()
    assert "- n_envs\n    - 2" in (run / "CartPole-v1" / "config.yml").read_text()


@pytest.mark.parametrize(
    "local_rank, local_world_size, gpus, expected_device, expected_backend",
    [
        (1, 2, 2, "cuda:1", "nccl"),  # one GPU per rank
        (1, 2, 1, "cuda:0", "gloo"),  # two ranks on a workstation's single GPU
        (3, 4, 2, "cuda:1", "gloo"),  # four ranks on two GPUs: local ranks 1 and 3 share GPU 1
        (5, 8, 8, "cuda:5", "nccl"),
    ],
)
def test_ranks_map_onto_the_gpus_of_their_machine(
    monkeypatch: pytest.MonkeyPatch, local_rank, local_world_size, gpus, expected_device, expected_backend
) -> None:
    """A rank uses cuda:(LOCAL_RANK % device_count); ranks sharing a GPU get gloo (nccl refuses them), with one warning."""
    from sb3_ewma.common.distributed import data_parallel_device, process_group_backend

    monkeypatch.setattr(th.cuda, "is_available", lambda: True)
    monkeypatch.setattr(th.cuda, "device_count", lambda: gpus)
    for rank in (0, local_rank):
        environment = dict(RANK=rank, LOCAL_RANK=local_rank, WORLD_SIZE=local_world_size, LOCAL_WORLD_SIZE=local_world_size)
        for name, value in environment.items():
            monkeypatch.setenv(name, str(value))
        for requested in ("auto", "cuda"):
            assert data_parallel_device(requested, None) == th.device(expected_device)
        assert data_parallel_device("cuda:0", None) == th.device("cuda:0")  # an explicit index is kept
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert process_group_backend(th.device(expected_device)) == expected_backend
        shared = [str(warning.message) for warning in caught if "share" in str(warning.message)]
        # one warning for the job: rank 0's
        assert len(shared) == int(expected_backend == "gloo" and rank == 0), shared
        if shared:
            assert f"{local_world_size} ranks share {gpus} GPU(s)" in shared[0] and "gloo" in shared[0]


def test_without_local_world_size_ranks_are_not_assumed_to_have_a_gpu_each(monkeypatch: pytest.MonkeyPatch) -> None:
    from sb3_ewma.common.distributed import process_group_backend

    monkeypatch.setattr(th.cuda, "device_count", lambda: 2)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "1")
    assert process_group_backend(th.device("cuda", 1)) == "gloo"
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert process_group_backend(th.device("cuda", 1)) == "nccl"


def test_a_cpu_rank_never_touches_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """device="cpu" under torchrun: the device, the backend and the process group's communication device avoid CUDA."""
    from sb3_ewma.common.distributed import DataParallelContext, data_parallel_device, process_group_backend

    def no_cuda(*args, **kwargs):
        raise AssertionError("CUDA touched by a CPU rank")

    for name in ("is_available", "device_count", "set_device", "current_device", "init"):
        monkeypatch.setattr(th.cuda, name, no_cuda)
    for name, value in dict(RANK=0, LOCAL_RANK=0, WORLD_SIZE=1, LOCAL_WORLD_SIZE=1).items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.setenv("MASTER_ADDR", "localhost")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    assert data_parallel_device("cpu", True) == th.device("cpu")
    assert process_group_backend(th.device("cpu")) == "gloo"
    assert not th.distributed.is_initialized()
    try:
        context = DataParallelContext(th.device("cpu"))
        assert context.backend == "gloo" and context.comm_device == th.device("cpu")
        assert context.mean_scalar(3.0) == 3.0
    finally:
        th.distributed.destroy_process_group()
