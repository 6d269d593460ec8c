"""Every aggregator against NumPy on the same per-replica values, run under shard_map."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxsel.core.aggregate import ClientSampled, RandomReplica, WeightedMean, describe_aggregator, get_aggregator
from jaxsel.core.collectives import LOCAL
from jaxsel.core.sync import StepContext
from reference import robust as robust_ref

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


# ------------------------------------------------------------------ Krum, Multi-Krum, Bulyan

@pytest.fixture(scope="module")
def payloads():
    """Two tensors per replica, continuous (tie-free) values, replica 6 far off: a
    Byzantine replica the robust rules must leave out."""
    rng = np.random.default_rng(7)
    a = rng.normal(size=(R, 3, 4)).astype(np.float32)
    b = rng.normal(size=(R, 5)).astype(np.float32)
    a[6] += 40.0
    return {"a": a, "b": b}


def _reference(spec, payloads):
    """The NumPy transcription of Flower's rule (tests/reference/robust.py) on the same payloads."""
    per_replica = [[payloads["a"][r], payloads["b"][r]] for r in range(R)]
    name, _, arg = spec.partition(":")
    args = [int(v) for v in arg.split(",")]
    out = {"krum": robust_ref.krum, "multikrum": robust_ref.multikrum, "bulyan": robust_ref.bulyan}[name](
        per_replica, *args)
    return {"a": out[0], "b": out[1]}


@pytest.mark.parametrize("spec", ["krum:1", "krum:2", "multikrum:1,3", "multikrum:2,5", "bulyan:1"])
def test_robust_aggregators_match_flower_reference(layout, payloads, spec):
    """8 replicas on 1, 2 and 8 devices: every replica ends with the reference's result."""
    got = aggregate(get_aggregator(spec), layout, payloads, np.ones(R, np.float32))
    want = _reference(spec, payloads)
    for key in want:
        for r in range(R):
            np.testing.assert_allclose(got[key][r], want[key], rtol=2e-6, atol=2e-6)
    assert not np.allclose(got["a"][0], payloads["a"].mean(0), atol=1.0)   # the outlier is kept out


def test_krum_picks_one_replicas_payload_exactly(mesh, payloads):
    got = aggregate(get_aggregator("krum:1"), mesh, payloads, np.ones(R, np.float32))
    winner = robust_ref.krum_index([[payloads["a"][r], payloads["b"][r]] for r in range(R)], 1)
    np.testing.assert_array_equal(got["a"][3], payloads["a"][winner])


def test_robust_aggregators_agree_integer_leaves(mesh, payloads):
    tree = {**payloads, "count": np.array([3, 3, 3, 3, 5, 3, 3, 3], np.int32)}
    got = aggregate(get_aggregator("bulyan:1"), mesh, tree, np.ones(R, np.float32))
    assert got["count"].dtype == np.int32 and (got["count"] == 5).all()


@pytest.mark.parametrize("spec, match", [
    ("krum:3", r"'krum:3' needs N > 2F\+2 replicas \(F=3\), got N=8"),
    ("multikrum:1,9", "averages M=9 of N=8 replicas: M must be in 1..8"),
    ("bulyan:2", r"'bulyan:2' needs N >= 4F\+3 replicas \(F=2\), got N=8"),
])
def test_invalid_f_for_n_is_one_line_naming_both(spec, match):
    from jaxsel.strategies import build_strategy

    with pytest.raises(ValueError, match=match):
        build_strategy("localsgd", {"aggregator": spec}, replicas=R)


@pytest.mark.parametrize("spec, match", [
    ("krum:x", "krum:F with integer F"),
    ("multikrum:1", "multikrum:F,M with integer F and M"),
    ("krum:-1", "F in 'krum:F'"),
    ("multikrum:1,0", "M in 'multikrum:F,M'"),
])
def test_bad_robust_specs_raise(spec, match):
    with pytest.raises(ValueError, match=match):
        get_aggregator(spec)


