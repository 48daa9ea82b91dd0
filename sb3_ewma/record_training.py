"""
Record the videos of a run's checkpoints with rl-zoo3 and join them:
``python -m sb3_ewma.record_training --algo ppo_ewma --env CartPole-v1 -f logs/ -n 1000`` takes every flag of
``python -m rl_zoo3.record_training`` and knows this package's algorithms and the Procgen ids. Needs ``moviepy`` and
the ``ffmpeg`` program.
"""

from sb3_ewma._command import run_command, zoo_command

main = zoo_command("record_training")

if __name__ == "__main__":
    run_command(main, prog="python -m sb3_ewma.record_training")
