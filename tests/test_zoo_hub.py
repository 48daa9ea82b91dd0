"""
``python -m sb3_ewma.push_to_hub`` / ``load_from_hub``: everything up to the network. The network calls
(``HfApi.create_repo`` / ``snapshot_download`` / ``upload_folder`` and ``hf_hub_download``) are replaced by a folder
laid out as the Hub's (``<root>/<organization>/<repository>/<file>``); nothing here reaches the real Hub.
"""

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("rl_zoo3")
pytest.importorskip("huggingface_sb3")

import httpx2
import huggingface_hub
import huggingface_hub.repocard
import huggingface_sb3.push_to_hub
import rl_zoo3.utils
import torch as th
from huggingface_hub.errors import RemoteEntryNotFoundError

from sb3_ewma import zoo
from sb3_ewma.load_from_hub import main as load_from_hub
from sb3_ewma.push_to_hub import main as push_to_hub
from sb3_ewma.zoo.hub import ALGORITHM_SUMMARIES

REPO_ROOT = Path(__file__).resolve().parent.parent
ORGANIZATION = "someone"
# a task of each algorithm's packaged or derived entries, made small; CartPoleNoVel-v1's entry normalizes observations
# (its repository has a vec_normalize.pkl), the CartPole-v1 entries do not
CASES = {
    "ppo_ewma": ("CartPole-v1", ()),
    "ppg_ewma": ("CartPole-v1", ()),
    "ppg": ("CartPole-v1", ()),
    "ppo_lstm_ewma": ("CartPoleNoVel-v1", ("n_steps:16", "n_epochs:1")),
    "ppo_mask_ewma": ("CartPole-v1", ("n_epochs:1",)),
}


