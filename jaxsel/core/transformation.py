"""Every jaxsel method as an optax transformation, and the one per-replica step behind it.

Why: a method is what one replica does with its gradients (its optimizer step, its
decision, its guarded sync), which is what an optax `GradientTransformation` is. So a
user's own training loop (a Flax `TrainState`, a hand-written `shard_map`, MaxText's step)
takes SelSync where it had `lax.pmean(grads)`, by changing its optimizer:

    tx = jaxsel.as_optax(jaxsel.SelSync(), optax.sgd(0.1))     # was: optax.sgd(0.1)
    updates, opt_state = tx.update(grads, opt_state, params)   # per replica
    params = optax.apply_updates(params, updates)

`replica_step` is the method's step, and the only one: `make_train_step` drives it inside
its own `shard_map`, `as_optax`'s `update` inside the user's. A parameter-averaging method's
update is the difference between the replica's new parameters and its current ones (as
`optax.lookahead` does), so `apply_updates` lands on the averaged (or outer-updated)
parameters up to one float rounding of that difference; `make_train_step` keeps the new
parameters themselves.

Where the replicas are (`axis_name`): each replica runs `update` inside a `jax.shard_map`
over a mesh axis ("data"), inside a named `jax.vmap` (replicas on one device), or both: a
pair such as ("local", "data") is k replicas vmapped on each of M devices, N = M * k, and
replica d * k + j is device d's j-th (what `lax.axis_index(("data", "local"))` gives, in
either order of the pair). Which name is which is read when `update` is traced.

What an optimizer cannot see is said, not dropped: the step's loss (a trigger that reads it
needs `update(..., loss=loss)`), the samples behind the gradients (FedAvg's weighted
average: `weight=`; default 1 per replica), the replica count at `init` (a method whose
state it sizes is refused by `as_optax`, naming why), and model state such as BatchNorm
statistics (`sync_model_state` averages them where the step synchronized).
"""
from __future__ import annotations

import weakref
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

from .collectives import (ReplicaAxes, local_count, local_stack, mesh_axes, replica_count,
                          varies_across_local_replicas)
from .sample_clock import advance_sample_clocks
from .state import TrainState, check_strategy, layout_of
from .sync import Ledger, StepContext, StepStats, Strategy, sync_where, varying_axes

_PROBE = "jaxsel_probe"   # the vmap axis of `init`'s abstract step (the facts' layout)
_MOST_REPLICAS = 4096     # the probe's largest replica count


def grad_norm_sum(grads) -> jax.Array:
    """Sum over parameter tensors of each tensor's L2 norm (SelSync's statistic s_t)."""
    return norm_sum(tensor_square_sums(grads))


def tensor_square_sums(grads) -> jax.Array:
    """Each gradient tensor's sum of squares (float32), in tree order, as one vector: the
    norm's one pass over the gradients, one reduction per tensor (the reductions
    `grad_norm_sum` has always run, so its bits, SelSync's decisions and the golden records
    stay as they were)."""
    sums = [jnp.sum(jnp.square(g.astype(jnp.float32))) for g in jax.tree.leaves(grads)]
    return jnp.stack(sums) if sums else jnp.zeros((0,), jnp.float32)


def norm_sum(square_sums: jax.Array) -> jax.Array:
    """The sum of the tensors' L2 norms from their sums of squares, added in tree order.

    Why two stages: a driver that computes a replica's gradients outside the vmap of its
    method's step (`make_train_step`'s unroll and map loops) finishes the norm inside it,
    from one vector that every consumer reads. Computed whole outside, its sum had several
    consumers in SelSync's step (its statistic, its window state) and XLA:CPU recomputed it
    in each from a root per tensor, each root an op of its own: 8 more ops on the CNN. The
    roots are one elementwise op on the vector for the same reason (a square root is an op
    XLA does not recompute per consumer); each is the same correctly rounded root."""
    roots = jnp.sqrt(square_sums)
    return sum(roots[i] for i in range(roots.shape[0]))


# ---------------------------------------------------------------- the one replica step

