"""
The decoupled PPO training core that every algorithm of this package shares (Hilton, Cobbe & Schulman 2021):

- :mod:`~sb3_ewma.common.decoupled.options`: the decoupled options and their check;
- :mod:`~sb3_ewma.common.decoupled.arguments`: the constructors' keyword arguments (typed, the signature built from the
  parent's) and their shared documentation;
- :mod:`~sb3_ewma.common.decoupled.objective`: the decoupled policy objective of a minibatch;
- :mod:`~sb3_ewma.common.decoupled.advantages`: advantage normalization (per minibatch or by EWMA moments);
- :mod:`~sb3_ewma.common.decoupled.proximal`: the proximal policy's network and its persistence;
- :mod:`~sb3_ewma.common.decoupled.logs`: the clip-range schedules and the logs of a training iteration;
- :mod:`~sb3_ewma.common.decoupled.algorithm`: :class:`DecoupledAlgorithm`, the one class between every algorithm and
  its parent (PPO's training iteration with the decoupled objective, and the collaborators it calls).
"""

# files saved before the training core became a package pickle the normalizer as
# ``sb3_ewma.common.decoupled.AdvantageNormalizer``: that name stays importable
from sb3_ewma.common.decoupled.advantages import AdvantageNormalizer

__all__ = ["AdvantageNormalizer"]
