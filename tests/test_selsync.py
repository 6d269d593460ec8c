"""SelSync decisions against an independent NumPy implementation of its significance test
(Tyagi & Swany, CLUSTER'23; the rule as `jaxsel.core.triggers.Significance` states it)."""
import numpy as np
import optax
import pytest

import jaxsel
from helpers import R, softmax_batches, softmax_loss, softmax_params

import jax


def reference_selsync(s, window, alpha, delta, eps=1e-12):
    """s: [T, R] per-replica statistics -> (global decisions [T], Delta_bar [T, R])."""
    T, n = s.shape
    w = (1 - alpha) ** np.arange(1, window + 1, dtype=np.float64)
    w /= w.sum()
    G = np.full((T, n), np.nan)
    Dl = np.full((T, n), np.nan)
    Db = np.full((T, n), np.nan)
    votes = np.zeros((T, n), bool)
    for t in range(T):
        if t >= window - 1:
            G[t] = sum(w[k - 1] * s[t - k + 1] for k in range(1, window + 1))
        if t >= window:
            Dl[t] = np.abs(G[t] - G[t - 1]) / np.maximum(G[t - 1], eps)
        if t >= 2 * window - 1:
            Db[t] = sum(w[k - 1] * Dl[t - k + 1] for k in range(1, window + 1))
        votes[t] = (t < 2 * window - 1) | (Db[t] >= delta if t >= 2 * window - 1 else True)
    return votes.any(axis=1), Db


def run_selsync(mesh, steps, **kw):
    strategy = jaxsel.SelSync(**kw)
    opt = optax.sgd(0.5)
    state = jaxsel.init_state(softmax_params(seed=1), opt, strategy, mesh, replicas=R)
    step = jaxsel.make_train_step(softmax_loss, opt, strategy, mesh, grad_norm_metric=True)
    out = []
    for batch in softmax_batches(steps, seed=3):
        state, m = step(state, batch)
        out.append(jax.device_get(m))
    s = np.stack([m["grad_norm"] for m in out]).astype(np.float64)
    synced = np.array([bool(m["synced"]) for m in out])
    delta = np.stack([m["delta"] for m in out])
    return s, synced, delta


@pytest.mark.parametrize("aggregate", ["params", "grads"])
def test_decisions_match_numpy_reference(mesh, aggregate):
    window, alpha, steps = 4, 0.1, 40
    # First pass: learn the Delta_bar values, then put delta in the widest gap among them so
    # float32-vs-float64 rounding cannot flip a decision and both outcomes occur.
    s, _, _ = run_selsync(mesh, steps, delta=0.0, window=window, alpha=alpha, aggregate=aggregate)
    _, db = reference_selsync(s, window, alpha, 0.0)
    vals = np.sort(np.max(db[2 * window - 1:], axis=1))
    mid = len(vals) // 4
    gaps = np.diff(vals[mid:-mid])
    i = mid + int(np.argmax(gaps))
    delta = float((vals[i] + vals[i + 1]) / 2)
    s, synced, got_delta = run_selsync(mesh, steps, delta=delta, window=window, alpha=alpha, aggregate=aggregate)
    expect, db = reference_selsync(s, window, alpha, delta)
    np.testing.assert_array_equal(synced, expect)
    assert expect[2 * window - 1:].any() and not expect[2 * window - 1:].all()
    warm = np.arange(steps) < 2 * window - 1
    assert np.isnan(got_delta[warm]).all()
    np.testing.assert_allclose(got_delta[~warm], db[~warm], rtol=2e-4, atol=1e-6)


def test_delta_zero_syncs_every_step(mesh):
    _, synced, _ = run_selsync(mesh, 20, delta=0.0, window=3)
    assert synced.all()


def test_huge_delta_syncs_only_during_warmup(mesh):
    window = 3
    _, synced, _ = run_selsync(mesh, 20, delta=1e9, window=window)
    assert synced[: 2 * window - 1].all() and not synced[2 * window - 1:].any()


