"""The README's test command is what CI runs, and the README's quickstart code runs."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def test_ci_runs_the_readme_test_command():
    block = re.search(r"```bash\n(.+?)\n```", readme_section("Running the tests"), re.S)
    assert block is not None
    command = block.group(1).strip()
    assert command.startswith("python -m pytest")
    ci = (ROOT / ".ci" / "run").read_text()
    assert command in ci
    assert "pip install --quiet torch==2.13.0" in ci
    assert ci.index("torch==2.13.0") < ci.index('-e ".[tests]"')


def test_quickstart_code_runs(tmp_path, monkeypatch):
    code = re.search(r"```python\n(.+?)\n```", readme_section("Quickstart"), re.S).group(1)
    code = code.replace("100_000", "256").replace("verbose=1", "verbose=0, n_steps=64, batch_size=32, n_epochs=1")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "README quickstart", "exec"), namespace)
    assert namespace["model"].num_timesteps == 256
    assert (tmp_path / "ppo_ewma_cartpole.zip").exists()


def test_scale_example_numbers():
    from sb3_ewma import center_of_mass_from_ewma_decay, ewma_span_from_decay

    block = re.search(r"```python\n(.+?)\n```", readme_section("Batch size-invariance"), re.S).group(1)
    namespace: dict = {}
    exec(compile(block, "README scale example", "exec"), namespace)
    settings = namespace["settings"]
    # the numbers the README's comment states, for c = 16
    assert settings["learning_rate"] == 5e-4 / 4
    assert settings["batch_size"] == 128 and settings["n_policy_iterations"] == 512
    assert center_of_mass_from_ewma_decay(settings["ewma_decay"]) == pytest.approx(128)
    assert ewma_span_from_decay(settings["advantage_ewma_decay"]) == pytest.approx(16)
    assert settings["n_steps"] == 256


def test_procgen_example_builds():
    pytest.importorskip("procgen")
    block = re.search(r"```python\n(.+?)\n```", readme_section("Procgen and the IMPALA CNN"), re.S).group(1)
    block = block.replace("n_envs=64", "n_envs=4").replace("batch_size=2048", "batch_size=128")
    block = block.replace("aux_batch_size=1024", "aux_batch_size=1024, n_policy_iterations=1")
    namespace: dict = {}
    exec(compile(block, "README procgen example", "exec"), namespace)
    model = namespace["model"]
    assert model.observation_space.shape == (3, 64, 64)
    assert type(model.policy.features_extractor).__name__ == "ImpalaCNN"
    namespace["env"].close()


def test_keep_freed_memory_example_runs():
    code = re.search(r"```python\n(.+?)\n```", readme_section("PPO_EWMA"), re.S).group(1)
    assert "keep_freed_memory()" in code
    code = code.replace("100_000", "64").replace('device="cpu"', 'device="cpu", n_steps=64, batch_size=32, n_epochs=1')
    namespace: dict = {}
    exec(compile(code, "README keep_freed_memory example", "exec"), namespace)
    assert namespace["model"].num_timesteps == 64
