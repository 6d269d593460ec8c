"""How alike the replicas' models are: the mean pairwise Pearson correlation of their
flattened parameters, next to `state.divergence` (the largest distance from their mean).

Divergence is a distance, in the parameters' units; correlation is scale-free, 1 for
identical replicas (BSP, or right after a full sync), lower as local steps pull the
replicas apart (the figure EXO Gym's users plot).

With v_i replica i's floating parameters flattened and joined (P entries), and u_i = (v_i -
mean(v_i)) / ||v_i - mean(v_i)|| its centred, unit-normalised copy, Pearson's r between
replicas i and j is <u_i, u_j>, and the mean over the N (N - 1) ordered pairs i != j is

    (||sum_i u_i||^2 - sum_i ||u_i||^2) / (N (N - 1))

one model-sized sum over the replicas (the same reduction the divergence makes), on the
device; only the scalar reaches the host. sum_i ||u_i||^2 is N unless a replica's
parameters are all equal, where r is undefined: such a replica's u_i is 0 (it counts as
uncorrelated with every other) rather than a NaN in the log. With one replica there is no
pair: `replica_metrics` then logs no correlation. The result is clipped to [-1, 1], which
float32 rounding otherwise leaves by about 1e-7 for identical replicas.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .state import divergence


@jax.jit
def replica_correlation(params: Any) -> jax.Array:
    """The mean pairwise Pearson correlation of the replicas' flattened parameters
    (`params` with the replica axis first, N >= 2), in float32."""
    leaves = [x.astype(jnp.float32).reshape(x.shape[0], -1) for x in jax.tree.leaves(params)
              if jnp.issubdtype(x.dtype, jnp.floating)]
    n = leaves[0].shape[0]
    if n < 2:
        raise ValueError(f"replica_correlation needs at least 2 replicas (pairs), got {n}")
    size = sum(x.shape[1] for x in leaves)
    means = sum(jnp.sum(x, axis=1) for x in leaves) / size                       # (N,)
    centred = [x - means[:, None] for x in leaves]
    norms = jnp.sqrt(sum(jnp.sum(c * c, axis=1) for c in centred))                # (N,)
    scale = jnp.where(norms > 0, 1.0 / jnp.where(norms > 0, norms, 1.0), 0.0)     # u_i = 0 for a constant v_i
    units = [c * scale[:, None] for c in centred]
    total = sum(jnp.sum(jnp.square(jnp.sum(u, axis=0))) for u in units)          # ||sum_i u_i||^2
    own = jnp.sum(jnp.square(scale * norms))                                      # sum_i ||u_i||^2
    return jnp.clip((total - own) / (n * (n - 1)), -1.0, 1.0)   # float32 rounds identical replicas to 1 + 1e-7


@jax.jit
def _both(params: Any) -> dict[str, jax.Array]:
    return {"divergence": divergence(params), "correlation": replica_correlation(params)}


def replica_metrics(params: Any) -> dict[str, jax.Array]:
    """What a run logs of its replicas on the steps it reads them: `divergence`, and
    `correlation` where there are pairs of replicas; one program on the device, nothing
    fetched."""
    if jax.tree.leaves(params)[0].shape[0] > 1:
        return _both(params)
    return {"divergence": divergence(params)}
