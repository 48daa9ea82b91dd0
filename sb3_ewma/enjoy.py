"""
Play a trained agent with rl-zoo3: ``python -m sb3_ewma.enjoy --algo ppo_ewma --env CartPole-v1 -f logs/`` takes every
flag of ``python -m rl_zoo3.enjoy`` and knows this package's algorithms and the Procgen ids.
"""

from sb3_ewma._command import run_command, zoo_command

main = zoo_command("enjoy")

if __name__ == "__main__":
    run_command(main, prog="python -m sb3_ewma.enjoy")
