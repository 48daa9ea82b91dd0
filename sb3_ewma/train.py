"""
Train with rl-zoo3: ``python -m sb3_ewma.train --algo ppo_ewma --env CartPole-v1`` takes every flag of
``python -m rl_zoo3.train`` and knows this package's algorithms, the Procgen ids ``procgen-<game>-<easy|hard>`` and this
package's hyperparameter files, plus the flags of :func:`sb3_ewma.zoo.add_scale_arguments` (``--scale-n-envs N``, ...).
Under torchrun the ranks train one model data-parallel (:ref:`distributed`). See :ref:`rl_zoo`.
"""

from sb3_ewma._command import run_command, zoo_command

main = zoo_command("train")

if __name__ == "__main__":
    run_command(main, prog="python -m sb3_ewma.train")