class LocalHub:
    """The Hub's repositories in a local folder, and the calls the scripts made."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.created: list[str] = []
        self.uploads: list[tuple[str, str]] = []

    def repository(self, repo_id: str) -> Path:
        return self.root / repo_id

    # HfApi's methods that push_to_hub calls
    def create_repo(self, repo_id: str, token: Any = None, private: bool = False, exist_ok: bool = False, **_: Any) -> str:
        self.created.append(repo_id)
        self.repository(repo_id).mkdir(parents=True, exist_ok=True)
        return f"https://huggingface.co/{repo_id}"

    def snapshot_download(self, repo_id: str, local_dir: str | Path, **_: Any) -> str:
        shutil.copytree(self.repository(repo_id), local_dir, dirs_exist_ok=True)
        return str(local_dir)

    def upload_folder(self, repo_id: str, folder_path: str | Path, commit_message: str, **_: Any) -> str:
        self.uploads.append((repo_id, commit_message))
        shutil.copytree(folder_path, self.repository(repo_id), dirs_exist_ok=True)
        return f"https://huggingface.co/{repo_id}/commit/0"

    # what huggingface_sb3's load_from_hub downloads each file with
    def hf_hub_download(self, repo_id: str, filename: str, **_: Any) -> str:
        path = self.repository(repo_id) / filename
        if not path.is_file():
            url = f"https://huggingface.co/{repo_id}/resolve/main/{filename}"
            response = httpx2.Response(404, request=httpx2.Request("GET", url))
            raise RemoteEntryNotFoundError(f"404 Client Error. Entry Not Found for url: {url}", response=response)
        return str(path)


@pytest.fixture
def local_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalHub:
    hub = LocalHub(tmp_path / "the_hub")
    hub.root.mkdir()
    for name in ("create_repo", "snapshot_download", "upload_folder"):
        method = getattr(hub, name)
        monkeypatch.setattr(
            huggingface_hub.HfApi, name, lambda self, *args, _method=method, **kwargs: _method(*args, **kwargs)
        )
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hub.hf_hub_download)
    monkeypatch.setenv("TRUST_REMOTE_CODE", "True")  # what huggingface_sb3 asks of a user before it downloads
    # push_to_hub writes the repository folder in hub/ of the working directory
    monkeypatch.chdir(tmp_path)
    return hub


def train(algo: str, env_id: str, folder: str, params: tuple[str, ...]) -> Path:
    from sb3_ewma.train import main

    main(
        [
            *("--algo", algo, "--env", env_id, "-n", "64", "-f", folder, "--seed", "0"),
            *("--num-threads", "1", "--eval-freq", "-1", "--verbose", "0"),
            *(("-params", *params) if params else ()),
        ]
    )
    (run,) = (Path(folder) / algo).glob(f"{env_id}_*")
    return run


@pytest.mark.parametrize("algo", CASES)
def test_push_load_enjoy(algo: str, local_hub: LocalHub, capsys: pytest.CaptureFixture[str]) -> None:
    env_id, params = CASES[algo]
    class_name = zoo.ZOO_ALGORITHMS[algo].__name__
    run = train(algo, env_id, "logs", params)
    normalized = (run / env_id / "vecnormalize.pkl").is_file()
    assert normalized == (env_id == "CartPoleNoVel-v1")

    push_to_hub(["--algo", algo, "--env", env_id, "-f", "logs", "-orga", ORGANIZATION, "--no-render", "--num-threads", "1"])
    repo_id = f"{ORGANIZATION}/{algo}-{env_id}"
    assert local_hub.created == [repo_id] and local_hub.uploads == [(repo_id, "Initial commit")]
    uploaded = local_hub.repository(repo_id)
    expected = {f"{algo}-{env_id}.zip", "config.yml", "args.yml", "env_kwargs.yml", "results.json"}
    expected |= {"train_eval_metrics.zip", "README.md", ".gitattributes", *(["vec_normalize.pkl"] if normalized else [])}
    assert expected <= {path.name for path in uploaded.iterdir()}
    assert (uploaded / f"{algo}-{env_id}" / "policy.pth").is_file()  # the model, unzipped too
    assert yaml.load((uploaded / "config.yml").read_text(), Loader=yaml.UnsafeLoader) == yaml.load(
        (run / env_id / "config.yml").read_text(), Loader=yaml.UnsafeLoader
    )

    # the model card: rl-zoo3's metadata and text, the algorithm, the paper, and commands that know the algorithm
    card = (uploaded / "README.md").read_text()
    metadata = yaml.safe_load(card.split("---")[1])
    assert metadata["library_name"] == "stable-baselines3" and env_id in metadata["tags"]
    assert metadata["model-index"][0]["name"] == class_name
    assert f"# **{class_name}** Agent playing **{env_id}**" in card
    assert "Hilton, Cobbe & Schulman" in card and '"Batch size-invariance for policy optimization"' in card
    assert "[arXiv 2110.00641](https://arxiv.org/abs/2110.00641)" in card
    assert ALGORITHM_SUMMARIES[algo] in card and f"from sb3_ewma import {class_name}" in card
    assert f"python -m sb3_ewma.load_from_hub --algo {algo} --env {env_id} -orga {ORGANIZATION} -f logs/" in card
    assert f"python -m sb3_ewma.enjoy --algo {algo} --env {env_id}" in card
    assert "python -m rl_zoo3." not in card and "\npip install rl_zoo3\n" not in card
    assert card.index("## The algorithm") < card.index("## Usage")

    # the names replaced during the call are restored
    assert huggingface_hub.repocard.metadata_save.__module__ == "huggingface_hub.repocard"
    assert not hasattr(huggingface_sb3.push_to_hub, "generate_metadata") or (
        huggingface_sb3.push_to_hub.generate_metadata.__module__ == "huggingface_sb3.push_to_hub"
    )
    assert rl_zoo3.utils.create_test_env.__module__ == "rl_zoo3.utils"

    # download into another log folder, as a run of train; a repository without vec_normalize.pkl loads without one
    capsys.readouterr()
    load_from_hub(["--algo", algo, "--env", env_id, "-orga", ORGANIZATION, "-f", "downloaded"])
    assert ("No normalization file" in capsys.readouterr().out) == (not normalized)
    downloaded = Path("downloaded") / algo / f"{env_id}_1"
    assert (downloaded / f"{env_id}.zip").is_file()
    for name in ("config.yml", "args.yml", "env_kwargs.yml", *(["vecnormalize.pkl"] if normalized else [])):
        assert (downloaded / env_id / name).is_file(), name

    # the downloaded model is the trained one, and enjoy plays it
    trained = zoo.ZOO_ALGORITHMS[algo].load(run / f"{env_id}.zip", device="cpu")
    loaded = zoo.ZOO_ALGORITHMS[algo].load(downloaded / f"{env_id}.zip", device="cpu")
    loaded_parameters = loaded.policy.state_dict()
    assert trained.policy.state_dict().keys() == loaded_parameters.keys()
    for name, value in trained.policy.state_dict().items():
        assert th.equal(value, loaded_parameters[name]), name
    zoo.enjoy(["--algo", algo, "--env", env_id, "-f", "downloaded", "-n", "50", "--no-render", "--num-threads", "1"])
    output = capsys.readouterr().out
    assert f"Loading {downloaded / env_id}.zip" in output, output[-2000:]


def test_model_card_of_another_algorithm_is_rl_zoo3_card() -> None:
    card = "\n# **PPO** Agent playing **CartPole-v1**\n\n## Usage\n```\npip install rl_zoo3\npython -m rl_zoo3.enjoy\n```\n"
    assert zoo.model_card(card, "ppo") == card
    completed = zoo.model_card(card, "ppo_ewma")
    assert completed.startswith("\n# **PPO** Agent playing") and "## The algorithm" in completed
    assert "python -m sb3_ewma.enjoy" in completed and 'pip install -e ".[zoo]"' in completed


def test_every_algorithm_has_a_summary() -> None:
    assert set(ALGORITHM_SUMMARIES) == set(zoo.ZOO_ALGOS)


@pytest.mark.parametrize("module", ["sb3_ewma.push_to_hub", "sb3_ewma.load_from_hub"])
def test_help_lists_the_algorithms_quietly(module: str) -> None:
    result = subprocess.run(
        [sys.executable, "-W", "default", "-m", module, "-h"], capture_output=True, text=True, cwd=REPO_ROOT, check=True
    )
    assert result.stdout.count("usage:") == 1 and all(algo in result.stdout for algo in zoo.ZOO_ALGOS)
    assert result.stderr == ""
