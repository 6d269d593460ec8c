"""Every jaxsel method as an optax transformation (`jaxsel.as_optax`), in a training loop a
user writes: a plain `jax.make_mesh`, parameters and optimizer state with a leading
replica axis, `jax.shard_map` (or a named `jax.vmap`), `tx.update` and
`optax.apply_updates`. Nothing else of jaxsel's runs in that loop.

- Every replica's parameters equal the NumPy references of tests/reference/ (BSP, local
  SGD, SelSync, DiLoCo, SPARTA, island averaging) on 8 devices, on 4 devices with 2 replicas vmapped on each
  (axis_name=("local", "data")) and on one device (a vmap named "data").
- Every method the transformation covers reaches `make_train_step`'s parameters, method
  state and sync facts (the transformation is the method; both drive one step).
- A refused method, a bad axis and a missing loss are one line naming the reason.
- A Flax `TrainState` with `tx=jaxsel.as_optax(...)` trains through `apply_gradients`.
"""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import jaxsel
from helpers import R, softmax_batches, softmax_loss, softmax_params
from jaxsel.strategies import SPARTA, STRATEGIES, build_strategy
from reference import islands, optim, outer, sparta, sync_orders, triggers
from reference.codecs import simulate_local_sgd
from reference.linreg import make_problem
from reference.trees import as_float, mean_over_replicas

#: layout -> (devices of the mesh, 0 for none; the vmap axis of a device's replicas; tx's axis_name)
LAYOUTS = {"8x1": (8, None, "data"), "4x2": (4, "local", ("local", "data")), "vmap": (0, "data", "data")}
D, LR, B = 5, 0.1, 4
PROBLEM = make_problem(n_replicas=R, d=D, n_samples=B, seed=1)
LINREG = {"x": np.concatenate(PROBLEM.xs).astype(np.float32), "y": np.concatenate(PROBLEM.ys).astype(np.float32)}


def linreg_loss(params, batch):
    r = batch["x"] @ params["w"] + params["b"][0] - batch["y"]
    return jnp.mean(r * r) / 2


def stacked(tree):
    """`tree` copied onto the R replicas (a leading axis)."""
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (R,) + jnp.shape(x)), tree)


def user_loop(tx, params, batches, layout="8x1", loss_fn=linreg_loss, weight=None):
    """A user's loop: [(parameters, optimizer state) on the host after each step], each
    with the replica axis. `batches` hold R * b rows, replica i's are rows i*b ... ."""
    devices, local, _ = LAYOUTS[layout]

    def replica(params, opt_state, batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        extra = {} if weight is None else {"weight": weight}
        updates, opt_state = tx.update(grads, opt_state, params, loss=loss, **extra)
        return optax.apply_updates(params, updates), opt_state

    params, opt_state = stacked(params), stacked(tx.init(params))
    split = lambda batch: jax.tree.map(lambda x: np.reshape(x, (R, -1) + np.shape(x)[1:]), batch)
    if devices == 0:
        step, place = jax.jit(jax.vmap(replica, axis_name=local)), (lambda tree: tree)
    else:
        mesh = jax.make_mesh((devices,), ("data",), devices=jax.devices()[:devices])
        one = lambda *a: jax.tree.map(lambda x: x[None], replica(*jax.tree.map(lambda x: x[0], a)))
        per_device = jax.vmap(replica, axis_name=local) if local else one
        step = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("data"), out_specs=P("data")))
        place = functools.partial(jax.device_put, device=NamedSharding(mesh, P("data")))
    params, opt_state = place((params, opt_state))
    history = []
    for batch in batches:
        params, opt_state = step(params, opt_state, place(split(batch)))
        history.append(jax.device_get((params, opt_state)))
    return history


def as_list(tree, r):
    """Replica r's {'w', 'b'} as the reference's [w, b]."""
    return [np.asarray(tree["w"][r], np.float64), np.asarray(tree["b"][r], np.float64)]


def assert_replicas(params, want, rtol=1e-4, atol=2e-5):
    for r in range(R):
        for got, ref in zip(as_list(params, r), want[r]):
            np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, err_msg=f"replica {r}")


