"""Compressed sync payloads (bf16, int8): bytes counted as sent, results within the
quantization bound of the uncompressed aggregate (computed in NumPy), every replica
bit-identical, packed and unpacked layouts agreeing, and bad settings refused."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import jaxsel
from jaxsel.costmodel import strategy_timing
from jaxsel.cli import main as cli_main
from jaxsel.core import compression
from jaxsel.core.aggregate import Bound, get_aggregator
from jaxsel.core.collectives import LOCAL
from jaxsel.core.sync import StepContext, sync_where
from jaxsel.strategies import build_strategy

R = 8
U_BF16 = 2.0 ** -8   # bf16's unit roundoff (8 significant bits)


def synced(mesh, x, codec, spec="mean", w=None, traced=True):
    """Every replica's (result, payload bytes) of one `sync_where(compress=codec)` on replica
    r's `x[r]` (weight `w[r]`), replicas packed on `mesh` as the step packs them."""
    k = R // mesh.shape["data"]
    w = np.ones(R, np.float32) if w is None else w

    def body(x, w):
        def one(xr, wr, r):
            ctx = StepContext(axis="data", n=R, step=jnp.int32(3), optimizer=None, weight=wr, replica=r)
            decide = jnp.asarray(True) if traced else True
            out = sync_where(decide, xr, Bound(get_aggregator(spec), "data", ctx), ctx, compress=codec)
            return out, ctx.ledger.report().payload_bytes

        replica = jax.lax.axis_index("data") * k + jnp.arange(k, dtype=jnp.int32)
        return jax.vmap(one, axis_name=LOCAL, axis_size=k)(x, w, replica)

    put = lambda v: jax.device_put(v, NamedSharding(mesh, P("data")))
    fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("data"), P("data")), out_specs=P("data")))
    return jax.device_get(fn(jax.tree.map(put, x), put(w)))


@pytest.fixture(scope="module")
def packed():
    return jaxsel.data_mesh(replicas=R, devices=2)


@pytest.fixture(scope="module")
def values():
    """Per-replica tensors of different magnitudes (so the per-replica scales differ)."""
    rng = np.random.default_rng(0)
    mag = np.linspace(0.5, 4.0, R, dtype=np.float32)
    return {"w": rng.normal(size=(R, 24, 16)).astype(np.float32) * mag[:, None, None],
            "b": rng.normal(size=(R, 16)).astype(np.float32) * mag[::-1, None]}


def int8_bound(x, c):
    """sum_r c_r * scale_r / 2 per element (scale_r = max|x_r| / 127), in NumPy."""
    scales = np.abs(x).reshape(R, -1).max(axis=1) / 127.0
    return float((c * scales).sum() / 2)


def assert_identical_replicas(tree):
    for leaf in jax.tree.leaves(tree):
        for r in range(1, R):
            np.testing.assert_array_equal(leaf[r], leaf[0])


# --------------------------------------------------------------------------- bytes


def test_bytes_counted_exactly_for_known_shapes(mesh):
    """int8: 1 byte/element + 4 per float tensor; bf16: 2 bytes/element; integer leaves
    pass through at their own size, uncompressed, and unchanged."""
    rng = np.random.default_rng(1)
    tree = {"kernel": rng.normal(size=(R, 20, 10)).astype(np.float32),   # 200 elements
            "bias": rng.normal(size=(R, 10)).astype(np.float32),          # 10
            "count": np.tile(np.arange(3, dtype=np.int32), (R, 1))}       # 3 x int32, kept
    floats = 200 + 10
    expected = {None: 4 * floats + 12, "bf16": 2 * floats + 12, "int8": floats + 2 * 4 + 12}
    for codec, nbytes in expected.items():
        out, sent = synced(mesh, tree, codec)
        assert set(sent.tolist()) == {nbytes}, (codec, sent)
        assert compression.payload_bytes(jax.tree.map(lambda x: x[0], tree), codec) == nbytes
        np.testing.assert_array_equal(out["count"], tree["count"])
        assert out["count"].dtype == np.int32 and out["kernel"].dtype == np.float32


