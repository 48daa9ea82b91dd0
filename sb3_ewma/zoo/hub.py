"""
The Hugging Face Hub entry points ``python -m sb3_ewma.push_to_hub`` / ``load_from_hub``: rl-zoo3's scripts, run with
``runpy`` and :func:`register_zoo` done, with a model card that names the algorithm and its paper (:func:`model_card`).
Names they import are replaced for the duration of the call where rl-zoo3 has no extension point (see :ref:`rl_zoo`).
"""

import argparse
import contextlib
import re
import runpy
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import rl_zoo3.utils
import torch as th

from sb3_ewma._install import install_hint
from sb3_ewma.zoo import threads
from sb3_ewma.zoo.arguments import CheckedStoreDict, chooses_num_threads
from sb3_ewma.zoo.checks import latest_run_with_model
from sb3_ewma.zoo.commands import checked_model_path
from sb3_ewma.zoo.install import ZOO_INSTALL_MESSAGE, import_zoo
from sb3_ewma.zoo.patching import patched, patched_argv
from sb3_ewma.zoo.procgen import create_test_env
from sb3_ewma.zoo.registry import ZOO_ALGORITHMS, register_zoo

PAPER = 'Hilton, Cobbe & Schulman, "Batch size-invariance for policy optimization" (2021)'
"""The paper of the package's algorithms, as model cards name it."""

PAPER_ARXIV_ID = "2110.00641"

ALGORITHM_SUMMARIES: dict[str, str] = {
    "ppo_ewma": (
        "PPO whose clipping anchor, the proximal policy, is an exponentially weighted moving average (EWMA) of the "
        "policy, decoupled from the behavior policy that collected the data"
    ),
    "ppg_ewma": "Phasic Policy Gradient (PPG) with the EWMA proximal policy of PPO-EWMA in its policy phase",
    "ppg": "Phasic Policy Gradient (PPG), the paper's baseline for PPG-EWMA: its proximal policy is the behavior policy",
    "ppo_lstm_ewma": (
        "sb3-contrib's RecurrentPPO (LSTM policies) with the EWMA proximal policy and the decoupled objective of PPO-EWMA"
    ),
    "ppo_mask_ewma": (
        "sb3-contrib's MaskablePPO (invalid action masking) with the EWMA proximal policy and the decoupled objective "
        "of PPO-EWMA"
    ),
}
"""What each algorithm of the package is, in one line of its model card."""

# rl-zoo3's model card tells to install rl_zoo3 alone: sb3-ewma brings it with its zoo extra
_ZOO_INSTALL_LINE = "pip install rl_zoo3"
_INSTALL_LINE = 'pip install -e ".[zoo]"  # in the root of the sb3-ewma repository: sb3-ewma, the RL Zoo, SB3, SB3-Contrib'


def model_card(card: str, algo: str) -> str:
    """
    Complete rl-zoo3's model card of an agent of ``algo``: a section that names the algorithm, what it is and its paper,
    and this package's commands and install line in place of rl-zoo3's. An ``algo`` not of this package leaves the card
    as it is.

    :param card: the model card that rl-zoo3 generated (Markdown)
    :param algo: the rl-zoo3 name of the agent's algorithm (``--algo``)
    :return: the model card
    """
    if algo not in ZOO_ALGORITHMS:
        return card
    class_name = ZOO_ALGORITHMS[algo].__name__
    section = (
        "\n## The algorithm\n\n"
        f"**{class_name}** (`--algo {algo}`) is an algorithm of sb3-ewma: {ALGORITHM_SUMMARIES[algo]}.\n"
        f"Paper: {PAPER}, [arXiv {PAPER_ARXIV_ID}](https://arxiv.org/abs/{PAPER_ARXIV_ID}).\n\n"
        f"The commands below are sb3-ewma's (rl-zoo3's own scripts do not know `{algo}`). They need sb3-ewma with its "
        f"`zoo` extra, which installs the RL Zoo: {install_hint('zoo')}. In Python: `from sb3_ewma import {class_name}`, "
        f"then `{class_name}.load(path)`.\n"
    )
    lines = [_INSTALL_LINE if line.strip() == _ZOO_INSTALL_LINE else line for line in card.split("\n")]
    card = "\n".join(lines).replace("python -m rl_zoo3.", "python -m sb3_ewma.")
    # after rl-zoo3's introduction: before its first section
    first_section = card.find("\n## ")
    if first_section < 0:
        return card + section
    return card[:first_section] + section + card[first_section:]


