"""Island averaging, from its definition.

N replicas of local SGD, each with its own optimizer state (a `reference.optim`
optimizer). Step t: every replica takes its own optimizer step; after every `period`-th
step ((t + 1) % period == 0) the replicas are cut into islands of K: the permutation of
that sync (`permutation(t)`, the implementation's draw from the run's seed and t, whose
own properties are checked on their own) lists the replicas, island j holds the replicas
at its positions jK ... jK+K-1, and every replica takes its island's mean. Nothing else
crosses replicas.

Bytes per replica at a sync: its parameters once (P entries, `itemsize` each), into its
island's all-reduce; none on the other steps. A sync is a group-level one (within
islands), never one over all N.
"""
from __future__ import annotations

import numpy as np

from .sparta import local_steps
from .trees import as_float, mean_over_replicas, replicate


def island_means(ws, order, size: int):
    """Each replica's parameters replaced by its island's mean."""
    out = list(ws)
    for j in range(0, len(order), size):
        members = [int(r) for r in order[j:j + size]]
        mean = mean_over_replicas([ws[r] for r in members])
        for r in members:
            out[r] = as_float(mean)
    return out


def simulate_islands(params0, grad_fn, n: int, steps: int, opt, period: int, size: int, permutation,
                     itemsize: int = 4):
    """(every replica's parameters after each step, each step's bytes per replica)."""
    if n % size:
        raise ValueError(f"islands of {size} do not divide {n} replicas")
    ws = replicate(params0, n)
    states = [opt.init(w) for w in ws]
    total = sum(np.size(p) for p in params0)
    history, sent = [], []
    for t in range(steps):
        ws, states = local_steps(ws, states, opt, grad_fn, t)
        synced = (t + 1) % period == 0
        if synced:
            order = np.asarray(permutation(t))
            assert sorted(order.tolist()) == list(range(n)), f"step {t}: not a permutation of the replicas"
            ws = island_means(ws, order, size)
        sent.append(total * itemsize if synced else 0)
        history.append([as_float(w) for w in ws])
    return history, sent
