"""
The settings shared by the learning experiments at each preset: environments, network, number of environments and
the hyperparameters of PPO and PPG (the paper's appendix B, scaled down for the CPU presets).

- ``smoke``: MinAtar Breakout, a tiny MLP, 4 environments x 16 steps; seconds, for the tests.
- ``cpu``: MinAtar Breakout (see ``benchmarks/README.md`` for why), an MLP [64, 64], 64 environments x 128 steps,
  8 minibatches, Adam 5e-4, gamma 0.99, GAE 0.95, entropy 0.01, no gradient clipping; PPO 3 epochs; PPG
  ``N_pi = 4``, ``E_pi = E_V = 1``, ``E_aux = 6``, auxiliary minibatch 4 rollouts of one environment (512 steps).
- ``cpu_regime``: the ``cpu`` setting with the training diagnostics of every iteration recorded
  (:mod:`benchmarks.harness.diagnostics`); each experiment sets its own iteration at this preset, the regime its
  pre-registration (``benchmarks/results/<experiment>/cpu_regime/preregistration.md``) chose from the short runs of
  :mod:`benchmarks.learning.regime_diagnostics` (issue 49).
- ``minatar5``: the ``cpu_regime`` setting on MinAtar's five games, the confirmatory replication's
  (``benchmarks/results/replication/minatar5/preregistration.md``); each experiment sets its iteration as at
  ``cpu_regime``, and its seeds start at :data:`REPLICATION_FIRST_SEED`.
- ``gpu``: Procgen easy (starpilot, bigfish, bossfight), the IMPALA CNN, reward normalization, the paper's
  hyperparameters at one worker: 64 environments x 256 steps, 8 minibatches, Adam 5e-4, gamma 0.999, GAE 0.95,
  entropy 0.01, no gradient clipping; PPO 3 epochs; PPG ``N_pi = 32``, ``E_aux = 6``, auxiliary minibatch 4 x 256.
- ``paper``: the paper's setting: the 16 Procgen games in hard mode, 256 environments (4 workers x 64) x 256 steps,
  so 8 minibatches of 8192; auxiliary minibatch 4 x 256 per worker, i.e. 4096.
"""

import copy
import math
from dataclasses import dataclass, field, replace
from typing import Any

from benchmarks.harness.common import RunSpec

NO_GRAD_CLIP = math.inf
"""``max_grad_norm`` that turns SB3's gradient clipping off (the paper clips nothing)."""

PROCGEN_GAMES_EASY = ("procgen-starpilot-easy", "procgen-bigfish-easy", "procgen-bossfight-easy")
PROCGEN_GAMES_HARD = tuple(
    f"procgen-{game}-hard"
    for game in (
        "coinrun",
        "starpilot",
        "caveflyer",
        "dodgeball",
        "fruitbot",
        "chaser",
        "miner",
        "jumper",
        "leaper",
        "maze",
        "bigfish",
        "heist",
        "climber",
        "plunder",
        "ninja",
        "bossfight",
    )
)
"""The 16 games in the order of the paper's figures."""

MINATAR_GAMES = (
    "MinAtar/Asterix-v1",
    "MinAtar/Breakout-v1",
    "MinAtar/Freeway-v1",
    "MinAtar/Seaquest-v1",
    "MinAtar/SpaceInvaders-v1",
)
"""MinAtar's five games: the replication's (``benchmarks/results/replication/minatar5/preregistration.md``)."""
REPLICATION_FIRST_SEED = 100
"""The replication's seeds start here: no run before it used a seed above 13."""


