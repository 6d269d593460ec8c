"""Helpers on parameters held as lists of tensors (a pytree's leaves), one list per replica."""
from __future__ import annotations

import numpy as np


def as_float(params) -> list[np.ndarray]:
    """A float64 copy."""
    return [np.array(p, np.float64) for p in params]


def replicate(params, n: int) -> list[list[np.ndarray]]:
    """n independent float64 copies."""
    return [as_float(params) for _ in range(n)]


def zeros_like_replicas(params, n: int) -> list[list[np.ndarray]]:
    return [[np.zeros(np.shape(p)) for p in params] for _ in range(n)]


def mean_over_replicas(trees) -> list[np.ndarray]:
    """Leafwise mean of N replicas' lists of tensors."""
    return [np.mean(np.stack(leaves), axis=0) for leaves in zip(*trees)]
