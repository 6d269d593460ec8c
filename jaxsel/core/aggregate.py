"""HOW replicas are combined at a sync: collectives over all N replicas.

Each aggregator maps a per-replica (varying) pytree to one value shared by all
replicas. The all-reduce family moves one model's worth of bytes per replica; the
order statistics gather every replica's copy (`all_gather`). Every collective goes
through `jaxsel.collectives`, which reduces over a device's packed replicas and then
over the mesh axis, so an aggregator never needs to know how replicas are laid out.
"""
from __future__ import annotations

import dataclasses
import numbers
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from .collectives import (replica_count, replica_gather, replica_index, replica_max, replica_mean,
                          replica_min, replica_sum)
from .registry import Registry


@dataclasses.dataclass(frozen=True)
class Aggregator:
    """Base: `__call__(tree, axis, ctx) -> aggregated tree (identical on all replicas)`."""

    #: "allreduce" or "allgather": which collective the cost model should charge
    collective: ClassVar[str] = "allreduce"
    #: True when the aggregate is sum_i c_i x_i with `coefficient` giving c_i: only such an
    #: aggregate can be computed from compressed payloads (`jaxsel.core.compression`)
    linear: ClassVar[bool] = False

    def coefficient(self, axis: str, ctx) -> jax.Array:
        """This replica's c_i in sum_i c_i x_i (linear aggregators only)."""
        raise TypeError(f"aggregator {self.name!r} is not a weighted sum of the replicas' values")

    @property
    def uses_sample_weights(self) -> bool:
        """True when the aggregate weights replicas by `ctx.weight` (samples seen since
        the last sync): the strategy must then count samples between syncs."""
        return False

    def __call__(self, tree: Any, axis: str, ctx) -> Any:
        raise NotImplementedError

    def check_replicas(self, n: int) -> None:
        """ValueError if this aggregator cannot combine `n` replicas (checked when a run's
        strategy is built, before anything compiles)."""

    @property
    def name(self) -> str:
        return type(self).__name__.lower()


def _float_only(fn):
    """Apply `fn` to floating leaves; integer leaves (counters) are agreed on through their max."""
    def apply(tree, axis):
        return jax.tree.map(lambda x: fn(x) if jnp.issubdtype(x.dtype, jnp.floating) else replica_max(x, axis), tree)
    return apply


#: aggregators by name (`--aggregator NAME`); each registers itself below
AGGREGATORS = Registry("aggregator", Aggregator, "jaxsel.aggregate.Aggregator")


@AGGREGATORS.register("mean")
@dataclasses.dataclass(frozen=True)
class Mean(Aggregator):
    linear: ClassVar[bool] = True

    def coefficient(self, axis, ctx=None):
        return jnp.float32(1.0 / replica_count(axis))

    def __call__(self, tree, axis, ctx=None):
        return _float_only(lambda x: replica_mean(x, axis))(tree, axis)


@dataclasses.dataclass(frozen=True)
class Sum(Aggregator):
    """Elementwise sum over replicas (the staleness ring's all-reduce; not a model
    aggregate, so not registered by name)."""

    linear: ClassVar[bool] = True

    def coefficient(self, axis, ctx=None):
        return jnp.float32(1.0)

    def __call__(self, tree, axis, ctx=None):
        return _float_only(lambda x: replica_sum(x, axis))(tree, axis)


@AGGREGATORS.register("min")
@dataclasses.dataclass(frozen=True)
class Min(Aggregator):
    def __call__(self, tree, axis, ctx=None):
        return _float_only(lambda x: replica_min(x, axis))(tree, axis)


@AGGREGATORS.register("max")
@dataclasses.dataclass(frozen=True)
class Max(Aggregator):
    def __call__(self, tree, axis, ctx=None):
        return _float_only(lambda x: replica_max(x, axis))(tree, axis)


@AGGREGATORS.register("median")
@dataclasses.dataclass(frozen=True)
class Median(Aggregator):
    """Elementwise median over replicas (mean of the two middle values for even N)."""

    collective: ClassVar[str] = "allgather"

    def __call__(self, tree, axis, ctx=None):
        return _float_only(lambda x: jnp.median(replica_gather(x, axis), axis=0))(tree, axis)


