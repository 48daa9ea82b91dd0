"""
The Procgen benchmark's tables (Cobbe et al. 2020): games, distribution modes, return normalization constants, and the
gymnasium ids ``procgen-<game>-<easy|hard>``. Needs no ``procgen``.
"""

import re

import numpy as np

PROCGEN_GAMES: list[str] = [
    "bigfish",
    "bossfight",
    "caveflyer",
    "chaser",
    "climber",
    "coinrun",
    "dodgeball",
    "fruitbot",
    "heist",
    "jumper",
    "leaper",
    "maze",
    "miner",
    "ninja",
    "plunder",
    "starpilot",
]
"""The 16 Procgen games."""

PROCGEN_DISTRIBUTION_MODES: tuple[str, ...] = ("easy", "hard", "extreme", "memory", "exploration")
"""Procgen's distribution modes; only "easy" and "hard" exist for every game."""

PROCGEN_MODE_GAMES: dict[str, tuple[str, ...]] = {
    # procgen aborts the whole process (C++ fassert) when a game is created in a mode it does not support
    "extreme": ("chaser", "dodgeball", "leaper", "starpilot"),
    "memory": ("caveflyer", "dodgeball", "heist", "jumper", "maze", "miner"),
    "exploration": ("caveflyer", "climber", "coinrun", "heist", "jumper", "leaper", "maze", "ninja"),
}
"""Games that support the restricted distribution modes."""

PROCGEN_NORMALIZATION_CONSTANTS: dict[str, dict[str, tuple[float, float]]] = {
    "easy": {
        "bigfish": (1.0, 40.0),
        "bossfight": (0.5, 13.0),
        "caveflyer": (3.5, 12.0),
        "chaser": (0.5, 13.0),
        "climber": (2.0, 12.6),
        "coinrun": (5.0, 10.0),
        "dodgeball": (1.5, 19.0),
        "fruitbot": (-1.5, 32.4),
        "heist": (3.5, 10.0),
        "jumper": (3.0, 10.0),
        "leaper": (3.0, 10.0),
        "maze": (5.0, 10.0),
        "miner": (1.5, 13.0),
        "ninja": (3.5, 10.0),
        "plunder": (4.5, 30.0),
        "starpilot": (2.5, 64.0),
    },
    "hard": {
        "bigfish": (0.0, 40.0),
        "bossfight": (0.5, 13.0),
        "caveflyer": (2.0, 13.4),
        "chaser": (0.5, 14.2),
        "climber": (1.0, 12.6),
        "coinrun": (5.0, 10.0),
        "dodgeball": (1.5, 19.0),
        "fruitbot": (-0.5, 27.2),
        "heist": (2.0, 10.0),
        "jumper": (1.0, 10.0),
        "leaper": (1.5, 10.0),
        "maze": (4.0, 10.0),
        "miner": (1.5, 20.0),
        "ninja": (2.0, 10.0),
        "plunder": (3.0, 30.0),
        "starpilot": (1.5, 35.0),
    },
}
"""``{distribution_mode: {game: (R_min, R_max)}}`` of the Procgen paper, for ``(R - R_min) / (R_max - R_min)``."""

PROCGEN_REGISTERED_MODES: tuple[str, ...] = ("easy", "hard")
"""Distribution modes of the gymnasium ids ``procgen-<game>-<mode>`` registered by :func:`register_procgen_envs`."""

_ENV_ID_PATTERN = re.compile(r"^procgen-(?P<game>[a-z]+)-(?P<mode>[a-z]+)$")


def parse_procgen_env_id(env_id: str) -> tuple[str, str] | None:
    """
    Parse an id ``procgen-<game>-<easy|hard>`` (registered by :func:`sb3_ewma.envs.register_procgen_envs`).

    :param env_id: e.g. "procgen-starpilot-easy"
    :return: ``(game, distribution_mode)``, e.g. ``("starpilot", "easy")``, or None if ``env_id`` is not such an id
    """
    match = _ENV_ID_PATTERN.match(env_id)
    if match is None or match["game"] not in PROCGEN_GAMES or match["mode"] not in PROCGEN_REGISTERED_MODES:
        return None
    return match["game"], match["mode"]


def normalized_return(
    game_or_env_id: str, return_: float | np.ndarray, distribution_mode: str | None = None
) -> float | np.ndarray:
    """
    Normalized return ``(R - R_min) / (R_max - R_min)`` of the Procgen paper (:data:`PROCGEN_NORMALIZATION_CONSTANTS`).
    The constants depend on the mode, which is never assumed.

    :param game_or_env_id: an id ``procgen-<game>-<easy|hard>``, or a game of :data:`PROCGEN_GAMES`
    :param return_: episode return(s) ``R``
    :param distribution_mode: "easy" or "hard"; required with a game, optional with an id (it must then agree)
    :return: the normalized return(s), a float for a scalar input, else an array of the input's shape
    """
    parsed = parse_procgen_env_id(game_or_env_id)
    if parsed is not None:
        game, id_mode = parsed
        if distribution_mode is not None and distribution_mode != id_mode:
            raise ValueError(
                f"distribution_mode={distribution_mode!r} contradicts the environment id {game_or_env_id!r}: "
                "leave distribution_mode unset to use the id's mode"
            )
        distribution_mode = id_mode
    else:
        game = game_or_env_id
        if game not in PROCGEN_GAMES:
            raise ValueError(
                f"game must be one of {PROCGEN_GAMES} or an id 'procgen-<game>-<easy|hard>', got {game_or_env_id!r}"
            )
        if distribution_mode is None:
            raise ValueError(
                f"distribution_mode is required for the game {game!r}: one of {tuple(PROCGEN_NORMALIZATION_CONSTANTS)} "
                "(the easy and hard modes have different constants), or pass an id such as 'procgen-starpilot-easy'"
            )
    if distribution_mode not in PROCGEN_NORMALIZATION_CONSTANTS:
        raise ValueError(
            f"distribution_mode must be one of {tuple(PROCGEN_NORMALIZATION_CONSTANTS)} for normalized returns, "
            f"got {distribution_mode!r}"
        )
    r_min, r_max = PROCGEN_NORMALIZATION_CONSTANTS[distribution_mode][game]
    result = (np.asarray(return_, dtype=np.float64) - r_min) / (r_max - r_min)
    return float(result) if result.ndim == 0 else result
