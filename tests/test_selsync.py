"""SelSync decisions and parameters against the NumPy transcription of the authors' loop
(tests/reference/triggers.py: both statistics, both warm-ups), on 8 devices and packed."""
import numpy as np
import optax
import pytest

import jaxsel
from helpers import R, run, softmax_batches, softmax_loss, softmax_params
from reference import triggers as ref

import jax


def run_selsync(mesh, steps, **kw):
    """(s [T, R], synced [T], Delta_bar metric [T, R], final params) of SGD 0.5 on the softmax task."""
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
    return s, synced, delta, jax.device_get(state.params)


def significance(kw: dict) -> dict:
    return {k: v for k, v in kw.items() if k in ("window", "alpha", "statistic", "warmup")}


def calibrated_run(mesh, steps, **kw):
    """A run whose delta sits in the widest gap of the Delta_bar values a delta=0 run
    records (so float32-vs-float64 rounding cannot flip a decision and both outcomes
    occur): (delta, the run's outputs)."""
    s, _, _, _ = run_selsync(mesh, steps, delta=0.0, **kw)
    _, _, db = ref.significance_trace(s, delta=0.0, **significance(kw))
    later = ~np.isnan(db).all(axis=1)
    vals = np.sort(np.max(db[later], axis=1))
    mid = len(vals) // 4
    i = mid + int(np.argmax(np.diff(vals[mid:-mid])))
    delta = float((vals[i] + vals[i + 1]) / 2)
    return delta, run_selsync(mesh, steps, delta=delta, **kw)


def check_against_reference(delta, s, synced, got_delta, **kw):
    expect, _, db = ref.significance_trace(s, delta=delta, **significance(kw))
    np.testing.assert_array_equal(synced, expect)
    warm = np.isnan(db).all(axis=1)
    assert expect[~warm].any() and not expect[~warm].all()
    assert np.isnan(got_delta[warm]).all()
    np.testing.assert_allclose(got_delta[~warm], db[~warm], rtol=2e-4, atol=1e-6)
    return warm


@pytest.mark.parametrize("sync, statistic, warmup", [
    ("params", "smoothed", None), ("grads", "smoothed", None), ("params", "raw", None), ("grads", "raw", None),
    ("params", "raw", 0), ("params", "smoothed", 3)])
def test_decisions_match_numpy_reference(mesh, sync, statistic, warmup):
    """Both statistics and warm-ups (None: W-1 raw, 2W-1 smoothed; 0; W-1 for smoothed, the
    authors' count), against the authors' loop fed the run's own gradient norms."""
    kw = dict(window=4, alpha=0.1, sync=sync, statistic=statistic, warmup=warmup)
    delta, (s, synced, got_delta, _) = calibrated_run(mesh, 40, **kw)
    warm = check_against_reference(delta, s, synced, got_delta, **kw)
    forced = (4 - 1 if statistic == "raw" else 2 * 4 - 1) if warmup is None else warmup
    assert warm.sum() == forced and warm[:forced].all()


@pytest.mark.slow
@pytest.mark.layouts
def test_raw_statistic_packed_matches_eight_devices_and_the_reference():
    """statistic="raw", 8 replicas on 8 devices, 2 x 4 and 1 x 8: each layout's decisions
    equal the authors' loop on its own norms and the 8-device decisions, its parameters
    the 8-device ones to float32 rounding."""
    kw = dict(window=3, alpha=0.1, statistic="raw")
    delta, eight = calibrated_run(jaxsel.data_mesh(replicas=R, devices=8), 30, **kw)
    check_against_reference(delta, *eight[:3], **kw)
    for devices in (2, 1):
        s, synced, got_delta, params = run_selsync(jaxsel.data_mesh(replicas=R, devices=devices), 30, delta=delta, **kw)
        check_against_reference(delta, s, synced, got_delta, **kw)
        np.testing.assert_array_equal(synced, eight[1])
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6), params, eight[3])


def test_the_default_is_the_raw_statistic_with_its_w_minus_1_warm_up():
    """The reference follows the library's default (issue 42: the one delta = 0.3 fits)."""
    from jaxsel.core.triggers import Significance

    assert jaxsel.SelSync().statistic == Significance().statistic == ref.DEFAULT_STATISTIC == "raw"
    assert jaxsel.SelSync().trigger.warmup_steps == 24 and jaxsel.SelSync(statistic="smoothed").trigger.warmup_steps == 49
    assert jaxsel.SelSync(warmup=7).trigger.warmup_steps == 7


def test_statistic_and_warmup_are_checked():
    with pytest.raises(ValueError, match=r"^statistic must be 'smoothed' or 'raw', got 'released'$"):
        jaxsel.SelSync(statistic="released")
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match=r"^warmup must be an integer >= 0 \(or unset\), got "):
            jaxsel.SelSync(warmup=bad)


def test_delta_zero_syncs_every_step(mesh):
    _, synced, _, _ = run_selsync(mesh, 20, delta=0.0, window=3)
    assert synced.all()


@pytest.mark.parametrize("statistic", ["raw", "smoothed"])
def test_delta_zero_syncs_every_step_where_the_norm_is_flat(mesh, statistic):
    """The vote is Δ̄ >= δ (the paper's test): δ = 0 syncs on every step even where Δ̄ is
    exactly 0. A loss linear in the parameters has the same gradient at every step, so the
    relative changes of its norm are 0 once the window holds no initial zero (from the
    step after the first decided one; with `>` none of those would sync)."""
    flat = lambda p, b: p["w"].sum() + p["b"].sum() + 0.0 * b["x"].sum()
    _, history = run(jaxsel.SelSync(delta=0.0, window=3, statistic=statistic), mesh, softmax_batches(8), loss=flat)
    warm = jaxsel.SelSync(window=3, statistic=statistic).trigger.warmup_steps
    deltas = np.stack([m["delta"] for _, m in history])
    assert (deltas[warm + 1:] == 0.0).all() and warm + 1 < 8, deltas
    assert [bool(m["synced"]) for _, m in history] == [True] * 8


@pytest.mark.parametrize("statistic, forced", [("smoothed", 5), ("raw", 2)])
def test_huge_delta_syncs_only_during_warmup(mesh, statistic, forced):
    _, synced, _, _ = run_selsync(mesh, 12, delta=1e9, window=3, statistic=statistic)
    assert synced[:forced].all() and not synced[forced:].any()


@pytest.mark.parametrize("statistic", ["smoothed", "raw"])
def test_zero_gradients_do_not_produce_nan(mesh, statistic):
    """The authors' loop divides by a zero previous norm (its G, or s); jaxsel guards it with eps."""
    strategy = jaxsel.SelSync(delta=0.5, window=2, statistic=statistic)
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
    mesh = jaxsel.data_mesh(replicas=R, devices=devices)
    window, alpha, steps, cap = 2, 0.1, 30, 3
    for delta in (1e9, 0.05):
        s, synced, _, _ = run_selsync(mesh, steps, delta=delta, window=window, alpha=alpha, max_local=cap,
                                      statistic="smoothed")
        sel = ref.SelSync(R, max_local=cap, delta=delta, window=window, alpha=alpha, statistic="smoothed")
        np.testing.assert_array_equal(synced, [sel.step(s[t]) for t in range(steps)])
        runs = np.diff(np.flatnonzero(np.r_[True, synced, True])) - 1
        assert runs.max() <= cap and (delta < 1 or not synced[2 * window - 1:].all())


def test_max_local_is_an_integer_at_least_one():
    with pytest.raises(ValueError, match=r"max_local must be an integer >= 1 \(or unset\), got 0"):
        jaxsel.SelSync(max_local=0)
