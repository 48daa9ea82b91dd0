"""
The preset table of the learning experiments: each preset is a setting (environments, network, number of environments
and the hyperparameters of PPO and PPG: the paper's appendix B, scaled down for the CPU presets) and, for each
experiment that runs at it, that experiment's runs (:class:`Runs`: their length and seeds, and what the experiment
changes from the setting). Every experiment of ``benchmarks/learning`` reads its runs from :data:`PRESETS`; its
command line offers the presets that name it (``--preset``).

- ``smoke``: MinAtar Breakout, a tiny MLP, 4 environments x 16 steps; seconds, for the tests.
- ``cpu``: MinAtar Breakout (see ``benchmarks/README.md`` for why), an MLP [64, 64], 64 environments x 128 steps,
  8 minibatches, Adam 5e-4, gamma 0.99, GAE 0.95, entropy 0.01, no gradient clipping; PPO 3 epochs; PPG
  ``N_pi = 4``, ``E_pi = E_V = 1``, ``E_aux = 6``, auxiliary minibatch 4 rollouts of one environment (512 steps).
  Short runs, a few seeds.
- ``breakout_preregistered``: the ``cpu`` setting with the training diagnostics of every iteration
  (:mod:`benchmarks.harness.diagnostics`), in the regime of each experiment's pre-registration
  (``benchmarks/results/<experiment>/breakout_preregistered/preregistration.md``), chosen from the short runs of
  :mod:`benchmarks.learning.regime_diagnostics`; seeds from a power calculation.
- ``breakout_large_steps``: staleness with a policy that moves further per iteration (clip range 0.5, Adam 2e-3), and
  the regime diagnostics' candidates for it (larger step sizes, more epochs, wider clip ranges).
- ``breakout_clip0.3``: staleness at the ``breakout_preregistered`` iteration with clip range 0.3.
- ``breakout_128_minibatches``: PPO against PPO-EWMA at the ``breakout_preregistered`` setting with 128 minibatches of
  64 per epoch (a noisy proximal policy); ``breakout_128_minibatches_ewma384`` the same with PPO-EWMA's center of
  mass at 384 optimizer steps.
- ``minatar5``: the ``breakout_preregistered`` setting on MinAtar's five games, the confirmatory replication's
  (``benchmarks/results/replication/minatar5/preregistration.md``); seeds from :data:`REPLICATION_FIRST_SEED`.
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
REPLICATION_GAMES = ("MinAtar/Asterix-v1", "MinAtar/Freeway-v1", "MinAtar/Seaquest-v1")
"""The batch size-invariance experiment's games in the replication: the first three of the five other than Breakout,
alphabetically (``results/replication/minatar5/preregistration.md``)."""
PILOT_SEED = 99
"""The seed of the replication's pilot (not a replication seed)."""


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

SMOKE = Setting(
    envs=("MinAtar/Breakout-v1",),
    network="mlp",
    n_envs=4,
    n_minibatches=4,
    common=dict(_MINATAR_COMMON, n_steps=16, policy_kwargs=dict(net_arch=[16])),
    ppo=dict(n_epochs=2),
    ppg=dict(_PPG, n_policy_iterations=2, n_aux_epochs=1, aux_batch_size=32),
)
BREAKOUT = Setting(
    envs=("MinAtar/Breakout-v1",),
    network="mlp",
    n_envs=64,
    n_minibatches=8,
    common=dict(_MINATAR_COMMON, n_steps=128, policy_kwargs=dict(net_arch=[64, 64])),
    ppo=dict(n_epochs=3),
    ppg=dict(_PPG, n_policy_iterations=4, aux_batch_size=4 * 128),
)
"""MinAtar Breakout on a CPU: the ``cpu`` preset's setting."""
BREAKOUT_DIAGNOSED = replace(BREAKOUT, diagnostics=True)
"""The ``cpu`` setting with the training diagnostics of every iteration."""
PROCGEN_EASY = Setting(
    envs=PROCGEN_GAMES_EASY,
    network="impala",
    n_envs=64,
    n_minibatches=8,
    common=_PROCGEN_COMMON,
    ppo=dict(n_epochs=3),
    ppg=dict(_PPG, n_policy_iterations=32, aux_batch_size=4 * 256),
    device="cuda",
    threads=4,
)
PROCGEN_PAPER = replace(
    PROCGEN_EASY, envs=PROCGEN_GAMES_HARD, n_envs=256, ppg=dict(_PPG, n_policy_iterations=32, aux_batch_size=4 * 4 * 256)
)


