"""
The optimizer's implementation, chosen where the package's policies build it: fewer kernel launches on CPU, the same
numbers as SB3's.

For small networks an optimizer step is a loop of tiny tensor operations, and Python's per-operation cost dominates
(the documentation's benchmarks page has the share of a minibatch it takes). Torch's Adam has a "foreach" version
that handles all parameters in one call, but chooses it by itself only on CUDA (its gradient-norm clipping uses the
foreach calls on CPU too). The package's own policies (PPO_EWMA's and PPG's) build an Adam or AdamW optimizer with
``foreach=True`` in their ``optimizer_kwargs`` unless the user chose an implementation (:func:`with_foreach_default`).
It gives SB3's results bit for bit (tested in ``tests/test_optim.py``), so the choice changes only the time.
"""

from typing import Any

import torch as th

# optimizers whose foreach step repeats the single-tensor step's arithmetic (checked bit for bit in the tests)
FOREACH_EXACT_OPTIMIZERS = (th.optim.Adam, th.optim.AdamW)
# optimizer keywords that choose the implementation of the step: a user's choice is kept
IMPLEMENTATION_KEYWORDS = ("foreach", "fused", "differentiable")


def with_foreach_default(optimizer_class: type[th.optim.Optimizer], optimizer_kwargs: dict[str, Any]) -> dict[str, Any]:
    """
    The keyword arguments a policy builds its optimizer with: ``optimizer_kwargs`` with ``foreach=True`` added for Adam
    and AdamW (whose foreach step gives the single-tensor step's numbers, faster on CPU; torch chooses it by itself on
    CUDA), unless ``optimizer_kwargs`` already chooses the implementation (``foreach``, ``fused`` or
    ``differentiable``). A new dict; ``optimizer_kwargs`` is left as it is. Other optimizers get ``optimizer_kwargs``
    unchanged, as their foreach step may round differently.
    """
    exact = isinstance(optimizer_class, type) and issubclass(optimizer_class, FOREACH_EXACT_OPTIMIZERS)
    if not exact or any(name in optimizer_kwargs for name in IMPLEMENTATION_KEYWORDS):
        return dict(optimizer_kwargs)
    return {**optimizer_kwargs, "foreach": True}