class SyncFacts(NamedTuple):
    """What one replica's step synchronized, from its ledger: the metrics `make_train_step`
    reports and `sync_facts` returns."""

    synced: jax.Array            # the replicas waited on a sync over all of them
    bytes_allreduced: jax.Array  # bytes this replica put into the step's exchanges, votes included
    vote_bytes: jax.Array        # of which the decisions' own votes (charged as latency)
    group: dict                  # group_synced, group_bytes: syncs within replica groups ({} without)
    shared: dict                 # the method's metrics that every replica shares
    replica: dict                # this replica's metrics (SelSync: delta, its Δ̄, and vote)

    def metrics(self) -> dict:
        """The facts every replica shares, by their metric names."""
        return {"synced": self.synced, "bytes_allreduced": self.bytes_allreduced, "vote_bytes": self.vote_bytes,
                **self.group, **self.shared}


def facts_of(ledger: Ledger) -> SyncFacts:
    report = ledger.report()
    return SyncFacts(report.synced, report.payload_bytes, report.vote_bytes, ledger.group_metrics(),
                     dict(ledger.shared_metrics), dict(ledger.replica_metrics))


def replica_step(strategy: Strategy, rs: TrainState, grads, stats: StepStats,
                 ctx: StepContext) -> tuple[TrainState, SyncFacts]:
    """One replica's step of `strategy` (its state `rs` without the replica axis): the new
    state, its counter advanced, and the facts of its syncs. Every driver runs this. An
    optimizer that counts epochs from samples (`sample_clock.SampleClock` in its state)
    has its clock advanced by this step's `synced`."""
    new = strategy.apply(rs, grads, stats, ctx).replace(step=rs.step + 1)
    facts = facts_of(ctx.ledger)
    return new.replace(opt_state=advance_sample_clocks(new.opt_state, facts.synced)), facts


# ------------------------------------------------------------------- the transformation

class SyncState(NamedTuple):
    """`as_optax`'s state: one replica's, like every optax state."""

    inner: Any          # the replica's optimizer state
    strategy: Any       # the method's own (trigger windows, anchors, global weights, residuals)
    count: jax.Array    # steps taken (int32)
    facts: SyncFacts    # what the last step synchronized (`sync_facts`)


class _NoLoss:
    """`StepStats.loss` when `update` got no `loss=`: a trigger that reads it says what to pass."""

    def _missing(self, *args, **kwargs):
        raise ValueError("this method's trigger reads the replica's loss: pass it, "
                         "tx.update(grads, opt_state, params, loss=loss)")

    __jax_array__ = __array__ = __float__ = __bool__ = _missing
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _missing
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = __neg__ = _missing
    __hash__ = object.__hash__


def as_optax(strategy: Strategy, inner, *, axis_name: Any = "data") -> optax.GradientTransformationExtraArgs:
    """`strategy` as an optax transformation around `inner`, the replica's own optimizer
    (None for a method that is its own optimizer: DeMo). Use it per replica inside your
    `shard_map` / named `vmap` over `axis_name` (a name, or a pair such as ("local",
    "data"): see the module docstring): `updates, opt_state = tx.update(grads, opt_state,
    params)`, with `loss=` for a trigger that reads the loss and `weight=` (samples behind
    these gradients) for a sample-weighted aggregate; other extra arguments are ignored, as
    in `optax.chain`. `init(params)` takes one replica's parameters. A method that cannot be
    an optimizer is a ValueError saying why."""
    check_strategy(strategy, "jaxsel.as_optax(strategy, inner)")
    reason = strategy.optax_refusal()
    if reason is not None:
        raise ValueError(f"jaxsel.as_optax: {strategy.name} cannot be an optax transformation: {reason}")
    inner = _checked_inner(strategy, inner)
    names = axis_names(axis_name)

    def init(params) -> SyncState:
        inner_state = inner.init(params)
        own = strategy.init(params, inner_state, None)
        return SyncState(inner_state, own, jnp.zeros((), jnp.int32), _initial_facts(strategy, inner, params,
                                                                                    inner_state, own))

    def update(grads, state: SyncState, params=None, *, loss=None, weight=None, **extra):
        if params is None:
            raise ValueError(f"jaxsel.as_optax({strategy.name}): update needs the parameters, "
                             f"tx.update(grads, opt_state, params)")
        _refuse_chained(grads, strategy)
        _check_own_state(strategy, state, params)
        axes = resolve_axes(names, grads)
        leftover = averaged_already(grads, axes)
        if leftover:   # raised here, not deeper: the user's traceback ends at tx.update
            raise ValueError(leftover)
        new_params, new_state = _step(strategy, inner, axes, grads, state, params, loss, weight)
        updates = jax.tree.map(lambda new, old: (new - old).astype(jnp.result_type(old)), new_params, params)
        _remember_returned(updates)
        return updates, new_state

    return optax.GradientTransformationExtraArgs(init, update)