# ------------------------------------------------------------------- NumPy references

def reference_bsp(steps, momentum=0.9):
    """SGD with momentum on the replicas' mean gradient (optax.sgd, tests/reference/optim.py)."""
    opt = optim.SGD(LR, momentum=momentum)
    w = PROBLEM.init()
    state = opt.init(w)
    for t in range(steps):
        updates, state = opt.update(mean_over_replicas([PROBLEM.grad(i, t, w) for i in range(R)]), state, w)
        w = optim.apply(w, updates)
    return [w] * R, [None] * steps


def reference_localsgd(steps, period=3):
    ws, _, _ = simulate_local_sgd(PROBLEM.init(), PROBLEM.grad, R, steps, period, LR, None)
    return ws, [(t + 1) % period == 0 for t in range(steps)]


def reference_selsync(steps, sync="params", momentum=None, sync_opt_state=False, **significance):
    """SelSync in closed loop: tests/reference/triggers.py decides from each replica's
    statistic (the sum of its gradient tensors' norms) at the step's own parameters; the
    parameters are averaged before the replicas' own SGD steps (sync="params", the
    authors' order) or after them ("model"), the momentum too where `sync_opt_state`
    (tests/reference/sync_orders.py)."""
    sel, decisions, last = triggers.SelSync(R, **significance), [], {}

    def grad_fn(i, t, params):
        last[i] = PROBLEM.grad(i, t, params)
        return last[i]

    def decide(t):
        decisions.append(sel.step([sum(np.linalg.norm(g) for g in last[i]) for i in range(R)]))
        return decisions[-1]

    ws = sync_orders.simulate(PROBLEM.init(), grad_fn, R, steps, decide, optim.SGD(LR, momentum=momentum), sync,
                              sync_opt_state)
    return ws, decisions


