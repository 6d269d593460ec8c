"""The sync core: every synchronization decision and collective goes through here.

A strategy decides *when* (a replicated predicate), *what* (a payload pytree) and *how*
(an aggregator); `sync_where` is the one place that turns that into a collective:

- it checks at trace time that the decision is identical on every replica (a collective
  inside one branch of `lax.cond` deadlocks when replicas disagree);
- only the collective (and work that exists only on a synced step) sits inside the
  `lax.cond`; everything both branches would do stays outside, fused with the step (a
  never-taken cond around a whole optimizer update made a CPU's local step markedly
  slower: BENCHMARKS.md, "Step-overhead bench");
- it records the bytes the collective moves, and whether replicas wait on it (`blocking`),
  in the step's `Ledger`, from which the method's step (`transformation.replica_step`,
  which `make_train_step` and `as_optax` run) alone builds the step's facts: no strategy
  builds or edits a report;
- with packed replicas (k per device, a vmap inside the shard_map) it also rejects a
  decision batched over a device's replicas (the cond would become a select that runs the
  collective every step) and an aggregate that differs across them (a raw mesh collective
  that skipped `jaxsel.collectives`' local stage).

`sync_where(..., compress="bf16"|"int8")` sends the payload's floating leaves compressed
(`jaxsel.core.compression`): only for a linear aggregate (mean, weighted mean, sum), which the
strategy names or hands over as a `jaxsel.aggregate.Bound` so the core can see its
coefficients; the ledger then counts the compressed bytes (what each replica actually sends).
The error-feedback codecs ("topk:F", "sign") also take the replica's residual (`residual=`)
and return it updated with the result.

`local_cond` is the only other conditional: for replica-local work that happens on some
steps only (no collective may sit inside it; tests/test_sync_core.py checks every
strategy's traced step for that). No other function calls `lax.cond` or `lax.switch`
(tests/test_layers.py).
"""
from __future__ import annotations

import abc

import dataclasses
from typing import Any, Callable, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

from . import compression
from .aggregate import Aggregator, Bound, get_aggregator
from .cell_options import CellOptions
from .collectives import Groups, PackedReplicasDisagree, mesh_axes, must_agree, varies_across_local_replicas
from .registry import Registry

SYNC_SCOPE = "jaxsel_sync_where"   # name scope of the core's conds (the no-stray-cond test reads it)


class NonReplicatedDecisionError(PackedReplicasDisagree):
    """A sync decision differs across replicas: `lax.cond` around a collective would deadlock."""


# --------------------------------------------------------------------- replication types

def varying_axes(x) -> frozenset:
    """Manual mesh axes along which `x` may differ: `jax.typeof(x).manual_axis_type.varying`,
    a `jax.sharding.ManualAxisType` in jax 0.10.2 and 0.12.0.1 (older jax called it `vma`).
    The deadlock guard and the cond's branch types rest on it, so a type without it is
    LibraryChanged, never an empty set (which would pass every decision as replicated)."""
    axis_type = getattr(jax.typeof(x), "manual_axis_type", None)
    if not isinstance(axis_type, jax.sharding.ManualAxisType):
        from .library_changes import LibraryChanged

        raise LibraryChanged(f"jax {jax.__version__}: the type of a value inside shard_map "
                             f"({type(jax.typeof(x)).__name__}) has no manual_axis_type; jaxsel's sync "
                             f"core reads which mesh axes a value varies over from it")
    return axis_type.varying


def ensure_replicated(decide, axis: str, who: str = "trigger") -> None:
    """Raise at trace time unless `decide` is provably identical on every replica: not
    varying over the mesh axis (devices) and not batched over a device's packed replicas
    (a batched predicate turns `lax.cond` into a select that pays for the collective on
    every step)."""
    if isinstance(decide, (bool, int)):
        return
    if jnp.shape(decide) != ():
        raise NonReplicatedDecisionError(f"{who} must return a scalar decision, got shape {jnp.shape(decide)}")
    varying = [a for a in mesh_axes(axis) if a in varying_axes(decide)]
    where = (f"the {varying[0]!r} axis" if varying else
             "a device's packed replicas" if varies_across_local_replicas(decide) else None)
    if where is not None:
        raise NonReplicatedDecisionError(
            f"{who} returned a sync decision that varies across {where}; replicas could "
            f"disagree and deadlock inside lax.cond. Reduce per-replica votes over all replicas "
            f"first: jaxsel.collectives.replica_max(vote, axis) (any replica) or replica_min "
            f"(all replicas), or triggers.any_replica."
        )


