"""
The replication's pilot (``results/replication/minatar5/preregistration.md``): whether each of MinAtar's five games
learns at the shortest budget of the replication with Breakout's settings. SB3's PPO at the ``cpu`` preset's setting
(64 environments x 128 steps, 8 minibatches, 3 epochs, Adam 5e-4), 2^20 steps, one seed (99, not a replication
seed), on each game; beside it the mean return of a uniform random policy over 100 episodes (seed 99), the lower end
of the replication's normalization. A game *learns* when PPO's final return is at least twice the random policy's
and at least one point above it (the criterion written before the pilot ran).

    python -m benchmarks.learning.pilot --preset minatar5 --workers 1
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.harness import cli
from benchmarks.harness.common import Experiment, RunSpec
from benchmarks.harness.envs import make_env
from benchmarks.harness.report import final_values, markdown_table
from benchmarks.harness.settings import PILOT_SEED, preset_runs, run_spec

NAME = "pilot"
RANDOM_EPISODES = 100


def build_specs(preset: str, overrides: dict[str, Any]) -> list[RunSpec]:
    """SB3's PPO at the ``cpu`` setting on each game (``--envs`` replaces the five)."""
    setting, scale, _ = preset_runs(preset, NAME, overrides)
    return [run_spec(NAME, setting, scale, env, "ppo", seed) for env in setting.envs for seed in scale.seed_range]


def random_return(env_id: str, episodes: int = RANDOM_EPISODES, seed: int = PILOT_SEED) -> float:
    """The mean return of uniformly random actions over ``episodes`` episodes of ``env_id`` (the harness's env)."""
    env = make_env(env_id, 8, seed=seed)
    env.action_space.seed(seed)
    returns: list[float] = []
    env.reset()
    while len(returns) < episodes:
        _, _, _, infos = env.step(np.array([env.action_space.sample() for _ in range(env.num_envs)]))
        returns += [float(info["episode"]["r"]) for info in infos if "episode" in info]
    env.close()
    return float(np.mean(returns[:episodes]))


def learns(final_return: float, random_mean: float) -> bool:
    """The pilot's criterion: at least twice the random policy's return and at least one point above it."""
    return final_return >= max(2 * random_mean, random_mean + 1)


def report(evaluations: pd.DataFrame, specs: Sequence[RunSpec], out_dir: Path) -> str:
    """Per game: the random policy's return, PPO's final return, whether the game learns, and PPO's speed."""
    filled = evaluations.assign(value=evaluations.groupby("run_id")["mean_return"].ffill())
    finals = final_values(filled, ["env"]).set_index("env")["value"]
    speed = evaluations.groupby("env")["wall_time"].max()
    rows = []
    for env in dict.fromkeys(spec.env for spec in specs):
        if env not in finals:
            continue
        random_mean = random_return(env)
        seconds = float(speed[env])
        rows.append(
            [
                env,
                f"{random_mean:.3g}",
                f"{finals[env]:.3g}",
                "yes" if learns(finals[env], random_mean) else "no",
                f"{seconds:.0f}",
            ]
        )
    header = ["game", f"random policy ({RANDOM_EPISODES} episodes)", "PPO final return", "learns", "PPO run (s)"]
    return "## Pilot\n\n" + markdown_table(header, rows)


EXPERIMENT = Experiment(
    NAME,
    "The replication's pilot: does each MinAtar game learn at the budget?",
    __doc__ or "",
    build_specs,
    report,
)


def main(argv: Sequence[str] | None = None) -> Path:
    """Run the pilot from the command line (see ``--help``); returns its results directory."""
    return cli.main(EXPERIMENT, argv)


if __name__ == "__main__":
    main()