def reference_diloco(steps, inner_steps=2):
    history, _, _ = outer.simulate_diloco(PROBLEM.init(), PROBLEM.grad, R, inner_steps, steps // inner_steps, LR)
    return [as_float(history[-1])] * R, [(t + 1) % inner_steps == 0 for t in range(steps)]


def reference_sparta(steps, period=None, fraction=0.5, seed=3):
    """SPARTA with SGD and momentum per replica (tests/reference/sparta.py) on the entries the
    run draws; the run's entries are the leaves in tree order, [b, w], the reference's [w, b]."""
    from jaxsel.core.sparse import draw_entries, sparse_count

    k, to_reference = sparse_count(fraction, D + 1), lambda e: np.where(e == 0, D, e - 1)
    entries = lambda t: to_reference(np.asarray(draw_entries(seed, t, D + 1, k)))
    history, _ = sparta.simulate_sparta(PROBLEM.init(), PROBLEM.grad, R, steps, optim.SGD(LR, momentum=0.9), entries,
                                        period)
    return history[-1], [True] * steps


def reference_islands(steps, size, period=2, seed=4):
    """Local SGD averaging within islands (tests/reference/islands.py) of the run's draw."""
    perm = lambda t: np.asarray(jaxsel.aggregate.IslandMean(size, seed).permutation(R, t))
    history, _ = islands.simulate_islands(PROBLEM.init(), PROBLEM.grad, R, steps, optim.SGD(LR), period, size, perm)
    return history[-1], [False] * steps   # syncs within islands, never over all replicas


#: syncs 111..111..11 in 12 steps (margins >= 9%); raw: 111011101110 (margins >= 7%)
SELSYNC = dict(window=2, delta=0.3, alpha=0.1, statistic="smoothed")
SELSYNC_RAW = dict(window=2, delta=0.3, alpha=0.1, statistic="raw")
REFERENCES = {   # name -> (strategy, inner optimizer, steps, reference)
    "bsp": (lambda: jaxsel.BSP(), lambda: optax.sgd(LR, momentum=0.9), 4, reference_bsp),
    "localsgd": (lambda: jaxsel.LocalSGD(period=3), lambda: optax.sgd(LR), 6, reference_localsgd),
    "selsync": (lambda: jaxsel.SelSync(**SELSYNC), lambda: optax.sgd(LR), 12,
                lambda steps: reference_selsync(steps, **SELSYNC)),
    "selsync-raw": (lambda: jaxsel.SelSync(**SELSYNC_RAW), lambda: optax.sgd(LR), 12,
                    lambda steps: reference_selsync(steps, **SELSYNC_RAW)),
    "selsync-model": (lambda: jaxsel.SelSync(sync="model", **SELSYNC), lambda: optax.sgd(LR, momentum=0.9), 12,
                      lambda steps: reference_selsync(steps, "model", 0.9, **SELSYNC)),
    "selsync-opt-state": (lambda: jaxsel.SelSync(sync_opt_state=True, **SELSYNC),
                          lambda: optax.sgd(LR, momentum=0.9), 12,
                          lambda steps: reference_selsync(steps, "params", 0.9, True, **SELSYNC)),
    "selsync-model-opt-state": (lambda: jaxsel.SelSync(sync="model", sync_opt_state=True, **SELSYNC),
                                lambda: optax.sgd(LR, momentum=0.9), 12,
                                lambda steps: reference_selsync(steps, "model", 0.9, True, **SELSYNC)),
    "diloco": (lambda: jaxsel.DiLoCo(period=2), lambda: optax.sgd(LR), 6, reference_diloco),
    "sparta": (lambda: SPARTA(fraction=0.5, seed=3), lambda: optax.sgd(LR, momentum=0.9), 4, reference_sparta),
    "sparta-period": (lambda: SPARTA(fraction=0.5, seed=3, period=3), lambda: optax.sgd(LR, momentum=0.9), 4,
                      lambda steps: reference_sparta(steps, period=3)),
    **{f"islands{k}": (lambda k=k: jaxsel.LocalSGD(period=2, islands=k, seed=4), lambda: optax.sgd(LR), 4,
                       lambda steps, k=k: reference_islands(steps, k)) for k in (2, 4)},
}


@pytest.fixture(scope="module")
def users_loops():
    """(method, layout) -> its user's-loop history, each run once per module: the packed
    layouts are held to the 8-device run, which is a test of its own."""
    runs = {}

    def run(name, layout):
        if (name, layout) not in runs:
            make, inner, steps, _ = REFERENCES[name]
            runs[name, layout] = user_loop(jaxsel.as_optax(make(), inner(), axis_name=LAYOUTS[layout][2]),
                                           {"w": jnp.zeros(D), "b": jnp.zeros(1)}, [LINREG] * steps, layout)
        return runs[name, layout]
    return run


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", list(REFERENCES))
def test_a_users_loop_matches_the_numpy_reference(name, layout, users_loops):
    """Every replica's parameters after each method's run in the user's loop, as NumPy
    computes them; the sync facts name the reference's sync steps."""
    steps, reference = REFERENCES[name][2:]
    history = users_loops(name, layout)
    want, decisions = reference(steps)
    assert_replicas(history[-1][0], want)
    if layout != "8x1":   # and to float32 rounding, 8 devices' (a device sums its replicas first)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6),
                     history[-1][0], users_loops(name, "8x1")[-1][0])
    synced = [bool(jaxsel.sync_facts(opt)["synced"][0]) for _, opt in history]
    assert synced == [True] * steps if name == "bsp" else synced == decisions
    if name.startswith("selsync"):
        assert any(decisions[2 * SELSYNC["window"] - 1:]) and not all(decisions), "both decisions occur"


