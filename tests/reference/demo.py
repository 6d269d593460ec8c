"""DeMo, Decoupled Momentum Optimization (Peng, Quesnelle & Kingma 2024, arXiv 2411.19870v1,
Algorithm 1), as its reference code (github.com/bloc97/DeMo, demo.py) computes it
(issue 25, item 7).

Defaults, from the paper's reference code: chunk s = 64, top-k k = 32 per chunk, momentum
decay beta = 0.999, weight decay 0. The learning rate has no DeMo default (it is the SGD
base optimizer's `lr` argument): pass it.

One step, for every tensor p (all replicas hold the same parameters; each keeps its own
momentum m_i, zeros at the start; g_i its gradient):

    p   <- p * (1 - lr * weight_decay)
    m_i <- beta * m_i + lr * g_i
    c_i  = DCT(m_i)                 per chunk, orthonormal DCT-II (norm="ortho")
    q_i  = the k coefficients of largest |c_i| in each chunk (lowest index on ties), 0 elsewhere
    m_i <- m_i - IDCT(q_i)          the transmitted components leave the local momentum
    Q    = all-gather of every q_i; per coefficient, the MEAN OVER THE REPLICAS THAT SENT IT
           (the code's scatter_reduce "mean", include_self=False), 0 where none did
           (average_over="replicas": the sum over replicas / N instead)
    p   <- p - lr * sign(IDCT(Q))   sign(0) = 0: an all-zero reconstruction leaves p

The momentum accumulates lr * g, as the code does, where the paper's notation accumulates the
gradient itself: every step above is invariant to one positive factor on all momenta (top-k
by |c|, linear transforms, the mean, sign), so with a constant lr the two are the same; they
differ only under an lr schedule.

Chunks: a tensor is viewed as a matrix (rows, cols): a 2-D tensor as itself, a 1-D tensor of
n entries as (1, n), a scalar as (1, 1), a tensor of 3 or more dimensions as
(prod(shape[:-1]), shape[-1]) (the code handles only 1-D and 2-D). Each dimension is cut into
chunks of the largest divisor of its length that is <= s (the code's _get_smaller_split: 768 ->
64, 100 -> 50, 67 -> 1). A (h, w) block B gets the 2-D DCT C_h B C_w^T; its h*w coefficients
are flattened row-major and the top min(k, h*w) are kept (a 1-D chunk of w entries: the
1-D DCT, top min(k, w)). Bytes: 4 (float32 value) + 4 (int32 index in the chunk) per kept
coefficient.
"""
from __future__ import annotations

import dataclasses

import numpy as np


def dct_matrix(n: int) -> np.ndarray:
    """C with C @ x = orthonormal DCT-II of x: C[k, j] = sqrt((1 if k == 0 else 2) / n) *
    cos(pi * k * (2j + 1) / (2n)). Orthogonal, so the inverse is C.T."""
    k, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    c = np.sqrt(2.0 / n) * np.cos(np.pi * k * (2 * j + 1) / (2 * n))
    c[0] /= np.sqrt(2.0)
    return c


def chunk_length(dim: int, target: int = 64) -> int:
    """The largest divisor of `dim` that is <= target."""
    return max(d for d in range(1, min(dim, target) + 1) if dim % d == 0)


def as_matrix(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    if x.ndim == 0:
        return x.reshape(1, 1)
    if x.ndim == 1:
        return x.reshape(1, -1)
    return x.reshape(-1, x.shape[-1])


def _blocks(shape2d, s: int):
    r, c = shape2d
    return chunk_length(r, s), chunk_length(c, s)


def encode(x: np.ndarray, s: int = 64) -> np.ndarray:
    """(rows/h, cols/w, h*w) coefficients of the matrix view of x, per chunk."""
    m = as_matrix(x)
    h, w = _blocks(m.shape, s)
    b = m.reshape(m.shape[0] // h, h, m.shape[1] // w, w).transpose(0, 2, 1, 3)
    coeffs = dct_matrix(h) @ b @ dct_matrix(w).T
    return coeffs.reshape(b.shape[0], b.shape[1], h * w)


def decode(coeffs: np.ndarray, shape, s: int = 64) -> np.ndarray:
    """The inverse of `encode`, back to `shape`."""
    rows, cols = as_matrix(np.zeros(shape)).shape
    h, w = _blocks((rows, cols), s)
    y = coeffs.reshape(rows // h, cols // w, h, w)
    b = dct_matrix(h).T @ y @ dct_matrix(w)
    return b.transpose(0, 2, 1, 3).reshape(rows, cols).reshape(shape)


def topk_chunks(coeffs: np.ndarray, k: int) -> np.ndarray:
    """0/1 mask of the min(k, chunk) largest |coefficients| of every chunk (last axis),
    the lowest index first on ties."""
    kk = max(1, min(k, coeffs.shape[-1]))
    order = np.argsort(-np.abs(coeffs), axis=-1, kind="stable")[..., :kk]
    mask = np.zeros(coeffs.shape, bool)
    np.put_along_axis(mask, order, True, axis=-1)
    return mask


def tensor_bytes(shape, s: int = 64, k: int = 32) -> int:
    rows, cols = as_matrix(np.zeros(shape)).shape
    h, w = _blocks((rows, cols), s)
    return (rows // h) * (cols // w) * min(k, h * w) * 8


@dataclasses.dataclass
class DeMo:
    lr: float
    n: int
    beta: float = 0.999
    k: int = 32
    chunk: int = 64
    weight_decay: float = 0.0
    average_over: str = "senders"   # or "replicas"
    momenta: list = None            # per replica, a list of tensors

    def step(self, params, grads):
        """params: the shared list of tensors; grads: per replica, a list of tensors.
        Returns the new parameters (momenta are updated in place)."""
        if self.momenta is None:
            self.momenta = [[np.zeros(np.shape(p)) for p in params] for _ in range(self.n)]
        out = []
        for j, p in enumerate(params):
            p = np.asarray(p, np.float64) * (1 - self.lr * self.weight_decay)
            qs = []
            for i in range(self.n):
                m = self.beta * self.momenta[i][j] + self.lr * np.asarray(grads[i][j], np.float64)
                c = encode(m, self.chunk)
                sent = topk_chunks(c, self.k)
                q = np.where(sent, c, 0.0)
                self.momenta[i][j] = m - decode(q, m.shape, self.chunk)
                qs.append((q, sent))
            out.append(p - self.lr * np.sign(decode(self._combine(qs), p.shape, self.chunk)))
        return out

    def _combine(self, qs) -> np.ndarray:
        """Q from every replica's (q, sent mask); a sent coefficient counts as a sender even
        when its value is 0, as in the code's scatter_reduce."""
        total = sum(q for q, _ in qs)
        if self.average_over == "replicas":
            return total / self.n
        senders = sum(sent.astype(np.float64) for _, sent in qs)
        return np.where(senders > 0, total / np.maximum(senders, 1), 0.0)