@dataclass(frozen=True)
class Runs:
    """
    One experiment's runs at a preset: their length, and what the experiment changes from the preset's setting.

    :param scale: environment steps per run, between evaluations, and the seeds
    :param changes: the experiment's own values of :class:`Setting` fields (``envs``, ``n_envs``, ``n_minibatches``,
        ``diagnostics``) and of ``n_steps``
    :param hyperparams: hyperparameters every run of the experiment at this preset sets otherwise (merged into the
        setting's ``common``)
    :param options: the experiment's own choices at this preset (the keys each experiment reads are in its module:
        staleness levels, numbers of environments, variants)
    """

    scale: Scale
    changes: dict[str, Any] = field(default_factory=dict)
    hyperparams: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    def setting(self, base: Setting) -> Setting:
        """``base`` with this experiment's changes."""
        changes = dict(self.changes)
        common = dict(base.common)
        if "n_steps" in changes:
            common["n_steps"] = changes.pop("n_steps")
        common.update(copy.deepcopy(self.hyperparams))
        return replace(base, common=common, **changes)


@dataclass(frozen=True)
class Preset:
    """
    A row of the preset table.

    :param summary: what the preset is
    :param setting: the environments, network and hyperparameters its experiments share
    :param runs: each experiment's runs at this preset, by experiment name (``Experiment.name``)
    """

    summary: str
    setting: Setting
    runs: dict[str, Runs]


def _replication(timesteps: int, eval_every: int, seeds: int) -> Scale:
    return Scale(timesteps=timesteps, eval_every=eval_every, seeds=seeds, first_seed=REPLICATION_FIRST_SEED)


_STALENESS_PREREGISTERED = dict(n_envs=64, n_steps=256)
"""The iteration of staleness's pre-registered regime (64 environments x 256 steps, minibatch 2,048)."""
_NOISY_PROXIMAL = dict(n_minibatches=128)

