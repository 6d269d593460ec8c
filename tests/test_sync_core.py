"""The sync core is the one place that synchronizes: no other module conditions a
collective, every strategy's decision is checked for replication, and the typed report
counts what moved."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

import jaxsel
from helpers import R, softmax_batches, softmax_loss
from jaxsel.core import sync, triggers
from jaxsel.core.aggregate import Aggregator
from jaxsel.strategies import STRATEGIES, build_strategy

COLLECTIVES = {"psum", "psum2", "psum_invariant", "pmax", "pmin", "all_gather", "all_gather_invariant",
               "ppermute", "all_to_all", "reduce_scatter", "psum_scatter"}
CONTEXT = dict(replicas=8, total_steps=6, steps_per_epoch=2)
B, D, C = 2, 4, 3


def init_params():
    """Two tensors, so that Streaming DiLoCo's default two fragments each get one."""
    return {"w": jnp.zeros((D, C)), "b": jnp.zeros((C,))}


def batch():
    return softmax_batches(1, b=B, d=D, c=C)[0]


def sub_jaxprs(eqn):
    for value in eqn.params.values():
        for sub in value if isinstance(value, (tuple, list)) else [value]:
            if hasattr(sub, "jaxpr") and hasattr(sub, "consts"):
                yield sub.jaxpr
            elif hasattr(sub, "eqns"):
                yield sub


def primitives(jaxpr) -> set[str]:
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for sub in sub_jaxprs(eqn):
            names |= primitives(sub)
    return names


