"""
The preset table of the learning experiments (``benchmarks.harness.settings.PRESETS``): every experiment builds its
runs at each preset that names it, and the runs of the presets whose results exist are pinned (their run ids,
settings and seeds), so that a change to the table or to an experiment cannot move a finished run.
"""

import hashlib
import importlib
import json
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `benchmarks` is a directory of the repository, not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import settings  # noqa: E402

EXPERIMENT_MODULES = {
    "ewma_comparison": "ewma_comparison",
    "staleness": "staleness",
    "batch_size_invariance": "batch_size_invariance",
    "batch_size_invariance_authors": "batch_size_invariance_authors",
    "pilot": "pilot",
    "async_rollouts": "overlapped_rollouts",
    "regime_diagnostics": "regime_diagnostics",
}
"""Experiment name -> module under ``benchmarks.learning``."""

PINNED = {
    # the confirmatory replication's runs: never to change (results/replication/minatar5/preregistration.md)
    ("ewma_comparison", "minatar5"): (240, "80027b94983b7e81bb6e6829f3280ed1c543fac6"),
    ("staleness", "minatar5"): (200, "12acf62e6646f71fb62a6f7fed36ad539bc24cec"),
    ("batch_size_invariance", "minatar5"): (192, "b7159d56c8a36282ac89e7a90d359ed13d46556c"),
    ("pilot", "minatar5"): (5, "e7aba1b2095dcf6de4bea691a208124eab8a90c7"),
    # the other presets with results under benchmarks/results
    ("ewma_comparison", "smoke"): (8, "8738377578720c558dd1e6ad34417b6743e06418"),
    ("ewma_comparison", "cpu"): (12, "e04acf208f92ce1d6832f39b1e09623036c613e2"),
    ("ewma_comparison", "breakout_preregistered"): (56, "ff7044e9ea7212be2089fb3a87786750910e1231"),
    ("ewma_comparison", "breakout_128_minibatches"): (20, "a5473de5fe368bf68c15dcfb042f1c615a9b5c30"),
    ("ewma_comparison", "breakout_128_minibatches_ewma384"): (20, "dd1a5602b09ea49a3bcf4a833dd53ae3f927e5ec"),
    ("ewma_comparison", "gpu"): (36, "4c11eb2fd4811e237bf14c894a75b8088f5cfc69"),
    ("ewma_comparison", "paper"): (256, "a476ce78a87ed6fd9c6f2a1390dab9e6ed7086bd"),
    ("staleness", "smoke"): (7, "461d7c0e862ce894705605a66d23a66c95728ddb"),
    ("staleness", "cpu"): (39, "13e1b4dc999174457efe9e9177a9af3acfb4b994"),
    ("staleness", "breakout_preregistered"): (50, "a9280fdcfae3e9207d1ccf5d7051a9e90d92c3e4"),
    ("staleness", "breakout_large_steps"): (35, "9859fd38f965004121903a5abb731c78655e7a2c"),
    ("staleness", "breakout_clip0.3"): (35, "e31a644de72ca2449c17cd532e845191ea8368e7"),
    ("staleness", "gpu"): (26, "860fc03d70f273f9bf68687752c9da7ab3552ad3"),
    ("staleness", "paper"): (1216, "099ad390f5a0cad50107c34ffa6fcc4deb1da2fa"),
    ("batch_size_invariance", "smoke"): (7, "96bc815c6b670699ffb1bfb1fe6a81cb1a9a7f21"),
    ("batch_size_invariance", "cpu"): (34, "c4cdbf3bc3863a61ac95720e40a8bca99717b02f"),
    ("batch_size_invariance", "breakout_preregistered"): (80, "a1af45c7962752544484c768cde795b8d98f98c5"),
    ("batch_size_invariance", "gpu"): (34, "7ab3356442a4b3483a0fccc6d687c3270c8ebbb8"),
    ("batch_size_invariance", "paper"): (1056, "50d1c3495b47b3cd1a692050c8ee5334275c4c47"),
    ("batch_size_invariance_authors", "smoke"): (5, "71631210222962d99095c2afc9d94d29d3ad49a4"),
    ("batch_size_invariance_authors", "cpu"): (14, "9b31d25494723ab0143cffb3abb960e7b86a0abd"),
    ("batch_size_invariance_authors", "gpu"): (14, "241b0cc09dba8f1df2e7cbcd8965d569f659d383"),
    ("batch_size_invariance_authors", "paper"): (384, "e8ce768d9dfead42a805dcb839af7aa2284148e6"),
    ("async_rollouts", "smoke"): (5, "e11c6ebc424a6101848a55b11702fe4c54671e37"),
    ("async_rollouts", "cpu"): (24, "b4e64b59f51bfccaa33825bf442aad2eb7fa48e3"),
    ("regime_diagnostics", "smoke"): (6, "2aa028fde92299a6dd3764e936081f6c33b78dd5"),
    ("regime_diagnostics", "cpu"): (15, "e65c049d96152809c815104017f04d081aeb5df7"),
    ("regime_diagnostics", "breakout_large_steps"): (27, "454910d423075550d0c7df92ca6d630def74ae4f"),
}
"""(experiment, preset) -> (number of runs, SHA-1 of the runs' settings in order), computed before the table existed."""


def experiment(name: str):
    return importlib.import_module(f"benchmarks.learning.{EXPERIMENT_MODULES[name]}").EXPERIMENT


def fingerprint(specs) -> tuple[int, str]:
    text = json.dumps([asdict(spec) for spec in specs], sort_keys=True, default=repr)
    return len(specs), hashlib.sha1(text.encode()).hexdigest()


def table_entries() -> list[tuple[str, str]]:
    return [(name, preset) for preset in settings.PRESETS for name in settings.PRESETS[preset].runs]


def test_every_experiment_of_the_table_is_known():
    assert {name for name, _ in table_entries()} <= set(EXPERIMENT_MODULES) | {"proximal_noise"}
    assert set(settings.PRESETS) >= {"smoke", "cpu", "minatar5", "gpu", "paper"}


@pytest.mark.parametrize("name, preset", [entry for entry in table_entries() if entry[0] != "proximal_noise"])
def test_each_experiment_builds_its_runs_at_each_of_its_presets(name, preset):
    specs = experiment(name).build_specs(preset, {})
    assert specs and len({spec.run_id for spec in specs}) == len(specs)
    assert all(spec.experiment == name for spec in specs)


@pytest.mark.parametrize("name, preset", sorted(PINNED))
def test_the_runs_of_presets_with_results_are_pinned(name, preset):
    assert fingerprint(experiment(name).build_specs(preset, {})) == PINNED[(name, preset)]


def test_minatar5_run_ids_and_seeds():
    """The replication's runs by name: the first and last run ids and the seeds of each experiment."""
    expected = {
        "ewma_comparison": ("asterix__ppo__n_envs=64__seed=100", range(100, 112)),
        "staleness": ("asterix__decoupled__staleness=0__n_envs=64__seed=100", range(100, 104)),
        "batch_size_invariance": ("asterix__ppg_ewma__n_envs=16__seed=100", range(100, 104)),
        "pilot": ("asterix__ppo__n_envs=64__seed=99", range(99, 100)),
    }
    for name, (first, seeds) in expected.items():
        specs = experiment(name).build_specs("minatar5", {})
        assert specs[0].run_id == first and {spec.seed for spec in specs} == set(seeds)
