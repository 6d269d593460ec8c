"""Optax's sgd, adam and adamw, transcribed to NumPy (optax 0.2.8, optax/_src/alias.py and
transform.py). An optimizer is `init(params) -> state` and
`update(grads, state, params) -> (updates, state)`; `apply` adds the updates, as
`optax.apply_updates`. States are dicts keyed by optax's own field names ("trace"; "count",
"mu", "nu"), each field a list of tensors like the parameters ("count" an int), so DES-LOC's
per-field periods can name them.

- sgd(lr, momentum, nesterov) = chain(trace(momentum, nesterov), scale(-lr)); momentum None:
  no trace. trace:  t <- g + momentum * t;  direction = g + momentum * t (Nesterov) or t.
  update = -lr * direction.
- adam(lr, b1=0.9, b2=0.999, eps=1e-8, eps_root=0): count <- count + 1;
  mu <- (1 - b1) g + b1 mu;  nu <- (1 - b2) g^2 + b2 nu;
  mu_hat = mu / (1 - b1^count);  nu_hat = nu / (1 - b2^count);
  update = -lr * mu_hat / (sqrt(nu_hat + eps_root) + eps).
- adamw(lr, ..., weight_decay=1e-4): chain(scale_by_adam, add_decayed_weights, scale(-lr)):
  update = -lr * (mu_hat / (sqrt(nu_hat + eps_root) + eps) + weight_decay * params).
"""
from __future__ import annotations

import dataclasses

import numpy as np


def _zeros(params):
    return [np.zeros_like(p, dtype=np.float64) for p in params]


def apply(params, updates):
    return [p + u for p, u in zip(params, updates)]


@dataclasses.dataclass(frozen=True)
class SGD:
    lr: float
    momentum: float | None = None
    nesterov: bool = False

    def init(self, params) -> dict:
        return {} if self.momentum is None else {"trace": _zeros(params)}

    def update(self, grads, state, params=None):
        if self.momentum is None:
            return [-self.lr * g for g in grads], state
        m = self.momentum
        trace = [g + m * t for g, t in zip(grads, state["trace"])]
        direction = [g + m * t for g, t in zip(grads, trace)] if self.nesterov else trace
        return [-self.lr * d for d in direction], {"trace": trace}


@dataclasses.dataclass(frozen=True)
class Adam:
    lr: float
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    eps_root: float = 0.0
    weight_decay: float = 0.0   # adamw's decoupled decay; 0 is optax.adam

    def init(self, params) -> dict:
        return {"count": 0, "mu": _zeros(params), "nu": _zeros(params)}

    def update(self, grads, state, params=None):
        count = state["count"] + 1
        mu = [(1 - self.b1) * g + self.b1 * m for g, m in zip(grads, state["mu"])]
        nu = [(1 - self.b2) * g * g + self.b2 * v for g, v in zip(grads, state["nu"])]
        c1, c2 = 1 - self.b1 ** count, 1 - self.b2 ** count
        direction = [(m / c1) / (np.sqrt(v / c2 + self.eps_root) + self.eps) for m, v in zip(mu, nu)]
        if self.weight_decay:
            direction = [d + self.weight_decay * p for d, p in zip(direction, params)]
        return [-self.lr * d for d in direction], {"count": count, "mu": mu, "nu": nu}


def adamw(lr: float, weight_decay: float = 1e-4, **kw) -> Adam:
    """optax.adamw's defaults: b1 0.9, b2 0.999, eps 1e-8, weight_decay 1e-4."""
    return Adam(lr, weight_decay=weight_decay, **kw)
