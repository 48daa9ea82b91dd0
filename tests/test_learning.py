"""
Slow learning tests on CPU (seeds fixed, so deterministic on a given machine; each 20-35 s on one core):
PPO_EWMA, PPG and PPG_EWMA solve CartPole-v1 and clearly improve on Pendulum-v1 (continuous actions, gSDE).

CartPole uses rl-zoo3's tuned PPO settings (PPO_EWMA is a drop-in for PPO). PPG's settings are tuned for a small
budget, not the paper's Procgen defaults: short phases (``N_pi = 8``), several policy and value epochs per iteration
(``E_pi = E_V = 10``) and 3 auxiliary epochs.
"""

import pytest
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecNormalize

from sb3_ewma import PPG, PPG_EWMA, PPO_EWMA

pytestmark = pytest.mark.slow

PHASES = dict(n_policy_iterations=8, n_epochs=10, n_value_epochs=10, n_aux_epochs=3, aux_batch_size=256)


def linear(initial: float):
    def schedule(progress_remaining: float) -> float:
        return progress_remaining * initial

    return schedule


def cartpole_model(algorithm, **kwargs):
    env = make_vec_env("CartPole-v1", n_envs=8, seed=0)
    return algorithm(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        learning_rate=linear(1e-3),
        clip_range=linear(0.2),
        seed=0,
        device="cpu",
        **kwargs,
    )


def test_ppo_ewma_solves_cartpole():
    # EWMA with the default center of mass
    model = cartpole_model(PPO_EWMA, n_epochs=20)
    model.learn(100_000)
    mean_return, _ = evaluate_policy(model, make_vec_env("CartPole-v1", n_envs=4, seed=100), n_eval_episodes=20)
    assert mean_return >= 475


@pytest.mark.parametrize("algorithm", [PPG, PPG_EWMA])
def test_ppg_solves_cartpole(algorithm):
    model = cartpole_model(algorithm, **PHASES)
    model.learn(100_000)
    assert model.n_aux_phases == 100_000 // (8 * 256)
    eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=100)
    mean_return, _ = evaluate_policy(model, eval_env, n_eval_episodes=20, deterministic=True)
    assert mean_return >= 475


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


# PPG_EWMA only: plain PPG (the same class with ewma_decay=None) learns CartPole above, and this is the costliest test
@pytest.mark.parametrize("algorithm", [PPG_EWMA])
def test_ppg_improves_on_pendulum(algorithm):
    env = VecNormalize(make_vec_env("Pendulum-v1", n_envs=4, seed=0), gamma=0.9)
    model = algorithm(
        "MlpPolicy",
        env,
        n_steps=256,
        batch_size=128,
        gae_lambda=0.95,
        gamma=0.9,
        learning_rate=1e-3,
        use_sde=True,
        sde_sample_freq=4,
        seed=0,
        device="cpu",
        **PHASES,
    )
    eval_env = VecNormalize(make_vec_env("Pendulum-v1", n_envs=1, seed=100), training=False, norm_reward=False)
    eval_env.obs_rms = env.obs_rms
    initial_return, _ = evaluate_policy(model, eval_env, n_eval_episodes=10, deterministic=True)
    model.learn(100_000)
    eval_env.obs_rms = env.obs_rms
    mean_return, _ = evaluate_policy(model, eval_env, n_eval_episodes=20, deterministic=True)
    assert initial_return < -1000  # a random policy
    # "clearly better": at this budget the final return varies between seeds by several hundred
    assert mean_return > -900 and mean_return - initial_return > 300
