"""
The learning tests' trainings, one function per case, each taking a seed and returning its outcome.

The tests (test_learning.py, test_contrib.py) run each case on a few seeds and assert thresholds set well below the
worst outcome seen over many seeds, because float kernels differ from one CPU to the next: a threshold that only
one seed's luck clears on one CPU fails on the next machine. This module's command line measures the distributions
(one torch thread per training, ``--workers`` trainings at once):

    python tests/learning_cases.py --seeds 10 --workers 2 --out learning_seeds.json

The distributions measured so far are written beside each test's thresholds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
from sb3_contrib.common.envs import InvalidActionEnvDiscrete
from sb3_contrib.common.maskable.evaluation import evaluate_policy as maskable_evaluate_policy
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

from sb3_ewma import PPG, PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA

# PPG's settings for a small budget, not the paper's Procgen defaults: short phases (N_pi = 8), several policy and
# value epochs per iteration (E_pi = E_V = 10) and 3 auxiliary epochs
PHASES = dict(n_policy_iterations=8, n_epochs=10, n_value_epochs=10, n_aux_epochs=3, aux_batch_size=256)


def linear(initial: float) -> Callable[[float], float]:
    def schedule(progress_remaining: float) -> float:
        return progress_remaining * initial

    return schedule


def _cartpole_model(algorithm: type, seed: int, **kwargs: Any):
    # rl-zoo3's tuned PPO settings for CartPole-v1 (PPO_EWMA is a drop-in for PPO)
    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    return algorithm(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        learning_rate=linear(1e-3),
        clip_range=linear(0.2),
        seed=seed,
        device="cpu",
        **kwargs,
    )


def ppo_ewma_cartpole(seed: int, **kwargs: Any) -> dict[str, float]:
    """PPO_EWMA with the default center of mass, rl-zoo3's CartPole entry, 100k steps: the mean return of 20 episodes."""
    model = _cartpole_model(PPO_EWMA, seed, n_epochs=20, **kwargs)
    model.learn(100_000)
    mean_return, _ = evaluate_policy(model, make_vec_env("CartPole-v1", n_envs=4, seed=100 + seed), n_eval_episodes=20)
    return {"mean_return": float(mean_return)}


def ppg_cartpole(seed: int, algorithm: type = PPG) -> dict[str, float]:
    model = _cartpole_model(algorithm, seed, **PHASES)
    model.learn(100_000)
    eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=100 + seed)
    mean_return, _ = evaluate_policy(model, eval_env, n_eval_episodes=20, deterministic=True)
    return {"mean_return": float(mean_return), "n_aux_phases": float(model.n_aux_phases)}


def ppg_ewma_cartpole(seed: int) -> dict[str, float]:
    return ppg_cartpole(seed, PPG_EWMA)


def ppo_ewma_pendulum(seed: int, **kwargs: Any) -> dict[str, float]:
    """PPO_EWMA with gSDE on Pendulum-v1, 61,440 steps: the mean return of 8 episodes before and after."""
    env = make_vec_env("Pendulum-v1", n_envs=4, seed=seed)
    model = PPO_EWMA(
        "MlpPolicy",
        env,
        n_steps=1024,
        batch_size=64,
        n_epochs=10,
        gae_lambda=0.95,
        gamma=0.9,
        learning_rate=1e-3,
        use_sde=True,
        sde_sample_freq=4,
        seed=seed,
        device="cpu",
        **kwargs,
    )
    eval_env = make_vec_env("Pendulum-v1", n_envs=4, seed=100 + seed)
    before, _ = evaluate_policy(model, eval_env, n_eval_episodes=8)
    model.learn(61_440)
    after, _ = evaluate_policy(model, eval_env, n_eval_episodes=8)
    return {"before": float(before), "after": float(after)}