def test_a_training_step_reports_the_compressed_bytes(mesh, packed):
    """Through the whole step: BSP's gradient payload (w: 4x3, b: 3) as sent per replica;
    with int8 the 2 x 4 packed layout's parameters are bit-identical to 8 x 1's."""
    params = {"w": jnp.zeros((4, 3)), "b": jnp.zeros((3,))}
    rng = np.random.default_rng(0)
    batch = {"x": rng.normal(size=(R * 2, 4)).astype(np.float32), "y": rng.integers(0, 3, R * 2)}
    loss = lambda p, b: optax.softmax_cross_entropy_with_integer_labels(b["x"] @ p["w"] + p["b"], b["y"]).mean()
    opt = optax.sgd(0.1)
    for codec, nbytes in [("bf16", 2 * 15), ("int8", 15 + 2 * 4)]:   # float32: 4 * 15 (test_step)
        strat = jaxsel.BSP(compress=codec)
        state = jaxsel.init_state(params, opt, strat, mesh, replicas=R)
        state, metrics = jaxsel.make_train_step(loss, opt, strat, mesh)(state, batch)
        assert int(np.asarray(metrics["bytes_allreduced"]).max()) == nbytes, codec
        assert_identical_replicas(jax.device_get(state.params))
    state4 = jaxsel.init_state(params, opt, strat, packed, replicas=R)
    state4, _ = jaxsel.make_train_step(loss, opt, strat, packed)(state4, batch)
    for a, b in zip(jax.tree.leaves(jax.device_get(state.params)), jax.tree.leaves(jax.device_get(state4.params))):
        np.testing.assert_array_equal(a, b)


# --------------------------------------------------------------------- error bounds


@pytest.mark.parametrize("traced", [True, False], ids=["cond", "static"])
def test_int8_within_bound_bit_identical_packed_equals_unpacked(mesh, packed, values, traced):
    """|int8 mean - exact mean| <= mean_r scale_r / 2; the same bits on every replica
    and on 8 x 1 and 2 x 4 layouts (the gathered sum runs in replica order everywhere)."""
    one, _ = synced(mesh, values, "int8", traced=traced)
    four, _ = synced(packed, values, "int8", traced=traced)
    assert_identical_replicas(one)
    for key, x in values.items():
        np.testing.assert_array_equal(one[key], four[key])
        err = np.abs(one[key][0].astype(np.float64) - x.astype(np.float64).mean(0))
        bound = int8_bound(x, np.full(R, 1 / R))
        assert err.max() <= bound * (1 + 1e-5), (key, err.max(), bound)
        assert err.max() > 0   # it did quantize


def test_int8_weighted_mean_within_bound(packed, values):
    """The weight rides on the scale: |err| <= sum_r (w_r / sum w) * scale_r / 2."""
    w = np.arange(1, R + 1, dtype=np.float32)
    got, _ = synced(packed, values, "int8", spec="weighted", w=w)
    assert_identical_replicas(got)
    c = w / w.sum()
    for key, x in values.items():
        exact = (c[:, None, None] if x.ndim == 3 else c[:, None]) * x.astype(np.float64)
        err = np.abs(got[key][0] - exact.sum(0))
        assert err.max() <= int8_bound(x, c) * (1 + 1e-5), key


def test_bf16_within_rounding_bound_on_both_layouts(mesh, packed, values):
    """An all-reduce in bf16: N roundings at most, |err| <= N * 2^-8 * mean_r |x_r|; every
    replica receives the same sum; the layouts add in other orders, so they agree within
    the bound."""
    results = [synced(m, values, "bf16")[0] for m in (mesh, packed)]
    for got in results:
        assert_identical_replicas(got)
        for key, x in values.items():
            exact = x.astype(np.float64).mean(0)
            bound = R * U_BF16 * np.abs(x.astype(np.float64)).mean(0)
            err = np.abs(got[key][0] - exact)
            assert (err <= bound * (1 + 1e-6) + 1e-30).all(), key
            assert err.max() > 0
    for key in values:
        np.testing.assert_allclose(results[0][key][0], results[1][key][0], rtol=0,
                                   atol=float(2 * R * U_BF16 * np.abs(values[key]).mean(0).max()))


def test_zero_tensor_and_non_finite_values():
    """A zero tensor quantizes to zeros (no 0/0); a non-finite one does not pass as finite."""
    q, scale = compression.quantize_int8(jnp.zeros((5,)))
    assert float(scale) == 0.0 and not np.asarray(q).any()
    q, scale = compression.quantize_int8(jnp.array([1.0, jnp.inf, -2.0]))
    with np.errstate(invalid="ignore"):
        assert not np.isfinite(np.float32(scale) * np.asarray(q, np.float32)).all()


