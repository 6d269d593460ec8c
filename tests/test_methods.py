"""The rest of the methods: SSP/ASP emulation, Sync-Switch, SSD-SGD, post-local SGD,
DiLoCo, FedAvg client sampling, supersteps, the registry, and the BSP-fraction search."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxsel
from helpers import R, identical, run, softmax_batches, softmax_grad_numpy, softmax_params
from jaxsel.analysis.syncswitch_search import search_bsp_fraction
from jaxsel.core.options import accepts
from jaxsel.core.triggers import Never
from jaxsel.strategies import STRATEGIES, TriggeredStrategy, build_strategy

B, D, C = 4, 5, 3   # helpers' default sizes
LR = 0.1


# ---------------------------------------------------------------- models and runs

def linear_loss(params, batch):
    """Gradient = the mean of the replica's rows of c: known per replica and step."""
    return jnp.mean(batch["c"] @ params["w"])


def linear_batches(steps, seed=1):
    rng = np.random.default_rng(seed)
    return [{"c": rng.normal(size=(R * B, D)).astype(np.float32)} for _ in range(steps)]


def linear_grads(batch):
    """(R, D): replica r's gradient for this batch."""
    return batch["c"].reshape(R, B, D).mean(axis=1)


# ----------------------------------------------------------------------- SSP / ASP

