"""Chunked orthonormal DCT-II of a tensor's matrix view, as DeMo transmits momenta.

Why a module: DeMo (Peng, Quesnelle & Kingma 2024) sends, per chunk of every tensor, the
largest coefficients of a 2-D DCT-II; the chunking and the transforms are the part of it
that must be exact, and they are tested on their own against NumPy/SciPy.

A tensor is viewed as a matrix: a 2-D tensor as itself, n entries as (1, n), a scalar as
(1, 1), a tensor of 3 or more dimensions as (prod(shape[:-1]), shape[-1]) (Flax's kernels
end with the output features). Each dimension is cut into chunks of the largest divisor
of its length that is <= `chunk` (768 -> 64, 100 -> 50, 67 -> 1), as the authors' code
does. A (h, w) block B has coefficients C_h B C_w^T (C orthonormal, so the inverse is
C_h^T Y C_w), flattened row-major: `encode` gives (chunks, h*w).
"""
from __future__ import annotations

import math
from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np


def chunk_length(dim: int, target: int) -> int:
    """The largest divisor of `dim` that is <= `target`."""
    return max(d for d in range(1, min(dim, target) + 1) if dim % d == 0)


def matrix_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    """(rows, cols) of a tensor's matrix view."""
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return 1, shape[0]
    return math.prod(shape[:-1]), shape[-1]


def block_shape(shape: tuple[int, ...], chunk: int) -> tuple[int, int]:
    """(h, w): one chunk of the matrix view."""
    rows, cols = matrix_shape(shape)
    return chunk_length(rows, chunk), chunk_length(cols, chunk)


@lru_cache(maxsize=64)
def dct_matrix(n: int) -> np.ndarray:
    """C with C @ x the orthonormal DCT-II of x (computed in float64, stored float32)."""
    k, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    c = np.sqrt(2.0 / n) * np.cos(np.pi * k * (2 * j + 1) / (2 * n))
    c[0] /= np.sqrt(2.0)
    return c.astype(np.float32)


def encode(x: jax.Array, chunk: int) -> jax.Array:
    """(chunks, h*w): every chunk's DCT-II coefficients, chunks in row-major block order."""
    rows, cols = matrix_shape(x.shape)
    h, w = block_shape(x.shape, chunk)
    blocks = x.astype(jnp.float32).reshape(rows // h, h, cols // w, w).transpose(0, 2, 1, 3)
    coeffs = jnp.einsum("ij,abjk,lk->abil", dct_matrix(h), blocks, dct_matrix(w))
    return coeffs.reshape(-1, h * w)


def decode(coeffs: jax.Array, shape: tuple[int, ...], chunk: int) -> jax.Array:
    """The tensor of `shape` whose `encode` is `coeffs` (the inverse transform)."""
    rows, cols = matrix_shape(shape)
    h, w = block_shape(shape, chunk)
    y = coeffs.reshape(rows // h, cols // w, h, w)
    blocks = jnp.einsum("ji,abjk,kl->abil", dct_matrix(h), y, dct_matrix(w))
    return blocks.transpose(0, 2, 1, 3).reshape(shape)


def top_coefficients(coeffs: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """(values, indices): the min(k, h*w) largest |coefficients| of every chunk, the lowest
    index first on ties (`lax.top_k`'s order)."""
    _, indices = jax.lax.top_k(jnp.abs(coeffs), min(k, coeffs.shape[-1]))
    return jnp.take_along_axis(coeffs, indices, axis=-1), indices.astype(jnp.int32)


def scatter(values: jax.Array, indices: jax.Array, size: int) -> jax.Array:
    """(chunks, size) zeros with each chunk's `values` at its `indices`."""
    rows = jnp.arange(values.shape[0])[:, None]
    return jnp.zeros((values.shape[0], size), jnp.float32).at[rows, indices].set(values)
