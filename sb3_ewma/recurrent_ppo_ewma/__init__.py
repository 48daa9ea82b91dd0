from sb3_ewma.recurrent_ppo_ewma.policies import CnnLstmPolicy, MlpLstmPolicy, MultiInputLstmPolicy
from sb3_ewma.recurrent_ppo_ewma.recurrent_ppo_ewma import RecurrentPPO_EWMA

__all__ = ["CnnLstmPolicy", "MlpLstmPolicy", "MultiInputLstmPolicy", "RecurrentPPO_EWMA"]