# ------------------------------------------------------------------------ strategies


@pytest.mark.parametrize("make", [lambda c: jaxsel.LocalSGD(period=2, compress=c),
                                  lambda c: jaxsel.DiLoCo(period=2, compress=c)], ids=["localsgd", "diloco"])
def test_compressed_strategies_keep_replicas_identical_and_close(mesh, make):
    """LocalSGD (model averaging) and DiLoCo (pseudo-gradient) with int8: replicas agree
    after each sync and stay close to the uncompressed run."""
    params = {"w": jnp.full((4, 3), 0.5), "b": jnp.zeros((3,))}
    rng = np.random.default_rng(0)
    batches = [{"x": rng.normal(size=(R * 2, 4)).astype(np.float32), "y": rng.integers(0, 3, R * 2)}
               for _ in range(4)]
    loss = lambda p, b: optax.softmax_cross_entropy_with_integer_labels(b["x"] @ p["w"] + p["b"], b["y"]).mean()
    opt = optax.sgd(0.1)
    finals = []
    for codec in (None, "int8"):
        strat = make(codec)
        state = jaxsel.init_state(params, opt, strat, mesh, replicas=R)
        step = jaxsel.make_train_step(loss, opt, strat, mesh)
        for b in batches:
            state, _ = step(state, b)
        finals.append(jax.device_get(strat.eval_params(state)))
    assert_identical_replicas(finals[1])
    for a, b in zip(jax.tree.leaves(finals[0]), jax.tree.leaves(finals[1])):
        np.testing.assert_allclose(b, a, atol=2e-2)
        assert not np.array_equal(a, b)


def test_describe_and_timing_name_the_codec():
    assert jaxsel.BSP(compress="int8").describe() == "bsp [int8]"
    assert build_strategy("fedavg", {"compress": "bf16"}).describe() == "fedavg [weighted, bf16] (period 50)"
    assert strategy_timing(jaxsel.BSP(compress="int8")).collective == "allgather"      # int8 gathers
    assert strategy_timing(jaxsel.LocalSGD(compress="bf16")).collective == "allreduce"
    assert strategy_timing(jaxsel.DiLoCo(compress="int8")).collective == "allgather"
    assert jaxsel.BSP(compress="none").compress is None


@pytest.mark.parametrize("make", [
    lambda: jaxsel.SelSync(aggregator="median", compress="int8"),
    lambda: jaxsel.LocalSGD(aggregator="trimmed:1", compress="bf16"),
    lambda: jaxsel.DiLoCo(aggregator="max", compress="int8"),
    lambda: build_strategy("triggered", {"trigger": "periodic", "trigger.period": 2, "aggregator": "min",
                                         "compress": "int8"}),
], ids=["selsync-median", "localsgd-trimmed", "diloco-max", "triggered-min"])
def test_codec_with_a_non_linear_aggregator_is_refused(make):
    with pytest.raises(ValueError, match=r"needs a mean, weighted mean or sum aggregator; aggregator '"):
        make()


def test_unknown_codec_lists_the_choices():
    with pytest.raises(ValueError, match=r"^compress must be one of none, bf16, int8, topk:F, sign \(0 < F <= 1\); got 'fp8'$"):
        jaxsel.BSP(compress="fp8")


@pytest.mark.parametrize("args, expected", [
    (["--strategy", "bsp", "--opt", "compress=int4"], ["compress must be one of none, bf16, int8", "'int4'"]),
    (["--strategy", "selsync:aggregator=median", "--opt", "compress=int8"], ["'median'", "mean, weighted mean or sum"]),
    (["--strategy", "ssp", "--opt", "compress=bf16"], ["no option 'compress'"]),
], ids=["bad-codec", "median", "strategy-without-codecs"])
def test_cli_refuses_with_one_line_and_exit_2(tmp_path, capsys, args, expected):
    code = cli_main(["train", "--no-progress", "--steps", "2", "--out", str(tmp_path / "out"),
                     "--checkpoint-dir", str(tmp_path / "ck"), *args])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert all(text in lines[0] for text in expected), lines[0]