def ensure_agreed(tree: Any, who: str = "aggregator") -> Any:
    """`tree`, checked (when the step's vmap batches it) to be identical across a device's
    packed replicas: an aggregate built from a raw `lax` collective over the mesh axis
    reduces over devices only, and is an error."""
    message = (f"{who} returned a value that differs across a device's packed replicas; combine "
               f"replicas with jaxsel.collectives (replica_mean, replica_sum, replica_gather, ...), "
               f"which reduce over the packed replicas and the devices, not raw lax collectives")
    return jax.tree.map(lambda x: must_agree(x, message, NonReplicatedDecisionError), tree)


def to_varying(tree: Any, axis) -> Any:
    """Cast invariant leaves to varying (over the mesh axes of `axis`) so both `lax.cond`
    branches have equal types."""
    names = mesh_axes(axis)
    return jax.tree.map(lambda x: _vary_all(x, names), tree) if names else tree


def tree_where(pred, on_true: Any, on_false: Any) -> Any:
    """Elementwise select of two pytrees of equal structure (for small state only)."""
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)


# ------------------------------------------------------------------ what a strategy sees


class StepStats(NamedTuple):
    """What a trigger may base its decision on. Per-replica values are varying: a
    trigger reduces its votes across replicas (psum/pmax) before deciding."""

    step: jax.Array        # replicated step counter (before this step)
    loss: jax.Array        # this replica's loss
    grad_norm: jax.Array   # sum over tensors of each tensor's L2 norm (SelSync's s_t)
    grads: Any = None      # this replica's gradients (a trigger that accumulates them: Accordion)


class SyncReport(NamedTuple):
    """What one step's synchronization did, for metrics and the cost model. Built from the
    step's `Ledger` by `transformation.replica_step`, never by a strategy."""

    synced: jax.Array          # True when the replicas waited on a collective over all of them
    payload_bytes: jax.Array   # bytes each replica put into this step's collectives
    vote_bytes: jax.Array      # of which the decisions' own votes (charged as latency)


def byte_count(nbytes, when=True) -> jax.Array:
    """`nbytes` where `when` holds, else 0, as the step's integer byte metric."""
    dtype = jnp.int64 if jax.config.jax_enable_x64 else jnp.int32
    return jnp.asarray(when).astype(dtype) * jnp.asarray(nbytes, dtype)


class Ledger:
    """What one replica's step synchronized, recorded as it happens: `sync_where` records
    each sync, a trigger's decision its vote (`StepContext.count`), a strategy its metrics
    (`StepContext.log`). The method's step (`transformation.replica_step`) turns it into
    the step's facts, so no strategy builds or edits a report. A trace-time record:
    syncs must run in the step's own trace (not inside a scan or cond of the strategy's)."""

    def __init__(self):
        self.entries: list[tuple[SyncReport, bool]] = []   # (one exchange, within groups only)
        self.replica_metrics: dict = {}
        self.shared_metrics: dict = {}

    def record(self, synced, payload_bytes, vote_bytes=0, grouped: bool = False) -> None:
        self.entries.append((SyncReport(jnp.asarray(synced), payload_bytes, byte_count(vote_bytes)), grouped))

    def report(self) -> SyncReport:
        """synced: some sync over all replicas was waited on; bytes: every exchange's."""
        return _total(self.entries, lambda r, grouped: False if grouped else r.synced)

    def group_metrics(self) -> dict:
        """Syncs within replica groups (a two-level method's inner level): `group_synced`,
        `group_bytes` (their payload per replica; the votes cross groups). {} without any."""
        grouped = [(r, g) for r, g in self.entries if g]
        if not grouped:
            return {}
        total = _total(grouped, lambda r, _: r.synced)
        return {"group_synced": total.synced, "group_bytes": total.payload_bytes}


def _total(entries, synced_of) -> SyncReport:
    """The entries summed: bytes added, `synced_of(report, grouped)` or-ed."""
    out = SyncReport(jnp.asarray(False), byte_count(0), byte_count(0))
    for r, grouped in entries:
        out = SyncReport(out.synced | synced_of(r, grouped), out.payload_bytes + r.payload_bytes,
                         out.vote_bytes + r.vote_bytes)
    return out


