"""DiLoCo's outer step with a choice of outer optimizer (issue 25, item 3).

N replicas start from the global parameters. Step t: every replica takes one inner SGD
step on its own gradient (w_i <- w_i - inner_lr * g_i(w_i); the inner optimizer is plain SGD
here, it has no state to keep). After every H-th step ((t + 1) % H == 0):

    delta    = global - mean_i(w_i)            the pseudo-gradient, what the optimizer sees
    updates  = outer.update(delta, state, global)
    global  <- global + updates
    w_i     <- global                          every replica restarts from it

With a codec (top-k / sign, `reference.codecs`), replica i sends global - w_i (plus its
error-feedback residual) and delta is the aggregate of what was sent.

Outer optimizers (optax transcriptions in `reference.optim`):
    "nesterov"  optax.sgd(outer_lr, momentum=outer_momentum, nesterov=True)   (default;
                lr 0.7, momentum 0.9)
    "sgd"       optax.sgd(outer_lr, momentum=outer_momentum or None)          (heavy ball; no
                momentum when outer_momentum is 0)
    "adam"      optax.adam(outer_lr)   b1 0.9, b2 0.999, eps 1e-8
    "adamw"     optax.adamw(outer_lr)  the same and weight_decay 1e-4 (on the global params)
With inner_steps=H this is FedOpt (FedAvgM with "sgd", FedAdam with "adam").
With "sgd", outer_lr 1 and momentum 0 it is local SGD with period H.
"""
from __future__ import annotations

from . import codecs, optim
from .trees import as_float, mean_over_replicas, replicate, zeros_like_replicas

OUTER = ("nesterov", "sgd", "adam", "adamw")


def outer_optimizer(name: str, lr: float = 0.7, momentum: float = 0.9):
    if name == "nesterov":
        return optim.SGD(lr, momentum=momentum or None, nesterov=bool(momentum))
    if name == "sgd":
        return optim.SGD(lr, momentum=momentum or None)
    if name == "adam":
        return optim.Adam(lr)
    if name == "adamw":
        return optim.adamw(lr)
    raise ValueError(f"outer_optimizer must be one of {', '.join(OUTER)}, got {name!r}")


def simulate_diloco(params0, grad_fn, n: int, inner_steps: int, rounds: int, inner_lr: float,
                    outer: str = "nesterov", outer_lr: float = 0.7, outer_momentum: float = 0.9,
                    codec: str | None = None, fraction: float | None = None,
                    error_feedback: bool = True):
    """`rounds` rounds of `inner_steps` steps. Returns (global parameters after each round,
    the pseudo-gradient of each round, the last outer state)."""
    opt = outer_optimizer(outer, outer_lr, outer_momentum)
    glob = as_float(params0)
    state = opt.init(glob)
    res = zeros_like_replicas(glob, n)
    history, deltas = [], []
    for r in range(rounds):
        ws = replicate(glob, n)
        for h in range(inner_steps):
            t = r * inner_steps + h
            ws = [[p - inner_lr * g for p, g in zip(ws[i], grad_fn(i, t, ws[i]))] for i in range(n)]
        sent = [[gp - p for gp, p in zip(glob, w)] for w in ws]   # global - w_i
        if codec is None:
            delta = mean_over_replicas(sent)
        else:
            delta, res, _ = codecs.ef_round(sent, res, codec, fraction, error_feedback)
        updates, state = opt.update(delta, state, glob)
        glob = optim.apply(glob, updates)
        history.append(as_float(glob))
        deltas.append(delta)
    return history, deltas, state
