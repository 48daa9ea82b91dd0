"""
Two parts of ``.ci/gpu_session check`` that no test of the suite runs end to end on a GPU (each raises on a failed check,
and prints what it saw):

    torchrun --standalone --nproc-per-node 2 .ci/gpu_check.py ranks --device cuda --steps 4096
        two ranks on one machine, data-parallel PPO_EWMA and PPG_EWMA on CartPole: with one GPU both ranks train on
        cuda:0, and the process group is gloo (nccl refuses two ranks on one GPU); the ranks' parameters stay
        identical; rank 0 alone saves; every rank loads the file onto its device and finds its own parameters
    python .ci/gpu_check.py collector --device cuda --steps 2048
        async_rollouts="process" with a learner on the device: PPO_EWMA, PPG_EWMA, RecurrentPPO_EWMA and
        MaskablePPO_EWMA each learn a few iterations (a forked child collects with a CPU copy of the policy), the
        learner's parameters stay on the device and finite, then save and load onto the device

``--device cpu`` runs the same on the CPU (the dry run of ``.ci/gpu_session``).
"""

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
import torch.distributed as dist
from sb3_contrib.common.envs import InvalidActionEnvDiscrete
from stable_baselines3.common.env_util import make_vec_env

from sb3_ewma import PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA

N_STEPS = 64
N_ENVS = 2


def expected_device(device: str) -> th.device:
    """The device a rank (or the one process) trains on: ``cuda:LOCAL_RANK % device_count`` for CUDA."""
    if device.startswith("cuda"):
        return th.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % th.cuda.device_count())
    return th.device(device)


def indexed(device: th.device | str) -> th.device:
    """A device with its index: SB3's ``model.device`` for ``device="cuda"`` is ``cuda`` (no index), its tensors' are
    ``cuda:0``."""
    device = th.device(device)
    if device.type == "cuda" and device.index is None:
        return th.device("cuda", th.cuda.current_device())
    return device


def parameters_on(model: Any, device: th.device) -> None:
    """Every parameter of the policy is on ``device`` and finite."""
    for name, parameter in model.policy.named_parameters():
        assert indexed(parameter.device) == device, f"{name} is on {parameter.device}, not {device}"
        assert th.isfinite(parameter).all(), f"{name} is not finite"


def flat_parameters(model: Any) -> np.ndarray:
    return th.cat([p.detach().flatten().float().cpu() for p in model.policy.parameters()]).numpy()


def check_ranks(device: str, steps: int, out_dir: Path) -> None:
    rank = int(os.environ["RANK"])
    for algo, kwargs in ((PPO_EWMA, {}), (PPG_EWMA, {"n_policy_iterations": 2})):
        name = algo.__name__
        start = time.perf_counter()
        model = algo(
            "MlpPolicy",
            make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=rank),
            n_steps=N_STEPS,
            batch_size=N_STEPS,
            n_epochs=2,
            seed=rank,
            device=device,
            distributed=True,
            policy_kwargs={"net_arch": [64, 64]},
            **kwargs,
        )
        want = expected_device(device)
        assert indexed(model.device) == want, f"rank {rank}: {name} is on {model.device}, not {want}"
        model.learn(steps)
        parameters_on(model, want)
        backend = dist.get_backend()
        world = dist.get_world_size()
        if world > max(th.cuda.device_count(), 1) or want.type == "cpu":
            assert backend == "gloo", f"{world} ranks sharing {want}: backend {backend}, not gloo"
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, (str(model.device), flat_parameters(model), model.num_timesteps))
        devices = [entry[0] for entry in gathered]
        for other, (_, parameters, timesteps) in enumerate(gathered[1:], start=1):
            assert np.array_equal(parameters, gathered[0][1]), f"{name}: rank {other}'s parameters differ from rank 0's"
            assert timesteps == gathered[0][2], f"{name}: rank {other} counted {timesteps} steps, rank 0 {gathered[0][2]}"
        path = out_dir / f"{name}.zip"
        model.save(path)
        dist.barrier()
        saved = sorted(p.name for p in out_dir.iterdir())
        loaded = algo.load(path, device=device)
        parameters_on(loaded, want)
        assert np.array_equal(flat_parameters(loaded), flat_parameters(model)), f"rank {rank}: {name} loaded other values"
        dist.barrier()
        if rank == 0:
            print(
                f"{name}: {world} ranks on {devices}, backend {backend}, num_timesteps {model.num_timesteps}, "
                f"parameters identical on the ranks, rank 0 saved ({saved}), every rank loaded it onto {want} "
                f"({time.perf_counter() - start:.1f} s)",
                flush=True,
            )