@dataclasses.dataclass(frozen=True)
class StepContext:
    """What a strategy sees of the step besides the replica's own state, and the step's
    ledger its syncs are recorded in."""

    axis: Any              # the mesh axis (or a collectives.ReplicaAxes); combine replicas with jaxsel.collectives over it
    n: int                 # number of replicas (all devices, all packed replicas)
    step: jax.Array        # replicated step counter (before this step)
    optimizer: optax.GradientTransformation
    weight: jax.Array      # this replica's sample count this step (FedAvg's weights)
    replica: Any = None    # this replica's global index (int32; d * k + j)
    ledger: Ledger = dataclasses.field(default_factory=Ledger, repr=False, compare=False)

    def sync(self, decide, payload: Any, aggregate: Any = "mean", **options) -> Any:
        """`sync_where(decide, payload, aggregate, self, **options)`: the one guarded sync."""
        return sync_where(decide, payload, aggregate, self, **options)

    def count(self, nbytes: int, vote: bool = False) -> None:
        """Bytes exchanged every step outside `sync_where` (a decision's vote when `vote`:
        charged as latency), for the step's report."""
        self.ledger.record(False, byte_count(nbytes), nbytes if vote else 0)

    def log(self, shared: bool = False, **values) -> None:
        """Step metrics: per replica (varying), or `shared` (the same on every replica)."""
        (self.ledger.shared_metrics if shared else self.ledger.replica_metrics).update(values)


# ------------------------------------------------------------------------ the primitive

def sync_where(decide, payload: Any, aggregate: str | Aggregator | Callable[[Any], Any], ctx: StepContext, *,
               state: Any = None, finish: Callable[[Any, Any], Any] | None = None,
               compress: str | None = None, who: str = "strategy",
               groups: int | None = None, blocking: Any = True, residual: Any = None) -> Any:
    """Aggregate `payload` across replicas where `decide` holds; the one guarded sync.

    `aggregate`: an aggregator's name ("mean", "median", "trimmed:2", ...), an `Aggregator`,
    or a function of the payload (a `jaxsel.aggregate.Bound` for a compressed payload).
    Without `state`/`finish`: returns aggregate(payload) if decide else payload.
    With them: returns finish(aggregate(payload), state) if decide else state —
    `finish` is work that exists only on a synced step (e.g. DiLoCo's outer optimizer
    step), so it shares the collective's branch instead of running every step.
    `decide` is a Python bool (static: no cond, no dead branch) or a replicated scalar.
    `compress` ("bf16", "int8"; None or "none": off) sends the payload's floating leaves
    compressed (`jaxsel.core.compression`); `aggregate` must then be a `jaxsel.aggregate.Bound`
    linear aggregator, and the bytes recorded are the compressed ones.
    `groups`: the aggregate combines replicas within groups (`collectives.Groups`), so it
    agrees within a group only and may differ across a device's packed replicas; the
    decision must still be replicated over all replicas. An aggregator that draws groups of
    its own (`within_groups`: islands) is recorded as a group-level sync the same way.
    `blocking` (a bool or a replicated traced bool): whether the replicas wait on this sync
    before they go on. False for an exchange consumed later (SSP's stale gradients): the
    step's report then counts its bytes but not a sync.
    `residual` (an error-feedback codec, "topk:F" or "sign", needs it): this replica's
    residual, a tree of the payload's leaves to compress (the same paths, e.g.
    `Synced(grads=e)`; the other leaves go uncompressed); the result is then
    (result, new residual), the residual changing only where `decide` holds.
    The sync is recorded in `ctx.ledger`, from which the driver builds the step's report.
    """
    ensure_replicated(decide, ctx.axis, who=who)
    if isinstance(aggregate, (str, Aggregator)):
        aggregate = Bound(get_aggregator(aggregate), Groups(ctx.axis, groups) if groups else ctx.axis, ctx)
    grouped = bool(groups) or (isinstance(aggregate, Bound) and aggregate.aggregator.within_groups)
    if finish is None:
        state, finish = payload, (lambda agg, _: agg)
    nbytes = compression.payload_bytes(payload, compress, residual)
    if compression.has_feedback(compress):
        payload, aggregate, state, finish = _with_residual(payload, aggregate, state, finish, compress,
                                                           who, grouped, residual)
    else:
        if compression.check_codec(compress) is not None:
            if not isinstance(aggregate, Bound):
                raise TypeError(f"{who}: sync_where(compress={compress!r}) needs the aggregate as "
                                f"jaxsel.aggregate.Bound(aggregator, axis, ctx), got {aggregate!r}")
            aggregate = compression.compressed_aggregate(compress, aggregate)
        aggregate = aggregate if grouped else _checked(aggregate)
    if isinstance(decide, (bool, int)):
        decide = bool(decide)
        out = finish(aggregate(payload), state) if decide else state
    else:
        with jax.named_scope(SYNC_SCOPE):
            out = lax.cond(decide,
                           lambda p, s: to_varying(finish(aggregate(p), s), ctx.axis),
                           lambda p, s: to_varying(s, ctx.axis),
                           payload, state)
    waited = decide if blocking is True else (False if blocking is False else decide & blocking)
    ctx.ledger.record(waited, byte_count(nbytes, decide), grouped=grouped)
    return out


