"""Krum, Multi-Krum and Bulyan over N replicas' payloads (issue 25, item 2).

The same results as Flower's `aggregate_krum(results, num_malicious=F, to_keep=0 or M)` and
`aggregate_bulyan(results, num_malicious=F, aggregation_rule=aggregate_krum, to_keep=0)`
(flwr/server/strategy/aggregate.py) on the same inputs, with every tie broken towards the
lowest replica index where Flower's order is left to NumPy's unstable sorts.

A replica's payload is a list of tensors; all of them flattened (C order) and concatenated
form its vector x_i. d(i, j) = ||x_i - x_j||^2.

Krum, "krum:F" (Blanchard et al. 2017), needs N > 2F + 2:
    m = max(1, n - F - 2) neighbours (n: the replicas scored; the max only matters for
    Bulyan's later rounds, where n shrinks);
    score_i = sum of the m smallest d(i, j), j != i;
    every replica takes the payload of argmin score, the lowest index on a tie.
Multi-Krum, "multikrum:F,M" (1 <= M <= N): the mean of the payloads of the M lowest scores,
    ties at the cut broken towards the lowest index.
Bulyan, "bulyan:F" (El Mhamdi et al. 2018), needs N >= 4F + 3:
    theta = N - 2F, beta = theta - 2F;
    selection: theta times, Krum (with the same F) over the replicas not selected yet; the
        winner joins the selection (lowest original index on a tie);
    then per coordinate: median of the theta selected values (np.median: the mean of the two
        middle values for an even theta), and the mean of the beta selected values closest to
        it (|x - median|), ties broken towards the lowest replica index.
"""
from __future__ import annotations

import numpy as np


def flatten(payloads) -> np.ndarray:
    """(N, D): each replica's tensors flattened and concatenated."""
    return np.stack([np.concatenate([np.ravel(np.asarray(t, np.float64)) for t in p]) for p in payloads])


def unflatten(vector: np.ndarray, like) -> list[np.ndarray]:
    """`vector` cut back into tensors shaped like the list `like`."""
    out, at = [], 0
    for t in like:
        size = np.size(t)
        out.append(vector[at:at + size].reshape(np.shape(t)))
        at += size
    return out


def squared_distances(x: np.ndarray) -> np.ndarray:
    diff = x[:, None, :] - x[None, :, :]
    return np.sum(diff * diff, axis=-1)


def krum_scores(x: np.ndarray, f: int) -> np.ndarray:
    """score_i = sum of the max(1, n - f - 2) smallest squared distances to the others."""
    n = len(x)
    m = max(1, n - f - 2)
    d = squared_distances(x)
    return np.array([np.sum(np.sort(np.delete(d[i], i))[:m]) for i in range(n)])


def check_krum(n: int, f: int) -> None:
    if not (isinstance(f, int) and f >= 0 and n > 2 * f + 2):
        raise ValueError(f"krum:{f} needs N > 2F+2 replicas, got N={n}")


def check_bulyan(n: int, f: int) -> None:
    if not (isinstance(f, int) and f >= 0 and n >= 4 * f + 3):
        raise ValueError(f"bulyan:{f} needs N >= 4F+3 replicas, got N={n}")


def krum_index(payloads, f: int) -> int:
    x = flatten(payloads)
    check_krum(len(x), f)
    return int(np.argmin(krum_scores(x, f)))


def krum(payloads, f: int) -> list[np.ndarray]:
    return [np.asarray(t, np.float64) for t in payloads[krum_index(payloads, f)]]


def multikrum_indices(payloads, f: int, m: int) -> np.ndarray:
    """The m lowest-scoring replicas, in increasing score (index on ties)."""
    x = flatten(payloads)
    check_krum(len(x), f)
    if not 1 <= m <= len(x):
        raise ValueError(f"multikrum:{f},{m} keeps M in 1..N, got M={m} for N={len(x)}")
    return np.argsort(krum_scores(x, f), kind="stable")[:m]


def multikrum(payloads, f: int, m: int) -> list[np.ndarray]:
    x = flatten(payloads)
    return unflatten(np.mean(x[multikrum_indices(payloads, f, m)], axis=0), payloads[0])


def bulyan_selection(x: np.ndarray, f: int) -> list[int]:
    """theta = N - 2f indices, in selection order, by Krum repeated on the rest."""
    remaining = list(range(len(x)))
    selected = []
    for _ in range(len(x) - 2 * f):
        best = remaining[int(np.argmin(krum_scores(x[remaining], f)))]
        selected.append(best)
        remaining.remove(best)
    return selected


def closest_to_median_mean(values: np.ndarray, beta: int) -> np.ndarray:
    """Per coordinate: the mean of the beta rows closest to the coordinate median (rows in
    replica order; a stable sort keeps the lowest row on ties)."""
    med = np.median(values, axis=0)
    order = np.argsort(np.abs(values - med), axis=0, kind="stable")[:beta]
    return np.mean(np.take_along_axis(values, order, axis=0), axis=0)


def bulyan(payloads, f: int) -> list[np.ndarray]:
    x = flatten(payloads)
    check_bulyan(len(x), f)
    selected = sorted(bulyan_selection(x, f))
    beta = len(selected) - 2 * f
    return unflatten(closest_to_median_mean(x[selected], beta), payloads[0])
