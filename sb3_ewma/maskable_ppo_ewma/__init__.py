from sb3_ewma.maskable_ppo_ewma.maskable_ppo_ewma import MaskablePPO_EWMA
from sb3_ewma.maskable_ppo_ewma.policies import CnnPolicy, MlpPolicy, MultiInputPolicy

__all__ = ["CnnPolicy", "MaskablePPO_EWMA", "MlpPolicy", "MultiInputPolicy"]
