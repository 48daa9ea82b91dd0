from sb3_ewma.ppg_ewma.policies import (
    CnnPolicy,
    MlpPolicy,
    MultiInputPolicy,
    PPGCnnPolicy,
    PPGMultiInputPolicy,
    PPGPolicy,
)
from sb3_ewma.ppg_ewma.ppg_ewma import PPG, PPG_EWMA

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