@AGGREGATORS.register("trimmed")
@dataclasses.dataclass(frozen=True)
class TrimmedMean(Aggregator):
    """Drop the `k` highest and `k` lowest replica values per element, average the rest."""

    k: int = 1
    collective: ClassVar[str] = "allgather"

    def __post_init__(self):
        if isinstance(self.k, bool) or not isinstance(self.k, numbers.Integral) or self.k < 0:
            raise ValueError(f"trimmed mean needs an integer K >= 0 in 'trimmed:K', got {self.k!r}")

    def check_replicas(self, n: int) -> None:
        if not 2 * self.k < n:
            raise ValueError(f"aggregator 'trimmed:{self.k}' drops {self.k} highest and {self.k} lowest of "
                             f"{n} replicas, leaving none: K must be in 0..{(n - 1) // 2}")

    def __call__(self, tree, axis, ctx=None):
        n = replica_count(axis)
        self.check_replicas(n)

        def trim(x):
            s = jnp.sort(replica_gather(x, axis), axis=0)
            return jnp.mean(s[self.k : n - self.k], axis=0)

        return _float_only(trim)(tree, axis)


@AGGREGATORS.register("weighted")
@dataclasses.dataclass(frozen=True)
class WeightedMean(Aggregator):
    """sum_i w_i x_i / sum_i w_i. `weights` fixed per replica, or None: the context's
    per-replica weight, which strategies set to the samples seen since the last sync
    (FedAvg's n_k). All-zero weights (nothing seen yet) fall back to the plain mean."""

    weights: tuple[float, ...] | None = None
    linear: ClassVar[bool] = True

    def __post_init__(self):
        if self.weights is not None:
            w = tuple(float(x) for x in self.weights)
            if any(not (x >= 0.0) for x in w) or not any(x > 0.0 for x in w):
                raise ValueError(f"weighted mean weights must be >= 0 and not all zero, got {self.weights!r}")
            object.__setattr__(self, "weights", w)

    @property
    def uses_sample_weights(self) -> bool:
        return self.weights is None

    def check_replicas(self, n: int) -> None:
        if self.weights is not None and len(self.weights) != n:
            raise ValueError(f"weighted mean has {len(self.weights)} weights for {n} replicas")

    def replica_weight(self, axis: str, ctx) -> jax.Array:
        """This replica's weight (fixed, or `ctx.weight`)."""
        if self.weights is not None:
            self.check_replicas(replica_count(axis))
            return jnp.asarray(self.weights, jnp.float32)[replica_index(axis, ctx)]
        if ctx is None or getattr(ctx, "weight", None) is None:
            raise ValueError("weighted mean without fixed weights needs a StepContext carrying `weight`")
        return jnp.asarray(ctx.weight, jnp.float32)

    def coefficient(self, axis, ctx=None):
        w, total = _weights(axis, self.replica_weight(axis, ctx))
        return w / total

    def __call__(self, tree, axis, ctx=None):
        return weighted_mean(tree, axis, self.replica_weight(axis, ctx))


def _weights(axis: str, w: jax.Array, fallback=1.0) -> tuple[jax.Array, jax.Array]:
    """(this replica's weight, the sum over replicas), the `fallback` weights used instead
    where every weight is zero."""
    total = replica_sum(w, axis)
    w = jnp.where(total > 0, w, jnp.asarray(fallback, jnp.float32))
    return w, replica_sum(w, axis)


def weighted_mean(tree: Any, axis: str, w: jax.Array, fallback=1.0) -> Any:
    """sum_i w_i x_i / sum_i w_i over `axis`; if every weight is zero, the `fallback`
    weights are used instead (default: the plain mean)."""
    w, total = _weights(axis, w, fallback)
    return _float_only(lambda x: (replica_sum(w * x, axis) / total).astype(x.dtype))(tree, axis)


@AGGREGATORS.register("random")
@dataclasses.dataclass(frozen=True)
class RandomReplica(Aggregator):
    """Every replica adopts one replica's copy, chosen uniformly at random per sync
    (the same choice on every replica: the key derives from the replicated step)."""

    seed: int = 0

    def __call__(self, tree, axis, ctx):
        n = replica_count(axis)
        pick = jax.random.randint(jax.random.fold_in(jax.random.key(self.seed), ctx.step), (), 0, n)
        mine = replica_index(axis, ctx) == pick
        return _float_only(lambda x: replica_sum(jnp.where(mine, x, jnp.zeros_like(x)), axis))(tree, axis)


