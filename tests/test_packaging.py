"""The package's imports need nothing beyond install_requires (and, for the modules of an extra, that extra)."""

import ast
import functools
import importlib.metadata
import pathlib
import re
import runpy
import sys

import pytest
import setuptools

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sb3_ewma"

# the modules (and packages) that belong to an extra (everything else must work with install_requires alone)
MODULE_EXTRAS = {
    "sb3_ewma.zoo": "zoo",
    "sb3_ewma.train": "zoo",
    "sb3_ewma.enjoy": "zoo",
    "sb3_ewma.record_video": "zoo",
    "sb3_ewma.record_training": "zoo",
    "sb3_ewma.push_to_hub": "zoo",
    "sb3_ewma.load_from_hub": "zoo",
    "sb3_ewma.hyperparams_opt": "zoo",
    "sb3_ewma.plots": "plots",
    "sb3_ewma.envs.procgen": "procgen",
    "sb3_ewma.envs.procgen_gymnasium": "procgen",
}


@functools.cache
def setup_arguments() -> dict:
    """The keyword arguments setup.py passes to ``setuptools.setup`` (setup.py run with ``setup`` replaced)."""
    captured: dict = {}
    original = setuptools.setup
    setuptools.setup = lambda **kwargs: captured.update(kwargs)  # type: ignore[assignment]
    try:
        runpy.run_path(str(ROOT / "setup.py"), run_name="__main__")
    finally:
        setuptools.setup = original
    return captured


def distribution_name(requirement: str) -> str:
    """The normalized distribution name of a requirement string ("stable-baselines3[extra]>=2.9" -> "stable_baselines3")."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)  # type: ignore[union-attr]
    return re.sub(r"[-_.]+", "_", name).lower()


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_top_level_names(path: pathlib.Path) -> set[str]:
    """Top-level names of every absolute import in the file (module level and inside functions)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@functools.cache
def packages_distributions() -> dict[str, list[str]]:
    """Which installed distributions provide each top-level import name (read once: it parses every distribution)."""
    return dict(importlib.metadata.packages_distributions())


def distributions_of(import_name: str) -> set[str]:
    return {distribution_name(dist) for dist in packages_distributions().get(import_name, [])}


def test_install_requires_declares_pyyaml_for_scale():
    assert "pyyaml" in {distribution_name(req) for req in setup_arguments()["install_requires"]}


def test_extras_all_is_what_a_user_runs_and_tests_adds_the_tools():
    extras = {name: set(reqs) for name, reqs in setup_arguments()["extras_require"].items()}
    user_parts = extras["procgen"] | extras["zoo"] | extras["plots"]
    assert extras["all"] == user_parts
    assert {"pytest", "ruff", "black", "mypy", "build"} <= extras["tests"] - extras["all"]
    assert extras["all"] <= extras["tests"]
    # the packaged YAML files go into the wheel
    assert "hyperparams/*.yml" in setup_arguments()["package_data"]["sb3_ewma"]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_need_nothing_beyond_install_requires(path):
    allowed = {distribution_name(req) for req in setup_arguments()["install_requires"]}
    name = module_name(path)
    # a package's extra covers its submodules (sb3_ewma.zoo.experiment is sb3_ewma.zoo's)
    extra = next((e for module, e in MODULE_EXTRAS.items() if name == module or name.startswith(module + ".")), None)
    if extra is not None:
        allowed |= {distribution_name(req) for req in setup_arguments()["extras_require"][extra]}
    for name in sorted(imported_top_level_names(path)):
        if name in sys.stdlib_module_names or name == "sb3_ewma":
            continue
        distributions = distributions_of(name)
        assert distributions, f"{path.name} imports {name!r}, which no installed distribution provides"
        assert distributions & allowed, (
            f"{module_name(path)} imports {name!r} (from {sorted(distributions)}), which is neither in install_requires "
            f"nor in its extra {extra!r}: declare it in setup.py or move the import behind the extra"
        )