def conds(jaxpr):
    """(name stack, primitives inside the branches) of every cond, however deeply nested."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "cond":
            inside = set().union(*(primitives(b.jaxpr) for b in eqn.params["branches"]))
            yield str(eqn.source_info.name_stack), inside
        for sub in sub_jaxprs(eqn):
            yield from conds(sub)


def traced_step(strategy, mesh):
    opt = optax.sgd(0.1, momentum=0.9)
    state = jaxsel.init_state(init_params(), opt, strategy, mesh, replicas=R)
    step = jaxsel.make_train_step(softmax_loss, opt, strategy, mesh)
    return jax.make_jaxpr(step)(state, batch()).jaxpr


ALL = sorted(STRATEGIES) + ["syncswitch-online", "fedavg-sampled", "selsync-median", "localsgd-int8", "bsp-bf16",
                            "triggered-periodic", "localsgd-syncs", "sparta-period"]
#: the strategies that condition no collective, and whether each all-reduces the parameters'
#: shape on every step (BSP, ASP, SSP and SSD-SGD do; `triggered`'s default trigger, "never",
#: moves nothing); every other strategy's sync is a `sync_where` around a collective
UNCONDITIONAL = {"asp": True, "bsp": True, "bsp-bf16": True, "ssdsgd": True, "ssp": True, "triggered": False,
                 "demo": False,    # DeMo gathers DCT coefficients every step, never the parameters
                 "sparta": False}  # SPARTA all-reduces its k drawn entries every step, never the parameters


def make(name):
    if name in ("localsgd-int8", "bsp-bf16"):   # compressed payloads: the gather/all-reduce in the cond
        strategy, codec = name.split("-")
        return build_strategy(strategy, {"compress": codec}, **CONTEXT)
    if name == "syncswitch-online":
        return build_strategy("syncswitch", {"policy": "online", "staleness": 2}, **CONTEXT)
    if name == "fedavg-sampled":
        return build_strategy("fedavg", {"fraction": 0.5}, **CONTEXT)
    if name == "selsync-median":
        return build_strategy("selsync", {"aggregator": "median"}, **CONTEXT)
    if name == "sparta-period":   # the sparse sync every step but the full one's, under a cond
        return build_strategy("sparta", {"period": 3}, **CONTEXT)
    if name == "localsgd-syncs":   # exactly 3 syncs spread over the run (triggers.Spread)
        return build_strategy("localsgd", {"syncs": 3}, **CONTEXT)
    if name == "triggered-periodic":
        return build_strategy("triggered", {"trigger": "periodic", "trigger.period": 3, "sync": "params"})
    return build_strategy(name, {}, **CONTEXT)


def unconditional_collective_shapes(jaxpr) -> set[tuple]:
    """The operand shapes of every collective outside all conds."""
    shapes = set()
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "cond":
            continue
        if eqn.primitive.name in COLLECTIVES:
            shapes |= {tuple(v.aval.shape) for v in eqn.invars}
        for sub in sub_jaxprs(eqn):
            shapes |= unconditional_collective_shapes(sub)
    return shapes


@pytest.mark.parametrize("name", ALL)
def test_every_cond_around_a_collective_is_the_sync_core(mesh, name):
    """Behavioural guard: in every strategy's traced step, a cond whose branches hold a
    collective was made by `sync_where`; every other cond is replica-local. A conditional
    strategy has such a cond; a static one has none and reduces its parameters
    unconditionally. (The textual guard, no `lax.cond`/`lax.switch` however spelled outside
    `sync_where` and `local_cond`, is tests/test_layers.py's.)"""
    jaxpr = traced_step(make(name), mesh)
    around = [(stack, inside & COLLECTIVES) for stack, inside in conds(jaxpr) if inside & COLLECTIVES]
    for stack, collectives in around:
        assert sync.SYNC_SCOPE in stack, f"{name}: a cond around {collectives} at {stack!r}"
    if name not in UNCONDITIONAL:
        assert around, f"{name}: no cond around a collective: its sync is not conditional"
    else:
        assert not around, f"{name} syncs statically, yet a cond holds {around}"
        reduces_params = (D, C) in unconditional_collective_shapes(jaxpr)
        assert reduces_params == UNCONDITIONAL[name], f"{name}: unconditional reduction of the parameters"


# ------------------------------------------------------------------ the replication guard

def apply_with_varying_step(strategy, mesh):
    """Run one strategy step whose step counter differs per replica (as a buggy trigger's
    decision would): every data-dependent decision becomes non-replicated."""
    opt = optax.sgd(0.1)
    state = jaxsel.init_state(init_params(), opt, strategy, mesh, replicas=R)
    specs = jax.tree.map(lambda _: P("data"), state).replace(step=P())

    def body(state, b):
        rs = jax.tree.map(lambda x: x[0], state.replace(step=None)).replace(step=state.step)
        skew = state.step + jax.lax.axis_index("data")    # differs per replica
        loss, grads = jax.value_and_grad(softmax_loss)(rs.params, b)
        ctx = sync.StepContext(axis="data", n=R, step=skew, optimizer=opt, weight=jnp.float32(B))
        strategy.apply(rs, grads, sync.StepStats(skew, loss, jaxsel.grad_norm_sum(grads)), ctx)
        return ctx.ledger.report().payload_bytes

    f = jax.shard_map(body, mesh=mesh, in_specs=(specs, P("data")), out_specs=P())
    b = jax.device_put(batch(), jax.sharding.NamedSharding(mesh, P("data")))
    return jax.jit(f).lower(state, b)


# every strategy whose decision derives from the step (SelSync's and online Sync-Switch's
# come from a psum/pmax of votes; SSP, ASP and SSD-SGD reduce on every step, unconditionally:
# SSD-SGD's pull is replica-local and waits on no one)
STEP_DECIDED = ["bsp-periodic", "localsgd", "fedavg", "superstep", "postlocal", "diloco", "streamingdiloco",
                "syncswitch", "triggered-periodic", "islands",
                "sparta"]   # a static sync, but its entries are drawn from the step: guarded too


@pytest.mark.parametrize("name", STEP_DECIDED)
def test_guard_fires_for_a_non_replicated_decision(mesh, name):
    if name == "bsp-periodic":     # BSP decides statically: gradient sync on a step-based trigger
        strat = jaxsel.TriggeredStrategy(trigger=triggers.Periodic(2), sync="grads")
    else:
        strat = make(name)
    with pytest.raises(jaxsel.NonReplicatedDecisionError, match="varies across the 'data' axis"):
        apply_with_varying_step(strat, mesh)


def test_guard_fires_when_selsync_forgets_its_vote_reduction(mesh, monkeypatch):
    """SelSync's decision is replicated only through the psum of the votes."""
    monkeypatch.setattr(triggers, "any_replica", lambda vote, axis: vote)
    with pytest.raises(jaxsel.NonReplicatedDecisionError, match="Significance"):
        traced_step(jaxsel.SelSync(), mesh)


def test_guard_fires_for_a_decision_batched_over_packed_replicas(mesh, monkeypatch):
    """A raw `lax.psum` over the mesh axis agrees across devices but not across a device's
    packed replicas: the guard names the packed replicas (a cond on it would be a select)."""
    monkeypatch.setattr(triggers, "any_replica",
                        lambda vote, axis: jax.lax.psum(vote.astype(jnp.float32), axis) > 0)
    with pytest.raises(jaxsel.NonReplicatedDecisionError, match="packed replicas"):
        traced_step(jaxsel.SelSync(), mesh)


def test_an_aggregate_that_skips_the_packed_replicas_is_an_error(mesh):
    strat = jaxsel.TriggeredStrategy(trigger=triggers.Periodic(2), sync="model", aggregator=RawMean())
    with pytest.raises(jaxsel.NonReplicatedDecisionError, match="jaxsel.collectives"):
        traced_step(strat, mesh)


@dataclasses.dataclass(frozen=True)
class RawMean(Aggregator):
    """A user aggregator written against the mesh axis only (wrong for packed replicas)."""

    def __call__(self, tree, axis, ctx=None):
        return jax.tree.map(lambda x: jax.lax.pmean(x, axis), tree)


@pytest.mark.parametrize("blocking", [True, False])
def test_sync_where_records_the_payload_bytes_in_the_ledger(mesh, blocking):
    """The step's report comes from the ledger: bytes where the sync ran, `synced` only
    where replicas wait on it (`blocking=False`: bytes counted, no sync), votes on top."""
    def body(x):
        decide = jax.lax.psum(x[0], "data") > 0
        ctx = sync.StepContext(axis="data", n=R, step=jnp.int32(0), optimizer=None, weight=jnp.float32(1))
        tree = {"a": jnp.ones((3,), jnp.float32), "b": jnp.ones((2, 2), jnp.float16)}
        tree = jax.tree.map(lambda t: (t * x[0]).astype(t.dtype), tree)
        out = ctx.sync(decide, tree, lambda t: jax.lax.pmean(t, "data"), blocking=blocking)
        ctx.count(4, vote=True)
        report = ctx.ledger.report()
        return out["a"][None], report.payload_bytes, report.vote_bytes, report.synced

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=(P("data"), P(), P(), P())))
    x = jax.device_put(jnp.arange(R, dtype=jnp.float32), jax.sharding.NamedSharding(mesh, P("data")))
    out, nbytes, votes, synced = f(x)
    assert bool(synced) == blocking and int(nbytes) == 3 * 4 + 4 * 2 + 4 and int(votes) == 4
    np.testing.assert_allclose(np.asarray(out)[:, 0], np.full(R, np.arange(R).mean()))
    out, nbytes, votes, synced = f(x * 0)
    assert not bool(synced) and int(nbytes) == 4 and int(votes) == 4


