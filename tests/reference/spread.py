"""Local SGD on exactly K of T steps, evenly spread (issue 37, item 1: the budget-matched
baseline of an adaptive method).

Step t = 0, 1, ..., T - 1 (and beyond: the pattern repeats every T steps, t' = t mod T)
syncs when floor((t' + 1) K / T) > floor(t' K / T): the count floor((t + 1) K / T) of syncs
so far steps up. So after step T - 1 exactly K steps have synced, and the gaps between
consecutive syncs differ by at most one step. K = 0: never; K = T: every step.

Local SGD (jaxsel's `LocalSGD`, sync "model"): every replica applies its own optimizer
update each step; after the update, on a syncing step, every replica's parameters are
replaced by their replica mean. Optimizer state stays local.
"""
from __future__ import annotations

from .trees import mean_over_replicas, replicate


def spread_steps(syncs: int, steps: int) -> list[int]:
    """The syncing steps in [0, steps), in Python integers."""
    return [t for t in range(steps) if (t + 1) * syncs // steps > t * syncs // steps]


def simulate(params0, grad_fn, n: int, steps: int, optimizer, syncing: set[int]):
    """(per-replica parameters after `steps` steps, per-replica optimizer states);
    `grad_fn(i, t, params_i)` is replica i's gradient at step t."""
    from . import optim

    ws = replicate(params0, n)
    states = [optimizer.init(ws[i]) for i in range(n)]
    for t in range(steps):
        for i in range(n):
            updates, states[i] = optimizer.update(grad_fn(i, t, ws[i]), states[i], ws[i])
            ws[i] = optim.apply(ws[i], updates)
        if t in syncing:
            ws = replicate(mean_over_replicas(ws), n)
    return ws, states