def test_robust_labels_round_trip():
    for spec in ("krum:2", "multikrum:1,4", "bulyan:1", "trimmed:2", "median"):
        assert describe_aggregator(get_aggregator(spec)) == spec


def test_krum_survives_a_faulty_replica_where_the_mean_fails(mesh):
    """Local SGD averaging every step while replica 7 sends garbage (std 100) in place of its
    parameters: the mean hands the garbage to every replica; Krum gives every replica the
    parameters the NumPy rule picks among the seven honest replicas' updates."""
    from helpers import run, softmax_batches, softmax_loss, softmax_params

    from jaxsel.core.aggregate import WithFaultyReplicas
    from jaxsel.strategies import LocalSGD

    batches, opt, p0 = softmax_batches(1), optax.sgd(0.1), softmax_params()
    mean_run = run(LocalSGD(period=1, aggregator=WithFaultyReplicas(get_aggregator("mean"))), mesh, batches, opt=opt)
    krum_run = run(LocalSGD(period=1, aggregator=WithFaultyReplicas(get_aggregator("krum:1"))), mesh, batches, opt=opt)
    assert np.abs(np.asarray(mean_run[0].params["w"])).max() > 5.0   # the garbage arrived

    b = len(batches[0]["y"]) // R
    updated = []
    for r in range(7):   # the honest replicas' parameters after their own SGD step
        rows = {k: v[r * b:(r + 1) * b] for k, v in batches[0].items()}
        g = jax.grad(softmax_loss)(p0, rows)
        updated.append([np.asarray(p0[k] - 0.1 * g[k]) for k in ("b", "w")])
    far = [x + 1e4 for x in updated[0]]   # any far-off payload: Krum's choice among the honest is the same
    want = robust_ref.krum(updated + [far], 1)
    got = jax.device_get(krum_run[0].params)
    for r in range(R):
        np.testing.assert_allclose(got["b"][r], want[0], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(got["w"][r], want[1], rtol=1e-6, atol=1e-7)


def test_faulty_replicas_must_leave_an_honest_one():
    from jaxsel.core.aggregate import WithFaultyReplicas

    with pytest.raises(ValueError, match="8 faulty replicas of 8 leave no honest one"):
        WithFaultyReplicas(get_aggregator("mean"), count=8).check_replicas(8)
    with pytest.raises(ValueError, match="faulty replicas must be an integer >= 1"):
        WithFaultyReplicas(get_aggregator("mean"), count=0)


def test_a_run_with_a_faulty_replica_fails_with_the_mean_and_trains_with_krum(tmp_path):
    """`faulty_replicas=1` through the public API (`jaxsel.train`): local SGD on digits,
    averaging every 2 steps while replica 7 sends garbage. The mean hands the garbage to
    every replica, and training blows up (non-finite, stopped); Krum's run trains."""
    from jaxsel import TrainConfig, train
    from jaxsel.training.faults import NonFiniteError

    def run_with(aggregator):
        cfg = TrainConfig(dataset="digits", strategy="localsgd", replicas=R, steps=40, eval_every=40,
                          strategy_options={"period": 2, "aggregator": aggregator}, faulty_replicas=1,
                          out_dir=str(tmp_path / aggregator.replace(":", "-")), progress=False)
        return train(cfg).final["final_test_accuracy"]

    with pytest.raises(NonFiniteError):
        run_with("mean")
    assert run_with("krum:1") > 0.7


@pytest.mark.parametrize("argv, message", [
    (["--strategy", "ssp", "--faulty-replicas", "1"], "faulty_replicas needs a strategy with an aggregator option"),
    (["--strategy", "bsp", "--faulty-replicas", "8"], "must be an integer >= 0 and <= 7"),
    (["--strategy", "bsp:compress=int8", "--faulty-replicas", "1"], "faulty_replicas: compress='int8' needs"),
])
def test_faulty_replicas_errors_are_one_line(tmp_path, capsys, argv, message):
    from jaxsel.cli import main

    assert main(["train", *argv, "--replicas", "8", "--steps", "2", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
