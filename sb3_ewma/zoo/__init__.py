"""
rl-zoo3 integration: this package's algorithms (:data:`sb3_ewma.algorithms.ALGORITHMS`), the Procgen ids
``procgen-<game>-<easy|hard>``, this package's hyperparameter files and samplers, for ``python -m sb3_ewma.train`` /
``enjoy`` / ``record_video`` / ``record_training`` / ``push_to_hub`` / ``load_from_hub``, which accept every rl-zoo3
flag. See :ref:`rl_zoo`.

:func:`register_zoo` adds the algorithms, samplers and Procgen ids to rl-zoo3's registries; :class:`ExperimentManager`
subclasses rl-zoo3's; where rl-zoo3 has no extension point, a name of its modules is replaced for the duration of one
call (:mod:`~sb3_ewma.zoo.patching`). Importing this package without rl-zoo3 raises an ``ImportError`` that says how to
install the ``zoo`` extra.
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
from sb3_ewma.zoo.commands import enjoy, record_training, record_video, train  # noqa: E402
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
    "record_training",
    "record_video",
    "register_zoo",
    "scale_options_from_args",
    "train",
    "zoo_algorithms",
    "zoo_hyperparams_per_rank",
]