#: the first leaf of the updates the latest `as_optax` update returned (weakly: never kept alive)
_RETURNED: list = [None]


def _remember_returned(updates) -> None:
    leaves = jax.tree.leaves(updates)
    try:
        _RETURNED[0] = weakref.ref(leaves[0]) if leaves else None
    except TypeError:   # a leaf type without weak references
        _RETURNED[0] = None


def _refuse_chained(grads, strategy: Strategy) -> None:
    """ValueError when `grads` are the very updates another `as_optax` update just returned:
    two jaxsel methods chained (`optax.chain(as_optax(A, ...), as_optax(B, ...))`), where the
    second would take the first's parameter step for gradients and both would synchronize."""
    leaves = jax.tree.leaves(grads)
    returned = _RETURNED[0]() if _RETURNED[0] is not None else None
    if leaves and returned is not None and leaves[0] is returned:
        raise ValueError(f"jaxsel.as_optax({strategy.name}): its gradients are the updates of another jaxsel.as_optax "
                         f"transformation (two chained, e.g. optax.chain(as_optax(A, opt), as_optax(B, opt))): each "
                         f"is a whole method around its own optimizer; use one, with the other optax transformations "
                         f"as its inner optimizer (as_optax(A, optax.chain(...)))")


def _check_own_state(strategy: Strategy, state, params) -> None:
    """TypeError, in one line, when `state` is not what this transformation's `init` makes
    for `params` (another strategy's, or no `SyncState` at all): it failed deep inside the
    strategy (`'tuple' object has no attribute 's_prev'`)."""
    shapes = lambda tree: jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), tree)
    advice = f"pass the state tx.init(params) made for jaxsel.as_optax({strategy.name}, ...)"
    if not isinstance(state, SyncState):
        raise TypeError(f"jaxsel.as_optax({strategy.name}): the optimizer state is {layout_of(state)}, not its "
                        f"SyncState: {advice}")
    expected = jax.eval_shape(lambda p, o: strategy.init(p, o, None), shapes(params), shapes(state.inner))
    if jax.tree.structure(expected) != jax.tree.structure(state.strategy):
        raise TypeError(f"jaxsel.as_optax({strategy.name}): the optimizer state's strategy state is "
                        f"{layout_of(state.strategy)}, but {type(strategy).__name__} keeps {layout_of(expected)} "
                        f"(another strategy's state?): {advice}")


def _checked_inner(strategy: Strategy, inner):
    if strategy.own_optimizer:
        if inner is not None:
            raise ValueError(f"jaxsel.as_optax: {strategy.name} is its own optimizer (its options hold its step "
                             f"size), so it takes no inner optimizer: pass None, got {type(inner).__name__}")
        return optax.identity()
    if not (callable(getattr(inner, "init", None)) and callable(getattr(inner, "update", None))):
        raise TypeError(f"jaxsel.as_optax(strategy, inner): inner must be the replica's optax optimizer "
                        f"(e.g. optax.sgd(0.1)), got {type(inner).__name__}")
    return inner


def _step(strategy, inner, axes: ReplicaAxes, grads, state: SyncState, params, loss, weight):
    """(new parameters, new SyncState): `replica_step` in the user's mapped code."""
    n = replica_count(axes)
    strategy.check_replicas(n)
    step, agreed_bytes = _agreed_count(state.count, axes)
    ctx = StepContext(axis=axes, n=n, step=step, optimizer=inner,
                      weight=jnp.float32(1.0) if weight is None else jnp.asarray(weight, jnp.float32),
                      replica=_replica(axes))
    if agreed_bytes:
        ctx.count(agreed_bytes, vote=True)
    rs = TrainState(step=step, params=params, opt_state=state.inner, model_state={}, strategy_state=state.strategy)
    stats = StepStats(step, _NoLoss() if loss is None else loss, grad_norm_sum(grads), grads)
    new, facts = replica_step(strategy, rs, grads, stats, ctx)
    return new.params, SyncState(new.opt_state, new.strategy_state, new.step, facts)