PRESETS: dict[str, Preset] = {
    "smoke": Preset(
        "MinAtar Breakout, a tiny MLP, 4 environments x 16 steps: seconds, for the tests",
        SMOKE,
        {
            "ewma_comparison": Runs(Scale(timesteps=256, eval_every=128, seeds=2)),
            "staleness": Runs(Scale(timesteps=256, eval_every=128, seeds=1), options=dict(staleness=(0, 1, 2))),
            "batch_size_invariance": Runs(Scale(timesteps=256, eval_every=128, seeds=1), options=dict(n_envs=(4, 1))),
            "batch_size_invariance_authors": Runs(Scale(timesteps=256, eval_every=128, seeds=1), options=dict(n_envs=(4, 1))),
            "async_rollouts": Runs(
                Scale(timesteps=128, eval_every=64, seeds=1),
                changes=dict(envs=("CartPole-v1",)),
                options=dict(cartpole=dict(n_envs=2, n_steps=16, batch_size=32, n_epochs=2)),
            ),
            "regime_diagnostics": Runs(
                Scale(timesteps=512, eval_every=256, seeds=1),
                changes=dict(diagnostics=True),
                options=dict(
                    staleness_regimes=((4, 16),),
                    batch_reference=4,
                    batch_n_envs=(4, 1),
                    batch_scale=Scale(timesteps=256, eval_every=128, seeds=1),
                ),
            ),
            "proximal_noise": Runs(
                Scale(timesteps=4 * 16 * 8, eval_every=4 * 16 * 4, seeds=1),
                options=dict(minibatches=(2, 4), points=2, replicas=3),
            ),
        },
    ),
    "cpu": Preset(
        "MinAtar Breakout, MLP [64, 64], 64 environments x 128 steps: short runs on a CPU, a few seeds",
        BREAKOUT,
        {
            "ewma_comparison": Runs(Scale(timesteps=2**20, eval_every=2**15, seeds=3)),
            "staleness": Runs(
                Scale(timesteps=2**19, eval_every=2**14, seeds=3),
                changes=dict(n_envs=16),  # more, smaller iterations in a short run
                options=dict(staleness=(0, 1, 2, 4, 8)),
            ),
            "batch_size_invariance": Runs(
                Scale(timesteps=10 * 2**15, eval_every=2**14, seeds=2), options=dict(n_envs=(64, 16, 4, 1))
            ),
            "batch_size_invariance_authors": Runs(
                Scale(timesteps=10 * 2**15, eval_every=2**14, seeds=2), options=dict(n_envs=(64, 16, 4, 1))
            ),
            "async_rollouts": Runs(
                Scale(timesteps=2**20, eval_every=2**16, seeds=3),
                changes=dict(envs=("CartPole-v1", "MinAtar/Breakout-v1")),
                options=dict(cartpole_scale=Scale(timesteps=2**16, eval_every=2**13, seeds=3)),
            ),
            "regime_diagnostics": Runs(
                Scale(timesteps=2**19, eval_every=2**16, seeds=1),
                changes=dict(diagnostics=True),
                options=dict(
                    staleness_regimes=((16, 128), (64, 128), (64, 256)),
                    batch_reference=16,
                    batch_n_envs=(16, 4, 1),
                    batch_scale=Scale(timesteps=10 * 2**15, eval_every=2**14, seeds=1),
                    large_reference=64,
                ),
            ),
            "proximal_noise": Runs(
                Scale(timesteps=2**20, eval_every=2**18, seeds=1),
                options=dict(minibatches=(8, 32, 128), points=4, replicas=4),
            ),
        },
    ),
    "breakout_preregistered": Preset(
        "MinAtar Breakout with the training diagnostics, each experiment in its pre-registered regime",
        BREAKOUT_DIAGNOSED,
        {
            "ewma_comparison": Runs(Scale(timesteps=2**20, eval_every=2**15, seeds=14)),
            "staleness": Runs(
                Scale(timesteps=4 * 2**20, eval_every=2**17, seeds=5),
                changes=_STALENESS_PREREGISTERED,
                options=dict(staleness=(0, 2, 8), ewma=True),
            ),
            "batch_size_invariance": Runs(
                Scale(timesteps=10 * 2**15, eval_every=2**14, seeds=5),
                changes=dict(n_envs=16),  # the reference: its minibatch of 256 below the critical batch size
                options=dict(n_envs=(16, 4, 1), ppg_variants=("ppg_ewma", "no_lr", "ppg"), ppo=True),
            ),
        },
    ),
    "breakout_large_steps": Preset(
        "MinAtar Breakout, staleness with a policy that moves further per iteration (clip range 0.5, Adam 2e-3)",
        BREAKOUT_DIAGNOSED,
        {
            "staleness": Runs(
                Scale(timesteps=2 * 2**20, eval_every=2**16, seeds=5),
                changes=_STALENESS_PREREGISTERED,
                hyperparams=dict(clip_range=0.5, learning_rate=2e-3),
                options=dict(staleness=(0, 2, 8)),
            ),
            "regime_diagnostics": Runs(
                Scale(timesteps=2**19, eval_every=2**16, seeds=1),
                options=dict(
                    staleness_regimes=((64, 256),),
                    candidates=(
                        {"learning_rate": 1e-3},
                        {"learning_rate": 2e-3},
                        {"learning_rate": 4e-3},
                        {"n_epochs": 6},
                        {"n_epochs": 12},
                        {"n_epochs": 12, "learning_rate": 1e-3},
                        {"clip_range": 0.3},
                        {"clip_range": 0.5},
                        {"clip_range": 0.5, "learning_rate": 2e-3},
                    ),
                ),
            ),
        },
    ),
    "breakout_clip0.3": Preset(
        "MinAtar Breakout, staleness at the pre-registered iteration with clip range 0.3",
        BREAKOUT_DIAGNOSED,
        {
            "staleness": Runs(
                Scale(timesteps=2 * 2**20, eval_every=2**16, seeds=5),
                changes=_STALENESS_PREREGISTERED,
                hyperparams=dict(clip_range=0.3),
                options=dict(staleness=(0, 2, 8)),
            ),
        },
    ),
    "breakout_128_minibatches": Preset(
        "MinAtar Breakout, PPO against PPO-EWMA with 128 minibatches of 64 per epoch (a noisy proximal policy)",
        BREAKOUT_DIAGNOSED,
        {
            "ewma_comparison": Runs(
                Scale(timesteps=2**20, eval_every=2**16, seeds=10),
                changes=_NOISY_PROXIMAL,
                options=dict(algos=("ppo", "ppo_ewma")),
            ),
        },
    ),
    "breakout_128_minibatches_ewma384": Preset(
        "the same with PPO-EWMA's center of mass at 384 optimizer steps (the iteration's 3 x 128)",
        BREAKOUT_DIAGNOSED,
        {
            "ewma_comparison": Runs(
                Scale(timesteps=2**20, eval_every=2**16, seeds=10),
                changes=_NOISY_PROXIMAL,
                options=dict(algos=("ppo", "ppo_ewma"), ppo_ewma_decay=1 - 1 / (1 + 3 * 128)),
            ),
        },
    ),
    "minatar5": Preset(
        "MinAtar's five games with the diagnostics: the confirmatory replication (its pre-registration fixes every run)",
        replace(BREAKOUT_DIAGNOSED, envs=MINATAR_GAMES),
        {
            "ewma_comparison": Runs(_replication(2**20, 2**15, 12)),
            "staleness": Runs(
                _replication(2 * 2**20, 2**16, 4),
                changes=_STALENESS_PREREGISTERED,
                hyperparams=dict(clip_range=0.3),
                options=dict(staleness=(0, 2, 8), ewma=True),
            ),
            "batch_size_invariance": Runs(
                _replication(10 * 2**15, 2**14, 4),
                changes=dict(envs=REPLICATION_GAMES, n_envs=16),
                options=dict(n_envs=(16, 4, 1), ppg_variants=("ppg_ewma", "no_lr", "ppg"), ppo=True),
            ),
            "pilot": Runs(
                Scale(timesteps=2**20, eval_every=2**15, seeds=1, first_seed=PILOT_SEED),
                changes=dict(diagnostics=False),
            ),
        },
    ),
    "gpu": Preset(
        "Procgen easy (starpilot, bigfish, bossfight), IMPALA CNN, 64 environments x 256 steps, on a GPU",
        PROCGEN_EASY,
        {
            "ewma_comparison": Runs(Scale(timesteps=25 * 2**20, eval_every=2**18, seeds=3)),
            "staleness": Runs(
                Scale(timesteps=16 * 2**20, eval_every=2**18, seeds=2),
                changes=dict(envs=("procgen-starpilot-easy",)),  # one game: its runs are long
                options=dict(staleness=(0, 1, 2, 4, 8)),
            ),
            "batch_size_invariance": Runs(
                Scale(timesteps=8 * 2**20, eval_every=2**18, seeds=2),
                changes=dict(envs=("procgen-starpilot-easy",)),  # one game: its runs at 1 environment are long
                options=dict(n_envs=(64, 16, 4, 1)),
            ),
            "batch_size_invariance_authors": Runs(
                Scale(timesteps=8 * 2**20, eval_every=2**18, seeds=2),
                changes=dict(envs=("procgen-starpilot-easy",)),
                options=dict(n_envs=(64, 16, 4, 1)),
            ),
        },
    ),
    "paper": Preset(
        "the paper's setting: the 16 Procgen games in hard mode, 256 environments x 256 steps, 100M steps per run",
        PROCGEN_PAPER,
        {
            "ewma_comparison": Runs(Scale(timesteps=100 * 2**20, eval_every=2**20, seeds=4)),
            "staleness": Runs(
                Scale(timesteps=100 * 2**20, eval_every=2**20, seeds=4), options=dict(staleness=(0, 1, 2, 4, 8, 16, 32))
            ),
            "batch_size_invariance": Runs(
                Scale(timesteps=100 * 2**20, eval_every=2**20, seeds=3), options=dict(n_envs=(256, 64, 16, 4, 1))
            ),
            "batch_size_invariance_authors": Runs(
                Scale(timesteps=100 * 2**20, eval_every=2**20, seeds=3), options=dict(n_envs=(256, 64, 16, 4, 1))
            ),
        },
    ),
}
"""The preset table: preset name -> :class:`Preset`."""


def presets_of(experiment: str) -> tuple[str, ...]:
    """The presets at which ``experiment`` has runs, in the table's order."""
    return tuple(name for name, preset in PRESETS.items() if experiment in preset.runs)


def preset_runs(preset: str, experiment: str, overrides: dict[str, Any]) -> tuple[Setting, Scale, Runs]:
    """
    ``experiment``'s runs at ``preset``: the preset's setting with the experiment's changes, then the command line's
    ``envs`` and ``device`` when given; the scale with the command line's ``timesteps``, ``eval_every`` and
    ``seeds`` when given; and the table's entry (for its ``options``).
    """
    if preset not in PRESETS or experiment not in PRESETS[preset].runs:
        raise ValueError(f"{experiment} has the presets {presets_of(experiment)}, got {preset!r}")
    runs = PRESETS[preset].runs[experiment]
    setting = runs.setting(PRESETS[preset].setting).with_overrides(overrides)
    return setting, runs.scale.with_overrides(overrides, setting.iteration_size), runs


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
