"""SPARTA (sparse parameter averaging), from its definition.

N replicas start from the same parameters, each with its own optimizer state (a
`reference.optim` optimizer). Step t (counted from 0):

    every replica:  w_i <- w_i + optimizer update of its own gradient g_i(w_i)
    a full sync ((t + 1) % period == 0, where `period` is given):
                    w_i <- mean_j w_j                      every entry
    otherwise:      w_i[e] <- mean_j w_j[e]  for e in S_t  the other entries stay local

The entries: the tensors flattened row-major and joined in order (entry e is element
e - o_l of tensor l, o_l the entries before it). S_t is the step's set of entries, passed
in (`entries(t)`): the implementation draws it from the run's seed and t, and its own
properties (exactly round(p * P) distinct entries, uniform, the same for the same seed and
step) are checked on their own. Nothing but the averaged entries crosses replicas.

Bytes per replica and step: |S_t| entries in the payload dtype (`itemsize`), or at a full
sync all P entries. Every step waits on its exchange.

`simulate_sparta_diloco`: DiLoCo (`reference.outer`'s outer step on the mean of the
replicas' weights every H steps) with SPARTA's sparse average on every other step.
"""
from __future__ import annotations

import numpy as np

from . import optim
from .trees import as_float, mean_over_replicas, replicate


def flat(params) -> np.ndarray:
    return np.concatenate([np.ravel(p) for p in params])


def unflat(vector: np.ndarray, like) -> list[np.ndarray]:
    out, offset = [], 0
    for p in like:
        out.append(vector[offset:offset + p.size].reshape(p.shape))
        offset += p.size
    return out


def sparse_mean(ws, entries) -> list[list[np.ndarray]]:
    """Each replica's parameters with `entries` replaced by their mean over the replicas."""
    vs = [flat(w) for w in ws]
    mean = np.mean([v[entries] for v in vs], axis=0)
    for v in vs:
        v[entries] = mean
    return [unflat(v, w) for v, w in zip(vs, ws)]


def local_steps(ws, states, opt, grad_fn, t):
    """Every replica's own optimizer step on its own gradient."""
    out = []
    for i, w in enumerate(ws):
        updates, states[i] = opt.update(grad_fn(i, t, w), states[i], w)
        out.append(optim.apply(w, updates))
    return out, states


def simulate_sparta(params0, grad_fn, n: int, steps: int, opt, entries, period: int | None = None,
                    itemsize: int = 4):
    """(every replica's parameters after each step, each step's bytes per replica)."""
    ws = replicate(params0, n)
    states = [opt.init(w) for w in ws]
    total = sum(np.size(p) for p in params0)
    history, sent = [], []
    for t in range(steps):
        ws, states = local_steps(ws, states, opt, grad_fn, t)
        if period is not None and (t + 1) % period == 0:
            ws = replicate(mean_over_replicas(ws), n)
            sent.append(total * itemsize)
        else:
            chosen = np.asarray(entries(t))
            ws = sparse_mean(ws, chosen)
            sent.append(len(chosen) * itemsize)
        history.append([as_float(w) for w in ws])
    return history, sent


def simulate_sparta_diloco(params0, grad_fn, n: int, steps: int, inner_steps: int, inner_lr: float, outer,
                           entries, itemsize: int = 4):
    """DiLoCo with plain inner SGD (`inner_lr`) and the outer optimizer `outer` (a
    `reference.optim` one): after every H-th step the outer step on global - mean(w_i)
    and every replica restarts from the global weights; on the other steps SPARTA's
    sparse average of the replicas' weights. (global weights after each step, bytes)."""
    glob = as_float(params0)
    state = outer.init(glob)
    ws = replicate(glob, n)
    total = sum(np.size(p) for p in params0)
    history, sent = [], []
    for t in range(steps):
        ws = [[p - inner_lr * g for p, g in zip(w, grad_fn(i, t, w))] for i, w in enumerate(ws)]
        if (t + 1) % inner_steps == 0:
            delta = [g - m for g, m in zip(glob, mean_over_replicas(ws))]
            updates, state = outer.update(delta, state, glob)
            glob = optim.apply(glob, updates)
            ws = replicate(glob, n)
            sent.append(total * itemsize)
        else:
            chosen = np.asarray(entries(t))
            ws = sparse_mean(ws, chosen)
            sent.append(len(chosen) * itemsize)
        history.append((as_float(glob), [as_float(w) for w in ws]))
    return history, sent