@pytest.mark.slow
@pytest.mark.layouts
def test_packed_and_vmapped_replicas_equal_eight_devices():
    """axis_name=("local", "data") with 2 replicas vmapped on each of 4 devices, and 8 replicas
    vmapped on one device, reach the 8-device parameters, optimizer and method state (to
    float32 rounding: a device sums its replicas first) and the same sync decisions. (The
    bytes differ by the step counter's agreement, which one device does not need.)"""
    batches = softmax_batches(6, seed=4)
    for strategy in (jaxsel.SelSync(window=2, delta=0.05), jaxsel.FedAvg(period=2, fraction=0.5),
                     jaxsel.Hierarchical(inner="localsgd", outer="selsync", groups=4, inner_options={"period": 2},
                                         outer_options={"window": 2, "delta": 0.05})):
        runs = {layout: user_loop(jaxsel.as_optax(strategy, optax.sgd(0.5, momentum=0.9), axis_name=LAYOUTS[layout][2]),
                                  softmax_params(), batches, layout, loss_fn=softmax_loss) for layout in LAYOUTS}
        state = lambda history: (history[-1][0], history[-1][1].inner, history[-1][1].strategy, history[-1][1].count)
        for layout, history in runs.items():
            jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6, err_msg=layout),
                         state(history), state(runs["8x1"]))
            assert [bool(jaxsel.sync_facts(o)["synced"][0]) for _, o in history] == \
                   [bool(jaxsel.sync_facts(o)["synced"][0]) for _, o in runs["8x1"]], layout


# ----------------------------------------------- the same step as make_train_step's

CONTEXT = dict(replicas=R, total_steps=6, steps_per_epoch=2, base_lr=0.1)
AGGREGATORS = ("mean", "min", "max", "median", "trimmed:2", "weighted", "random", "krum:1", "multikrum:1,4",
               "bulyan:1")
#: case -> (strategy name, options); every registered strategy the transformation covers
#: (its defaults, where it has them), and the variants the issue lists
COVERED = {
    **{name: (name, {}) for name in sorted(STRATEGIES) if name not in ("asp", "syncswitch")},
    "syncswitch-offline-s2": ("syncswitch", {"staleness": 2}),
    "syncswitch-online-s2": ("syncswitch", {"policy": "online", "staleness": 2}),
    "selsync-grads": ("selsync", {"sync": "grads", "window": 2, "delta": 0.05}),
    "selsync-model": ("selsync", {"sync": "model", "window": 2, "delta": 0.05}),
    "selsync-opt-state": ("selsync", {"sync_opt_state": True, "window": 2, "delta": 0.05}),
    "selsync-max-local": ("selsync", {"window": 2, "delta": 1.0, "max_local": 1}),
    "selsync-raw-w0": ("selsync", {"window": 2, "delta": 0.3, "statistic": "raw", "warmup": 0}),
    "selsync-smoothed-w1": ("selsync", {"window": 2, "delta": 0.05, "statistic": "smoothed", "warmup": 1}),
    "fedavg-sampled": ("fedavg", {"period": 2, "fraction": 0.5}),
    "localsgd-desloc": ("localsgd", {"period": 2, "opt_state_period": 3}),
    **{f"superstep-{agg}": ("superstep", {"epochs": 0.5, "aggregator": agg}) for agg in AGGREGATORS},
    **{f"diloco-{o}": ("diloco", {"period": 2, "outer_optimizer": o, "outer_lr": 0.05}) for o in
       ("nesterov", "sgd", "adam", "adamw")},
    **{f"streamingdiloco-{o}": ("streamingdiloco", {"period": 2, "outer_optimizer": o, "outer_lr": 0.05})
       for o in ("nesterov", "sgd", "adam", "adamw")},
    "hierarchical-groups2": ("hierarchical", {"groups": 2, "outer.window": 2, "outer.delta": 0.05}),
    "bsp-topk": ("bsp", {"compress": "topk:0.3"}),
    "localsgd-sign": ("localsgd", {"period": 2, "compress": "sign"}),
    "selsync-int8": ("selsync", {"window": 2, "delta": 0.05, "compress": "int8"}),
    "diloco-topk": ("diloco", {"period": 2, "compress": "topk:0.5"}),
    "sparta-period": ("sparta", {"fraction": 0.2, "period": 2}),
    "localsgd-islands": ("localsgd", {"period": 2, "islands": 4}),
    "diloco-sparta": ("diloco", {"period": 2, "sparta": 0.2}),
}


