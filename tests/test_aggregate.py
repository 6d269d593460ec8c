"""Every aggregator against NumPy on the same per-replica values, run under shard_map."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxsel.core.aggregate import ClientSampled, RandomReplica, WeightedMean, get_aggregator
from jaxsel.core.collectives import LOCAL
from jaxsel.core.sync import StepContext

R = 8
STEP = 5


def aggregate(agg, mesh, x, w, step=STEP):
    """Run `agg` on replica r's `x[r]` (weight `w[r]`), with the mesh's replicas packed as
    the step packs them (a vmap over each device's block); return every replica's result."""
    k = R // mesh.shape["data"]

    def body(x, w):
        def one(xr, wr, r):
            ctx = StepContext(axis="data", n=R, step=jnp.int32(step), optimizer=None, weight=wr, replica=r)
            return agg(xr, "data", ctx)

        replica = jax.lax.axis_index("data") * k + jnp.arange(k, dtype=jnp.int32)
        return jax.vmap(one, axis_name=LOCAL, axis_size=k)(x, w, replica)

    put = lambda v: jax.device_put(v, NamedSharding(mesh, P("data")))
    fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("data"), P("data")), out_specs=P("data")))
    return jax.device_get(fn(jax.tree.map(put, x), put(w)))


@pytest.fixture(params=[1, 2, 8], ids=lambda m: f"8-on-{m}")
def layout(request):
    """8 replicas on 1, 2 (packed) and 8 devices (one each)."""
    import jaxsel

    return jaxsel.data_mesh(replicas=R, devices=request.param)


@pytest.fixture(scope="module")
def values():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(R, 3, 4)).astype(np.float32)
    w = rng.uniform(0.5, 3.0, size=R).astype(np.float32)
    return x, w


def _sorted_trim(x, k):
    return np.sort(x, axis=0)[k:R - k].mean(axis=0)


def _pick(step, seed=0):
    return int(jax.random.randint(jax.random.fold_in(jax.random.key(seed), step), (), 0, R))


@pytest.mark.parametrize("spec, expected", [
    ("mean", lambda x, w: x.mean(0)),
    ("weighted", lambda x, w: (w[:, None, None] * x).sum(0) / w.sum()),
    ("median", lambda x, w: np.median(x, axis=0)),
    ("min", lambda x, w: x.min(0)),
    ("max", lambda x, w: x.max(0)),
    ("trimmed", lambda x, w: _sorted_trim(x, 1)),
    ("trimmed:2", lambda x, w: _sorted_trim(x, 2)),
    ("random", lambda x, w: x[_pick(STEP)]),
])
def test_aggregator_matches_numpy(layout, values, spec, expected):
    mesh = layout
    x, w = values
    got = aggregate(get_aggregator(spec), mesh, x, w)
    want = expected(x, w)
    for r in range(R):  # the same result on every replica
        np.testing.assert_allclose(got[r], want, rtol=1e-5, atol=1e-6)


def test_fixed_weights_and_zero_weight_fallback(mesh, values):
    x, _ = values
    fixed = np.arange(1, R + 1, dtype=np.float32)
    got = aggregate(WeightedMean(weights=tuple(fixed)), mesh, x, np.zeros(R, np.float32))
    np.testing.assert_allclose(got[0], (fixed[:, None, None] * x).sum(0) / fixed.sum(), rtol=1e-5)
    got = aggregate(WeightedMean(), mesh, x, np.zeros(R, np.float32))  # nothing seen: plain mean
    np.testing.assert_allclose(got[3], x.mean(0), rtol=1e-5, atol=1e-6)


def test_integer_leaves_are_agreed_not_averaged(mesh, values):
    x, w = values
    tree = {"f": x, "count": np.array([7, 7, 7, 9, 7, 7, 7, 7], np.int32)}
    got = aggregate(get_aggregator("median"), mesh, tree, w)
    assert got["count"].dtype == np.int32 and (got["count"] == 9).all()
    np.testing.assert_allclose(got["f"][0], np.median(x, axis=0), rtol=1e-6)


@pytest.mark.parametrize("base", ["weighted", "mean"])
def test_client_sampling_averages_participants_only(mesh, values, base):
    x, w = values
    agg = ClientSampled(fraction=0.5, base=base, seed=3)
    mask = np.asarray(agg.participants(R, jnp.int32(STEP)))
    assert mask.sum() == 4
    wt = (w if base == "weighted" else np.ones(R, np.float32)) * mask
    got = aggregate(agg, mesh, x, w)
    for r in range(R):
        np.testing.assert_allclose(got[r], (wt[:, None, None] * x).sum(0) / wt.sum(), rtol=1e-5, atol=1e-6)
    other = np.asarray(agg.participants(R, jnp.int32(STEP + 1)))
    assert other.sum() == 4  # a fresh draw per sync (same size)


def test_random_replica_changes_with_step(mesh, values):
    x, w = values
    picks = {_pick(s) for s in range(20)}
    assert len(picks) > 1
    got = aggregate(RandomReplica(), mesh, x, w, step=11)
    np.testing.assert_array_equal(got[0], x[_pick(11)])


@pytest.mark.parametrize("spec, match", [
    ("geomean", "unknown aggregator"),
    ("mean:2", "takes no argument"),
    ("trimmed:x", "integer K"),
])
def test_bad_specs_raise(spec, match):
    with pytest.raises(ValueError, match=match):
        get_aggregator(spec)


def test_bad_weights_and_fractions_raise(mesh, values):
    with pytest.raises(ValueError, match="not all zero"):
        WeightedMean(weights=(0.0, 0.0))
    with pytest.raises(ValueError, match="client fraction"):
        ClientSampled(fraction=0.0)
    with pytest.raises(ValueError, match="leaving none: K must be in 0..3"):
        aggregate(get_aggregator("trimmed:4"), mesh, *values)