# the EWMA age rules on the cases above (sb3_ewma.common.ewma_age): "paper" (M, minibatches per epoch), "max_age" (E x M),
# "mean_age" (E x M / 2); CartPole's entry has E = 20 epochs of M = 1 minibatch, Pendulum's E = 10 of M = 64
AGE_CASES: dict[str, Callable[[int], dict[str, float]]] = {
    f"{task}_{age}{'_async' if async_rollouts else ''}": (
        lambda seed, task=task, age=age, async_rollouts=async_rollouts: (
            ppo_ewma_cartpole(seed, ewma_decay=age, async_rollouts=async_rollouts)
            if task == "ppo_ewma_cartpole"
            else ppo_ewma_pendulum(seed, ewma_decay=age)
        )
    )
    for task, async_options in (("ppo_ewma_cartpole", (False, True)), ("ppo_ewma_pendulum", (False,)))
    for age in ("paper", "max_age", "mean_age")
    for async_rollouts in async_options
}


def ppg_ewma_pendulum(seed: int) -> dict[str, float]:
    """PPG_EWMA with gSDE and normalized observations on Pendulum-v1, 100k steps: 10 episodes before, 20 after."""
    env = VecNormalize(make_vec_env("Pendulum-v1", n_envs=4, seed=seed), gamma=0.9)
    model = PPG_EWMA(
        "MlpPolicy",
        env,
        n_steps=256,
        batch_size=128,
        gae_lambda=0.95,
        gamma=0.9,
        learning_rate=1e-3,
        use_sde=True,
        sde_sample_freq=4,
        seed=seed,
        device="cpu",
        **PHASES,
    )
    eval_env = VecNormalize(make_vec_env("Pendulum-v1", n_envs=1, seed=100 + seed), training=False, norm_reward=False)
    eval_env.obs_rms = env.obs_rms
    before, _ = evaluate_policy(model, eval_env, n_eval_episodes=10, deterministic=True)
    model.learn(100_000)
    eval_env.obs_rms = env.obs_rms
    after, _ = evaluate_policy(model, eval_env, n_eval_episodes=20, deterministic=True)
    return {"before": float(before), "after": float(after)}


def recurrent_cartpole_without_velocities(
    seed: int, timesteps: int = 15_000, compile_step: bool | str = "auto"
) -> dict[str, float]:
    """
    CartPoleNoVel-v1 (rl-zoo3): positions only, the velocities must be remembered; rl-zoo3's ppo_lstm settings
    (n_envs 8, n_steps 32, batch 256, gamma 0.98, lambda 0.8) on a smaller budget: 15k steps, an actor LSTM of 32
    units (the critic: a linear layer), 10 epochs at a constant learning rate of 2e-3. The mean return of 10 episodes
    before and after.
    """
    import rl_zoo3.import_envs  # noqa: F401  (registers the NoVel ids)

    env = VecNormalize(make_vec_env("CartPoleNoVel-v1", n_envs=8, seed=seed), gamma=0.98)
    model = RecurrentPPO_EWMA(
        "MlpLstmPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=10,
        learning_rate=2e-3,
        policy_kwargs=dict(
            ortho_init=False,
            activation_fn=th.nn.ReLU,
            lstm_hidden_size=32,
            enable_critic_lstm=False,
            net_arch=dict(pi=[64], vf=[64]),
        ),
        seed=seed,
        device="cpu",
        compile_step=compile_step,
    )
    eval_env = VecNormalize(make_vec_env("CartPoleNoVel-v1", n_envs=1, seed=100 + seed), training=False, norm_reward=False)
    eval_env.obs_rms = env.obs_rms
    before, _ = evaluate_policy(model, eval_env, n_eval_episodes=10)
    model.learn(timesteps)
    eval_env.obs_rms = env.obs_rms
    after, _ = evaluate_policy(model, eval_env, n_eval_episodes=10)
    return {"before": float(before), "after": float(after)}