@pytest.mark.parametrize("case", sorted(COVERED))
def test_the_transformation_is_make_train_steps_method(case):
    """In the user's loop on 8 devices, each covered method reaches the parameters, optimizer
    and method state of `make_train_step`'s run, and its sync facts are that run's metrics,
    plus the one 4-byte exchange the user's loop adds: its replicas' step counters arrive
    varying, and a decision taken from them must be replicated (`_agreed_count`)."""
    name, options = COVERED[case]
    strategy = build_strategy(name, options, **CONTEXT)
    opt = optax.sgd(0.1, momentum=0.9)
    batches = softmax_batches(CONTEXT["total_steps"], seed=7)
    mesh = jaxsel.data_mesh(replicas=R, devices=8)
    driven = run_make_train_step(strategy, opt, mesh, batches)
    tx = jaxsel.as_optax(strategy, None if strategy.own_optimizer else opt)
    mine = user_loop(tx, softmax_params(), batches, loss_fn=softmax_loss, weight=float(B))
    close = lambda a, b, what: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6, err_msg=f"{case}: {what}")
    for t, ((params, opt_state), (state, metrics)) in enumerate(zip(mine, driven)):
        jax.tree.map(lambda a, b: close(a, b, f"params at step {t}"), params, state.params)
        sync = jaxsel.sync_facts(opt_state)
        assert sorted(sync) == sorted(k for k in metrics if k not in ("loss", "replica_loss", "grad_norm")), case
        for key, value in sync.items():
            extra = 4 if key in ("bytes_allreduced", "vote_bytes") else 0
            np.testing.assert_allclose(value, np.asarray(metrics[key]) + extra, rtol=1e-5, err_msg=f"{case} {key} {t}")
    own = mine[-1][1]   # the SyncState of every replica
    jax.tree.map(lambda a, b: close(a, b, "method state"), own.strategy, driven[-1][0].strategy_state)
    if not strategy.own_optimizer:   # DeMo's run keeps the optimizer's state untouched, its transformation none
        jax.tree.map(lambda a, b: close(a, b, "optimizer state"), own.inner, driven[-1][0].opt_state)
    assert np.all(own.count == CONTEXT["total_steps"])


def run_make_train_step(strategy, opt, mesh, batches):
    """[(state, metrics) on the host after each step] of jaxsel's own step."""
    state = jaxsel.init_state(softmax_params(), opt, strategy, mesh, replicas=R)
    step = jaxsel.make_train_step(softmax_loss, opt, strategy, mesh)
    history = []
    for batch in batches:
        state, metrics = step(state, batch)
        history.append(jax.device_get((state, metrics)))
    return history


# ------------------------------------------------------------------------------ refusals

@pytest.mark.parametrize("strategy, reason", [
    (lambda: jaxsel.ASP(), "asp cannot be an optax transformation: its staleness s = N - 1 sizes a ring"),
    (lambda: jaxsel.SSP(staleness=None), "ssp cannot be an optax transformation: its staleness s = N - 1"),
    (lambda: jaxsel.SyncSwitch(switch_step=2), "syncswitch cannot be an optax transformation: its asynchronous "
                                               "phase's staleness"),
    (lambda: jaxsel.SyncSwitch(policy="online", staleness=1, step_times="state", total_steps=4),
     "syncswitch cannot be an optax transformation: its step times are fed into its state by the training loop"),
])
def test_a_method_that_cannot_be_an_optimizer_is_refused_in_one_line(strategy, reason):
    with pytest.raises(ValueError) as raised:
        jaxsel.as_optax(strategy(), optax.sgd(0.1))
    message = str(raised.value)
    assert message.startswith(f"jaxsel.as_optax: {reason}") and "\n" not in message


@pytest.mark.parametrize("call, error, match", [
    (lambda: jaxsel.as_optax("selsync", optax.sgd(0.1)), TypeError, "needs a jaxsel Strategy instance"),
    (lambda: jaxsel.as_optax(jaxsel.SelSync(), "sgd"), TypeError, "inner must be the replica's optax optimizer"),
    (lambda: jaxsel.as_optax(jaxsel.DeMo(), optax.sgd(0.1)), ValueError, "demo is its own optimizer"),
    (lambda: jaxsel.as_optax(jaxsel.BSP(), optax.sgd(0.1), axis_name=("data", "data")), ValueError,
     r"axis_name must be a mesh or vmap axis name, or a tuple of distinct names"),
    (lambda: jaxsel.as_optax(jaxsel.BSP(), optax.sgd(0.1), axis_name=3), ValueError, "got 3"),
])
def test_bad_arguments_are_one_line(call, error, match):
    with pytest.raises(error, match=match) as raised:
        call()
    assert "\n" not in str(raised.value)


