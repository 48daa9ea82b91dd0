"""The package's layout: which modules may import which, the bases of every algorithm, and module sizes."""

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
from sb3_ewma.common.decoupled.algorithm import DecoupledAlgorithm
from sb3_ewma.common.decoupled.proximal import ProximalPolicy
from sb3_ewma.common.host import PPOHost

PACKAGE_DIR = Path(sb3_ewma.__file__).parent
# what sb3_ewma.common must never import: the algorithms and the entry points built on them
ABOVE_COMMON = ("ppo_ewma", "ppg_ewma", "recurrent_ppo_ewma", "maskable_ppo_ewma", "ablations", "zoo", "scale", "train")


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


PARENTS = [(PPO_EWMA, PPO), (PPG_EWMA, OnPolicyAlgorithm), (RecurrentPPO_EWMA, RecurrentPPO), (MaskablePPO_EWMA, MaskablePPO)]


@pytest.mark.parametrize("algorithm, parent", PARENTS, ids=lambda value: value.__name__)
def test_every_algorithm_is_its_parent_with_one_shared_base(algorithm, parent):
    """
    ``Algorithm(DecoupledAlgorithm, Parent)`` (see sb3_ewma.common.host): the package's own classes in an algorithm's
    MRO are the algorithm and DecoupledAlgorithm, whose collaborators do the rest; at most 7 classes (SB3's PPO has 5).
    """
    assert algorithm.__bases__ == (DecoupledAlgorithm, parent)
    assert algorithm.__mro__[1:] == (DecoupledAlgorithm, *parent.__mro__)
    assert len(algorithm.__mro__) <= 7
    assert PPG.__bases__ == (PPG_EWMA,) and len(PPG.__mro__) <= 7


@pytest.mark.parametrize("method", ["learn", "save", "_excluded_save_params", "set_parameters", "load"])
@pytest.mark.parametrize(
    "algorithm, parent", [*PARENTS, (PPG, OnPolicyAlgorithm)], ids=lambda value: getattr(value, "__name__", value)
)
def test_the_lifecycle_is_defined_once_below_the_parent(algorithm, parent, method):
    """
    ``learn``, ``save``, ``load``, ... are DecoupledAlgorithm's alone: no algorithm overrides them again (``learn``
    names its arguments after ``reset_num_timesteps`` by the parent's own signature: MaskablePPO's ``use_masking``).
    """
    below_parent = algorithm.__mro__[: algorithm.__mro__.index(parent)]
    defining = [klass for klass in below_parent if method in vars(klass)]
    assert defining == [DecoupledAlgorithm]


@pytest.mark.parametrize("algorithm", [PPO_EWMA, PPG_EWMA, RecurrentPPO_EWMA, MaskablePPO_EWMA])
def test_every_algorithm_has_the_hyperparameters_and_collaborators_it_uses(algorithm):
    policy = "MlpLstmPolicy" if algorithm is RecurrentPPO_EWMA else "MlpPolicy"
    env = "CartPole-v1"
    if algorithm is MaskablePPO_EWMA:
        from sb3_contrib.common.envs import InvalidActionEnvDiscrete

        env = InvalidActionEnvDiscrete(dim=4, n_invalid_actions=1)
    model = algorithm(policy, env, n_steps=8, batch_size=8)
    assert isinstance(model, PPOHost)
    assert isinstance(model.proximal, ProximalPolicy) and model.proximal.kind == "ewma"
    assert model.data_parallel is None  # present only when distributed
    assert algorithm(policy, env, n_steps=8, batch_size=8, ewma_decay=None).proximal.kind == "behavior"


@pytest.mark.parametrize("path", SOURCES, ids=module_name)
def test_no_module_is_over_500_lines(path):
    assert len(path.read_text().splitlines()) <= 500


def test_type_ignores_are_few():
    """Each ``type: ignore`` is a place where the types do not say what the code does: at most 20 in the package."""
    assert sum(path.read_text().count("type: ignore") for path in SOURCES) <= 20


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