def _with_residual(payload, aggregate, state, finish, compress, who, groups, residual):
    """`sync_where`'s operands for an error-feedback codec: the residual rides along with the
    payload (in) and the state (out), so it changes only on a synced step."""
    if residual is None or not isinstance(aggregate, Bound):
        raise TypeError(f"{who}: sync_where(compress={compress!r}) needs residual= (the payload's error-"
                        f"feedback residual) and the aggregate as a jaxsel.aggregate.Bound, got "
                        f"residual={type(residual).__name__}, aggregate={aggregate!r}")
    combine = compression.feedback_aggregate(compress, aggregate, residual)

    def both(pair):
        agg, new_residual = combine(*pair)
        return (agg if groups else ensure_agreed(agg)), new_residual
    return ((payload, residual), both, (state, residual),
            lambda out, st: (finish(out[0], st[0]), out[1]))


def _checked(aggregate: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda payload: ensure_agreed(aggregate(payload))


def local_cond(pred, if_true: Callable, if_false: Callable, *operands):
    """Replica-local work on some steps only (no collective inside either branch).

    `pred` may differ across replicas: nothing inside waits on another replica."""
    if isinstance(pred, (bool, int)):
        return (if_true if pred else if_false)(*operands)
    axis_of = lambda tree: {a for x in jax.tree.leaves(tree) for a in varying_axes(x)}
    axes = axis_of(operands) | varying_axes(pred)
    cast = (lambda t: jax.tree.map(lambda x: _vary_all(x, axes), t)) if axes else (lambda t: t)
    return lax.cond(pred, lambda *o: cast(if_true(*o)), lambda *o: cast(if_false(*o)), *operands)


def _vary_all(x, axes):
    missing = tuple(a for a in axes if a not in varying_axes(x))
    return lax.pcast(x, missing, to="varying") if missing else x


def local_update(params, opt_state, grads, optimizer, scale: float = 1.0):
    """One optimizer step on `grads`: (params, opt_state). `scale` multiplies the updates,
    which for optimizers linear in the learning rate (sgd, momentum, adam(w)) is training
    at lr * scale; the optimizer's own state is unaffected."""
    updates, opt_state = optimizer.update(grads, opt_state, params)
    if not (isinstance(scale, (int, float)) and scale == 1.0):
        updates = jax.tree.map(lambda u: (u * scale).astype(u.dtype), updates)
    return optax.apply_updates(params, updates), opt_state


# ------------------------------------------------------------------------ the protocol

#: last release's attributes of every strategy that now live in another layer: name ->
#: reader(class or strategy) that layer installs (strategies/traits.py), which warns and
#: answers for one release; this module knows no name of them
MOVED_ATTRIBUTES: dict[str, Callable[[Any], Any]] = {}


def _moved_attribute(owner, name: str):
    """A read of an attribute that `owner` (a strategy class or a strategy) lacks."""
    if name in MOVED_ATTRIBUTES:
        return MOVED_ATTRIBUTES[name](owner)
    what = owner.__name__ if isinstance(owner, type) else f"{type(owner).__name__!r} object"
    raise AttributeError(f"{what} has no attribute {name!r}")


class _ReadsMovedAttributes(abc.ABCMeta):
    """Strategy's metaclass: a class attribute moved to another layer is read through it for
    one release (`MOVED_ATTRIBUTES`). It leaves construction alone, so a strategy's
    signature is its dataclass's (`inspect.signature(SelSync)` lists delta, window, ...).
    An ABCMeta, so that a plugin strategy may also be an `abc.ABC`."""

    def __getattr__(cls, name):   # only for names the class and its bases lack
        return _moved_attribute(cls, name)


class Strategy(CellOptions, metaclass=_ReadsMovedAttributes):
    """A synchronization method. Subclasses are frozen dataclasses whose fields are the
    method's options (the CLI and configs check option names against them); `init` gives a
    replica's state, `apply` its step. Everything else has a default. What the layers
    above want to know of a method is declared beside it (its traits, `strategies/traits.py`),
    not here: the protocol is what a replica's step needs."""

    name: ClassVar[str] = "strategy"
    #: run facts the training loop may pass when the user left the field unset
    context_fields: ClassVar[tuple[str, ...]] = ()
    #: the method is its own optimizer, and the replica's optimizer is not used (DeMo)
    own_optimizer: ClassVar[bool] = False
    #: the last release's names of options renamed since, old -> new: still read (from the
    #: command line, configs, Python and old records) for one release, with a
    #: DeprecationWarning naming the new one (DiLoCo's `inner_steps` is now `period`); set
    #: by the one-release shim `@jaxsel.compat.renamed_options.renamed(old="new")`
    aliases: ClassVar[dict] = {}
    #: the fields that hold a strategy of their own (a two-level method's levels)
    levels: ClassVar[tuple[str, ...]] = ()
    #: whether the method may be a level of a two-level method (random islands may not)
    composable: ClassVar[bool] = True

    # What other layers read of every strategy, with the value of a method that does not
    # set it. A strategy with these as options declares them as fields, the payload's once
    # for all (strategies/payload.py).
    #: how its syncs combine the replicas' payloads (a name or an `Aggregator`); None: no
    #: aggregator option, its syncs are plain means (the cost model charges an all-reduce)
    aggregator: Any = None
    #: its payload codec (`core.compression`); None: uncompressed
    compress: str | None = None
    #: how many steps a replica's gradient may lag (asynchronous methods); None: none
    staleness: int | None = None
    #: when it syncs, where one trigger decides (`core.triggers`: the run's warning for a
    #: sync that falls after the run reads when it first fires); None: not one trigger
    trigger: Any = None

    def settle(self, **values) -> None:
        """Set checked or resolved option values from `__post_init__` (e.g. a default that
        depends on another option): the one way a frozen strategy's fields change."""
        for key, value in values.items():
            object.__setattr__(self, key, value)

    def init(self, params, opt_state, n: int | None) -> Any:
        """Per-replica strategy state (unbatched, a typed pytree); `init_state` adds the replica
        axis. `n` is None where the replica count is not known yet (an optax transformation's
        `init` sees one replica's parameters): what depends on it is checked when the step
        is traced (`check_replicas`)."""
        return ()

    def apply(self, rs, grads, stats: StepStats, ctx: StepContext):
        """One replica's step: its new state (a TrainState without the replica axis) from
        `rs` and this step's `grads`. Syncs through `ctx.sync`, metrics through `ctx.log`."""
        raise NotImplementedError

    def check_replicas(self, n: int) -> None:
        """ValueError when the method cannot run on `n` replicas (checked when a run's
        strategy is built, before anything compiles): by default, what its `aggregator`
        (if it has one) can combine ('trimmed:4' of 8 replicas leaves none)."""
        if self.aggregator is not None:
            get_aggregator(self.aggregator).check_replicas(n)

    def optax_refusal(self) -> str | None:
        """Why this method cannot run as an optax transformation (`jaxsel.as_optax`), or None.
        An optimizer's `init` sees one replica's parameters, and its `update` the
        gradients, its state and the parameters: a method whose state is sized by the
        replica count, or that needs what the training loop feeds between steps, says so."""
        return None

    def __getattr__(self, name):   # only for names the strategy lacks (MOVED_ATTRIBUTES)
        return _moved_attribute(self, name)

    def eval_params(self, state):
        """The replica-axis parameters a run is evaluated on (through their replica mean):
        the replicas' own weights, unless the method keeps a global model of its own."""
        return state.params

    def describe(self) -> str:
        """The name and the options that differ from their defaults: "mine (period=4)"."""
        changed = [f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self)
                   if f.init and not _is_default(f, getattr(self, f.name))] if dataclasses.is_dataclass(self) else []
        return f"{self.name} ({', '.join(changed)})" if changed else self.name


def _is_default(field: dataclasses.Field, value) -> bool:
    default = (field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default)
    try:
        return bool(value == default)
    except Exception:   # an array-valued option: always shown
        return False


#: strategies by name; each registers itself where it is defined (`jaxsel.strategies`)
STRATEGIES = Registry("strategy", Strategy, "jaxsel.Strategy")