def _update_under(tx, axis_name=None, loss=True):
    """tx.update on 8 replicas vmapped over `axis_name` (None: outside any mapping)."""
    params = {"w": jnp.zeros(D), "b": jnp.zeros(1)}

    def replica(params, opt_state, batch):
        value, grads = jax.value_and_grad(linreg_loss)(params, batch)
        return tx.update(grads, opt_state, params, **({"loss": value} if loss else {}))

    batch = jax.tree.map(lambda x: x.reshape((R, -1) + x.shape[1:]), LINREG)
    if axis_name is None:
        return replica(params, tx.init(params), jax.tree.map(lambda x: x[0], batch))
    return jax.vmap(replica, axis_name=axis_name)(stacked(params), stacked(tx.init(params)), batch)


def test_an_axis_that_is_not_there_or_a_vmap_left_unnamed_is_one_line():
    tx = jaxsel.as_optax(jaxsel.BSP(), optax.sgd(0.1), axis_name="data")
    with pytest.raises(ValueError, match=r"axis_name 'data' is not an axis where tx.update runs: call it inside "
                                         r"jax.shard_map over a mesh with that axis, or inside jax.vmap"):
        _update_under(tx)
    with pytest.raises(ValueError, match=r"tx.update runs under a jax.vmap whose axis is not in "
                                         r"axis_name=\('data',\): name it, e.g. axis_name=\('local', 'data'\)"):
        user_loop(tx, {"w": jnp.zeros(D), "b": jnp.zeros(1)}, [LINREG], "4x2")   # vmaps "local", names "data"


def test_a_chained_transformation_and_its_facts():
    """optax.chain(clip, as_optax(LocalSGD, sgd)) in the user's loop: make_train_step's run
    with the optimizer chain(clip, sgd) (clipping is per replica either way), and
    sync_facts finds the state inside the chain's."""
    clip, strategy = optax.clip_by_global_norm(0.05), jaxsel.LocalSGD(period=2)
    tx = optax.chain(clip, jaxsel.as_optax(strategy, optax.sgd(0.5)))
    batches = softmax_batches(4, seed=6)
    mine = user_loop(tx, softmax_params(), batches, "vmap", loss_fn=softmax_loss)
    driven = run_make_train_step(strategy, optax.chain(clip, optax.sgd(0.5)), jaxsel.data_mesh(replicas=R),
                                 batches)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6), mine[-1][0],
                 driven[-1][0].params)
    assert [bool(jaxsel.sync_facts(o)["synced"][0]) for _, o in mine] == [False, True, False, True]


def test_two_chained_methods_are_refused():
    """Issue 48 item 9: the second took the first's parameter step for its gradients and
    both synchronized."""
    first, second = (jaxsel.as_optax(s, optax.sgd(0.5)) for s in (jaxsel.LocalSGD(period=2), jaxsel.BSP()))
    for tx in (optax.chain(first, second), optax.chain(first, first)):
        with pytest.raises(ValueError, match=r"its gradients are the updates of another jaxsel.as_optax transformation "
                                             r"\(two chained"):
            user_loop(tx, softmax_params(), softmax_batches(1, seed=6), "vmap", loss_fn=softmax_loss)


@dataclasses.dataclass(frozen=True)
class LossAbove(jaxsel.triggers.Trigger):
    def __call__(self, tstate, stats, axis):
        return tstate, jaxsel.triggers.any_replica(stats.loss > 1.0, axis), {}


