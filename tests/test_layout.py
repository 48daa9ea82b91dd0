"""The package's layout: which modules may import which, and the bases of every algorithm."""

import ast
import importlib
import inspect
import pkgutil
from collections.abc import Container
from pathlib import Path

import pytest
from sb3_contrib import MaskablePPO, RecurrentPPO
from stable_baselines3 import PPO

import sb3_ewma
from sb3_ewma import PPG, PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA
from sb3_ewma.common.decoupled.algorithm import DecoupledAlgorithm
from sb3_ewma.common.decoupled.proximal import ProximalPolicy
from sb3_ewma.common.distributed import DataParallelTraining, SingleProcessTraining

PACKAGE_DIR = Path(sb3_ewma.__file__).parent
# what sb3_ewma.common must never import: the algorithms, their registry and the entry points built on them
ABOVE_COMMON = (
    "ppo_ewma",
    "ppg_ewma",
    "recurrent_ppo_ewma",
    "maskable_ppo_ewma",
    "ablations",
    "algorithms",
    "zoo",
    "scale",
    "train",
)


def imported_modules(path: Path, modules: Container[str] = ()) -> set[str]:
    """
    Every module an ``import`` statement of the file names, at any depth (in functions too). ``from package import
    name`` names ``package`` and ``package.name``; when ``package.name`` is one of ``modules`` (a submodule, imported
    as ``import package.name`` would import it), only ``package.name``.
    """
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            imported = [f"{node.module}.{alias.name}" for alias in node.names]
            names.update(imported)
            if not all(name in modules for name in imported):
                names.add(node.module)
    return names


def module_name(path: Path, base: Path = PACKAGE_DIR.parent) -> str:
    parts = path.relative_to(base).with_suffix("").parts
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


ALGORITHM_PACKAGES = ("ppo_ewma", "ppg_ewma", "recurrent_ppo_ewma", "maskable_ppo_ewma", "ablations")


def test_common_holds_what_the_algorithms_share():
    """
    Every module of ``common/`` is imported, directly or through others, by an algorithm: what serves only the
    command line, rl-zoo3 or the scale helper lives beside its user (``zoo/``, ``scale/``, the entry points).
    """
    graph = import_graph(PACKAGE_DIR)
    reached: set[str] = set()
    pending = [name for name in graph if name.split(".")[1:2] and name.split(".")[1] in ALGORITHM_PACKAGES]
    while pending:
        name = pending.pop()
        if name not in reached:
            reached.add(name)
            pending.extend(graph[name])
    packages = {module_name(path) for path in PACKAGE_DIR.rglob("__init__.py")}
    unused = sorted(name for name in graph if name.startswith("sb3_ewma.common.") and name not in reached | packages)
    assert not unused, f"modules of common/ that no algorithm uses: {unused}"


def import_graph(root: Path, base: Path = PACKAGE_DIR.parent) -> dict[str, set[str]]:
    """
    Which modules under ``root`` each module under ``root`` imports: imports inside functions included, and a
    package's imports of its own submodules too (``zoo/__init__.py`` importing ``zoo.commands``), since a submodule
    that imports back what imports its package closes a cycle through them.
    """
    modules = {module_name(path, base): path for path in sorted(root.rglob("*.py"))}
    return {
        name: {imported for imported in imported_modules(path, modules) if imported in modules and imported != name}
        for name, path in modules.items()
    }


