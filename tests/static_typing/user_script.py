# mypy: warn-unused-ignores
# pyright: reportUnnecessaryTypeIgnoreComment=true
"""
A user's script as type checkers (mypy, and pyright: VS Code's Pylance) see it, checked by both in ``.ci/run`` and
never run. Each model must be typed as its class, by the constructor, ``load`` and ``learn``; SB3's positional order and
a user's own policy class must be accepted. A line that must be an error carries ``# type: ignore[code]``: with
``warn-unused-ignores`` (mypy) and ``reportUnnecessaryTypeIgnoreComment`` (pyright), the check fails if the checker
does not find an error there.
"""

from typing import assert_type

import gymnasium as gym
import stable_baselines3.ppo
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3.common.policies import ActorCriticPolicy

from sb3_ewma import PPG, PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA
from sb3_ewma.ablations import StaleMaskablePPO_EWMA, StalePPO_EWMA, StaleRecurrentPPO_EWMA
from sb3_ewma.ppg_ewma import PPGPolicy


class MyPolicy(ActorCriticPolicy):
    pass


class MyLstmPolicy(RecurrentActorCriticPolicy):
    pass


class MyMaskablePolicy(MaskableActorCriticPolicy):
    pass


class MyPPGPolicy(PPGPolicy):
    pass


env = gym.make("CartPole-v1")

# --- PPO_EWMA: SB3's PPO's arguments, by position too, then the decoupled options
ppo = PPO_EWMA("MlpPolicy", env, 3e-4, 64, 32, 2, ewma_decay=0.9, kl_coef=0.1, clip_range=None)
assert_type(ppo, PPO_EWMA)
assert_type(PPO_EWMA(MyPolicy, env), PPO_EWMA)
assert_type(ppo.learn(1_000), PPO_EWMA)
assert_type(PPO_EWMA.load("ppo_ewma.zip"), PPO_EWMA)
assert_type(PPO_EWMA.load("ppo_ewma.zip", env="CartPole-v1"), PPO_EWMA)
PPO_EWMA("MlpPolicy", env, n_stepz=64)  # type: ignore[call-arg]
PPO_EWMA("MlpPolicy", env, n_steps="64")  # type: ignore[arg-type]
PPO_EWMA("MlpPolicy", env, ewma_decay=[0.9])  # type: ignore[arg-type]
ppo.lern(1_000)  # type: ignore[attr-defined]

# --- RecurrentPPO_EWMA: sb3-contrib's RecurrentPPO's arguments (batch_size may be None), then the options
recurrent = RecurrentPPO_EWMA("MlpLstmPolicy", env, 3e-4, 128, None, ewma_decay="paper")
assert_type(recurrent, RecurrentPPO_EWMA)
assert_type(RecurrentPPO_EWMA(MyLstmPolicy, env), RecurrentPPO_EWMA)
assert_type(recurrent.learn(1_000), RecurrentPPO_EWMA)
assert_type(RecurrentPPO_EWMA.load("recurrent.zip"), RecurrentPPO_EWMA)
RecurrentPPO_EWMA("MlpLstmPolicy", env, rollout_buffer_class=None)  # type: ignore[call-arg]
RecurrentPPO_EWMA("MlpLstmPolicy", env, n_epochs=1.5)  # type: ignore[arg-type]
recurrent.lern(1_000)  # type: ignore[attr-defined]

# --- MaskablePPO_EWMA: sb3-contrib's MaskablePPO's arguments, then the options; learn's use_masking in its place
maskable = MaskablePPO_EWMA("MlpPolicy", env, 3e-4, 64, 32, async_rollouts="thread")
assert_type(maskable, MaskablePPO_EWMA)
assert_type(MaskablePPO_EWMA(MyMaskablePolicy, env), MaskablePPO_EWMA)
assert_type(maskable.learn(1_000, None, 1, "run", True, False), MaskablePPO_EWMA)
assert_type(MaskablePPO_EWMA.load("maskable.zip"), MaskablePPO_EWMA)
MaskablePPO_EWMA("MlpPolicy", env, use_sde=True)  # type: ignore[call-arg]
MaskablePPO_EWMA("MlpPolicy", env, gamma="0.99")  # type: ignore[arg-type]
maskable.lern(1_000)  # type: ignore[attr-defined]

# --- PPG_EWMA and PPG: PPO's policy-phase arguments, PPG's own, then the options (PPG has no ewma_decay)
ppg_ewma = PPG_EWMA("MlpPolicy", env, 5e-4, 256, 64, 1, 1, n_aux_epochs=2, ewma_decay=0.99)
assert_type(ppg_ewma, PPG_EWMA)
assert_type(PPG_EWMA(MyPPGPolicy, env), PPG_EWMA)
# a script written for PPO passes SB3's policy class: PPG builds its own policy of the same kind
assert_type(PPG_EWMA(stable_baselines3.ppo.MlpPolicy, env), PPG_EWMA)
assert_type(ppg_ewma.learn(1_000), PPG_EWMA)
assert_type(PPG_EWMA.load("ppg_ewma.zip"), PPG_EWMA)
PPG_EWMA("MlpPolicy", env, kl_coeff=0.1)  # type: ignore[call-arg]
PPG_EWMA("MlpPolicy", env, n_aux_epochs="6")  # type: ignore[arg-type]
ppg_ewma.lern(1_000)  # type: ignore[attr-defined]

ppg = PPG("MlpPolicy", env, 5e-4, 256, 64, n_policy_iterations=8, kl_coef=0.1)
assert_type(ppg, PPG)
assert_type(PPG(MyPPGPolicy, env), PPG)
assert_type(ppg.learn(1_000), PPG)
assert_type(PPG.load("ppg.zip"), PPG)
PPG("MlpPolicy", env, ewma_decay=0.9)  # type: ignore[call-arg]
PPG("MlpPolicy", env, beta_clone="1")  # type: ignore[arg-type]
ppg.lern(1_000)  # type: ignore[attr-defined]

# --- the ablation: the algorithm's constructor, and set_staleness typed as the class
stale = StalePPO_EWMA("MlpPolicy", env, 3e-4, 64, ewma_decay=None).set_staleness(2, mode="behavior")
assert_type(stale, StalePPO_EWMA)
assert_type(StaleRecurrentPPO_EWMA("MlpLstmPolicy", env).set_staleness(1), StaleRecurrentPPO_EWMA)
assert_type(StaleMaskablePPO_EWMA.load("stale.zip"), StaleMaskablePPO_EWMA)
stale.set_staleness("2")  # type: ignore[arg-type]
