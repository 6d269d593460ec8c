"""Sparsified (top-k) and 1-bit (sign) payloads with error feedback (issue 25, item 1).

Per replica i and floating tensor, with residual e_i (zeros at the start):

    u_i    = payload_i + e_i                  (error_feedback=False: u_i = payload_i, e_i stays 0)
    sent_i = C(u_i)
    e_i   <- u_i - sent_i
    aggregate = (1/N) sum_i sent_i            (`weights` c_i: sum_i c_i sent_i, any linear aggregator)

top-k, compress="topk:F" (0 < F <= 1):
    k = ceil(F * size), with F taken as the exact decimal it was written as
        (Fraction(str(F))): 0.07 * 100 is 7.000000000000001 in floating point, k is 7, not 8.
        k >= 1 for any F > 0; F = 1 sends everything.
    the k entries of largest |u| are sent, ties broken towards the LOWEST FLAT INDEX
        (C order): a stable argsort of -|u|, as jax.lax.top_k orders equal values.
    sent = u at those entries, 0 elsewhere.
    bytes: 4 (float32 value) + 4 (int32 flat index) per kept entry, 8k per tensor.

sign, compress="sign":
    scale = mean |u| over the tensor (one float32 per tensor and replica)
    sent  = scale * s, s = +1 where u >= 0 and -1 where u < 0. One bit carries no zero:
        sign(0) = +1 (also for -0.0); a NaN gives -1 and a NaN scale.
    bytes: ceil(size / 8) + 4 per tensor (each tensor's bits packed on their own, the last
        byte padded).

Integer leaves are not compressed (they go through uncompressed, at their own size), as for
the existing bf16 / int8 codecs.

Parameter-averaging strategies compress the change since the last synchronized parameters,
which every replica holds (`anchor`): payload_i = w_i - anchor, and the sync sets every
replica to anchor + aggregate, which becomes the next anchor. Before the first sync the
anchor is the initial parameters (every replica starts from them). See `simulate_local_sgd`.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .trees import as_float, mean_over_replicas, replicate, zeros_like_replicas

CODECS = ("topk", "sign")


def topk_count(size: int, fraction: float) -> int:
    """k = ceil(F * size), F exact as written; 0 < F <= 1."""
    if not 0 < fraction <= 1:
        raise ValueError(f"topk fraction must be in (0, 1], got {fraction!r}")
    return math.ceil(Fraction(str(fraction)) * size)


def topk(u: np.ndarray, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(sent, kept flat indices in selection order): the k largest |u|, lowest index on ties."""
    flat = np.asarray(u, dtype=np.float64).ravel()
    k = topk_count(flat.size, fraction)
    kept = np.argsort(-np.abs(flat), kind="stable")[:k]
    sent = np.zeros_like(flat)
    sent[kept] = flat[kept]
    return sent.reshape(np.shape(u)), kept


def sign(u: np.ndarray) -> tuple[np.ndarray, float]:
    """(sent, scale): scale * (+1 where u >= 0 else -1), scale = mean |u|."""
    u = np.asarray(u, dtype=np.float64)
    scale = float(np.mean(np.abs(u)))
    return scale * np.where(u >= 0, 1.0, -1.0), scale


def compress(u: np.ndarray, codec: str, fraction: float | None = None) -> np.ndarray:
    """What one replica sends for one tensor, as a dense array."""
    if codec == "topk":
        return topk(u, fraction)[0]
    if codec == "sign":
        return sign(u)[0]
    raise ValueError(f"codec must be one of {CODECS}, got {codec!r}")


def tensor_bytes(size: int, codec: str, fraction: float | None = None) -> int:
    """Bytes one replica sends for one floating tensor of `size` entries."""
    if codec == "topk":
        return 8 * topk_count(size, fraction)
    if codec == "sign":
        return -(-size // 8) + 4
    raise ValueError(f"codec must be one of {CODECS}, got {codec!r}")


def payload_bytes(shapes, codec: str, fraction: float | None = None) -> int:
    """Bytes one replica sends for floating tensors of these shapes."""
    return sum(tensor_bytes(math.prod(s), codec, fraction) for s in shapes)


def ef_round(payloads, residuals, codec: str, fraction: float | None = None,
             error_feedback: bool = True, weights=None):
    """One compressed sync. payloads, residuals: N replicas' lists of tensors.
    Returns (aggregate, new residuals, what each replica sent)."""
    n = len(payloads)
    sent, new_res = [], []
    for payload, res in zip(payloads, residuals):
        us = [np.asarray(p, np.float64) + (e if error_feedback else 0.0) for p, e in zip(payload, res)]
        s = [compress(u, codec, fraction) for u in us]
        sent.append(s)
        new_res.append([u - x for u, x in zip(us, s)] if error_feedback else [np.zeros_like(x) for x in s])
    c = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, np.float64)
    aggregate = [sum(c[i] * sent[i][j] for i in range(n)) for j in range(len(payloads[0]))]
    return aggregate, new_res, sent


def simulate_local_sgd(params0, grad_fn, n: int, steps: int, period, lr: float,
                       codec: str | None, fraction: float | None = None,
                       error_feedback: bool = True, mode: str = "model"):
    """N replicas of plain SGD (lr) synchronized after every `period`-th step, t with
    (t + 1) % period == 0 (or at the steps t where `period(t)` is true, e.g. a SelSync
    run's recorded decisions), through the parameter-averaging payload rule.

    mode "model" (local SGD, FedAvg, superstep): each replica updates, then the updated
        parameters are synced.
    mode "params" (SelSync sync="params"): the pre-update parameters are synced, then
        each replica applies its own gradient, taken at its pre-sync parameters.
    codec None: the exact mean (payload = w_i - anchor, the mean of which is mean(w) - anchor).
    Returns (per-replica parameters, residuals, anchor) after `steps` steps."""
    if mode not in ("model", "params"):
        raise ValueError(f"mode must be 'model' or 'params', got {mode!r}")
    ws, anchor = replicate(params0, n), as_float(params0)
    res = zeros_like_replicas(params0, n)
    for t in range(steps):
        grads = [grad_fn(i, t, ws[i]) for i in range(n)]
        if mode == "model":
            ws = [[p - lr * g for p, g in zip(ws[i], grads[i])] for i in range(n)]
        if (period(t) if callable(period) else (t + 1) % period == 0):
            ws, res, anchor = _sync(ws, res, anchor, codec, fraction, error_feedback)
        if mode == "params":
            ws = [[p - lr * g for p, g in zip(ws[i], grads[i])] for i in range(n)]
    return ws, res, anchor


def _sync(ws, res, anchor, codec, fraction, error_feedback):
    """Every replica ends at anchor + aggregate of (w_i - anchor), the new anchor."""
    deltas = [[p - a for p, a in zip(w, anchor)] for w in ws]
    if codec is None:
        agg = mean_over_replicas(deltas)
    else:
        agg, res, _ = ef_round(deltas, res, codec, fraction, error_feedback)
    anchor = [a + d for a, d in zip(anchor, agg)]
    return replicate(anchor, len(ws)), res, anchor
