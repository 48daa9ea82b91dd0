"""
PPO_EWMA's policies: SB3's actor-critic policies with one more keyword, ``head_init_scale``
(:class:`sb3_ewma.common.policies.HeadInitMixin`).
"""

from stable_baselines3.common.policies import ActorCriticCnnPolicy, ActorCriticPolicy, MultiInputActorCriticPolicy

from sb3_ewma.common.policies import HeadInitMixin, LeanActingMixin


class MlpPolicy(HeadInitMixin, LeanActingMixin, ActorCriticPolicy):
    """SB3's ``ActorCriticPolicy`` (``MlpPolicy``) with the ``head_init_scale`` keyword (None: SB3's initialization)."""


class CnnPolicy(HeadInitMixin, LeanActingMixin, ActorCriticCnnPolicy):
    """SB3's ``ActorCriticCnnPolicy`` with the ``head_init_scale`` keyword (None: SB3's initialization)."""


class MultiInputPolicy(HeadInitMixin, LeanActingMixin, MultiInputActorCriticPolicy):
    """SB3's ``MultiInputActorCriticPolicy`` with the ``head_init_scale`` keyword (None: SB3's initialization)."""


__all__ = ["CnnPolicy", "MlpPolicy", "MultiInputPolicy"]