@dataclasses.dataclass(frozen=True)
class ClientSampled(Aggregator):
    """FedAvg's client sampling: a fraction C of the replicas, drawn anew at every sync
    (without replacement, at least one), is averaged; the others' updates of the round
    are discarded and every replica adopts the result, as a non-selected client would
    receive the new global model at the next round. The draw uses a key from the
    replicated step, so every replica agrees on it. `base`: "weighted" (by samples seen
    since the last sync, FedAvg) or "mean" (uniform over participants). Built by
    FedAvg(fraction=C), not by name."""

    fraction: float = 1.0
    base: str = "weighted"
    seed: int = 0
    linear: ClassVar[bool] = True

    def __post_init__(self):
        if not (0.0 < float(self.fraction) <= 1.0):
            raise ValueError(f"client fraction C must be in (0, 1], got {self.fraction!r}")
        if self.base not in ("weighted", "mean"):
            raise ValueError(f"client sampling averages with 'weighted' or 'mean', got {self.base!r}")

    @property
    def uses_sample_weights(self) -> bool:
        return self.base == "weighted"

    def participants(self, n: int, step) -> jax.Array:
        """Boolean mask of length n: the replicas taking part in the sync at `step`."""
        m = max(1, int(round(float(self.fraction) * n)))
        key = jax.random.fold_in(jax.random.key(self.seed), step)
        chosen = jax.random.choice(key, n, (m,), replace=False)
        return jnp.zeros((n,), bool).at[chosen].set(True)

    def _mine(self, axis, ctx):
        """(this replica's weight, 0 unless drawn; the fallback weight: 1 if drawn)."""
        mine = self.participants(replica_count(axis), ctx.step)[replica_index(axis, ctx)]
        w = jnp.asarray(ctx.weight, jnp.float32) if self.base == "weighted" else jnp.float32(1.0)
        return jnp.where(mine, w, 0.0), mine.astype(jnp.float32)

    def coefficient(self, axis, ctx):
        w, total = _weights(axis, *self._mine(axis, ctx))
        return w / total

    def __call__(self, tree, axis, ctx):
        w, fallback = self._mine(axis, ctx)
        return weighted_mean(tree, axis, w, fallback=fallback)


def register_aggregator(name: str, cls: type | None = None):
    """Make a user-defined aggregator reachable by name (`--aggregator NAME`, configs):
    `register_aggregator(name, cls)` or `@register_aggregator(name)`. `cls` is a frozen
    dataclass subclassing Aggregator whose `__call__(tree, axis, ctx)` returns a value
    identical on every replica."""
    return AGGREGATORS.register(name, cls)


def get_aggregator(spec: str | Aggregator) -> Aggregator:
    """An aggregator from its name ("mean", "median", "trimmed:2", ...) or itself."""
    if isinstance(spec, Aggregator):
        return spec
    name, colon, arg = str(spec).partition(":")
    if name not in AGGREGATORS:
        raise ValueError(AGGREGATORS.unknown(spec))
    if colon:
        if name != "trimmed":
            raise ValueError(f"aggregator {name!r} takes no argument (got {spec!r}); only trimmed:K does")
        try:
            k = int(arg)
        except ValueError:
            raise ValueError(f"trimmed mean needs an integer K in 'trimmed:K', got {spec!r}") from None
        return TrimmedMean(k=k)
    return AGGREGATORS[name]()


@dataclasses.dataclass(frozen=True)
class Bound:
    """An aggregator bound to a step's axis and context: `bound(tree)` aggregates. Strategies
    hand this (not a bare lambda) to the sync core, which can then see the aggregator a
    compressed payload needs (its linear coefficients)."""

    aggregator: Aggregator
    axis: str
    ctx: Any = None

    def __call__(self, tree):
        return self.aggregator(tree, self.axis, self.ctx)

    def coefficient(self) -> jax.Array:
        return self.aggregator.coefficient(self.axis, self.ctx)


def describe_aggregator(agg: Aggregator) -> str:
    """A short label: "mean", "trimmed:2", "weighted"."""
    if isinstance(agg, TrimmedMean):
        return f"trimmed:{agg.k}"
    for key, cls in AGGREGATORS.items():
        if type(agg) is cls:
            return key
    return agg.name
