"""The selection rules of the Byzantine-robust aggregators: Krum, Multi-Krum, Bulyan.

Why: the mean lets one replica that sends garbage (a faulty GPU, a poisoned shard, a
bit flip) move every replica's model anywhere; these rules choose whom to trust by
distance, so up to F bad replicas out of N cannot. Each gathers every replica's payload
(an all-gather, charged as one by the cost model), and every replica computes the same
choice from the same gathered values, so the result is identical on all of them.

A replica's vector x_i is all its floating tensors flattened and concatenated; the
distance is d(i, j) = ||x_i - x_j||^2. Integer leaves (counters) are agreed on by their
max, as with every other aggregator.
- `krum:F` (Blanchard et al. 2017), needs N > 2F + 2: score_i = the sum of the m smallest
  d(i, j), j != i, with m = max(1, n - F - 2) over the n replicas scored; every replica
  takes the lowest-scoring replica's payload (the lowest index on a tie).
- `multikrum:F,M`: the mean of the M lowest-scoring replicas' payloads (ties at the cut
  go to the lowest index).
- `bulyan:F` (El Mhamdi et al. 2018), needs N >= 4F + 3: theta = N - 2F replicas are
  selected by Krum applied again and again to those not yet selected; then, per
  coordinate, the mean of the beta = theta - 2F selected values closest to the selected
  values' median.
The aggregators themselves (`aggregate.Krum`, `MultiKrum`, `Bulyan`) gather the payloads
and call these functions on every replica's copy. They are Flower's `aggregate_krum` (to_keep=0 or M) and `aggregate_bulyan`, with ties
broken towards the lowest replica index where Flower leaves them to NumPy's sorts
(tests/reference/robust.py says where the two can differ).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def squared_distances(gathered: list[jax.Array]) -> jax.Array:
    """(N, N): d(i, j) = ||x_i - x_j||^2 over every gathered (N, ...) tensor, in float32.
    One row at a time, so memory stays at N copies of the model, not N^2."""
    flat = [g.reshape(g.shape[0], -1).astype(jnp.float32) for g in gathered]

    def row(i):
        return sum(jnp.sum(jnp.square(f - f[i]), axis=1) for f in flat)

    return jax.lax.map(row, jnp.arange(flat[0].shape[0]))


def krum_scores(dist: jax.Array, f: int, candidates: jax.Array) -> jax.Array:
    """score_i for the replicas with `candidates[i]` True (+inf for the others): the sum of
    the m = max(1, n - f - 2) smallest distances to the other candidates, n their count."""
    size = dist.shape[0]
    others = candidates[None, :] & ~jnp.eye(size, dtype=bool)
    nearest = jnp.sort(jnp.where(others, dist, jnp.inf), axis=1)
    m = jnp.maximum(1, jnp.sum(candidates) - f - 2)
    scores = jnp.sum(jnp.where(jnp.arange(size)[None, :] < m, nearest, 0.0), axis=1)
    return jnp.where(candidates, scores, jnp.inf)


def multikrum_weights(dist: jax.Array, f: int, m: int) -> jax.Array:
    """(N,) each replica's weight in the result: 1/m on the m lowest Krum scores (the
    lowest index first on ties), 0 elsewhere; m = 1 is Krum."""
    n = dist.shape[0]
    kept = jnp.argsort(krum_scores(dist, f, jnp.ones(n, bool)), stable=True)[:m]
    return jnp.zeros(n, jnp.float32).at[kept].set(1.0 / m)


def bulyan_selection(dist: jax.Array, f: int) -> jax.Array:
    """Bulyan's theta = N - 2f selected replicas, ascending: Krum, again and again, over
    the replicas not yet selected (the lowest index on a tie)."""
    n = dist.shape[0]
    selected = jnp.zeros(n, bool)
    for _ in range(n - 2 * f):
        selected = selected.at[jnp.argmin(krum_scores(dist, f, ~selected))].set(True)
    return jnp.nonzero(selected, size=n - 2 * f)[0]


def closest_to_median_mean(values: jax.Array, beta: int) -> jax.Array:
    """Per coordinate of the (theta, ...) `values`: the mean of the `beta` rows closest to
    the rows' median (the stable sort keeps the lowest row on ties)."""
    median = jnp.median(values, axis=0)
    order = jnp.argsort(jnp.abs(values - median), axis=0, stable=True)[:beta]
    return jnp.mean(jnp.take_along_axis(values, order, axis=0), axis=0)
