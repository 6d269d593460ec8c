"""A tiny linear-regression problem for the simulations (codecs, outer, desloc).

Parameters are a list of tensors, as a pytree's leaves: [w (d,), b (1,)]. Replica i has its
own data (X_i, y_i) - heterogeneous on purpose, so that replicas drift apart between
syncs - and its loss is L_i = mean((X_i w + b - y_i)^2) / 2 over its full data set, so a
gradient is deterministic. Any other `grad_fn(i, t, params) -> list of arrays` can replace
`LinReg.grad` in the simulations (for example one that reads step t's minibatch).
"""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class LinReg:
    xs: tuple   # X_i, (n_samples, d) per replica
    ys: tuple   # y_i, (n_samples,) per replica

    @property
    def n_replicas(self) -> int:
        return len(self.xs)

    def init(self) -> list[np.ndarray]:
        d = self.xs[0].shape[1]
        return [np.zeros(d), np.zeros(1)]

    def loss(self, i: int, params) -> float:
        w, b = params
        r = self.xs[i] @ w + b[0] - self.ys[i]
        return float(np.mean(r * r) / 2)

    def grad(self, i: int, t: int, params) -> list[np.ndarray]:
        """Replica i's full-batch gradient at `params` (t, the step, is unused here)."""
        w, b = params
        r = self.xs[i] @ w + b[0] - self.ys[i]
        return [self.xs[i].T @ r / len(r), np.array([np.mean(r)])]


def make_problem(n_replicas: int = 4, d: int = 5, n_samples: int = 16, seed: int = 0) -> LinReg:
    """Replica i's targets come from its own true weights (a shared part plus a replica
    part), so the replicas' optima differ."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(size=d)
    xs, ys = [], []
    for _ in range(n_replicas):
        x = rng.normal(size=(n_samples, d))
        w_i = shared + 0.5 * rng.normal(size=d)
        xs.append(x)
        ys.append(x @ w_i + 0.3 + 0.1 * rng.normal(size=n_samples))
    return LinReg(tuple(xs), tuple(ys))

