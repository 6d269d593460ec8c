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
from . import robust
from .cell_options import CellOptions
from .checks import MAX_SEED, check_int
from .collectives import (Groups, replica_count, replica_gather, replica_index, replica_max, replica_mean,
                          replica_min, replica_segment_sum, replica_sum)
from .registry import Registry


@dataclasses.dataclass(frozen=True)
class Aggregator(CellOptions):
    """Base: `__call__(tree, axis, ctx) -> aggregated tree (identical on all replicas)`."""

    #: "allreduce" or "allgather": which collective the cost model should charge
    collective: ClassVar[str] = "allreduce"
    #: True when the aggregate is sum_i c_i x_i with `coefficient` giving c_i: only such an
    #: aggregate can be computed from compressed payloads (`jaxsel.core.compression`)
    linear: ClassVar[bool] = False
    #: True when the result agrees only within groups of replicas that the aggregator itself
    #: draws (islands): the sync core then records a group-level sync and checks no agreement
    within_groups: ClassVar[bool] = False
    #: what `NAME:ARG` takes after the colon, its integer fields in order ("K" for
    #: trimmed:K, "F,M" for multikrum:F,M); None: the name takes no argument
    argument: ClassVar[str | None] = None

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


def _floating(x) -> bool:
    return jnp.issubdtype(x.dtype, jnp.floating)


def _float_only(fn):
    """Apply `fn` to floating leaves; integer leaves (counters) are agreed on through their max."""
    def apply(tree, axis):
        return jax.tree.map(lambda x: fn(x) if _floating(x) else replica_max(x, axis), tree)
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
    argument: ClassVar[str] = "K"

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
    cell_options: ClassVar[tuple[str, ...]] = ("seed",)   # read only as a PRNG key's seed (core/cell_options.py)

    def __call__(self, tree, axis, ctx):
        n = replica_count(axis)
        pick = jax.random.randint(jax.random.fold_in(jax.random.key(self.seed), ctx.step), (), 0, n)
        mine = replica_index(axis, ctx) == pick
        return _float_only(lambda x: replica_sum(jnp.where(mine, x, jnp.zeros_like(x)), axis))(tree, axis)


#: folded into the seed's key so that the islands' draw is a stream of its own
ISLAND_STREAM = 0x4953


