from sb3_ewma.recurrent_ppo_ewma.policies import CnnLstmPolicy, MlpLstmPolicy, MultiInputLstmPolicy
from sb3_ewma.recurrent_ppo_ewma.recurrent_ppo_ewma import RecurrentPPO_EWMA, RecurrentPPOEWMAArguments

__all__ = ["CnnLstmPolicy", "MlpLstmPolicy", "MultiInputLstmPolicy", "RecurrentPPOEWMAArguments", "RecurrentPPO_EWMA"]
