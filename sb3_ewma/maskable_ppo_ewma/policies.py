"""MaskablePPO_EWMA uses sb3-contrib's maskable actor-critic policies unchanged; the proximal policy is an EWMA copy."""

from sb3_contrib.common.maskable.policies import (
    MaskableActorCriticCnnPolicy,
    MaskableActorCriticPolicy,
    MaskableMultiInputActorCriticPolicy,
)

MlpPolicy = MaskableActorCriticPolicy
CnnPolicy = MaskableActorCriticCnnPolicy
MultiInputPolicy = MaskableMultiInputActorCriticPolicy

__all__ = ["CnnPolicy", "MlpPolicy", "MultiInputPolicy"]
