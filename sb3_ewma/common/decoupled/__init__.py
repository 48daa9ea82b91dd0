"""
The decoupled PPO training core that every algorithm of this package shares (Hilton, Cobbe & Schulman 2021):

- :mod:`~sb3_ewma.common.decoupled.options`: the decoupled options' check and what they resolve to;
- :mod:`~sb3_ewma.common.decoupled.objective`: the decoupled policy objective of a minibatch;
- :mod:`~sb3_ewma.common.decoupled.advantages`: advantage normalization (per minibatch or by EWMA moments);
- :mod:`~sb3_ewma.common.decoupled.proximal`: the proximal policy's network and its persistence;
- :mod:`~sb3_ewma.common.decoupled.algorithm`: :class:`DecoupledAlgorithm`, the class between every PPO variant and
  its parent (PPO's training iteration with the decoupled objective and its logs, and the collaborators it holds).
"""

# files saved before the training core became a package pickle the normalizer as
# ``sb3_ewma.common.decoupled.AdvantageNormalizer``: that name stays importable
from sb3_ewma.common.decoupled.advantages import AdvantageNormalizer

__all__ = ["AdvantageNormalizer"]
