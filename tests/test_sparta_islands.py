"""SPARTA and island averaging (issue 47) against their NumPy references
(tests/reference/sparta.py, tests/reference/islands.py), on 8 devices and 8 packed on 1:
every replica's parameters after every step, each step's bytes and which steps sync. The
shared draws (SPARTA's entries, the islands' permutation) are checked on their own: the
references take them as given, as a real cluster's replicas would."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxsel
from helpers import R, run, softmax_batches, softmax_grad_numpy, softmax_params
from jaxsel.core.aggregate import IslandMean
from jaxsel.core.options import OptionError
from jaxsel.core.sparse import draw_entries, entry_count, sparse_count
from jaxsel.strategies import SPARTA, build_strategy
from reference import islands as islands_ref, optim, sparta as sparta_ref

D, C, B = 12, 8, 4   # 12 x 8 weights and 8 biases: P = 104 entries, of which p = 0.05 is k = 5
LR, MU, T = 0.1, 0.9, 6
P = D * C + C


def problem():
    """(batches, the NumPy gradient of replica i at step t, the initial [b, w])."""
    batches = softmax_batches(T, seed=3, b=B, d=D, c=C)

    def grad_fn(i, t, params):
        rows = slice(i * B, (i + 1) * B)
        return softmax_grad_numpy(params, np.asarray(batches[t]["x"][rows], np.float64), batches[t]["y"][rows])

    return batches, grad_fn, jax.tree.leaves(jax.device_get(softmax_params(D, C)))


def assert_history(hist, want):
    for t, ((state, _), replicas) in enumerate(zip(hist, want)):
        got = jax.tree.leaves(state.params)   # [b, w], the reference's order
        for r in range(R):
            for leaf, ref in zip(got, replicas[r]):
                np.testing.assert_allclose(leaf[r], ref, rtol=2e-5, atol=2e-6, err_msg=f"step {t}, replica {r}")


@pytest.mark.parametrize("devices", [8, 1], ids=lambda d: f"8-on-{d}")
@pytest.mark.parametrize("period", [None, 3], ids=lambda p: "sparse-only" if p is None else f"full-every-{p}")
def test_sparta_matches_numpy_reference(period, devices):
    """p = 0.05 of 104 entries (5 per step), SGD with momentum kept per replica; with a full
    average after every 3rd step, or none."""
    batches, grad_fn, p0 = problem()
    strategy = SPARTA(fraction=0.05, seed=11, period=period)
    mesh = jaxsel.data_mesh(replicas=R, devices=devices)
    _, hist = run(strategy, mesh, batches, params=softmax_params(D, C), opt=optax.sgd(LR, momentum=MU))
    k = sparse_count(0.05, P)
    want, sent = sparta_ref.simulate_sparta(p0, grad_fn, R, T, optim.SGD(LR, momentum=MU),
                                            lambda t: np.asarray(draw_entries(11, t, P, k)), period)
    assert k == 5 and entry_count(softmax_params(D, C)) == P
    assert_history(hist, want)
    assert [int(m["bytes_allreduced"]) for _, m in hist] == sent
    assert sent == [P * 4 if period and (t + 1) % period == 0 else k * 4 for t in range(T)]
    assert all(bool(m["synced"]) for _, m in hist)   # every step waits on its all-reduce
    w = np.asarray(hist[-2][0].params["w"])   # after step 4, a sparse one
    assert not all(np.array_equal(w[0], w[r]) for r in range(R)), "the other entries stay local"


@pytest.mark.parametrize("devices", [8, 1], ids=lambda d: f"8-on-{d}")
@pytest.mark.parametrize("size", [2, 4])
def test_islands_match_numpy_reference(size, devices):
    """Local SGD with period 2 averaging within islands of 2 or 4 of the 8 replicas: three
    syncs, each a fresh split; a sync is a group-level one of P entries per replica."""
    batches, grad_fn, p0 = problem()
    strategy = jaxsel.LocalSGD(period=2, islands=size, seed=5)
    mesh = jaxsel.data_mesh(replicas=R, devices=devices)
    _, hist = run(strategy, mesh, batches, params=softmax_params(D, C), opt=optax.sgd(LR, momentum=MU))
    perm = lambda t: np.asarray(strategy.aggregator.permutation(R, t))
    want, sent = islands_ref.simulate_islands(p0, grad_fn, R, T, optim.SGD(LR, momentum=MU), 2, size, perm)
    assert_history(hist, want)
    synced = [(t + 1) % 2 == 0 for t in range(T)]
    assert [int(m["bytes_allreduced"]) for _, m in hist] == sent == [P * 4 * s for s in synced]
    assert [int(m["group_bytes"]) for _, m in hist] == sent
    assert [bool(m["group_synced"]) for _, m in hist] == synced
    assert not any(bool(m["synced"]) for _, m in hist)   # never a sync over all 8
    w = np.asarray(hist[-1][0].params["w"])
    assert len({w[r].tobytes() for r in range(R)}) == R // size   # bit-identical within an island


@pytest.mark.parametrize("devices", [8, 1], ids=lambda d: f"8-on-{d}")
def test_sparta_between_diloco_outer_steps_matches_numpy_reference(devices):
    """SPARTA + DiLoCo: p = 0.05 of the entries averaged after every inner step but the
    outer step's (H = 3, Nesterov outer step); global and local weights at every step."""
    from reference import outer

    batches, grad_fn, p0 = problem()
    strategy = jaxsel.DiLoCo(period=3, sparta=0.05, seed=2)
    mesh = jaxsel.data_mesh(replicas=R, devices=devices)
    _, hist = run(strategy, mesh, batches, params=softmax_params(D, C), opt=optax.sgd(LR))
    k = sparse_count(0.05, P)
    want, sent = sparta_ref.simulate_sparta_diloco(p0, grad_fn, R, T, 3, LR, outer.outer_optimizer("nesterov"),
                                                   lambda t: np.asarray(draw_entries(2, t, P, k)))
    assert_history(hist, [local for _, local in want])
    for t, ((state, _), (glob, _)) in enumerate(zip(hist, want)):
        for leaf, ref in zip(jax.tree.leaves(state.strategy_state.global_params), glob):
            for r in range(R):
                np.testing.assert_allclose(leaf[r], ref, rtol=2e-5, atol=2e-6, err_msg=f"global, step {t}")
    assert [int(m["bytes_allreduced"]) for _, m in hist] == sent == [P * 4 if t % 3 == 2 else k * 4 for t in range(T)]
    assert "SPARTA p=0.05" in strategy.describe()