def test_selsync_keeps_a_real_conditional_in_the_compiled_step(mesh):
    """A vmapped or select-lowered decision would pay for the collective on every step."""
    strat, opt = jaxsel.SelSync(), optax.sgd(0.1)
    state = jaxsel.init_state(init_params(), opt, strat, mesh, replicas=R)
    step = jaxsel.make_train_step(softmax_loss, opt, strat, mesh)
    hlo = step.lower(state, batch()).compile().as_text()
    assert "conditional" in hlo


def test_consensus_of_a_diloco_run_mid_round_is_its_global_weights(mesh):
    strat, opt = jaxsel.DiLoCo(period=3, outer_lr=0.7), optax.sgd(0.1)
    state = jaxsel.init_state(init_params(), opt, strat, mesh, replicas=R)
    step = jaxsel.make_train_step(softmax_loss, opt, strat, mesh)
    # one outer step (after step 2), then one inner step of the next round
    for b in softmax_batches(4, seed=1, b=B, d=D, c=C):
        state, _ = step(state, b)
    glob = np.asarray(state.strategy_state.global_params["w"])
    # (a mean of 8 equal float32 values: exact only in some summation orders)
    np.testing.assert_allclose(np.asarray(jaxsel.consensus(state, strat)["w"]), glob.mean(0), rtol=1e-6)
    assert np.all(glob == glob[0])   # the global weights are the same on every replica
    local = np.asarray(jaxsel.consensus(state)["w"])
    assert not np.allclose(local, glob[0])   # the replicas' drafts have moved on


def test_a_checkpoint_of_the_old_dict_state_layout_is_refused_clearly():
    from jaxsel import TrainConfig
    from jaxsel.training.checkpoint import CheckpointMismatch, check_identity
    from jaxsel.training.checkpoint import run_identity

    current = run_identity(TrainConfig())
    old = {k: v for k, v in current.items() if k != "state_format"}   # jaxsel 0.1 wrote no format
    with pytest.raises(CheckpointMismatch, match="layout 1 .* this jaxsel reads layout 3"):
        check_identity(old, current, "ck/100")
    with pytest.raises(CheckpointMismatch, match=r"layout 2 \(typed NamedTuples.*reads layout 3 \(typed, with post-local"):
        check_identity({**current, "state_format": 2}, current, "ck/100")
    check_identity(dict(current), current, "ck/100")   # the same layout resumes
