"""
Train with rl-zoo3: ``python -m sb3_ewma.train --algo ppo_ewma --env CartPole-v1`` takes every flag of
``python -m rl_zoo3.train`` and knows the algorithms ``ppo_ewma``, ``ppg_ewma``, ``ppg``,
``ppo_lstm_ewma`` and ``ppo_mask_ewma``, the Procgen ids
``procgen-<game>-<easy|hard>`` and this package's hyperparameter files (used when ``-conf`` is not given).

Extra flags (:func:`sb3_ewma.zoo.add_scale_arguments`; ``-h`` lists them after rl-zoo3's): ``--scale-n-envs N``
rescales the hyperparameter entry for ``N`` environments (batch size-invariance), with ``--scale-lr-rule``,
``--scale-adam-betas`` and ``--scale-aux-learning-rate``; ``--no-keep-freed-memory`` leaves glibc's ``malloc`` as it is
(by default it keeps freed memory for reuse, :func:`sb3_ewma.allocator.keep_freed_memory`, which speeds up CPU
training).

Under torchrun (``torchrun --standalone --nproc-per-node W -m sb3_ewma.train ...``) the ranks train one model
data-parallel: rank 0 chooses the run folder and the seed and alone writes and prints; ``--scale-n-envs N`` then takes
the total number of environments of all ranks (see the documentation's guide, "Data-Parallel Training").
"""

from sb3_ewma._command import run_command, zoo_command

main = zoo_command("train")

if __name__ == "__main__":
    run_command(main, prog="python -m sb3_ewma.train")