@AGGREGATORS.register("islands")
@dataclasses.dataclass(frozen=True)
class IslandMean(Aggregator):
    """Island averaging: at each sync a fresh random permutation of the N replicas cuts them
    into N/K islands of K (island j = the replicas at positions jK ... jK+K-1 of the
    permutation), and each replica takes its island's mean. The permutation comes from
    `jax.random.key(seed)`, a stream number and the step of the sync, so every replica draws
    the same islands without exchanging anything, and a run's seed reproduces them. (Two
    syncs in one step share the islands: the parameters and the optimizer state of a replica
    go to the same island.) Each replica sends its payload once, into its island's
    all-reduce: the bytes of a mean, among K replicas instead of N. `islands:K` by name has
    seed 0; LocalSGD's `islands=K` takes the run's seed.

    The simulation sums each island through `collectives.replica_segment_sum` (one psum of
    N/K rows). Not linear in one coefficient per replica (a replica's weight depends on who
    receives), so no codec compresses it."""

    size: int = 2
    seed: int = 0
    within_groups: ClassVar[bool] = True
    cell_options: ClassVar[tuple[str, ...]] = ("seed",)   # read only as a PRNG key's seed (core/cell_options.py)
    argument: ClassVar[str] = "K"

    def __post_init__(self):
        check_int("K in 'islands:K' (replicas per island)", self.size, 2)
        check_int("the islands' seed", self.seed, 0, MAX_SEED)

    def check_replicas(self, n: int) -> None:
        if n % self.size:
            raise ValueError(f"aggregator 'islands:{self.size}' cuts the {n} replicas into islands of "
                             f"{self.size}: K must divide {n}")

    def permutation(self, n: int, step) -> jax.Array:
        """(n,) int32: the replicas in the order the sync of `step` cuts into islands."""
        key = jax.random.fold_in(jax.random.fold_in(jax.random.key(self.seed), ISLAND_STREAM), step)
        return jax.random.permutation(key, n).astype(jnp.int32)

    def islands(self, n: int, step) -> jax.Array:
        """(n,) int32: the island of each replica at the sync of `step`."""
        order = self.permutation(n, step)
        return jnp.zeros((n,), jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32) // self.size)

    def __call__(self, tree, axis, ctx):
        if isinstance(axis, Groups):
            raise ValueError(f"aggregator 'islands:{self.size}' draws its own groups; it cannot combine "
                             f"within a two-level method's fixed groups")
        n = replica_count(axis)
        self.check_replicas(n)
        island = self.islands(n, ctx.step)
        mine = island[replica_index(axis, ctx)]

        def mean(x):
            return (replica_segment_sum(x, island, n // self.size, axis)[mine] / self.size).astype(x.dtype)

        return _float_only(mean)(tree, axis)


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
    cell_options: ClassVar[tuple[str, ...]] = ("seed",)   # read only as a PRNG key's seed (core/cell_options.py)

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


# ------------------------------------------------------------------ robust to faulty replicas

def _gathered_floats(tree: Any, axis) -> list[jax.Array]:
    """Every floating leaf of `tree` gathered over replicas as (N, ...) float32, in leaf
    order: gathered once, for both the choice of replicas and the combination."""
    return [replica_gather(x, axis).astype(jnp.float32) for x in jax.tree.leaves(tree) if _floating(x)]


def _from_gathered(tree: Any, gathered: list[jax.Array], axis, combine) -> Any:
    """`combine(gathered (N, ...)) -> value` on each floating leaf (the leaf's dtype out);
    integer leaves agreed on by their max."""
    leaves, treedef = jax.tree.flatten(tree)
    pending = iter(gathered)
    out = [combine(next(pending)).astype(x.dtype) if _floating(x) else replica_max(x, axis) for x in leaves]
    return jax.tree.unflatten(treedef, out)


@AGGREGATORS.register("krum")
@dataclasses.dataclass(frozen=True)
class Krum(Aggregator):
    """Every replica takes the payload of the replica closest to its N - F - 2 nearest
    others (Blanchard et al. 2017; `jaxsel.core.robust` has the rule). Needs N > 2F+2."""

    f: int = 1
    collective: ClassVar[str] = "allgather"
    argument: ClassVar[str] = "F"

    def __post_init__(self):
        check_int(f"F in '{type(self).__name__.lower()}:{self.argument}' (replicas that may be faulty)", self.f, 0)

    def check_replicas(self, n: int) -> None:
        if not n > 2 * self.f + 2:
            raise ValueError(f"aggregator '{describe_aggregator(self)}' needs N > 2F+2 replicas (F={self.f}), "
                             f"got N={n}")

    def replica_weights(self, dist: jax.Array) -> jax.Array:
        """(N,) each replica's weight in the result: one-hot on the lowest score."""
        return robust.multikrum_weights(dist, self.f, 1)

    def __call__(self, tree, axis, ctx=None):
        gathered = _gathered_floats(tree, axis)
        self.check_replicas(gathered[0].shape[0])
        w = self.replica_weights(robust.squared_distances(gathered))
        return _from_gathered(tree, gathered, axis, lambda g: jnp.tensordot(w, g, axes=1))


@AGGREGATORS.register("multikrum")
@dataclasses.dataclass(frozen=True)
class MultiKrum(Krum):
    """The mean of the M lowest-scoring replicas' payloads (Krum's score)."""

    m: int = 1
    argument: ClassVar[str] = "F,M"

    def __post_init__(self):
        super().__post_init__()
        check_int("M in 'multikrum:F,M' (replicas averaged)", self.m, 1)

    def check_replicas(self, n: int) -> None:
        super().check_replicas(n)
        if self.m > n:
            raise ValueError(f"aggregator '{describe_aggregator(self)}' averages M={self.m} of N={n} replicas: "
                             f"M must be in 1..{n}")

    def replica_weights(self, dist: jax.Array) -> jax.Array:
        return robust.multikrum_weights(dist, self.f, self.m)


@AGGREGATORS.register("bulyan")
@dataclasses.dataclass(frozen=True)
class Bulyan(Aggregator):
    """Krum selects N - 2F replicas one at a time; per coordinate, the mean of the N - 4F
    selected values closest to their median (El Mhamdi et al. 2018). Needs N >= 4F+3."""

    f: int = 1
    collective: ClassVar[str] = "allgather"
    argument: ClassVar[str] = "F"

    def __post_init__(self):
        check_int("F in 'bulyan:F' (replicas that may be faulty)", self.f, 0)

    def check_replicas(self, n: int) -> None:
        if not n >= 4 * self.f + 3:
            raise ValueError(f"aggregator 'bulyan:{self.f}' needs N >= 4F+3 replicas (F={self.f}), got N={n}")

    def __call__(self, tree, axis, ctx=None):
        gathered = _gathered_floats(tree, axis)
        n = gathered[0].shape[0]
        self.check_replicas(n)
        rows = robust.bulyan_selection(robust.squared_distances(gathered), self.f)
        return _from_gathered(tree, gathered, axis, lambda g: robust.closest_to_median_mean(g[rows], n - 4 * self.f))


@dataclasses.dataclass(frozen=True)
class WithFaultyReplicas(Aggregator):
    """A fault to test robustness with: the last `count` replicas send Gaussian garbage of
    standard deviation `scale` instead of their payload at every sync, and `inner`
    combines what arrives. The mean then follows the garbage; Krum, Multi-Krum and Bulyan
    must not. Built by a run's `faulty_replicas` setting (or by hand), not by name. Not
    linear: a codec's compressed sum would bypass the garbage, so codecs are refused."""

    inner: Aggregator = dataclasses.field(default_factory=Mean)
    count: int = 1
    scale: float = 100.0
    seed: int = 0
    cell_options: ClassVar[tuple[str, ...]] = ("inner", "seed")   # the garbage's key; the inner rule's own

    def __post_init__(self):
        check_int("faulty replicas", self.count, 1)

    @property
    def collective(self) -> str:
        return self.inner.collective

    @property
    def uses_sample_weights(self) -> bool:
        return self.inner.uses_sample_weights

    def check_replicas(self, n: int) -> None:
        if self.count >= n:
            raise ValueError(f"{self.count} faulty replicas of {n} leave no honest one: must be fewer than {n}")
        self.inner.check_replicas(n)

    def __call__(self, tree, axis, ctx):
        n, me = replica_count(axis), replica_index(axis, ctx)
        key = jax.random.fold_in(jax.random.fold_in(jax.random.key(self.seed), ctx.step), me)
        leaves, treedef = jax.tree.flatten(tree)
        keys = jax.random.split(key, len(leaves))
        faulty = me >= n - self.count

        def garbage(x, k):
            if not _floating(x):
                return x
            return jnp.where(faulty, self.scale * jax.random.normal(k, x.shape, jnp.float32), x).astype(x.dtype)

        return self.inner(jax.tree.unflatten(treedef, [garbage(x, k) for x, k in zip(leaves, keys)]), axis, ctx)


def register_aggregator(name: str, cls: type | None = None):
    """Make a user-defined aggregator reachable by name (`--aggregator NAME`, configs):
    `register_aggregator(name, cls)` or `@register_aggregator(name)`. `cls` is a frozen
    dataclass subclassing Aggregator whose `__call__(tree, axis, ctx)` returns a value
    identical on every replica."""
    return AGGREGATORS.register(name, cls)


def get_aggregator(spec: str | Aggregator) -> Aggregator:
    """An aggregator from its name ("mean", "median", "trimmed:2", "multikrum:1,4", ...)
    or itself. `NAME:ARG` gives the integer fields that the class's `argument` names."""
    if isinstance(spec, Aggregator):
        return spec
    name, colon, arg = str(spec).partition(":")
    if name not in AGGREGATORS:
        raise ValueError(AGGREGATORS.unknown(spec))
    cls = AGGREGATORS[name]
    if not colon:
        return cls()
    with_argument = ", ".join(f"{n}:{c.argument}" for n, c in AGGREGATORS.items() if c.argument)
    if cls.argument is None:
        raise ValueError(f"aggregator {name!r} takes no argument (got {spec!r}); only {with_argument} do")
    values = arg.split(",")
    if len(values) != cls.argument.count(",") + 1 or not all(v.strip().lstrip("-").isdigit() for v in values):
        raise ValueError(f"aggregator {spec!r} must be written {name}:{cls.argument} with integer "
                         f"{cls.argument.replace(',', ' and ')}")
    return cls(*(int(v) for v in values))


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
    """A short label, as a user writes it: "mean", "trimmed:2", "multikrum:1,4"."""
    if isinstance(agg, WithFaultyReplicas):
        return f"{describe_aggregator(agg.inner)} (the last {agg.count} replicas send garbage)"
    for key, cls in AGGREGATORS.items():
        if type(agg) is cls:
            if cls.argument is None:
                return key
            fields = [f.name for f in dataclasses.fields(agg)][: cls.argument.count(",") + 1]
            return f"{key}:{','.join(str(getattr(agg, f)) for f in fields)}"
    return agg.name