@dataclass(frozen=True)
class Setting:
    """
    Environments, network and hyperparameters of one preset.

    :param envs: environment ids
    :param network: network name (:func:`benchmarks.harness.envs.policy_for`)
    :param n_envs: number of parallel environments
    :param n_minibatches: minibatches per epoch (``batch_size = n_steps * n_envs / n_minibatches``)
    :param common: hyperparameters of every algorithm (``n_steps`` included)
    :param ppo: PPO's and PPO-EWMA's own
    :param ppg: PPG's and PPG-EWMA's own
    :param device: torch device
    :param threads: torch threads per run
    :param diagnostics: record the training diagnostics of every iteration (:mod:`benchmarks.harness.diagnostics`)
    """

    envs: tuple[str, ...]
    network: str
    n_envs: int
    n_minibatches: int
    common: dict[str, Any]
    ppo: dict[str, Any] = field(default_factory=dict)
    ppg: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    threads: int = 1
    diagnostics: bool = False

    @property
    def iteration_size(self) -> int:
        """Environment steps per iteration at ``n_envs``."""
        return int(self.common["n_steps"]) * self.n_envs

    def hyperparams(self, algo: str, n_envs: int | None = None) -> dict[str, Any]:
        """
        Constructor keyword arguments of ``algo`` (``"ppo"``, ``"ppo_ewma"``, ``"ppg"``, ``"ppg_ewma"``), with the
        ``batch_size`` of ``n_envs`` environments (default: the setting's). The EWMA variants use the classes'
        default ``ewma_decay="auto"`` (center of mass = minibatches per epoch), the others none.
        """
        n_envs = self.n_envs if n_envs is None else n_envs
        hyperparams = copy.deepcopy(self.common)
        hyperparams["batch_size"] = int(self.common["n_steps"]) * n_envs // self.n_minibatches
        hyperparams.update(copy.deepcopy(self.ppo if algo.startswith("ppo") else self.ppg))
        return hyperparams

    def with_overrides(self, overrides: dict[str, Any]) -> "Setting":
        """This setting with the command line's ``envs`` and ``device`` when given."""
        changes = {key: overrides[key] for key in ("envs", "device") if overrides.get(key) is not None}
        return replace(self, **changes)


_MINATAR_COMMON = dict(
    learning_rate=5e-4,
    gamma=0.99,
    gae_lambda=0.95,
    ent_coef=0.01,
    vf_coef=0.5,
    clip_range=0.2,
    max_grad_norm=NO_GRAD_CLIP,
)
_PROCGEN_COMMON = dict(_MINATAR_COMMON, n_steps=256, gamma=0.999)
_PPG = dict(n_epochs=1, n_value_epochs=1, n_aux_epochs=6, beta_clone=1.0)

SETTINGS: dict[str, Setting] = {
    "smoke": Setting(
        envs=("MinAtar/Breakout-v1",),
        network="mlp",
        n_envs=4,
        n_minibatches=4,
        common=dict(_MINATAR_COMMON, n_steps=16, policy_kwargs=dict(net_arch=[16])),
        ppo=dict(n_epochs=2),
        ppg=dict(_PPG, n_policy_iterations=2, n_aux_epochs=1, aux_batch_size=32),
    ),
    "cpu": Setting(
        envs=("MinAtar/Breakout-v1",),
        network="mlp",
        n_envs=64,
        n_minibatches=8,
        common=dict(_MINATAR_COMMON, n_steps=128, policy_kwargs=dict(net_arch=[64, 64])),
        ppo=dict(n_epochs=3),
        ppg=dict(_PPG, n_policy_iterations=4, aux_batch_size=4 * 128),
    ),
    "cpu_regime": Setting(
        envs=("MinAtar/Breakout-v1",),
        network="mlp",
        n_envs=64,
        n_minibatches=8,
        common=dict(_MINATAR_COMMON, n_steps=128, policy_kwargs=dict(net_arch=[64, 64])),
        ppo=dict(n_epochs=3),
        ppg=dict(_PPG, n_policy_iterations=4, aux_batch_size=4 * 128),
        diagnostics=True,
    ),
    "minatar5": Setting(
        envs=MINATAR_GAMES,
        network="mlp",
        n_envs=64,
        n_minibatches=8,
        common=dict(_MINATAR_COMMON, n_steps=128, policy_kwargs=dict(net_arch=[64, 64])),
        ppo=dict(n_epochs=3),
        ppg=dict(_PPG, n_policy_iterations=4, aux_batch_size=4 * 128),
        diagnostics=True,
    ),
    "gpu": Setting(
        envs=PROCGEN_GAMES_EASY,
        network="impala",
        n_envs=64,
        n_minibatches=8,
        common=_PROCGEN_COMMON,
        ppo=dict(n_epochs=3),
        ppg=dict(_PPG, n_policy_iterations=32, aux_batch_size=4 * 256),
        device="cuda",
        threads=4,
    ),
    "paper": Setting(
        envs=PROCGEN_GAMES_HARD,
        network="impala",
        n_envs=256,
        n_minibatches=8,
        common=_PROCGEN_COMMON,
        ppo=dict(n_epochs=3),
        ppg=dict(_PPG, n_policy_iterations=32, aux_batch_size=4 * 4 * 256),
        device="cuda",
        threads=4,
    ),
}