def _parsed_algo(argv: Sequence[str]) -> str | None:
    """The ``--algo`` of the command line, or None."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--algo")
    return parser.parse_known_args(list(argv))[0].algo


def _metadata_as_dict(generate: Any) -> Any:
    """``generate_metadata`` as rl-zoo3 expects it (a dict), from huggingface_sb3's ``_generate_metadata``."""

    def generate_metadata(model_name: str, env_id: str, mean_reward: float, std_reward: float) -> dict[str, Any]:
        metadata = generate(model_name, env_id, mean_reward, std_reward)
        return metadata.to_dict() if hasattr(metadata, "to_dict") else dict(metadata)

    return generate_metadata


def _run_zoo_script(name: str) -> None:
    """Run rl-zoo3's script ``name`` as ``python -m`` would, without runpy's warning where the module is already imported."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=f"'{re.escape(name)}' found in sys.modules", category=RuntimeWarning)
            runpy.run_module(name, run_name="__main__", alter_sys=False)
    except ModuleNotFoundError as error:
        raise ImportError(f"{ZOO_INSTALL_MESSAGE} (missing module: {error.name})") from error


def push_to_hub(argv: Sequence[str], prog: str = "python -m sb3_ewma.push_to_hub") -> None:
    """
    Run rl-zoo3's ``push_to_hub`` script with :func:`register_zoo` done: evaluate a trained agent of the log folder,
    write the repository folder (with the model card completed by :func:`model_card`) and upload it to the Hugging Face
    Hub.

    :param argv: rl-zoo3's command line arguments (without the program name)
    :param prog: the program name shown in messages
    """
    register_zoo()
    repocard = import_zoo("huggingface_hub.repocard")
    hub_sb3 = import_zoo("huggingface_sb3.push_to_hub")
    save_metadata = repocard.metadata_save
    algo = _parsed_algo(argv) or ""

    def complete_card_and_save_metadata(local_path: str | Path, data: dict) -> None:
        # rl-zoo3 has just written its model card there
        readme = Path(local_path)
        readme.write_text(model_card(readme.read_text(encoding="utf-8"), algo), encoding="utf-8")
        save_metadata(local_path, data)

    with contextlib.ExitStack() as stack:
        # rl-zoo3's push_to_hub is a script: it reads sys.argv and imports the names below when it runs, and its
        # model card is written and saved inside package_to_hub, which has no parameter for either
        stack.enter_context(patched(repocard, "metadata_save", complete_card_and_save_metadata))
        if not hasattr(hub_sb3, "generate_metadata"):
            stack.enter_context(
                patched(hub_sb3, "generate_metadata", _metadata_as_dict(hub_sb3._generate_metadata), missing_ok=True)
            )
        stack.enter_context(patched(rl_zoo3.utils, "create_test_env", create_test_env))
        stack.enter_context(patched(rl_zoo3.utils, "StoreDict", CheckedStoreDict))
        # as enjoy: the newest run that has a model, and the model file checked before it is loaded
        stack.enter_context(patched(rl_zoo3.utils, "get_latest_run_id", latest_run_with_model))
        stack.enter_context(patched(rl_zoo3.utils, "get_model_path", checked_model_path(rl_zoo3.utils.get_model_path)))
        stack.enter_context(patched_argv(prog, argv))
        stack.enter_context(threads.restored_num_threads())
        if not chooses_num_threads(argv):
            th.set_num_threads(1)  # one observation at a time: one thread (see sb3_ewma.zoo.threads)
        _run_zoo_script("rl_zoo3.push_to_hub")


def load_from_hub(argv: Sequence[str], prog: str = "python -m sb3_ewma.load_from_hub") -> None:
    """
    Run rl-zoo3's ``load_from_hub`` script with :func:`register_zoo` done: download an agent from the Hugging Face Hub
    into the log folder as a run of ``train``.

    :param argv: rl-zoo3's command line arguments (without the program name)
    :param prog: the program name shown in messages
    """
    register_zoo()
    hub_sb3 = import_zoo("huggingface_sb3")
    errors = import_zoo("huggingface_hub.errors")
    # a file missing on the Hub (not one missing from the local cache, offline)
    entry_not_found = getattr(errors, "RemoteEntryNotFoundError", errors.EntryNotFoundError)
    http_error = import_zoo("requests.exceptions").HTTPError
    download = hub_sb3.load_from_hub

    def download_or_http_error(repo_id: str, filename: str) -> str:
        try:
            return download(repo_id, filename)
        except entry_not_found as error:
            raise http_error(str(error)) from error

    # rl-zoo3's load_from_hub is a script: it reads sys.argv, and imports huggingface_sb3's load_from_hub when it runs
    with patched(hub_sb3, "load_from_hub", download_or_http_error), patched_argv(prog, argv):
        _run_zoo_script("rl_zoo3.load_from_hub")


__all__ = ["ALGORITHM_SUMMARIES", "PAPER", "PAPER_ARXIV_ID", "load_from_hub", "model_card", "push_to_hub"]
