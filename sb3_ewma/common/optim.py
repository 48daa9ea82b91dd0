"""
The optimizer step of every phase, with fewer kernel launches on CPU and the same numbers as SB3's.

For small networks an optimizer step is a loop of tiny tensor operations, and Python's per-operation cost dominates
(the documentation's benchmarks page has the share of a minibatch it takes). Torch has "foreach" versions of the
gradient-norm clipping and of Adam's step that handle all parameters in one call, but uses them by itself only on
CUDA. The two helpers here use them on CPU too; both give SB3's results bit for bit (tested in
``tests/test_optim.py``), so the choice changes only the time.
"""

from collections.abc import Iterable

import torch as th

# optimizers whose foreach step repeats the single-tensor step's arithmetic (checked bit for bit in the tests)
FOREACH_EXACT_OPTIMIZERS = (th.optim.Adam, th.optim.AdamW)


def clip_grad_norm(parameters: Iterable[th.nn.Parameter], max_norm: float) -> th.Tensor:
    """
    ``th.nn.utils.clip_grad_norm_(parameters, max_norm)`` (2-norm) with the same arithmetic in foreach calls: the
    total norm is the norm of the per-parameter norms, and gradients are scaled by ``min(max_norm / (norm + 1e-6), 1)``.
    Parameters without a gradient are skipped.

    :return: the total norm of the gradients before clipping
    """
    gradients = [parameter.grad for parameter in parameters if parameter.grad is not None]
    if not gradients:
        return th.tensor(0.0)
    total_norm = th.linalg.vector_norm(th.stack(th._foreach_norm(gradients)), 2)
    th._foreach_mul_(gradients, th.clamp(max_norm / (total_norm + 1e-6), max=1.0))
    return total_norm


def prefer_foreach(optimizer: th.optim.Optimizer) -> None:
    """
    Let an Adam or AdamW optimizer left to torch's choice of implementation (``foreach=None``) take its foreach step on
    CPU as well (torch chooses it by itself on CUDA). An explicit ``foreach`` or ``fused`` is kept; other optimizers are
    left alone, as their foreach step may round differently.
    """
    if not isinstance(optimizer, FOREACH_EXACT_OPTIMIZERS):
        return
    for group in optimizer.param_groups:
        if group.get("foreach") is None and not group.get("fused") and not group.get("differentiable"):
            group["foreach"] = True
