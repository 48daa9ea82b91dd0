"""
Download an agent from the Hugging Face Hub with rl-zoo3 into the log folder, as a run of ``train``:
``python -m sb3_ewma.load_from_hub --algo ppo_ewma --env CartPole-v1 -orga <user or organization> -f logs/`` takes every
flag of ``python -m rl_zoo3.load_from_hub`` (:func:`sb3_ewma.zoo.load_from_hub`). It downloads only with
``TRUST_REMOTE_CODE=True``: the files are loaded with ``pickle``.
"""

from sb3_ewma._command import run_command, zoo_command

main = zoo_command("load_from_hub")

if __name__ == "__main__":
    run_command(main, prog="python -m sb3_ewma.load_from_hub")