def test_sparta_sends_its_entries_through_a_codec_or_within_islands(mesh):
    """The sparse payload is an ordinary sync payload: bf16 halves its bytes; with the
    `islands:2` aggregator each island averages its entries (a group-level sync)."""
    batches = softmax_batches(2, b=B, d=D, c=C)
    k = sparse_count(0.1, P)
    _, hist = run(SPARTA(fraction=0.1, compress="bf16"), mesh, batches, params=softmax_params(D, C))
    assert [int(m["bytes_allreduced"]) for _, m in hist] == [k * 2] * 2
    _, hist = run(SPARTA(fraction=0.1, aggregator="islands:2"), mesh, batches, params=softmax_params(D, C))
    assert [(bool(m["synced"]), bool(m["group_synced"]), int(m["group_bytes"])) for _, m in hist] == \
        [(False, True, k * 4)] * 2
    w = np.asarray(hist[-1][0].params["w"])
    assert len({w[r].tobytes() for r in range(R)}) == R   # only k entries agree within an island


# ------------------------------------------------------------------- the shared draws

def test_sparta_draws_exactly_round_p_times_P_distinct_entries_uniformly():
    assert [sparse_count(p, n) for p, n in [(0.05, 104), (0.05, 10), (0.25, 10), (0.001, 18), (1.0, 7)]] == \
        [5, 1, 3, 1, 7]   # halves round up; at least one; at most all
    draws = np.asarray(jax.jit(jax.vmap(lambda t: draw_entries(7, t, 100, 10)))(jnp.arange(2000)))
    assert draws.shape == (2000, 10) and draws.min() >= 0 and draws.max() < 100
    assert all(np.all(np.diff(row) > 0) for row in draws)   # sorted and distinct
    assert len({row.tobytes() for row in draws}) == 2000     # a fresh subset every step
    counts = np.bincount(draws.ravel(), minlength=100)       # Binomial(2000, 0.1): 200 +- 13.4
    assert counts.min() > 200 - 6 * 13.4 and counts.max() < 200 + 6 * 13.4, counts
    np.testing.assert_array_equal(draw_entries(7, 5, 100, 10), draws[5])   # the same seed and step
    assert not np.array_equal(draw_entries(8, 5, 100, 10), draws[5])      # another seed
    np.testing.assert_array_equal(draw_entries(7, 0, 6, 6), np.arange(6))  # every entry


@pytest.mark.parametrize("count, draws", [(70, None), (10, 10)], ids=["left-out-entries", "drawn-again"])
def test_sparta_draw_above_half_and_when_the_draws_fall_short(monkeypatch, count, draws):
    """Above half the entries the draw picks those left out; a draw whose m values show
    fewer than k distinct ones is drawn again (m forced down to k here, so it happens)."""
    from jaxsel.core import sparse

    if draws is not None:
        monkeypatch.setattr(sparse, "_draws", lambda total, count: draws)
    got = np.asarray(jax.jit(jax.vmap(lambda t: draw_entries(3, t, 100, count)))(jnp.arange(2000)))
    assert all(len(set(row)) == count and np.all(np.diff(row) > 0) for row in got)
    p = count / 100
    sd = np.sqrt(2000 * p * (1 - p))
    counts = np.bincount(got.ravel(), minlength=100)
    assert counts.min() > 2000 * p - 6 * sd and counts.max() < 2000 * p + 6 * sd, counts


