"""
Record a video of a trained agent with rl-zoo3:
``python -m sb3_ewma.record_video --algo ppo_ewma --env CartPole-v1 -f logs/ -n 1000`` takes every flag of
``python -m rl_zoo3.record_video`` and knows this package's algorithms and the Procgen ids. Needs ``moviepy``.
"""

from sb3_ewma._command import run_command, zoo_command

main = zoo_command("record_video")

if __name__ == "__main__":
    run_command(main, prog="python -m sb3_ewma.record_video")