def _agreed_count(count, axes: ReplicaAxes) -> tuple[jax.Array, int]:
    """(the step counter replicated in type, the bytes that took). Every replica's counter
    is the same by construction (each update adds one), but a sync decision derived from
    it must be provably replicated: a device's packed replicas agree for free (their
    first copy), devices through a 4-byte max, which the step's facts count as a vote.
    A counter that comes in replicated (jaxsel's own step, a pure vmap) costs nothing."""
    step = jnp.asarray(count, jnp.int32)
    if varies_across_local_replicas(step):
        step = local_stack(step, axes)[0]
    varying = tuple(a for a in mesh_axes(axes) if a in varying_axes(step))
    if not varying:
        return step, 0
    return lax.pmax(step, varying), step.dtype.itemsize


def _replica(axes: ReplicaAxes) -> jax.Array:
    """This replica's index d * k + j."""
    d = lax.axis_index(axes.mesh) if axes.mesh is not None else 0
    j = lax.axis_index(axes.local) if axes.local is not None else 0
    return jnp.asarray(d * local_count(axes) + j, jnp.int32)


def axis_names(axis_name) -> tuple[str, ...]:
    """`axis_name` as a tuple of distinct names (ValueError naming what is allowed)."""
    names = (axis_name,) if isinstance(axis_name, str) else tuple(axis_name) if isinstance(axis_name, (tuple, list)) \
        else ()
    if not names or not all(isinstance(a, str) and a for a in names) or len(set(names)) != len(names):
        raise ValueError(f"axis_name must be a mesh or vmap axis name, or a tuple of distinct names such as "
                         f"('local', 'data'), got {axis_name!r}")
    return names


def resolve_axes(names: tuple[str, ...], like: Any) -> ReplicaAxes:
    """At trace time: which of `names` is the vmap axis of a device's packed replicas, and
    which are mesh axes; `like` (the gradients) must not be batched by a vmap left unnamed,
    whose replicas the collectives would otherwise fold in unknowingly."""
    mesh, local = [], []
    for name in names:
        try:
            index = lax.axis_index(name)
        except NameError:
            raise ValueError(f"axis_name {name!r} is not an axis where tx.update runs: call it inside "
                             f"jax.shard_map over a mesh with that axis, or inside jax.vmap(..., axis_name={name!r})"
                             ) from None
        (local if varies_across_local_replicas(index) else mesh).append(name)
    if len(local) > 1:
        raise ValueError(f"axis_name {names!r} names {len(local)} vmap axes ({', '.join(local)}); the replicas of "
                         f"one device are one vmap axis, the devices mesh axes")
    if not local and any(varies_across_local_replicas(x) for x in jax.tree.leaves(like)):
        raise ValueError(f"tx.update runs under a jax.vmap whose axis is not in axis_name={names!r}: name it, "
                         f"e.g. axis_name=('local', {names[0]!r}), so that its replicas are combined too")
    return ReplicaAxes(None if not mesh else mesh[0] if len(mesh) == 1 else tuple(mesh), local[0] if local else None)


def averaged_already(grads, axes: ReplicaAxes) -> str | None:
    """The one-line error when every gradient is provably the same on all replicas (a
    `lax.pmean` left in the loop): the method decides when replicas average, so it takes
    each replica's own gradients; None otherwise. Read from the types: shard_map's varying
    axes (where it tracks them) and the vmap's batching."""
    leaves = jax.tree.leaves(grads)
    mesh = set(mesh_axes(axes))
    if not leaves or (mesh and not mesh <= varying_axes(lax.axis_index(axes.mesh))):
        return None   # no gradients, or a shard_map with check_vma=False: nothing to read
    if any(mesh & varying_axes(g) or varies_across_local_replicas(g) for g in leaves):
        return None
    return (f"the gradients reach tx.update already the same on every replica (a lax.pmean over "
            f"{axes.mesh or axes.local!r} left in the loop?): the method decides when the replicas average, so it "
            f"takes each replica's own gradients; remove the pmean")


