from sb3_ewma.ppg_ewma.policies import (
    CnnPolicy,
    MlpPolicy,
    MultiInputPolicy,
    PPGCnnPolicy,
    PPGMultiInputPolicy,
    PPGPolicy,
)
from sb3_ewma.ppg_ewma.ppg import PPG
from sb3_ewma.ppg_ewma.ppg_ewma import PPG_EWMA

__all__ = [
    "PPG",
    "PPG_EWMA",
    "CnnPolicy",
    "MlpPolicy",
    "MultiInputPolicy",
    "PPGCnnPolicy",
    "PPGMultiInputPolicy",
    "PPGPolicy",
]
