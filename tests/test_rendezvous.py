"""
No silent wait under torchrun: a rank whose peers do not join within ``SB3_EWMA_RENDEZVOUS_TIMEOUT`` seconds exits
with a message naming the missing ranks and the rendezvous address (torch's ``env://`` rendezvous waits 30 minutes in
silence); and a job of two nodes, simulated on this machine (two torchrun agents, a c10d rendezvous on localhost),
trains as one.
"""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch as th

from sb3_ewma.common.distributed.process_group import (
    DEFAULT_RENDEZVOUS_TIMEOUT_S,
    RENDEZVOUS_TIMEOUT_VARIABLE,
    rendezvous_timeout,
)

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not th.distributed.is_available(), reason="torch.distributed is not available")
JOIN = "from sb3_ewma.common.distributed import join_torchrun; print('joined', join_torchrun('cpu'))"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


def environment(**variables: str) -> dict[str, str]:
    inherited = {key: value for key, value in os.environ.items() if not key.startswith(("TORCHELASTIC", "SB3_EWMA_"))}
    return {**inherited, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **variables}


def one_rank(rank: int, port: int, *command: str, timeout: str = "3") -> tuple[subprocess.CompletedProcess, float]:
    """One rank of a job of 2, started alone (as ``WORLD_SIZE=2 RANK=r python ...``), with a short rendezvous timeout."""
    env = environment(
        WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port), **{RENDEZVOUS_TIMEOUT_VARIABLE: timeout},
    )  # fmt: skip
    start = time.perf_counter()
    result = subprocess.run([sys.executable, *command], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    return result, time.perf_counter() - start


def test_rank0_alone_names_the_missing_rank_and_the_address() -> None:
    port = free_port()
    result, seconds = one_rank(0, port, "-c", JOIN)
    assert result.returncode != 0 and "joined" not in result.stdout
    assert (
        f"RendezvousTimeoutError: rank 0 of 2: rank(s) 1 did not join the rendezvous at 127.0.0.1:{port} within 3 s. "
        "Start every rank of the job"
    ) in result.stderr
    assert f"{RENDEZVOUS_TIMEOUT_VARIABLE} sets how long a rank waits (3 s now)" in result.stderr
    assert seconds < 60


def test_a_rank_without_rank0_names_it() -> None:
    port = free_port()
    result, seconds = one_rank(1, port, "-c", JOIN)
    assert result.returncode != 0
    assert f"rank 1 of 2: no rendezvous at 127.0.0.1:{port} within 3 s (rank 0 hosts it" in result.stderr
    assert "missing rank 0 at least" in result.stderr
    assert seconds < 60


def test_the_ranks_join_when_all_come() -> None:
    port = free_port()
    env = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), RENDEZVOUS_TIMEOUT_VARIABLE: "60"}
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", JOIN],
            env=environment(**env, RANK=str(rank), LOCAL_RANK=str(rank)),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = [rank.communicate(timeout=120) for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], outputs
    assert [out.strip() for out, _ in outputs] == ["joined (0, 2)", "joined (1, 2)"]


def test_train_alone_says_so_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    pytest.importorskip("rl_zoo3")
    port = free_port()
    train = ["-m", "sb3_ewma.train", "--algo", "ppo_ewma", "--env", "CartPole-v1", "-n", "64", "-f", str(tmp_path / "logs")]
    result, _ = one_rank(0, port, *train)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"error: rank 0 of 2: rank(s) 1 did not join the rendezvous at 127.0.0.1:{port} within 3 s" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["0", "-5", "soon", "nan", "inf"])
def test_rendezvous_timeout_must_be_seconds(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RENDEZVOUS_TIMEOUT_VARIABLE, value)
    with pytest.raises(ValueError, match=rf"{RENDEZVOUS_TIMEOUT_VARIABLE}='{value}': must be a number of seconds > 0"):
        rendezvous_timeout()


def test_rendezvous_timeout_default_and_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(RENDEZVOUS_TIMEOUT_VARIABLE, raising=False)
    assert rendezvous_timeout() == DEFAULT_RENDEZVOUS_TIMEOUT_S == 300
    monkeypatch.setenv(RENDEZVOUS_TIMEOUT_VARIABLE, "12.5")
    assert rendezvous_timeout() == 12.5


@pytest.mark.slow
def test_two_nodes_on_one_machine_train_as_one_job(tmp_path: Path) -> None:
    """Two torchrun agents (two "nodes"), 2 processes each, a c10d rendezvous on localhost: one job of 4 ranks."""
    pytest.importorskip("rl_zoo3")
    endpoint = f"localhost:{free_port()}"
    log_folder = tmp_path / "logs"
    train = [
        *("-m", "sb3_ewma.train", "--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(log_folder), "--seed", "0"),
        *("-n", "512", "--eval-freq", "-1", "--num-threads", "1", "-params", "n_envs:2", "n_steps:32", "batch_size:32"),
    ]
    nodes = [
        subprocess.Popen(
            [
                *(sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2"),
                *("--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "sb3-ewma-two-nodes"),
                *train,
            ],
            env=environment(),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        outputs = [node.communicate(timeout=420)[0] for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(output[-3000:] for output in outputs)
    output = "\n".join(outputs)
    assert "Data-parallel training on 4 ranks: n_envs=2 per rank, 8 environments in total" in output
    runs = list((log_folder / "ppo_ewma").iterdir())
    assert [run.name for run in runs] == ["CartPole-v1_1"]  # one run folder, written by rank 0 of the job
    from sb3_ewma import PPO_EWMA

    model = PPO_EWMA.load(runs[0] / "CartPole-v1.zip", device="cpu")
    # steps of all ranks: 2 iterations of 4 ranks x 2 environments x 32 steps
    assert model.num_timesteps == 512
