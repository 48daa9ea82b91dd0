"""The package's layout: which modules may import which, and the base-class order of every algorithm."""

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest
from sb3_contrib import MaskablePPO, RecurrentPPO
from stable_baselines3 import PPO
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

import sb3_ewma
from sb3_ewma import PPG, PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA
from sb3_ewma.common.collection.overlap import AsyncRolloutMixin
from sb3_ewma.common.collection.rollout import RolloutCollectionMixin
from sb3_ewma.common.decoupled.contrib import ContribDecoupledMixin
from sb3_ewma.common.decoupled.mixin import DecoupledAlgorithmMixin
from sb3_ewma.common.decoupled.proximal import ProximalSaveMixin
from sb3_ewma.common.decoupled.training import DecoupledTrainingMixin
from sb3_ewma.common.distributed import DataParallelMixin
from sb3_ewma.common.host import PPOHost

PACKAGE_DIR = Path(sb3_ewma.__file__).parent
# what sb3_ewma.common must never import: the algorithms and the entry points built on them
ABOVE_COMMON = ("ppo_ewma", "ppg_ewma", "recurrent_ppo_ewma", "maskable_ppo_ewma", "zoo", "scale", "train")


def imported_modules(path: Path) -> set[str]:
    """Every module an ``import`` statement of the file names, at any depth (in functions too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


SOURCES = sorted(PACKAGE_DIR.rglob("*.py"))


def test_every_module_imports():
    for module in pkgutil.walk_packages([str(PACKAGE_DIR)], prefix="sb3_ewma."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)


@pytest.mark.parametrize("path", [path for path in SOURCES if "common" in path.parts], ids=module_name)
def test_common_imports_nothing_above_it(path):
    forbidden = {f"sb3_ewma.{name}" for name in ABOVE_COMMON}
    above = {name for name in imported_modules(path) if any(name == f or name.startswith(f + ".") for f in forbidden)}
    assert not above, f"{module_name(path)} imports {sorted(above)}"


BENCHMARKS_DIR = PACKAGE_DIR.parent / "benchmarks"


def import_graph(root: Path) -> dict[str, set[str]]:
    """Which modules under ``root`` each module under ``root`` imports (function-level imports included)."""
    modules = {module_name(path): path for path in sorted(root.rglob("*.py"))}
    graph = {
        name: {imported for imported in imported_modules(path) if imported in modules and imported != name}
        for name, path in modules.items()
    }
    # a package's __init__ may re-export its submodules: an edge from a package to its own submodule is no cycle
    return {name: {m for m in edges if not m.startswith(name + ".")} for name, edges in graph.items()}


@pytest.mark.parametrize("root", [PACKAGE_DIR, BENCHMARKS_DIR], ids=lambda root: root.name)
def test_no_import_cycles(root):
    """The import graph of the package and of the benchmarks (function-level imports included) has no cycle."""
    graph = import_graph(root)
    visiting: list[str] = []
    done: set[str] = set()

    def visit(name: str) -> None:
        if name in done:
            return
        assert name not in visiting, f"import cycle: {' -> '.join([*visiting[visiting.index(name):], name])}"
        visiting.append(name)
        for imported in sorted(graph[name]):
            visit(imported)
        visiting.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)


@pytest.mark.parametrize("path", sorted(BENCHMARKS_DIR.rglob("*.py")), ids=module_name)
def test_benchmarks_import_no_private_names(path):
    """A benchmark module uses another's public names only (``from benchmarks.x import _name`` is a hidden contract)."""
    private = [
        f"{node.module}.{alias.name}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module is not None and node.module.startswith("benchmarks")
        for alias in node.names
        if alias.name.startswith("_")
    ]
    assert not private, f"{module_name(path)} imports private names {private}"


DECOUPLED_BASES = (DecoupledAlgorithmMixin, ProximalSaveMixin)
PPO_LIKE_BASES = (DataParallelMixin, AsyncRolloutMixin, RolloutCollectionMixin)


@pytest.mark.parametrize(
    "algorithm, bases, host",
    [
        (PPO_EWMA, (*PPO_LIKE_BASES, DecoupledTrainingMixin, *DECOUPLED_BASES), PPO),
        (PPG_EWMA, (*PPO_LIKE_BASES, *DECOUPLED_BASES), OnPolicyAlgorithm),
        (PPG, (PPG_EWMA, *PPO_LIKE_BASES, *DECOUPLED_BASES), OnPolicyAlgorithm),
        (RecurrentPPO_EWMA, (*PPO_LIKE_BASES, ContribDecoupledMixin, DecoupledTrainingMixin, *DECOUPLED_BASES), RecurrentPPO),
        (MaskablePPO_EWMA, (*PPO_LIKE_BASES, ContribDecoupledMixin, DecoupledTrainingMixin, *DECOUPLED_BASES), MaskablePPO),
    ],
)
def test_base_class_order(algorithm, bases, host):
    """
    The mixins come before the host, in this order (see sb3_ewma.common.host): data-parallel training sees every call
    first, then overlapped rollouts, the rollout loop, the training core and the proximal policy's persistence.
    """
    mro = algorithm.__mro__
    assert mro[1 : len(bases) + 1] == bases
    assert mro[len(bases) + 1] is host


@pytest.mark.parametrize("algorithm", [PPO_EWMA, PPG_EWMA, RecurrentPPO_EWMA, MaskablePPO_EWMA])
def test_every_algorithm_has_the_hyperparameters_the_mixins_use(algorithm):
    policy = "MlpLstmPolicy" if algorithm is RecurrentPPO_EWMA else "MlpPolicy"
    env = "CartPole-v1"
    if algorithm is MaskablePPO_EWMA:
        from sb3_contrib.common.envs import InvalidActionEnvDiscrete

        env = InvalidActionEnvDiscrete(dim=4, n_invalid_actions=1)
    assert isinstance(algorithm(policy, env, n_steps=8, batch_size=8), PPOHost)


def test_the_package_lists_exactly_what_it_offers():
    # what `from sb3_ewma import *` gives, the lazily imported classes and functions included, and nothing else
    assert dir(sb3_ewma) == sorted(sb3_ewma.__all__)
    assert {"RecurrentPPO_EWMA", "MaskablePPO_EWMA", "scale_hyperparams"} <= set(sb3_ewma.__all__)
    assert not {"os", "file_handler"} & set(vars(sb3_ewma))
    assert len(set(sb3_ewma.__all__)) == len(sb3_ewma.__all__)
    for name in sb3_ewma.__all__:
        assert getattr(sb3_ewma, name) is not None, name
    namespace: dict = {}
    exec("from sb3_ewma import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(sb3_ewma.__all__)
