"""
Share a trained agent on the Hugging Face Hub with rl-zoo3:
``python -m sb3_ewma.push_to_hub --algo ppo_ewma --env CartPole-v1 -f logs/ -orga <user or organization>`` takes every
flag of ``python -m rl_zoo3.push_to_hub`` and knows this package's algorithms (:func:`sb3_ewma.zoo.push_to_hub`). Needs
a Hub token with write access.
"""

from sb3_ewma._command import run_command, zoo_command

main = zoo_command("push_to_hub")

if __name__ == "__main__":
    run_command(main, prog="python -m sb3_ewma.push_to_hub")
