"""Episode statistics of Procgen environments: SB3's ``VecMonitor`` with Procgen's own statistics."""

from collections.abc import Sequence

from stable_baselines3.common.monitor import ResultsWriter
from stable_baselines3.common.vec_env import VecEnv, VecMonitor
from stable_baselines3.common.vec_env.base_vec_env import VecEnvStepReturn

from sb3_ewma.envs.procgen_games import PROCGEN_NORMALIZATION_CONSTANTS, normalized_return


class ProcgenMonitor(VecMonitor):
    """
    SB3's ``VecMonitor`` over a :class:`~sb3_ewma.envs.ProcgenVecEnv`: ``info["episode"]`` holds the **raw** return
    ``"r"``, ``"l"`` and ``"t"``, plus ``"level_complete"``, ``"level_seed"`` (the finished level's) and, in the easy
    and hard modes, ``"normalized_return"``; also written to the Monitor CSV file when given.

    :param venv: the Procgen ``VecEnv``
    :param filename: the Monitor CSV file, or None
    :param info_keywords: keys of the step's info to add to the episode statistics (``Monitor``'s argument)
    """

    EPISODE_KEYS = ("level_complete", "normalized_return", "level_seed")

    def __init__(self, venv: VecEnv, filename: str | None = None, info_keywords: Sequence[str] = ()) -> None:
        super().__init__(venv, filename=None, info_keywords=("level_complete", "prev_level_seed", *info_keywords))
        # render_fps and render modes, for VecVideoRecorder
        self.metadata = venv.metadata
        self.env_name = venv.get_attr("env_name")[0]
        self.distribution_mode = venv.get_attr("distribution_mode")[0]
        self.user_info_keywords = tuple(info_keywords)
        # VecMonitor's results_writer would write the row before the Procgen statistics are added
        self.episode_writer: ResultsWriter | None = None
        if filename:
            self.episode_writer = ResultsWriter(
                filename,
                header={"t_start": self.t_start, "env_id": str(self.env_name)},
                extra_keys=self.EPISODE_KEYS + self.user_info_keywords,
            )

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, dones, infos = super().step_wait()
        for info in infos:
            episode = info.get("episode")
            if episode is None:
                continue
            episode["level_seed"] = episode.pop("prev_level_seed")
            if self.distribution_mode in PROCGEN_NORMALIZATION_CONSTANTS:
                episode["normalized_return"] = normalized_return(self.env_name, float(episode["r"]), self.distribution_mode)
            if self.episode_writer is not None:
                columns = ("r", "l", "t", *self.EPISODE_KEYS, *self.user_info_keywords)
                self.episode_writer.write_row({key: episode.get(key, "") for key in columns})
        return obs, rewards, dones, infos

    def close(self) -> None:
        if self.episode_writer is not None:
            self.episode_writer.close()
        super().close()


__all__ = ["ProcgenMonitor"]