@dataclass(frozen=True)
class Scale:
    """
    How long and how often: the length of the runs of one experiment at one preset.

    :param timesteps: environment steps per run
    :param eval_every: environment steps between evaluations
    :param seeds: number of seeds
    :param first_seed: the first seed (the seeds are ``first_seed, first_seed + 1, ...``)
    """

    timesteps: int
    eval_every: int
    seeds: int
    first_seed: int = 0

    @property
    def seed_range(self) -> range:
        """The seeds of the runs."""
        return range(self.first_seed, self.first_seed + self.seeds)

    def with_overrides(self, overrides: dict[str, Any], multiple: int) -> "Scale":
        """
        This scale with the command line's ``timesteps`` and ``eval_every`` (each rounded up to ``multiple``) and
        ``seeds`` when given.
        """
        scale = self
        if overrides.get("seeds") is not None:
            scale = replace(scale, seeds=int(overrides["seeds"]))
        if overrides.get("eval_every") is not None:
            scale = replace(scale, eval_every=-(-int(overrides["eval_every"]) // multiple) * multiple)
        if overrides.get("timesteps") is not None:
            timesteps = -(-int(overrides["timesteps"]) // multiple) * multiple
            scale = replace(scale, timesteps=timesteps, eval_every=min(scale.eval_every, timesteps))
        return scale


def run_spec(
    experiment: str,
    setting: Setting,
    scale: Scale,
    env: str,
    algo: str,
    seed: int,
    *,
    variant: str | None = None,
    n_envs: int | None = None,
    hyperparams: dict[str, Any] | None = None,
    labels: dict[str, Any] | None = None,
    aliases: tuple[str, ...] = (),
    eval_episodes: int | None = None,
) -> RunSpec:
    """
    A run of ``algo`` at a preset's setting and scale.

    :param variant: the curve it belongs to (default: ``algo``)
    :param n_envs: number of environments (default: the setting's)
    :param hyperparams: constructor arguments (default: ``setting.hyperparams(algo, n_envs)``)
    :param labels: extra identifying columns
    :param aliases: other variants the run stands for
    :param eval_episodes: episodes of a separate evaluation (default 0: the training episodes)
    """
    n_envs = setting.n_envs if n_envs is None else n_envs
    return RunSpec(
        experiment=experiment,
        variant=algo if variant is None else variant,
        algo=algo,
        env=env,
        n_envs=n_envs,
        seed=seed,
        total_timesteps=scale.timesteps,
        eval_every=scale.eval_every,
        hyperparams=setting.hyperparams(algo, n_envs) if hyperparams is None else hyperparams,
        network=setting.network,
        labels=dict(labels or {}),
        aliases=aliases,
        device=setting.device,
        threads=setting.threads,
        eval_episodes=int(eval_episodes or 0),
        diagnostics=setting.diagnostics,
    )


def preset_setting(
    preset: str,
    overrides: dict[str, Any],
    envs: dict[str, tuple[str, ...]] | None = None,
    n_envs: dict[str, int] | None = None,
    n_steps: dict[str, int] | None = None,
) -> Setting:
    """
    The setting of ``preset`` for one experiment: the experiment's own choice of environments, number of
    environments and steps per environment of an iteration at this preset (``envs``, ``n_envs``, ``n_steps``, by
    preset) if any, then the command line's ``envs`` and ``device`` when given.
    """
    setting = SETTINGS[preset]
    if envs and preset in envs:
        setting = replace(setting, envs=envs[preset])
    if n_envs and preset in n_envs:
        setting = replace(setting, n_envs=n_envs[preset])
    if n_steps and preset in n_steps:
        setting = replace(setting, common=dict(setting.common, n_steps=n_steps[preset]))
    return setting.with_overrides(overrides)