def masked_env() -> Any:
    return InvalidActionEnvDiscrete(dim=4, ep_length=10, n_invalid_actions=1)


class StepPids(gym.Wrapper):
    """Leaves a file named for each process that steps the environment in ``folder`` (a forked collector's pid too)."""

    folder = Path(".")

    def step(self, action: Any) -> Any:
        (self.folder / str(os.getpid())).touch()
        return self.env.step(action)


def check_collector(device: str, steps: int, out_dir: Path) -> None:
    want = indexed(device)
    cases = (
        (PPO_EWMA, "MlpPolicy", "CartPole-v1", {}),
        (PPG_EWMA, "MlpPolicy", "CartPole-v1", {"n_policy_iterations": 2}),
        (RecurrentPPO_EWMA, "MlpLstmPolicy", "CartPole-v1", {"policy_kwargs": {"lstm_hidden_size": 16}}),
        (MaskablePPO_EWMA, "MlpPolicy", masked_env, {}),
    )
    for algo, policy, env_id, kwargs in cases:
        name = algo.__name__
        start = time.perf_counter()
        StepPids.folder = out_dir / f"{name}_pids"
        StepPids.folder.mkdir()
        env = make_vec_env(env_id, n_envs=N_ENVS, seed=0, wrapper_class=StepPids)
        model = algo(
            policy,
            env,
            n_steps=N_STEPS,
            batch_size=N_STEPS,
            n_epochs=2,
            seed=0,
            device=device,
            async_rollouts="process",
            **kwargs,
        )
        assert indexed(model.device) == want, f"{name} is on {model.device}, not {want}"
        model.learn(steps)
        assert model.num_timesteps == steps, f"{name}: {model.num_timesteps} steps, not {steps}"
        children = sorted(int(p.name) for p in StepPids.folder.iterdir() if int(p.name) != os.getpid())
        assert children, f"{name}: no process but this one stepped the environments"
        assert (StepPids.folder / str(os.getpid())).exists(), f"{name}: this process collected no rollout (the first)"
        parameters_on(model, want)
        path = out_dir / f"{name}.zip"
        model.save(path)
        loaded = algo.load(path, device=device)
        parameters_on(loaded, want)
        assert np.array_equal(flat_parameters(loaded), flat_parameters(model)), f"{name}: loaded other values"
        env.close()
        print(
            f"{name}: async_rollouts='process' with the learner on {want}: {steps} steps (collected here and by the "
            f"forked process {children}), parameters on {want} and finite, saved and loaded onto {want} "
            f"({time.perf_counter() - start:.1f} s)",
            flush=True,
        )


def main(arguments: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=("ranks", "collector"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=2048, help="steps of each learn (per rank)")
    args = parser.parse_args(arguments)
    th.set_num_threads(1)
    if args.device.startswith("cuda") and not th.cuda.is_available():
        sys.exit(f"--device {args.device}, but torch sees no CUDA device")
    if args.part == "ranks":
        # one folder for every rank (torchrun gives them the same run id): rank 0 alone saves, each loads
        shared = Path(tempfile.gettempdir()) / f"gpu_check_ranks_{os.environ.get('TORCHELASTIC_RUN_ID', 'run')}"
        shared.mkdir(exist_ok=True)
        check_ranks(args.device, args.steps, shared)
        dist.barrier()
        if int(os.environ["RANK"]) == 0:
            shutil.rmtree(shared, ignore_errors=True)
    else:
        with tempfile.TemporaryDirectory() as scratch:
            check_collector(args.device, args.steps, Path(scratch))
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"{args.part}: every check passed", flush=True)


if __name__ == "__main__":
    main()
