"""
rl-zoo3 integration: the algorithms of :data:`sb3_ewma.algorithms.ALGORITHMS`, the Procgen environment ids
``procgen-<game>-<easy|hard>``, this package's hyperparameter files and its hyperparameter samplers, for
``python -m sb3_ewma.train`` / ``python -m sb3_ewma.enjoy`` / ``python -m sb3_ewma.record_video`` /
``python -m sb3_ewma.push_to_hub`` / ``python -m sb3_ewma.load_from_hub``, which accept every rl-zoo3 flag.

How it hooks into rl-zoo3 (2.9):

- :func:`register_zoo` adds the algorithms (:data:`sb3_ewma.algorithms.ALGORITHMS`) to ``rl_zoo3.ALGOS`` (the one
  dict that ``rl_zoo3.utils``, ``rl_zoo3.exp_manager``, ``train``, ``enjoy`` and ``record_video`` share; ``train()``
  builds its ``--algo`` choices from it when called), the samplers to ``rl_zoo3.hyperparams_opt.HYPERPARAMS_SAMPLER`` and
  ``HYPERPARAMS_CONVERTER``, and registers the Procgen ids in gymnasium.
- :class:`ExperimentManager` subclasses rl-zoo3's: it reads this package's ``hyperparams/<algo>.yml`` when no
  ``-conf`` is given, evaluates ``policy_kwargs`` strings with ``ImpalaCNN`` in scope, keeps an explicit ``gamma`` of
  the ``normalize`` settings (rl-zoo3 replaces it with the algorithm's discount; the paper normalizes rewards with
  0.99 while discounting with 0.999), optionally rescales the entry for another number of environments
  (``--scale-n-envs``), and for Procgen ids builds procgen's native vectorized environment and evaluates with
  stochastic actions. :func:`train` runs ``rl_zoo3.train.train()`` with it, and with :class:`TrainArgumentParser`
  (rl-zoo3's parser plus the ``--scale-*`` flags, so that ``-h`` prints one usage block).
- Where rl-zoo3 has no extension point, a name of its module is replaced for the duration of one call and restored
  (:mod:`~sb3_ewma.zoo.patching`; each replacement says why in one comment): ``ExperimentManager`` and ``argparse``
  in ``rl_zoo3.train`` (``train()`` takes no arguments and looks both up when it runs; the parser it gets reads the
  command line given to :func:`train`, not ``sys.argv``), ``argparse``, ``create_test_env`` and ``get_model_path``
  in ``rl_zoo3.enjoy``, ``get_latest_run_id`` in ``rl_zoo3.utils``. rl-zoo3's ``record_video``, ``push_to_hub`` and
  ``load_from_hub`` are scripts (their code under ``if __name__ == "__main__"``), run with ``runpy`` as
  ``python -m`` would, without importing them first: they read ``sys.argv``, and the names of ``rl_zoo3.utils``
  (``create_test_env``, ``StoreDict``, ``get_model_path``) they import when they run.
- For Procgen ids, :func:`make_procgen_vec_env` is given to rl-zoo3 as its ``VecEnv`` class (the ``vec_env_cls``
  argument of ``make_vec_env``): instead of stepping ``n_envs`` copies of the single-environment wrapper, it creates
  one :class:`~sb3_ewma.envs.ProcgenVecEnv` of ``n_envs`` environments, configured like the copies would have been
  (same ``--env-kwargs``). rl-zoo3's own wrappers (``VecNormalize``, ``vec_env_wrapper``, ``frame_stack``,
  ``VecTransposeImage``) are applied on top as usual. :func:`enjoy` and :func:`record_video` route
  ``create_test_env`` the same way.

rl-zoo3 is an optional dependency: importing this package without it raises an ``ImportError`` that says how to
install the ``zoo`` extra.

The package by job: :mod:`~sb3_ewma.zoo.registry` (algorithms, samplers, Procgen ids), :mod:`~sb3_ewma.zoo.procgen`
(Procgen routing), :mod:`~sb3_ewma.zoo.derivation` (entries derived from rl-zoo3's), :mod:`~sb3_ewma.zoo.experiment`
(the experiment manager), :mod:`~sb3_ewma.zoo.arguments` (the command line's flags),
:mod:`~sb3_ewma.zoo.commands` (the entry points) and :mod:`~sb3_ewma.zoo.hub` (the Hugging Face Hub's entry points
and model card).
"""

# first: without rl-zoo3, importing the package raises an ImportError that says how to install the extra
from sb3_ewma.zoo.install import ZOO_INSTALL_MESSAGE, require_zoo

require_zoo()

from sb3_ewma.zoo.arguments import (  # noqa: E402
    ScaleOptions,
    TrainArgumentParser,
    add_scale_arguments,
    scale_options_from_args,
)
from sb3_ewma.zoo.commands import enjoy, record_video, train  # noqa: E402
from sb3_ewma.zoo.experiment import POLICY_KWARGS_NAMESPACE, ExperimentManager, zoo_hyperparams_per_rank  # noqa: E402
from sb3_ewma.zoo.hub import load_from_hub, model_card, push_to_hub  # noqa: E402
from sb3_ewma.zoo.procgen import create_test_env, is_procgen_env_id, make_procgen_vec_env  # noqa: E402
from sb3_ewma.zoo.registry import (  # noqa: E402
    HYPERPARAMS_DIR,
    ZOO_ALGORITHMS,
    ZOO_ALGOS,
    default_conf_file,
    register_zoo,
    zoo_algorithms,
)

__all__ = [
    "HYPERPARAMS_DIR",
    "POLICY_KWARGS_NAMESPACE",
    "ZOO_ALGORITHMS",
    "ZOO_ALGOS",
    "ZOO_INSTALL_MESSAGE",
    "ExperimentManager",
    "ScaleOptions",
    "TrainArgumentParser",
    "add_scale_arguments",
    "create_test_env",
    "default_conf_file",
    "enjoy",
    "is_procgen_env_id",
    "load_from_hub",
    "make_procgen_vec_env",
    "model_card",
    "push_to_hub",
    "record_video",
    "register_zoo",
    "scale_options_from_args",
    "train",
    "zoo_algorithms",
    "zoo_hyperparams_per_rank",
]
