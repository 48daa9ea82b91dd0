"""PPO_EWMA learns: CartPole-v1 solved and Pendulum-v1 clearly improved within about a minute on one CPU core."""

import pytest
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy

from sb3_ewma import PPO_EWMA


def linear(initial: float):
    def schedule(progress_remaining: float) -> float:
        return progress_remaining * initial

    return schedule


@pytest.mark.slow
def test_ppo_ewma_solves_cartpole():
    # rl-zoo3's tuned PPO settings for CartPole-v1 (PPO_EWMA is a drop-in), EWMA with the default center of mass
    env = make_vec_env("CartPole-v1", n_envs=8, seed=0)
    model = PPO_EWMA(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        n_epochs=20,
        gae_lambda=0.8,
        gamma=0.98,
        learning_rate=linear(1e-3),
        clip_range=linear(0.2),
        seed=0,
        device="cpu",
    )
    model.learn(100_000)
    mean_return, _ = evaluate_policy(model, make_vec_env("CartPole-v1", n_envs=4, seed=100), n_eval_episodes=20)
    assert mean_return >= 475


@pytest.mark.slow
def test_ppo_ewma_improves_on_pendulum():
    env = make_vec_env("Pendulum-v1", n_envs=4, seed=0)
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
        seed=0,
        device="cpu",
    )
    eval_env = make_vec_env("Pendulum-v1", n_envs=4, seed=100)
    before, _ = evaluate_policy(model, eval_env, n_eval_episodes=8)
    model.learn(61_440)
    after, _ = evaluate_policy(model, eval_env, n_eval_episodes=8)
    assert before < -1000  # a random policy
    assert after > -900 and after - before > 400