def test_zero_gradients_do_not_produce_nan(mesh):
    """The reference divides by G_{t-1} = 0; jaxsel guards it with eps."""
    strategy = jaxsel.SelSync(delta=0.5, window=2)
    opt = optax.sgd(0.1)
    zero_loss = lambda p, b: 0.0 * (b["x"] @ p["w"]).sum()
    state = jaxsel.init_state(softmax_params(), opt, strategy, mesh, replicas=R)
    step = jaxsel.make_train_step(zero_loss, opt, strategy, mesh)
    for t, batch in enumerate(softmax_batches(6)):
        state, m = step(state, batch)
        if t >= 3:
            assert np.isfinite(np.asarray(m["delta"])).all()
            assert not bool(m["synced"])


def test_sync_step_averages_params_then_applies_own_gradient(mesh):
    """On a sync step the gradient is taken at the pre-average parameters."""
    strategy = jaxsel.SelSync(delta=0.0, window=1)
    opt = optax.sgd(0.1)
    params = {"w": np.random.default_rng(0).normal(size=(R, 5, 3)).astype(np.float32),
              "b": np.zeros((R, 3), np.float32)}
    state = jaxsel.init_state(softmax_params(), opt, strategy, mesh, replicas=R)
    from jaxsel.core.parallel import replica_sharding

    state = state.replace(params=jax.device_put(params, replica_sharding(mesh)))
    step = jaxsel.make_train_step(softmax_loss, opt, strategy, mesh)
    batch = softmax_batches(1)[0]
    new, m = step(state, batch)
    assert bool(m["synced"])
    mean_w = params["w"].mean(0)
    for r in (0, 5):
        g = jax.grad(softmax_loss)({"w": params["w"][r], "b": params["b"][r]},
                                   {k: v[r * 4:(r + 1) * 4] for k, v in batch.items()})
        np.testing.assert_allclose(np.asarray(new.params["w"])[r], mean_w - 0.1 * np.asarray(g["w"]),
                                   rtol=1e-5, atol=1e-6)
    assert int(m["bytes_allreduced"]) == (5 * 3 + 3) * 4 + 4  # parameters + the float32 vote


def _all_reduces(strategy, mesh) -> int:
    """All-reduce ops in the compiled step's entry computation (the cond's branch excluded)."""
    import re

    opt = optax.sgd(0.1)
    step = jaxsel.make_train_step(softmax_loss, opt, strategy, mesh)
    state = jaxsel.init_state(softmax_params(), opt, strategy, mesh, replicas=R)
    text = step.lower(state, softmax_batches(1)[0]).compile().as_text()
    return len(re.findall(r" all-reduce(?:-start)?\(", text[text.index("ENTRY"):]))


def test_the_vote_shares_the_loss_all_reduce(mesh):
    """SelSync's vote rides in the all-reduce the loss mean needs anyway: a step that stays
    local runs as many collectives as a plain local step (see BENCHMARKS.md)."""
    from jaxsel.core.triggers import Never

    local = jaxsel.TriggeredStrategy(trigger=Never(), sync="params")
    assert _all_reduces(jaxsel.SelSync(delta=0.3, window=3), mesh) == _all_reduces(local, mesh) == 1


@pytest.mark.parametrize("devices", [8, 2, 1], ids=lambda d: f"8-on-{d}")
def test_max_local_matches_numpy_reference(devices):
    """SelSync(max_local=3): the significance votes plus a sync whenever the 3 steps before
    were all local, against tests/reference/triggers.py fed the run's own statistics, on
    8 devices, 2 x 4 and 8 packed on 1. delta sits where the statistic sometimes votes."""
    from reference import triggers as ref

    mesh = jaxsel.data_mesh(replicas=R, devices=devices)
    window, alpha, steps, cap = 2, 0.1, 30, 3
    for delta in (1e9, 0.05):
        s, synced, _ = run_selsync(mesh, steps, delta=delta, window=window, alpha=alpha, max_local=cap)
        sel = ref.SelSync(R, max_local=cap, delta=delta, window=window, alpha=alpha)
        np.testing.assert_array_equal(synced, [sel.step(s[t]) for t in range(steps)])
        runs = np.diff(np.flatnonzero(np.r_[True, synced, True])) - 1
        assert runs.max() <= cap and (delta < 1 or not synced[2 * window - 1:].all())


def test_max_local_is_an_integer_at_least_one():
    with pytest.raises(ValueError, match=r"max_local must be an integer >= 1 \(or unset\), got 0"):
        jaxsel.SelSync(max_local=0)
