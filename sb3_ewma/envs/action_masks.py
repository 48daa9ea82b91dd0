"""All-valid action masks for ``MaskablePPO_EWMA`` on environments that have none (an ``env_wrapper`` of the zoo)."""

import gymnasium as gym
import numpy as np
from gymnasium import spaces


def all_valid_action_mask(action_space: spaces.Space) -> np.ndarray:
    """
    The mask where every action of ``action_space`` is valid, in sb3-contrib's layout.

    :param action_space: a ``Discrete``, ``MultiDiscrete`` or ``MultiBinary`` space (else a ``ValueError``)
    :return: a boolean array of ones
    """
    if isinstance(action_space, spaces.Discrete):
        size = int(action_space.n)
    elif isinstance(action_space, spaces.MultiDiscrete):
        size = int(np.sum(action_space.nvec))
    elif isinstance(action_space, spaces.MultiBinary):
        size = 2 * int(np.prod(action_space.shape))
    else:
        raise ValueError(
            f"action masks need a Discrete, MultiDiscrete or MultiBinary action space, got {action_space}: "
            "MaskablePPO (ppo_mask_ewma) has no continuous actions, use ppo_ewma"
        )
    return np.ones(size, dtype=bool)


class ActionMaskOrAllValid(gym.Wrapper):
    """
    Gives the environment an ``action_masks()`` method: the wrapped environment's own, else every action valid.

    :param env: an environment with discrete actions
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        try:
            self._inner_masks = env.get_wrapper_attr("action_masks")
        except AttributeError:
            self._inner_masks = None
        self._all_valid = all_valid_action_mask(env.action_space)

    def action_masks(self) -> np.ndarray:
        """The wrapped environment's masks, else ones."""
        if self._inner_masks is not None:
            return np.asarray(self._inner_masks(), dtype=bool)
        return self._all_valid
