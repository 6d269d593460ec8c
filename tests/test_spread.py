"""Exact budget matching (issue 37, item 1): local SGD on exactly K of the run's T steps,
evenly spread (`triggers.Spread`, `LocalSGD(syncs=K)`), against tests/reference/spread.py."""
import jax
import numpy as np
import optax
import pytest

import jaxsel
from helpers import R, run, softmax_batches, softmax_grad_numpy, softmax_params
from jaxsel.core.triggers import UNKNOWN, Periodic, Spread, first_sync_step, spread_steps
from jaxsel.strategies import build_strategy, is_adaptive
from reference import optim, spread

B = 4


@pytest.mark.parametrize("steps", [1, 7, 40, 600, 601])
def test_exactly_k_syncs_evenly_spread_for_every_k(steps):
    """Every K in 0..T gives exactly K syncs (the reference's steps), the last step among
    them, and gaps that differ by at most one step."""
    for k in range(steps + 1):
        got = spread_steps(k, steps).tolist()
        assert got == spread.spread_steps(k, steps) and len(got) == k, (k, steps)
        if k:
            gaps = np.diff([-1, *got])
            assert got[-1] == steps - 1 and gaps.max() - gaps.min() <= 1, (k, steps)
            assert first_sync_step(Spread(k, steps)) == got[0]
    assert first_sync_step(Spread(0, steps)) is None


def test_a_dividing_period_fires_exactly_where_periodic_does():
    for steps, period in ((600, 2), (600, 12), (40, 8), (10, 1)):
        want = [t for t in range(steps) if bool(Periodic(period).fires(t))]
        assert spread_steps(steps // period, steps).tolist() == want


@pytest.mark.parametrize("steps, syncs, warmup", [(600, 567, 24), (600, 30, 24), (40, 30, 3), (10, 4, 4), (10, 0, 0),
                                                  (7, 7, 2)])
def test_a_warm_up_syncs_first_and_the_rest_spread_over_the_steps_after_it(steps, syncs, warmup):
    """Spread(K, T, warmup=w): the first w steps, then the reference's K - w of T - w steps
    after them, exactly K in all (a method's forced warm-up kept in its matched schedule)."""
    trigger = Spread(syncs, steps, warmup=warmup)
    got = [t for t in range(2 * steps) if bool(trigger.fires(t))]
    want = list(range(warmup)) + [warmup + t for t in spread.spread_steps(syncs - warmup, steps - warmup)]
    assert got == want + [steps + t for t in want]   # and the pattern repeats
    assert first_sync_step(trigger) == (want[0] if want else None)
    with pytest.raises(ValueError, match=f"warmup must be an integer >= 0 and <= {syncs}"):
        Spread(syncs, steps, warmup=syncs + 1)


def test_long_runs_stay_exact():
    """(t+1) K overflows int32 here; the steps are worked out in int64 on the host."""
    steps, k = 2_000_000, 1_999_999
    got = spread_steps(k, steps)
    assert len(got) == k and int(got[-1]) == steps - 1
    assert list(got[:3]) == [1, 2, 3] and 0 not in got   # the one local step is the first


@pytest.mark.parametrize("devices, syncs", [(8, 7), (1, 7), (8, 3), (2, 10), (8, 0)],
                         ids=["8-k7", "8-on-1-k7", "8-k3", "2x4-k10", "8-k0"])
def test_local_sgd_on_k_steps_matches_numpy_reference(devices, syncs):
    """LocalSGD(syncs=K) over T = 10 steps on 8 devices and packed: the steps that synced,
    the bytes they moved, and every replica's parameters against the NumPy reference."""
    steps, lr = 10, 0.1
    mesh = jaxsel.data_mesh(replicas=R, devices=devices)
    strategy = build_strategy("localsgd", {"syncs": syncs}, total_steps=steps, replicas=R)
    batches = softmax_batches(steps, seed=6)
    final, hist = run(strategy, mesh, batches, opt=optax.sgd(lr, momentum=0.9))
    syncing = spread.spread_steps(syncs, steps)
    assert [t for t, (_, m) in enumerate(hist) if bool(m["synced"])] == syncing
    per_sync = max(int(m["bytes_allreduced"]) for _, m in hist) if syncing else 0
    assert [int(m["bytes_allreduced"]) for _, m in hist] == [per_sync if t in syncing else 0 for t in range(steps)]

    def grad(i, t, params):
        rows = slice(i * B, (i + 1) * B)
        return softmax_grad_numpy(params, batches[t]["x"][rows], batches[t]["y"][rows])

    p0 = [np.asarray(x, np.float64) for x in jax.tree.leaves(softmax_params())]
    ws, _ = spread.simulate(p0, grad, R, steps, optim.SGD(lr, momentum=0.9), set(syncing))
    final = jax.device_get(final)
    for r in range(R):
        for got, want in zip(jax.tree.leaves(final.params), ws[r]):
            np.testing.assert_allclose(got[r], want, rtol=2e-5, atol=2e-6)


def test_syncs_equal_to_a_dividing_period_trains_bit_for_bit_like_that_period(mesh):
    batches = softmax_batches(8, seed=2)
    by_period, _ = run(jaxsel.LocalSGD(period=4), mesh, batches)
    by_count, _ = run(jaxsel.LocalSGD(syncs=2, total_steps=8), mesh, batches)
    for a, b in zip(jax.tree.leaves(jax.device_get(by_period)), jax.tree.leaves(jax.device_get(by_count))):
        assert np.array_equal(a, b)


def test_the_option_is_checked_and_described():
    built = build_strategy("localsgd", {"syncs": 358}, total_steps=600)
    assert built.describe() == "localsgd (358 of 600 steps)" and built.period is None
    assert not is_adaptive(built) and first_sync_step(built.trigger) != UNKNOWN
    assert build_strategy("localsgd", {}, total_steps=600).period == 50   # unset: 50, as before
    assert build_strategy("fedavg", {"syncs": 3}, total_steps=6).trigger == Spread(3, 6)
    for options, message in (({"syncs": 3, "period": 4}, "period=4 or syncs=3, not both"),
                              ({"syncs": 601}, "syncs must be an integer >= 0 and <= 600"),
                              ({"syncs": -1}, "syncs must be an integer >= 0")):
        with pytest.raises(ValueError, match=message):
            build_strategy("localsgd", options, total_steps=600)
    with pytest.raises(ValueError, match="needs total_steps"):
        jaxsel.LocalSGD(syncs=3)
    with pytest.raises(ValueError, match="syncs must be an integer"):
        Spread(2.5, 10)