def test_a_pmean_left_in_the_loop_is_one_line():
    """Gradients averaged before tx.update (BSP's pmean kept after switching to SelSync) are
    refused: the method takes each replica's own."""
    tx = jaxsel.as_optax(jaxsel.SelSync(), optax.sgd(0.1))
    mesh = jax.make_mesh((8,), ("data",))

    @functools.partial(jax.shard_map, mesh=mesh, in_specs=P("data"), out_specs=P("data"))
    def step(params, opt_state, batch):
        params, opt_state, batch = jax.tree.map(lambda x: x[0], (params, opt_state, batch))
        grads = jax.lax.pmean(jax.grad(linreg_loss)(params, batch), "data")
        return tx.update(grads, opt_state, params)

    params = {"w": jnp.zeros(D), "b": jnp.zeros(1)}
    args = jax.device_put((stacked(params), stacked(tx.init(params)),
                           jax.tree.map(lambda x: x.reshape((R, -1) + x.shape[1:]), LINREG)),
                          NamedSharding(mesh, P("data")))
    with pytest.raises(ValueError, match=r"the gradients reach tx.update already the same on every replica \(a "
                                         r"lax.pmean over 'data' left in the loop\?\)"):
        jax.jit(step)(*args)


def test_a_trigger_that_reads_the_loss_asks_for_it():
    tx = jaxsel.as_optax(jaxsel.TriggeredStrategy(trigger=LossAbove(), sync="params"), optax.sgd(0.1))
    with pytest.raises(ValueError, match=r"reads the replica's loss: pass it, tx.update\(grads, opt_state, "
                                         r"params, loss=loss\)"):
        _update_under(tx, "data", loss=False)
    _, state = _update_under(tx, "data")
    assert state.facts.synced.shape == (R,)


# ----------------------------------------------------------- Flax, model state, keys

def test_a_flax_train_state_trains_through_apply_gradients():
    """`flax.training.train_state.TrainState` with tx=jaxsel.as_optax(SelSync) in a user's
    shard_map step, `state.apply_gradients(grads=grads)`: make_train_step's parameters."""
    import flax.linen as nn
    from flax.training.train_state import TrainState

    model = nn.Dense(3)
    params = model.init(jax.random.key(0), jnp.zeros((1, 5)))["params"]
    strategy, opt = jaxsel.SelSync(window=2, delta=0.05), optax.sgd(0.5, momentum=0.9)

    def loss_fn(params, batch):
        logits = model.apply({"params": params}, batch["x"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()

    mesh = jax.make_mesh((8,), ("data",))
    state = jax.device_put(stacked(TrainState.create(apply_fn=model.apply, params=params,
                                                     tx=jaxsel.as_optax(strategy, opt))),
                           NamedSharding(mesh, P("data")))

    @jax.jit
    @functools.partial(jax.shard_map, mesh=mesh, in_specs=P("data"), out_specs=P("data"))
    def train_step(state, batch):
        state, batch = jax.tree.map(lambda x: x[0], (state, batch))
        state = state.apply_gradients(grads=jax.grad(loss_fn)(state.params, batch))
        return jax.tree.map(lambda x: x[None], state)

    batches = softmax_batches(6, seed=2)
    for batch in batches:
        batch = jax.device_put(jax.tree.map(lambda x: x.reshape((R, -1) + x.shape[1:]), batch),
                               NamedSharding(mesh, P("data")))
        state = train_step(state, batch)
    jaxsel_mesh = jaxsel.data_mesh(replicas=R, devices=8)
    driven = jaxsel.init_state(params, opt, strategy, jaxsel_mesh, replicas=R)
    step = jaxsel.make_train_step(loss_fn, opt, strategy, jaxsel_mesh)
    for batch in batches:
        driven, metrics = step(driven, batch)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6), state.params, driven.params)
    assert np.all(np.asarray(state.step) == 6)
    np.testing.assert_allclose(jaxsel.sync_facts(state.opt_state)["delta"], metrics["delta"], rtol=1e-5)


