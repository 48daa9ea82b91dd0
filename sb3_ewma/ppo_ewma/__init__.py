from sb3_ewma.ppo_ewma.policies import CnnPolicy, MlpPolicy, MultiInputPolicy
from sb3_ewma.ppo_ewma.ppo_ewma import PPO_EWMA

__all__ = ["PPO_EWMA", "CnnPolicy", "MlpPolicy", "MultiInputPolicy"]
