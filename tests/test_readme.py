"""The README's test command is what CI runs, and the README's quickstart code runs."""

import pathlib
import re

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