def running_mean_loss(params, model_state, batch):
    """tests/test_golden.py's model: inputs centred by a running mean (the model state)."""
    mean = 0.9 * model_state["mean"] + 0.1 * batch["x"].mean(0)
    logits = (batch["x"] - mean) @ params["w"] + params["b"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean(), {"mean": mean}


def test_sync_model_state_averages_model_state_where_the_step_synced():
    """LocalSGD(period=2) with model state: the user's loop updates it through the loss and
    calls jaxsel.sync_model_state after tx.update; parameters and model state equal
    make_train_step's stateful run (which averages it inside the method's sync)."""
    strategy, opt = jaxsel.LocalSGD(period=2), optax.sgd(0.5)
    tx = jaxsel.as_optax(strategy, opt)
    mesh = jax.make_mesh((8,), ("data",))
    place = functools.partial(jax.device_put, device=NamedSharding(mesh, P("data")))
    params, model_state = softmax_params(), {"mean": jnp.zeros(5)}
    carry = place(stacked((params, model_state, tx.init(params))))

    @jax.jit
    @functools.partial(jax.shard_map, mesh=mesh, in_specs=P("data"), out_specs=P("data"))
    def train_step(carry, batch):
        (params, model_state, opt_state), batch = jax.tree.map(lambda x: x[0], (carry, batch))
        (_, model_state), grads = jax.value_and_grad(running_mean_loss, has_aux=True)(params, model_state, batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        model_state, opt_state = jaxsel.sync_model_state(model_state, opt_state)
        return jax.tree.map(lambda x: x[None], (optax.apply_updates(params, updates), model_state, opt_state))

    batches = [jax.tree.map(lambda x: x + 1.0 if x.dtype == np.float32 else x, b) for b in softmax_batches(4, seed=5)]
    facts = []
    for batch in batches:
        carry = train_step(carry, place(jax.tree.map(lambda x: x.reshape((R, -1) + x.shape[1:]), batch)))
        facts.append(jax.device_get(jaxsel.sync_facts(carry[2])))
    jaxsel_mesh = jaxsel.data_mesh(replicas=R, devices=8)
    driven = jaxsel.init_state(params, opt, strategy, jaxsel_mesh, model_state=model_state, replicas=R)
    step = jaxsel.make_train_step(running_mean_loss, opt, strategy, jaxsel_mesh, stateful=True)
    for t, batch in enumerate(batches):
        driven, metrics = step(driven, batch)
        assert int(facts[t]["bytes_allreduced"][0]) == int(metrics["bytes_allreduced"]) + 4, t
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    jax.tree.map(close, carry[0], driven.params)
    jax.tree.map(close, carry[1], driven.model_state)


def test_make_train_step_gives_the_loss_a_key_per_replica_and_step():
    """make_train_step(..., rng=key): the loss's key is fold_in(fold_in(key, step), replica),
    the same on 8 devices and 8 packed on 1 (each replica's loss carries its draw)."""
    key = jax.random.key(3)

    def noisy_loss(params, batch, rng):
        return softmax_loss(params, batch) + jax.random.uniform(rng)

    batches, want = softmax_batches(3), []
    for t, batch in enumerate(batches):
        params = softmax_params()   # lr 0: the parameters never move, so the clean loss is known
        clean = [softmax_loss(params, jax.tree.map(lambda x: x[r * B:(r + 1) * B], batch)) for r in range(R)]
        noise = [jax.random.uniform(jax.random.fold_in(jax.random.fold_in(key, t), r)) for r in range(R)]
        want.append(np.asarray(clean) + np.asarray(noise))
    for devices in (8, 1):
        mesh = jaxsel.data_mesh(replicas=R, devices=devices)
        state = jaxsel.init_state(softmax_params(), optax.sgd(0.0), jaxsel.BSP(), mesh, replicas=R)
        step = jaxsel.make_train_step(noisy_loss, optax.sgd(0.0), jaxsel.BSP(), mesh, rng=key)
        for t, batch in enumerate(batches):
            state, metrics = step(state, batch)
            np.testing.assert_allclose(metrics["replica_loss"], want[t], rtol=1e-6, err_msg=f"{devices} devices")
    with pytest.raises(TypeError, match=r"make_train_step\(\.\.\., rng=\) takes a key, e\.g\. jax\.random\.key\(0\), "
                                        r"got int 3"):
        jaxsel.make_train_step(noisy_loss, optax.sgd(0.0), jaxsel.BSP(), mesh, rng=3)