def test_ssp_zero_equals_bsp_exactly(mesh):
    batches = softmax_batches(4)
    bsp, _ = run(jaxsel.BSP(), mesh, batches)
    ssp, hist = run(jaxsel.SSP(staleness=0), mesh, batches)
    for a, b in zip(jax.tree.leaves(bsp.params), jax.tree.leaves(ssp.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert bool(hist[-1][1]["synced"])


@pytest.mark.parametrize("staleness", [2, None])  # None: ASP, s = N - 1
def test_ssp_applies_others_gradients_s_steps_late(mesh, staleness):
    s = R - 1 if staleness is None else staleness
    T = s + 3
    batches = linear_batches(T)
    w0 = np.zeros(D, np.float32)
    strategy = jaxsel.SSP(staleness=staleness)
    _, hist = run(strategy, mesh, batches, loss=linear_loss, params={"w": jnp.asarray(w0)}, opt=optax.sgd(LR))
    g = np.stack([linear_grads(b) for b in batches])  # (T, R, D)
    prev = np.broadcast_to(w0, (R, D))
    for t, (state, metrics) in enumerate(hist):
        others = (g[t - s].sum(0) - g[t - s]) if t >= s else 0.0   # sum_{j != i} g_j(t - s)
        want = prev - LR * (g[t] + others) / R
        np.testing.assert_allclose(state.params["w"], want, rtol=1e-5, atol=1e-6, err_msg=f"step {t}")
        prev = np.asarray(state.params["w"])
        assert not bool(metrics["synced"]) and int(metrics["bytes_allreduced"]) == D * 4
    assert "emulated" in strategy.describe()


def test_asp_with_momentum_feeds_combined_gradient_to_optimizer(mesh):
    batches = linear_batches(R + 1)
    opt = optax.sgd(LR, momentum=0.9)
    _, hist = run(jaxsel.ASP(), mesh, batches, loss=linear_loss, params={"w": jnp.zeros(D)}, opt=opt)
    g, s = np.stack([linear_grads(b) for b in batches]), R - 1
    for r in (0, 5):
        w, ostate = jnp.zeros(D), opt.init(jnp.zeros(D))
        for t in range(len(batches)):
            others = (g[t - s].sum(0) - g[t - s][r]) if t >= s else 0.0
            u, ostate = opt.update(jnp.asarray((g[t][r] + others) / R), ostate, w)
            w = optax.apply_updates(w, u)
        np.testing.assert_allclose(hist[-1][0].params["w"][r], w, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------- Sync-Switch

@pytest.mark.parametrize("lr_scale", [1.0, 0.5])
def test_syncswitch_bsp_then_async_with_rescaled_lr(mesh, lr_scale):
    switch, s, T = 3, R - 1, 3 + R + 1
    batches = linear_batches(T)
    strat = jaxsel.SyncSwitch(bsp_fraction=0.25, total_steps=12, lr_scale=lr_scale)
    assert strat.switch_step == switch
    _, hist = run(strat, mesh, batches, loss=linear_loss, params={"w": jnp.zeros(D)}, opt=optax.sgd(LR))
    g = np.stack([linear_grads(b) for b in batches])
    prev = np.zeros((R, D))
    for t, (state, m) in enumerate(hist):
        if t < switch:   # BSP: every replica applies lr * mean gradient
            want = prev - LR * g[t].mean(0)
            assert bool(m["synced"]) and not bool(m["asynchronous"]) and identical(state.params)
        else:            # emulated ASP: each gradient enters with lr * lr_scale / N
            tau = t - s
            others = (g[tau].sum(0) - g[tau]) if tau >= switch else 0.0  # nothing stale from BSP steps
            want = prev - LR * lr_scale * (g[t] + others) / R
            assert not bool(m["synced"]) and bool(m["asynchronous"])
        np.testing.assert_allclose(state.params["w"], want, rtol=1e-5, atol=1e-6, err_msg=f"step {t}")
        prev = np.asarray(state.params["w"])


@pytest.mark.parametrize("rule", ["reset", "scale"])
def test_syncswitch_momentum_rule_at_the_switch(mesh, rule):
    switch, mu = 2, 0.9
    batches = linear_batches(switch + 1)
    opt = optax.sgd(LR, momentum=mu)
    strat = jaxsel.SyncSwitch(switch_step=switch, momentum=rule)
    _, hist = run(strat, mesh, batches, loss=linear_loss, params={"w": jnp.zeros(D)}, opt=opt)
    g = np.stack([linear_grads(b) for b in batches])
    trace = np.zeros(D)
    for t in range(switch):
        trace = mu * trace + g[t].mean(0)
    carried = {"reset": 0.0, "scale": 1.0 / R}[rule] * trace
    before = hist[switch - 1][0].params["w"]
    after = hist[switch][0].params["w"]
    for r in range(R):  # first async step: nothing stale yet, own gradient / N
        new_trace = mu * carried + g[switch][r] / R
        np.testing.assert_allclose(after[r], before[r] - LR * new_trace, rtol=1e-5, atol=1e-6)


def test_syncswitch_online_follows_a_straggler_and_drains_back_to_bsp(mesh):
    T, slow_steps = 8, range(2, 5)  # replica 2 is 3x slower on steps 2, 3, 4

    def feed(t, state):
        times = np.ones(R, np.float32)
        if t in slow_steps:
            times[2] = 3.0
        return jaxsel.feed_step_times(state, times)

    strat = jaxsel.SyncSwitch(policy="online", step_times="state", straggler_factor=2.0, straggler_steps=2)
    batches = linear_batches(T)
    _, hist = run(strat, mesh, batches, loss=linear_loss, params={"w": jnp.zeros(D)}, opt=optax.sgd(LR),
                  before_step=feed)
    modes = [bool(m["asynchronous"]) for _, m in hist]
    assert modes == [False, False, False, True, True, False, False, False]  # 2 consecutive slow steps
    g = np.stack([linear_grads(b) for b in batches])
    state = hist[5][0]  # back to BSP: stale gradients drained, one model again
    assert identical(state.params)
    np.testing.assert_allclose(state.params["w"][0], -LR * g[:6].mean(1).sum(0), rtol=1e-5, atol=1e-6)
    assert int(hist[5][1]["bytes_allreduced"]) > int(hist[4][1]["bytes_allreduced"])  # drain averages


def test_syncswitch_online_simulated_stragglers_from_costmodel(mesh):
    strat = jaxsel.SyncSwitch(policy="online", total_steps=4, stragglers="fixed:factor=3,replicas=1",
                              straggler_steps=2)
    _, hist = run(strat, mesh, softmax_batches(4))
    # step t sees the times of step t-1 (step 0 sees none): slow at 1 and 2 -> async from 2
    assert [bool(m["asynchronous"]) for _, m in hist] == [False, False, True, True]
    grad_bytes = (D * C + C) * 4
    assert int(hist[0][1]["bytes_allreduced"]) == grad_bytes + 12  # + the step-time exchange
    assert int(hist[0][1]["vote_bytes"]) == 0  # the straggler monitor holds no barrier


# -------------------------------------------------------------------------- SSD-SGD

def test_ssdsgd_local_equals_global_after_each_pull(mesh):
    k, warm, T = 3, 2, 11
    _, hist = run(jaxsel.SSDSGD(period=k, warmup_steps=warm), mesh, softmax_batches(T))
    grad_bytes = (D * C + C) * 4
    for t, (state, m) in enumerate(hist):
        local, glob = state.params, state.strategy_state.global_params
        assert identical(glob), f"step {t}: global weights differ across replicas"
        assert int(m["bytes_allreduced"]) == grad_bytes  # gradients reduce every step
        pulled = t >= warm and (t - warm + 1) % k == 0
        if t < warm or pulled:
            assert bool(m["synced"]) and identical(local)
            for a, b in zip(jax.tree.leaves(local), jax.tree.leaves(glob)):
                np.testing.assert_array_equal(a, b)
        else:
            assert not bool(m["synced"]) and not identical(local)


def test_ssdsgd_glu_formula(mesh):
    k, warm, beta, scale = 4, 1, 0.25, 4.0
    batches = linear_batches(4)
    strat = jaxsel.SSDSGD(period=k, warmup_steps=warm, glu_beta=beta, local_lr_scale=scale)
    _, hist = run(strat, mesh, batches, loss=linear_loss, params={"w": jnp.zeros(D)}, opt=optax.sgd(LR))
    g = np.stack([linear_grads(b) for b in batches])
    glob = -LR * g[0].mean(0)                  # warm-up step: BSP
    local = np.broadcast_to(glob, (R, D)).copy()
    anchor = glob
    for t in range(warm, 4):
        glob = glob - LR * g[t].mean(0)
        local = local - scale * LR * g[t] + beta * (anchor - local)
        np.testing.assert_allclose(hist[t][0].params["w"], local, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(hist[t][0].strategy_state.global_params["w"][0], glob, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------ post-local SGD, DiLoCo

def test_postlocalsgd_sync_schedule(mesh):
    switch, period, T = 3, 2, 9
    _, hist = run(jaxsel.PostLocalSGD(switch_step=switch, period=period), mesh, softmax_batches(T))
    synced = [bool(m["synced"]) for _, m in hist]
    assert synced == [t < switch or (t - switch + 1) % period == 0 for t in range(T)]
    for t, (state, _) in enumerate(hist):
        assert identical(state.params) == synced[t], f"step {t}"


def reference_params_sync_with_opt_state(batches, period: int, lr=0.1, momentum=0.9):
    """NumPy: each replica's SGD with momentum on its rows; on every `period`-th step the
    pre-update parameters and the momentum traces are replaced by their replica means before
    the replicas' own updates (gradients taken at their own pre-average parameters).
    Returns [(parameters, traces) of every replica after each step], leaves as [b, w]."""
    w0 = [np.asarray(p, np.float64) for p in jax.tree.leaves(softmax_params())]
    ws, traces, history = [list(w0) for _ in range(R)], [[np.zeros_like(p) for p in w0] for _ in range(R)], []
    for t, batch in enumerate(batches):
        rows = lambda i: slice(4 * i, 4 * (i + 1))
        grads = [softmax_grad_numpy(ws[i], batch["x"][rows(i)], batch["y"][rows(i)]) for i in range(R)]
        if (t + 1) % period == 0:
            mean = lambda trees: [np.mean(np.stack(leaves), axis=0) for leaves in zip(*trees)]
            ws, traces = [mean(ws)] * R, [mean(traces)] * R
        traces = [[g + momentum * m for g, m in zip(grads[i], traces[i])] for i in range(R)]
        ws = [[p - lr * m for p, m in zip(ws[i], traces[i])] for i in range(R)]
        history.append((ws, traces))
    return history


def test_sync_opt_state_averages_the_optimizer_state_at_a_sync(mesh):
    """`sync_opt_state=True` (sync="params"): at a sync the momentum traces are averaged
    with the parameters, so every replica's trace after a sync step is the replicas' mean
    plus its own gradient; the NumPy reference after every step, synced or not."""
    batches = softmax_batches(5, seed=2)
    strategy = TriggeredStrategy(trigger="periodic", trigger_options={"period": 2}, sync="params", sync_opt_state=True)
    _, hist = run(strategy, mesh, batches)
    want = reference_params_sync_with_opt_state(batches, period=2)
    assert [bool(m["synced"]) for _, m in hist] == [False, True, False, True, False]
    for t, ((state, _), (ws, traces)) in enumerate(zip(hist, want)):
        for r in range(R):
            for got, ref in zip(jax.tree.leaves(state.params), ws[r]):
                np.testing.assert_allclose(got[r], ref, rtol=1e-5, atol=1e-6, err_msg=f"params, step {t}")
            for got, ref in zip(jax.tree.leaves(state.opt_state), traces[r]):
                np.testing.assert_allclose(got[r], ref, rtol=1e-5, atol=1e-6, err_msg=f"trace, step {t}")


def test_diloco_with_plain_outer_sgd_equals_localsgd(mesh):
    H, batches = 3, softmax_batches(7)
    local, _ = run(jaxsel.LocalSGD(period=H), mesh, batches)
    dil, hist = run(jaxsel.DiLoCo(period=H, outer_lr=1.0, outer_momentum=0.0), mesh, batches)
    for a, b in zip(jax.tree.leaves(local.params), jax.tree.leaves(dil.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    assert [bool(m["synced"]) for _, m in hist] == [(t + 1) % H == 0 for t in range(7)]


def test_diloco_nesterov_outer_step_is_replicated(mesh):
    _, hist = run(jaxsel.DiLoCo(period=2), mesh, softmax_batches(4))
    state = hist[-1][0]
    assert identical(state.params) and identical(state.strategy_state.outer_opt)
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(state.strategy_state.global_params)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("outer, lr, devices", [
    ("nesterov", 0.7, 8), ("sgd", 0.7, 8), ("adam", 0.05, 8), ("adamw", 0.05, 8),
    ("adam", 0.05, 2), ("adamw", 0.05, 1)], ids=lambda v: str(v))
def test_diloco_outer_optimizers_match_numpy_reference(outer, lr, devices):
    """DiLoCo and its outer optimizer choice (inner plain SGD, H = 2, 3 rounds) against
    tests/reference/outer.py, on 8 devices, 2 x 4 and 8 packed on 1."""
    from reference import outer as ref

    mesh = jaxsel.data_mesh(replicas=R, devices=devices)
    H, rounds, inner_lr = 2, 3, 0.3
    batches = softmax_batches(H * rounds, seed=5)
    strategy = jaxsel.DiLoCo(period=H, outer_optimizer=outer, outer_lr=lr)
    final, _ = run(strategy, mesh, batches, opt=optax.sgd(inner_lr))

    def grad_fn(i, t, params):
        rows = slice(i * B, (i + 1) * B)
        return softmax_grad_numpy(params, np.asarray(batches[t]["x"][rows], np.float64), batches[t]["y"][rows])

    p0 = jax.tree.leaves(jax.device_get(softmax_params()))
    history, _, _ = ref.simulate_diloco(p0, grad_fn, R, H, rounds, inner_lr, outer=outer, outer_lr=lr)
    got = jax.tree.leaves(jax.device_get(final.strategy_state.global_params))
    for leaf, want in zip(got, history[-1]):
        for r in range(R):
            np.testing.assert_allclose(leaf[r], want, rtol=2e-5, atol=2e-6)
    final = jax.device_get(final)
    assert identical(final.params) and identical(final.strategy_state.outer_opt)


# --------------------------------------------------- FedAvg, supersteps, the registry

def test_fedavg_client_sampling_averages_the_drawn_replicas(mesh):
    batches = softmax_batches(2)
    fed = jaxsel.FedAvg(period=2, fraction=0.5, seed=4)
    _, hist = run(fed, mesh, batches)
    apart, _ = run(TriggeredStrategy(trigger=Never(), sync="model"), mesh, batches)
    mask = np.asarray(fed.aggregator.participants(R, jnp.int32(1)))
    for name in ("w", "b"):
        want = np.asarray(apart.params[name])[mask].mean(0)
        for r in range(R):
            np.testing.assert_allclose(hist[-1][0].params[name][r], want, rtol=1e-5, atol=1e-6)
    assert hist[0][0].strategy_state.samples[0] == B  # samples seen since the last sync
    assert hist[1][0].strategy_state.samples[0] == 0


def test_superstep_period_is_epochs_times_steps_per_epoch(mesh):
    strat = build_strategy("superstep", {"epochs": 2, "aggregator": "median"}, steps_per_epoch=2)
    assert strat.trigger.period == 4 and strat.name == "superstep"
    _, hist = run(strat, mesh, softmax_batches(8))
    assert [bool(m["synced"]) for _, m in hist] == [(t + 1) % 4 == 0 for t in range(8)]
    assert identical(hist[3][0].params) and not identical(hist[4][0].params)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_registered_strategy_builds_and_runs(mesh, name):
    opts = {"period": 2} if accepts(STRATEGIES[name], "period") else {}
    strat = build_strategy(name, opts, replicas=R, total_steps=3, steps_per_epoch=2, base_lr=LR)
    _, hist = run(strat, mesh, softmax_batches(3))
    for _, m in hist:
        assert np.isfinite(m["loss"]) and "synced" in m and int(m["bytes_allreduced"]) >= 0
    assert strat.describe()


@pytest.mark.parametrize("make, match", [
    (lambda: jaxsel.SSP(staleness=-1), "staleness"),
    (lambda: jaxsel.SyncSwitch(policy="sometimes", switch_step=1), "policy"),
    (lambda: jaxsel.SyncSwitch(momentum="flip", switch_step=1), "momentum rule"),
    (lambda: jaxsel.SyncSwitch(), "total_steps"),
    (lambda: jaxsel.SyncSwitch(policy="online", total_steps=5, stragglers="slowish"), "straggler model"),
    (lambda: jaxsel.SSDSGD(period=0), "pull period"),
    (lambda: jaxsel.DiLoCo(period=0), "period"),
    (lambda: jaxsel.PostLocalSGD(), "switch_step"),
    (lambda: jaxsel.Superstep(epochs=1), "steps_per_epoch"),
    (lambda: jaxsel.FedAvg(fraction=0.0), "fraction"),
    (lambda: jaxsel.FedAvg(fraction=0.5, aggregator="median"), "client sampling"),
])
def test_bad_options_raise_clear_errors(make, match):
    with pytest.raises(ValueError, match=match):
        make()


# ------------------------------------------------------------- BSP-fraction search

def test_search_bsp_fraction_finds_the_smallest_good_fraction():
    calls = []

    def fake_train(fraction):  # accuracy rises with the BSP share, saturating at BSP's 0.92
        calls.append(fraction)
        return min(0.92, 0.8 + fraction)

    res = search_bsp_fraction(fake_train, tolerance=0.01)
    assert res.fraction == pytest.approx(8 / 64) and res.reference_accuracy == pytest.approx(0.92)
    assert res.accuracy >= 0.91 and len(calls) == len(set(calls)) <= 8
    res = search_bsp_fraction(fake_train, tolerance=0.5, reference_accuracy=0.92, resolution=0.25)
    assert res.fraction == 0.0
    with pytest.raises(ValueError, match="tolerance"):
        search_bsp_fraction(fake_train, tolerance=-1)


def test_ssdsgd_is_evaluated_on_its_global_weights():
    """Between pulls the replicas hold local drafts; the model SSD-SGD reports is the global one."""
    from jaxsel.core.state import consensus, consensus_model_state
    from jaxsel.training.train import TrainConfig, build_run, train

    cfg = TrainConfig(strategy="ssdsgd", strategy_options={"period": 4, "warmup_steps": 2}, steps=9,
                      batch_size=8, eval_every=9, log_every=3, progress=False)
    run = build_run(cfg)   # built, to evaluate with; the run trains its own plan
    result = train(run.plan)
    st = result.state
    local, global_w = consensus(st), consensus(st.replace(params=st.strategy_state.global_params))
    assert not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(local), jax.tree.leaves(global_w)))
    expect = run.evaluate(global_w, consensus_model_state(st), run.test)
    assert result.evals[-1]["test_loss"] == pytest.approx(expect["test_loss"], rel=1e-6)


# --------------------------------------------------- Accordion

def _accordion_against_reference(mesh, steps=24, **options):
    """(the run's sync decisions, the NumPy reference's on the run's own per-replica
    gradients, the periods the reference chose)."""
    from reference import triggers as ref

    batches, p0 = softmax_batches(steps, seed=2), softmax_params()
    _, hist = run(jaxsel.Accordion(**options), mesh, batches, opt=optax.sgd(0.5))
    acc = ref.Accordion(R, **options)
    want = []
    for t in range(steps):
        params = jax.tree.leaves(p0) if t == 0 else None
        per_replica = []
        for i in range(R):
            p = [np.asarray(x, np.float64) for x in params] if params else \
                [np.asarray(x[i], np.float64) for x in jax.tree.leaves(hist[t - 1][0].params)]
            rows = slice(i * B, (i + 1) * B)
            per_replica.append(softmax_grad_numpy(p, np.asarray(batches[t]["x"][rows], np.float64),
                                             batches[t]["y"][rows]))
        want.append(acc.step(per_replica))
    return [bool(m["synced"]) for _, m in hist], want, acc.periods


@pytest.mark.parametrize("devices", [8, 2, 1], ids=lambda d: f"8-on-{d}")
def test_accordion_matches_numpy_reference(devices):
    """Accordion's decisions through the public API equal tests/reference/triggers.py's on
    the same gradients, on 8 devices, 2 x 4 and 8 packed on 1; both regimes occur."""
    mesh = jaxsel.data_mesh(replicas=R, devices=devices)
    got, want, periods = _accordion_against_reference(mesh, interval=4, eta=0.5, low=2, high=4)
    assert got == want
    assert periods == [2, 2, 2, 4, 4, 4, 2]   # quiet intervals, and a critical one after them


def test_accordion_options_are_checked():
    with pytest.raises(ValueError, match="interval must be an integer >= 1"):
        jaxsel.Accordion(interval=0)
    with pytest.raises(ValueError, match="eta must be a finite number > 0"):
        jaxsel.Accordion(eta=float("nan"))