def _initial_facts(strategy, inner, params, inner_state, own) -> SyncFacts:
    """Zero facts laid out as the step's: the step traced abstractly (`jax.eval_shape`, no
    compile) on the smallest replica count the method accepts, vmapped on one device,
    since `init` sees one replica and the facts' layout (which metrics) does not depend
    on N."""
    p = _probe_replicas(strategy)
    axes = ReplicaAxes(None, _PROBE)

    def one(params, inner_state, own):
        state = SyncState(inner_state, own, jnp.zeros((), jnp.int32), None)
        zeros = jax.tree.map(jnp.zeros_like, params)
        return _step(strategy, inner, axes, zeros, state, params, jnp.float32(0.0), None)[1].facts

    def probe(*trees):
        batched = [jax.tree.map(lambda x: jnp.broadcast_to(x, (p,) + jnp.shape(x)), t) for t in trees]
        return jax.vmap(one, axis_name=_PROBE, axis_size=p)(*batched)

    shapes = jax.eval_shape(probe, params, inner_state, own)
    return jax.tree.map(lambda s: jnp.zeros(s.shape[1:], s.dtype), shapes)


def _probe_replicas(strategy: Strategy) -> int:
    for n in range(1, _MOST_REPLICAS + 1):
        try:
            strategy.check_replicas(n)
            return n
        except ValueError:
            continue
    raise ValueError(f"{strategy.describe()} accepts no replica count up to {_MOST_REPLICAS}")


# ---------------------------------------------------------------- reading and completing

def sync_state(opt_state, where: str = "jaxsel.sync_facts") -> SyncState:
    """The one `as_optax` state inside `opt_state` (chained, or a Flax TrainState's)."""
    found = [x for x in jax.tree.leaves(opt_state, is_leaf=lambda x: isinstance(x, SyncState))
             if isinstance(x, SyncState)]
    if len(found) != 1:
        raise ValueError(f"{where}: the optimizer state holds {len(found)} states of jaxsel.as_optax "
                         f"transformations; it needs exactly one")
    return found[0]


def sync_facts(opt_state) -> dict:
    """The last step's sync facts, for logging, named as `make_train_step`'s metrics:
    `synced`, `bytes_allreduced` (votes included), `vote_bytes`, for a two-level method
    `group_synced` / `group_bytes`, and the method's own (SelSync: `delta`, its Δ̄, NaN in
    the warm-up, and `vote`). Each with the replica axis where the state has one."""
    facts = sync_state(opt_state).facts
    return {**facts.metrics(), **facts.replica}


def sync_model_state(model_state, opt_state, *, axis_name: Any = "data") -> tuple[Any, Any]:
    """(model state, optimizer state): `model_state` (BatchNorm statistics, which no
    optimizer sees) replaced by its mean over all replicas where this step's update synced
    over all of them, through the sync core's guarded collective; its bytes are added to the
    step's facts. Call it in the same step as `tx.update`, after it (`make_train_step` does
    this inside the method's own sync, with its aggregator, for `sync_model_state=True`)."""
    found = sync_state(opt_state, "jaxsel.sync_model_state")
    axes = resolve_axes(axis_names(axis_name), model_state)
    ctx = StepContext(axis=axes, n=replica_count(axes), step=found.count, optimizer=None,
                      weight=jnp.float32(1.0), replica=_replica(axes))
    model_state = sync_where(found.facts.synced, model_state, "mean", ctx,
                             who="jaxsel.sync_model_state (call it in the step of tx.update)")
    moved = found.facts.bytes_allreduced + ctx.ledger.report().payload_bytes
    done = found._replace(facts=found.facts._replace(bytes_allreduced=moved))
    return model_state, jax.tree.map(lambda x: done if x is found else x, opt_state,
                                     is_leaf=lambda x: isinstance(x, SyncState))
