"""TrainState: every replica-divergent leaf carries a leading replica axis.

The replica axis (length N) is sharded ``P("data")`` so each device holds exactly its own
k = N/M replicas, and a checkpoint of the state stores every replica (never one copy
labelled replicated); it restores onto any layout of the same N replicas.
Only the step counter is truly replicated.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from .parallel import num_replicas, replica_sharding, replicated_sharding


@struct.dataclass
class TrainState:
    step: jax.Array          # int32 scalar, replicated
    params: Any              # leading axis = replica
    opt_state: Any           # leading axis = replica
    model_state: Any         # e.g. BatchNorm statistics; leading axis = replica ({} if none)
    strategy_state: Any      # trigger windows, ring buffers, ...; leading axis = replica


def replicate_tree(tree: Any, n: int) -> Any:
    """Stack `n` identical copies along a new leading replica axis."""
    return jax.tree.map(lambda x: jnp.broadcast_to(jnp.asarray(x), (n,) + jnp.shape(x)), tree)


def init_state(params: Any, optimizer, strategy, mesh, model_state: Any = None) -> TrainState:
    """Replicate `params` (and `model_state`) onto every replica and build all local state."""
    n = num_replicas(mesh)
    model_state = {} if model_state is None else model_state

    def build(params, model_state):
        opt_state = optimizer.init(params)
        extra = strategy.init(params, opt_state, n)
        return TrainState(
            step=jnp.zeros((), jnp.int32),
            params=replicate_tree(params, n),
            opt_state=replicate_tree(opt_state, n),
            model_state=replicate_tree(model_state, n),
            strategy_state=replicate_tree(extra, n),
        )

    shapes = jax.eval_shape(build, params, model_state)
    shardings = jax.tree.map(lambda _: replica_sharding(mesh), shapes)
    shardings = shardings.replace(step=replicated_sharding(mesh))
    return jax.jit(build, out_shardings=shardings)(params, model_state)


def replica(tree: Any, r: int) -> Any:
    """Replica `r`'s copy of a replica-axis pytree, fetched to the host (NumPy).

    (Indexing a sharded array of an explicit-axes mesh directly is ambiguous in JAX.)"""
    return jax.tree.map(lambda x: np.asarray(jax.device_get(x))[r], tree)


@jax.jit
def _mean_over_replicas(tree):
    return jax.tree.map(lambda x: jnp.mean(x, axis=0) if jnp.issubdtype(x.dtype, jnp.floating) else x[0], tree)


def consensus(state: TrainState, strategy=None) -> Any:
    """The parameters a run is evaluated on: the replica average of what `strategy`
    evaluates (its `eval_params`: DiLoCo's and SSD-SGD's global weights, the replicas'
    own weights otherwise). Without a strategy, the replicas' own weights."""
    params = state.params if strategy is None else strategy.eval_params(state)
    return _mean_over_replicas(params)


def consensus_model_state(state: TrainState) -> Any:
    """Averaged model state (BatchNorm statistics) across replicas, for evaluation."""
    return _mean_over_replicas(state.model_state)


@jax.jit
def divergence(params: Any) -> jax.Array:
    """Largest L2 distance of one replica's parameters from the replica mean."""
    leaves = [x.astype(jnp.float32) for x in jax.tree.leaves(params)]
    sq = sum(jnp.sum((x - x.mean(0, keepdims=True)) ** 2, axis=tuple(range(1, x.ndim))) for x in leaves)
    return jnp.sqrt(jnp.max(sq))


def tree_bytes(tree: Any) -> int:
    """Exact payload size of a pytree (per replica, leading axis excluded if present)."""
    return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree)))


#: Version of the layout of TrainState's strategy state. 2: typed NamedTuples (SelSync's
#: trigger window, DiLoCo's global weights, ...); 1 (jaxsel 0.1): string-keyed dicts.
STATE_FORMAT = 2