@pytest.mark.parametrize("size", [2, 4])
def test_islands_are_a_fresh_partition_of_the_replicas_at_each_sync(size):
    agg = IslandMean(size, seed=5)
    orders = np.asarray(jax.vmap(lambda t: agg.permutation(R, t))(jnp.arange(40)))
    islands = np.asarray(jax.vmap(lambda t: agg.islands(R, t))(jnp.arange(40)))
    for order, island in zip(orders, islands):
        assert sorted(order) == list(range(R))
        assert np.array_equal(island[order], np.arange(R) // size)   # island j: positions jK ... jK+K-1
    splits = {frozenset(frozenset(np.flatnonzero(i == j)) for j in range(R // size)) for i in islands}
    assert len(splits) > 10   # fresh splits (of 35 or 105 possible)
    np.testing.assert_array_equal(IslandMean(size, seed=5).permutation(R, 3), orders[3])
    assert not all(np.array_equal(IslandMean(size, seed=6).permutation(R, t), orders[t]) for t in range(5))


# ----------------------------------------------------------------------------- options

@pytest.mark.parametrize("make, match", [
    (lambda: SPARTA(fraction=0.0), r"fraction must be a number in \(0, 1\]"),
    (lambda: SPARTA(fraction=1.5), r"fraction must be a number in \(0, 1\]"),
    (lambda: SPARTA(fraction=float("nan")), r"fraction must be a number in \(0, 1\]"),
    (lambda: SPARTA(period=0), "period must be an integer >= 1"),
    (lambda: SPARTA(compress="topk:0.1"), "error feedback"),
    (lambda: SPARTA(aggregator="median", compress="int8"), "cannot combine compressed payloads"),
    (lambda: jaxsel.DiLoCo(sparta=2.0), r"sparta must be a number in \(0, 1\]"),
    (lambda: jaxsel.DiLoCo(sparta=0.1, compress="int8"), "takes no compress"),
    (lambda: jaxsel.LocalSGD(islands=1), r"islands \(replicas per island\) must be an integer >= 2"),
    (lambda: jaxsel.LocalSGD(islands=2, aggregator="median"), "takes a plain mean within each island"),
    (lambda: jaxsel.FedAvg(islands=2, fraction=0.5), "takes a plain mean within each island"),
    (lambda: IslandMean(1), r"K in 'islands:K' \(replicas per island\) must be an integer >= 2"),
    (lambda: build_strategy("islands", {"islands": 3}, replicas=R), "islands of 3: K must divide 8"),
    (lambda: build_strategy("bsp", {"aggregator": "islands:3"}, replicas=R), "islands of 3: K must divide 8"),
])
def test_bad_options_are_one_line(make, match):
    with pytest.raises((ValueError, OptionError), match=match) as raised:
        make()
    assert "\n" not in str(raised.value)


def test_islands_inside_a_two_level_method_are_refused():
    with pytest.raises(ValueError, match="draws groups of its own"):
        jaxsel.Hierarchical(inner="localsgd", outer="localsgd", groups=2, inner_options={"islands": 2})


# ---------------------------------------------------------------------- the cost model

def test_island_syncs_are_projected_as_all_reduces_among_k_over_the_inter_host_network():
    """An island's members are drawn anywhere: its all-reduce among K runs over the network
    between hosts even on a two-level cluster; SPARTA's every step is a barrier and a
    k-entry all-reduce over all replicas."""
    from jaxsel import costmodel as cm

    strategy = build_strategy("localsgd", {"period": 2, "islands": 4}, replicas=R, seed=1)
    timing = cm.strategy_timing(strategy)
    assert timing.islands == 4 and timing.groups is None
    step = {"step": 0, "synced": False, "bytes_allreduced": 1000, "vote_bytes": 0, "group_bytes": 1000,
            "group_synced": True}
    for network, cluster in (("10gbe", "10gbe"), ("10gbe", cm.Cluster("10gbe", "nvlink", 8))):
        times, summary = cm.project_run([step], cluster, R, 0.1, **timing._asdict())
        assert times[-1] == pytest.approx(0.1 + cm.allreduce_time(1000, 4, network))
        assert summary["group_syncs"] == 1 and "random islands of 4 replicas" in summary["group_level"]
    with pytest.raises(ValueError, match="islands must be an integer >= 2 that divides the replicas"):
        cm.Projector("10gbe", R, 1, islands=3)
    sparta = cm.strategy_timing(SPARTA(fraction=0.05))
    times, _ = cm.project_run([{"step": 0, "synced": True, "bytes_allreduced": 20}], "10gbe", R, 0.1,
                              **sparta._asdict())
    assert sparta.islands is None and times[-1] == pytest.approx(0.1 + cm.allreduce_time(20, R, "10gbe"))
