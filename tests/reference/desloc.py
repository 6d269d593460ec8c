"""Separate averaging periods for parameters and optimizer state (issue 25, item 5; DES-LOC,
Iacob et al. 2025, which gives each of Adam's states its own period).

N replicas, each with its own optimizer state (`reference.optim`: SGD with momentum, field
"trace"; Adam, fields "count", "mu", "nu"). Step t = 0, 1, ...: every replica applies its
own update, then, both after the update:

    parameters are replaced by their replica mean when (t + 1) % P == 0;
    optimizer-state field f (its floating tensors) is replaced by its replica mean when
        (t + 1) % Q_f == 0.

opt_state_period Q: None (today's behaviour: the state stays local), an int (every floating
field), or a dict naming optax state fields, e.g. {"mu": 3P, "nu": 6P}; a field it does not
name stays local, a name that is no field of the state is an error. Integer fields (Adam's
"count") are never averaged: every replica's is the same.
"""
from __future__ import annotations

from . import optim
from .trees import as_float, mean_over_replicas, replicate


def field_periods(state: dict, opt_state_period) -> dict:
    """{field: period} for the floating fields that get averaged."""
    floating = [f for f, v in state.items() if isinstance(v, list)]
    if opt_state_period is None:
        return {}
    if isinstance(opt_state_period, dict):
        unknown = sorted(set(opt_state_period) - set(floating))
        if unknown:
            raise ValueError(f"opt_state_period names {unknown}, not floating fields of the optimizer "
                             f"state; choose from {floating}")
        periods = dict(opt_state_period)
    else:
        periods = dict.fromkeys(floating, opt_state_period)
    for f, q in periods.items():
        if not (isinstance(q, int) and q >= 1):
            raise ValueError(f"opt_state_period for {f!r} must be an integer >= 1, got {q!r}")
    return periods


def simulate(params0, grad_fn, n: int, steps: int, optimizer, period: int, opt_state_period=None):
    """Returns (per-replica parameters, per-replica optimizer states) after `steps` steps."""
    ws = replicate(params0, n)
    states = [optimizer.init(ws[i]) for i in range(n)]
    periods = field_periods(states[0], opt_state_period)
    for t in range(steps):
        for i in range(n):
            updates, states[i] = optimizer.update(grad_fn(i, t, ws[i]), states[i], ws[i])
            ws[i] = optim.apply(ws[i], updates)
        if (t + 1) % period == 0:
            ws = replicate(mean_over_replicas(ws), n)
        for f, q in periods.items():
            if (t + 1) % q == 0:
                mean = mean_over_replicas([s[f] for s in states])
                states = [{**s, f: as_float(mean)} for s in states]
    return ws, states