def import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph (its modules, the first one repeated at the end), or None."""
    visiting: list[str] = []
    done: set[str] = set()

    def visit(name: str) -> list[str] | None:
        if name in done:
            return None
        if name in visiting:
            return [*visiting[visiting.index(name) :], name]
        visiting.append(name)
        for imported in sorted(graph[name]):
            cycle = visit(imported)
            if cycle is not None:
                return cycle
        visiting.pop()
        done.add(name)
        return None

    for name in sorted(graph):
        cycle = visit(name)
        if cycle is not None:
            return cycle
    return None


@pytest.mark.parametrize("root", [PACKAGE_DIR, BENCHMARKS_DIR], ids=lambda root: root.name)
def test_no_import_cycles(root):
    """The import graph of the package and of the benchmarks (function-level imports included) has no cycle."""
    cycle = import_cycle(import_graph(root))
    assert cycle is None, f"import cycle: {' -> '.join(cycle or [])}"


def test_the_cycle_test_sees_function_level_imports_and_package_to_submodule_edges(tmp_path):
    # the shape of a cycle this test once missed: app.command imports app.tools inside a function, app/tools/__init__.py
    # imports its submodule app.tools.run, which imports app.command at the top
    package = tmp_path / "app"
    (package / "tools").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "command.py").write_text("def main():\n    from app import tools\n\n\ndef shared():\n    pass\n")
    (package / "tools" / "__init__.py").write_text("from app.tools.run import run\n")
    (package / "tools" / "run.py").write_text("from app.command import shared\n\n\ndef run():\n    shared()\n")
    graph = import_graph(package, tmp_path)
    assert "app.tools" in graph["app.command"] and "app.tools.run" in graph["app.tools"]
    assert import_cycle(graph) == ["app.command", "app.tools", "app.tools.run", "app.command"]
    # a submodule naming a sibling through its package (`from app.tools import other`) depends on the sibling only
    (package / "tools" / "other.py").write_text("")
    (package / "tools" / "run.py").write_text("from app.tools import other\n")
    graph = import_graph(package, tmp_path)
    assert graph["app.tools.run"] == {"app.tools.other"} and import_cycle(graph) is None
    # ... but naming one of the package's own names does depend on the package
    (package / "tools" / "run.py").write_text("from app.tools import helper\n")
    assert "app.tools" in import_graph(package, tmp_path)["app.tools.run"]
    # the shared function moved to a module that imports nothing of the package: no cycle
    (package / "shared.py").write_text("def shared():\n    pass\n")
    (package / "tools" / "run.py").write_text("from app.shared import shared\n")
    assert import_cycle(import_graph(package, tmp_path)) is None


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


PARENTS = [(PPO_EWMA, PPO), (RecurrentPPO_EWMA, RecurrentPPO), (MaskablePPO_EWMA, MaskablePPO)]


@pytest.mark.parametrize("algorithm, parent", PARENTS, ids=lambda value: value.__name__)
def test_every_ppo_variant_is_its_parent_with_the_decoupled_training(algorithm, parent):
    """``Algorithm(DecoupledAlgorithm, Parent)``: the parent's methods, reached from DecoupledAlgorithm's ``super()``."""
    assert algorithm.__bases__ == (DecoupledAlgorithm, parent)
    assert algorithm.__mro__[1:] == (DecoupledAlgorithm, *parent.__mro__)


def test_ppg_is_ppo_with_its_phases_and_ppg_ewma_adds_the_ewma():
    """PPG is SB3's PPO (its policy phase) with an auxiliary phase; PPG_EWMA only adds ``ewma_decay``."""
    assert PPG.__bases__ == (DecoupledAlgorithm, PPO) and PPG.__mro__[1:] == (DecoupledAlgorithm, *PPO.__mro__)
    assert PPG_EWMA.__bases__ == (PPG,)
    assert {"train", "_auxiliary_phase"} <= set(vars(PPG)) and not {"train", "_auxiliary_phase"} & set(vars(PPG_EWMA))
    assert "ewma_decay" in inspect.signature(PPG_EWMA).parameters and "ewma_decay" not in inspect.signature(PPG).parameters


@pytest.mark.parametrize("algorithm", [PPO_EWMA, PPG_EWMA, RecurrentPPO_EWMA, MaskablePPO_EWMA])
def test_every_algorithm_has_the_collaborators_it_uses(algorithm):
    policy = "MlpLstmPolicy" if algorithm is RecurrentPPO_EWMA else "MlpPolicy"
    env = "CartPole-v1"
    if algorithm is MaskablePPO_EWMA:
        from sb3_contrib.common.envs import InvalidActionEnvDiscrete

        env = InvalidActionEnvDiscrete(dim=4, n_invalid_actions=1)
    model = algorithm(policy, env, n_steps=8, batch_size=8)
    assert isinstance(model.proximal, ProximalPolicy) and model.proximal.kind == "ewma"
    # one process: the training that does nothing (no process group), the same methods as data-parallel training's
    assert isinstance(model.data_parallel, SingleProcessTraining) and (model.world_size, model.rank) == (1, 0)
    assert {name for name in vars(DataParallelTraining) if not name.startswith("_")} <= set(dir(SingleProcessTraining))
    assert model.gradient_noise is None  # logged only with log_gradient_noise_scale=True
    assert algorithm(policy, env, n_steps=8, batch_size=8, ewma_decay=None).proximal.kind == "behavior"


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
