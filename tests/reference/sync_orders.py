"""A trigger-based method's sync in each order, with any optimizer of optim.py (issue 58):
SelSync's authors average the parameters before the update (`selsync_imgclassifier.py`:
all-reduce, then `opt.step()` with each worker's own gradient and momentum); local SGD
averages after it. At a sync step t (`decide(t)` true), for N replicas w_i with optimizer
states s_i and gradients g_i = grad(w_i) taken at the step's own parameters:

    sync_opt_state:  s_i <- mean_j s_j                      (before the update, both orders)
    "params":        w_i <- mean_j w_j;  (u_i, s_i) = opt(g_i, s_i);  w_i <- w_i + u_i
    "model":         (u_i, s_i) = opt(g_i, s_i);  w_i <- w_i + u_i;  w_i <- mean_j w_j

and without a sync each replica takes its own update alone.
"""
from __future__ import annotations

from .optim import apply
from .trees import mean_over_replicas, replicate

ORDERS = ("params", "model")


def simulate(params0, grad_fn, n: int, steps: int, decide, opt, sync: str, sync_opt_state: bool = False):
    """Every replica's parameters after `steps` steps (`grad_fn(i, t, w)`: replica i's
    gradient at step t; `decide(t)`: whether step t syncs, asked after the step's gradients)."""
    if sync not in ORDERS:
        raise ValueError(f"sync must be one of {ORDERS}, got {sync!r}")
    ws = replicate(params0, n)
    states = [opt.init(w) for w in ws]
    for t in range(steps):
        grads = [grad_fn(i, t, ws[i]) for i in range(n)]
        synced = bool(decide(t))
        if synced and sync_opt_state:
            states = [{k: mean_over_replicas([s[k] for s in states]) for k in states[0]}] * n
        if synced and sync == "params":
            ws = [mean_over_replicas(ws)] * n
        for i in range(n):
            updates, states[i] = opt.update(grads[i], states[i], ws[i])
            ws[i] = apply(ws[i], updates)
        if synced and sync == "model":
            ws = [mean_over_replicas(ws)] * n
    return ws
