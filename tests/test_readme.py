"""
The README and the documentation cannot rot: the README's test and docs commands are what CI runs, and every Python
code block of the README and of the documentation's pages runs (with fewer steps).
"""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# the step counts of the examples, and what they become here (the examples stay a few thousand steps at most)
STEPS, TEST_STEPS = "100_000", "1_024"


def section(path: pathlib.Path, title: str) -> str:
    """The text of the Markdown section whose heading starts with ``title`` (to the next heading of that level)."""
    text = path.read_text()
    match = re.search(rf"^(#+) {re.escape(title)}", text, re.M)
    assert match is not None, f"{path.name}: no section {title!r}"
    level = match.group(1)
    following = re.search(rf"^{level} ", text[match.end() :], re.M)
    return text[match.start() : match.end() + following.start() if following else None]


def code_blocks(text: str, language: str) -> list[str]:
    """The fenced code blocks of ``language``, also when they are indented (in a list item)."""
    blocks = re.findall(rf"^( *)```{language}\n(.+?)\n\1```", text, re.M | re.S)
    return ["\n".join(line[len(indent) :] for line in block.split("\n")) for indent, block in blocks]


def first_block(path: pathlib.Path, title: str, language: str = "python") -> str:
    blocks = code_blocks(section(path, title), language)
    assert blocks, f"{path.name}, {title!r}: no {language} block"
    return blocks[0]


def run_example(code: str, name: str) -> dict:
    """Run an example with fewer steps and no training log; returns its namespace."""
    assert STEPS in code or ".learn(" not in code, f"{name}: the example's step counts should be written {STEPS}"
    code = code.replace(STEPS, TEST_STEPS).replace("verbose=1", "verbose=0")
    namespace: dict = {"__name__": "__main__"}
    exec(compile(code, name, "exec"), namespace)
    return namespace


def python_examples() -> list:
    """Every Python block of the README and of the documentation's Markdown pages, as pytest parameters."""
    examples = []
    for path in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        if "_build" in path.parts:
            continue
        for index, code in enumerate(code_blocks(path.read_text(), "python")):
            if "make_procgen_env" in code:
                continue  # the paper's Procgen setting (gigabytes of buffers): built smaller by test_procgen_example_builds
            name = f"{path.relative_to(ROOT)}[{index}]"
            examples.append(pytest.param(code, name, id=name))
    return examples


def test_ci_runs_the_readme_test_command():
    block = first_block(ROOT / "README.md", "Running the tests", "bash")
    command = block.strip()
    assert command == "python -m pytest tests -n 2"
    ci = (ROOT / ".ci" / "run").read_text()
    assert command in ci
    assert "pip install --quiet torch==2.13.0" in ci
    assert ci.index("torch==2.13.0") < ci.index('-e ".[tests,docs]"')
    # the install line that makes the command work is next to it
    assert 'pip install -e ".[tests]"' in section(ROOT / "README.md", "Running the tests")


def test_ci_builds_the_docs_as_the_readme_says():
    command = first_block(ROOT / "README.md", "Documentation", "bash").strip()
    assert command == "python -m sphinx -W --keep-going -b html docs docs/_build/html"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python -m sphinx -W --keep-going" in ci and "-b html docs" in ci


def test_docs_extra_has_the_build_tools():
    setup = (ROOT / "setup.py").read_text()
    extra = re.search(r'"docs": \[(.+?)\]', setup)
    assert extra is not None
    for tool in ("sphinx", "sphinx_rtd_theme", "myst-parser", "sphinx-mathjax-offline"):
        assert f'"{tool}"' in extra.group(1)


@pytest.mark.parametrize(("code", "name"), python_examples())
def test_python_example_runs(code, name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for variable in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):  # the torchrun examples run as one process here
        monkeypatch.delenv(variable, raising=False)
    namespace = run_example(code, name)
    model = namespace.get("model")
    if model is not None and hasattr(model, "num_timesteps") and ".learn(" in code:
        assert model.num_timesteps >= 1_024


def test_readme_quickstart_saves_and_loads(tmp_path, monkeypatch):
    # .ci/check_wheel runs the first Python block after "## Quickstart" from the installed wheel
    monkeypatch.chdir(tmp_path)
    namespace = run_example(first_block(ROOT / "README.md", "Quickstart"), "README quickstart")
    assert type(namespace["model"]).__name__ == "PPO_EWMA"
    assert (tmp_path / "ppo_ewma_cartpole.zip").exists()


def test_scale_example_numbers():
    from sb3_ewma import center_of_mass_from_ewma_decay, ewma_span_from_decay

    block = first_block(DOCS / "guide" / "batch_size_invariance.md", "`scale_hyperparams`")
    settings = run_example(block, "scale example")["settings"]
    # the numbers the example's comment states, for c = 16
    assert settings["learning_rate"] == 5e-4 / 4
    assert settings["batch_size"] == 128 and settings["n_policy_iterations"] == 512
    assert center_of_mass_from_ewma_decay(settings["ewma_decay"]) == pytest.approx(128)
    assert ewma_span_from_decay(settings["advantage_ewma_decay"]) == pytest.approx(16)
    assert settings["n_steps"] == 256


def test_quickstart_scale_example_numbers(tmp_path, monkeypatch):
    from sb3_ewma import center_of_mass_from_ewma_decay, ewma_span_from_decay

    monkeypatch.chdir(tmp_path)
    block = first_block(DOCS / "guide" / "quickstart.md", "Changing the number of environments")
    model = run_example(block, "quickstart scale example")["model"]
    # the comment: learning_rate 1e-3 / 2, batch_size 64, EWMA center of mass 16, advantage span 4
    assert model.learning_rate == pytest.approx(1e-3 / 2)
    assert model.batch_size == 64 and model.n_envs == 2
    assert center_of_mass_from_ewma_decay(model.ewma_decay) == pytest.approx(16)
    assert ewma_span_from_decay(model.advantage_ewma_decay) == pytest.approx(4)


def test_procgen_example_builds():
    pytest.importorskip("procgen")
    block = first_block(DOCS / "guide" / "procgen.md", "Procgen and the IMPALA CNN")
    block = block.replace("n_envs=64", "n_envs=4").replace("batch_size=2048", "batch_size=128")
    block = block.replace("aux_batch_size=1024", "aux_batch_size=1024, n_policy_iterations=1")
    namespace = run_example(block, "procgen example")
    model = namespace["model"]
    assert model.observation_space.shape == (3, 64, 64)
    assert type(model.policy.features_extractor).__name__ == "ImpalaCNN"
    namespace["env"].close()


def test_keep_freed_memory_example_runs():
    code = first_block(DOCS / "guide" / "performance.md", "CPU memory: `keep_freed_memory()`")
    assert "keep_freed_memory()" in code
    namespace = run_example(code, "keep_freed_memory example")
    assert namespace["model"].num_timesteps >= 1_024


def test_docs_state_the_threads_default():
    # the documented behaviour of the command-line scripts (one torch thread per process for MLP and LSTM policies)
    page = (DOCS / "guide" / "performance.md").read_text()
    assert "--num-threads N" in page and "OMP_NUM_THREADS" in page and "torch.set_num_threads(1)" in page
    assert "--num-threads N" in section(ROOT / "README.md", "Training on several processes or GPUs")