class InvalidActionCounter(gym.Wrapper):
    """Counts the actions taken that the environment's mask forbids."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.invalid_actions = 0
        self.actions = 0

    def step(self, action):
        self.actions += 1
        self.invalid_actions += int(not self.env.unwrapped.action_masks()[int(action)])
        return self.env.step(action)

    def action_masks(self):
        return self.env.unwrapped.action_masks()


def maskable_invalid_actions(seed: int, compile_step: bool | str = "auto") -> dict[str, float]:
    """
    20 actions, 10 of them invalid at each step: a random valid action is right 1 time in 10 (a return of about 10
    per 100-step episode). 4,000 steps; the mean return of 5 episodes before and after, and the invalid actions taken.
    """

    def make(index: int) -> InvalidActionCounter:
        env = InvalidActionEnvDiscrete(dim=20, ep_length=100, n_invalid_actions=10)
        env.action_space.seed(index)
        return InvalidActionCounter(env)

    env = DummyVecEnv([lambda index=index: make(1000 * seed + index) for index in range(4)])
    model = MaskablePPO_EWMA(
        "MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=4, learning_rate=3e-3, seed=seed, device="cpu",
        compile_step=compile_step,
    )  # fmt: skip
    eval_env = DummyVecEnv([lambda: make(1000 * seed + 10)])
    before, _ = maskable_evaluate_policy(model, eval_env, n_eval_episodes=5, warn=False)
    model.learn(4000)
    after, _ = maskable_evaluate_policy(model, eval_env, n_eval_episodes=5, warn=False)
    counters = [*env.envs, *eval_env.envs]
    if compile_step is True:
        assert model.compiled_step.verified, model.compiled_step.reason
    return {
        "before": float(before),
        "after": float(after),
        "actions": float(sum(counter.actions for counter in counters)),
        "invalid_actions": float(sum(counter.invalid_actions for counter in counters)),
    }


CASES: dict[str, Callable[[int], dict[str, float]]] = {
    "ppo_ewma_cartpole": ppo_ewma_cartpole,
    "ppg_cartpole": ppg_cartpole,
    "ppg_ewma_cartpole": ppg_ewma_cartpole,
    "ppo_ewma_pendulum": ppo_ewma_pendulum,
    "ppg_ewma_pendulum": ppg_ewma_pendulum,
    "recurrent_cartpole_without_velocities": recurrent_cartpole_without_velocities,
    "recurrent_cartpole_without_velocities_25k": lambda seed: recurrent_cartpole_without_velocities(seed, 25_000),
    "maskable_invalid_actions": maskable_invalid_actions,
    **AGE_CASES,
}


def _run(case: str, seed: int) -> tuple[str, int, dict[str, float], float]:
    th.set_num_threads(1)
    start = time.perf_counter()
    outcome = CASES[case](seed)
    return case, seed, outcome, time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0 .. N-1")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="learning_seeds.json", help="JSON file, extended as runs finish (resumes)")
    args = parser.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = "1"
    results: dict[str, dict[str, Any]] = {}
    if os.path.exists(args.out):
        with open(args.out) as file:
            results = json.load(file)
    jobs = [(case, seed) for case in args.cases for seed in range(args.seeds) if str(seed) not in results.get(case, {})]
    with ProcessPoolExecutor(args.workers) as pool:
        futures = [pool.submit(_run, case, seed) for case, seed in jobs]
        for future in as_completed(futures):
            case, seed, outcome, seconds = future.result()
            results.setdefault(case, {})[str(seed)] = {**outcome, "seconds": round(seconds, 1)}
            print(f"{case} seed {seed}: {outcome} ({seconds:.0f} s)", flush=True)
            with open(args.out, "w") as file:
                json.dump(results, file, indent=1, sort_keys=True)
    for case, by_seed in results.items():
        for key in next(iter(by_seed.values())):
            values = np.array([outcome[key] for outcome in by_seed.values()])
            print(f"{case:40s} {key:16s} min {values.min():9.1f} median {np.median(values):9.1f} max {values.max():9.1f}")


if __name__ == "__main__":
    sys.exit(main())
