"""Error-feedback codecs (top-k, sign; issue 25 item 1) through the public API, against the
NumPy reference (tests/reference/codecs.py, outer.py): the strategies' parameters, residuals
and anchors on 8 devices, 8 packed on 1 and 2 x 4; the telescoping invariant; topk:1 is the
exact mean; bytes counted exactly; memory estimates; resume bit for bit; bad options."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import jaxsel
from jaxsel.analysis.variants import parse_strategies
from jaxsel.cli import main as cli_main
from jaxsel.core import compression
from jaxsel.core.aggregate import Bound, get_aggregator
from jaxsel.core.collectives import LOCAL
from jaxsel.core.sync import StepContext, sync_where
from jaxsel.costmodel import strategy_timing
from jaxsel.strategies import build_strategy
from reference import codecs as ref
from reference.linreg import make_problem
from reference.outer import simulate_diloco
from reference.trees import zeros_like_replicas

R, D, LR, STEPS = 8, 5, 0.1, 4
PROBLEM = make_problem(n_replicas=R, d=D, n_samples=4, seed=1)
BATCH = {"x": np.concatenate(PROBLEM.xs).astype(np.float32), "y": np.concatenate(PROBLEM.ys).astype(np.float32)}


def linreg_loss(params, batch):
    r = batch["x"] @ params["w"] + params["b"][0] - batch["y"]
    return jnp.mean(r * r) / 2


def as_list(tree):
    """{'w', 'b'} -> the reference's [w, b]."""
    return [np.asarray(tree["w"], np.float64), np.asarray(tree["b"], np.float64)]


LAYOUTS = {"8x1": 8, "1x8": 1, "2x4": 2}   # devices x replicas per device
_meshes = {}


def mesh_of(layout: str):
    if layout not in _meshes:
        _meshes[layout] = jaxsel.data_mesh(replicas=R, devices=LAYOUTS[layout])
    return _meshes[layout]


def layouts(*cases, every=()):
    """(case, layout) pairs: the `every` cases on all three layouts, the others on 2 x 4
    (packed replicas over several devices), to keep one compile per pair few."""
    return [(c, lay) for c in cases for lay in (LAYOUTS if c in every else ["2x4"])]


def train(strategy, mesh, steps=STEPS):
    opt = optax.sgd(LR)
    params = {"w": jnp.zeros(D), "b": jnp.zeros(1)}
    state = jaxsel.init_state(params, opt, strategy, mesh, replicas=R)
    step = jaxsel.make_train_step(linreg_loss, opt, strategy, mesh)
    metrics = []
    for _ in range(steps):
        state, m = step(state, BATCH)
        metrics.append(jax.device_get(m))
    return jax.device_get(state), metrics


def reference_bsp(codec, fraction, error_feedback=True):
    """BSP: every step the replicas' gradients go through `ef_round`; SGD on the aggregate."""
    w = PROBLEM.init()
    res = zeros_like_replicas(w, R)
    for t in range(STEPS):
        grads = [PROBLEM.grad(i, t, w) for i in range(R)]
        agg, res, _ = ref.ef_round(grads, res, codec, fraction, error_feedback)
        w = [p - LR * g for p, g in zip(w, agg)]
    return [w] * R, res, None


def check_replicas(got, want, atol=2e-5):
    for r in range(R):
        for a, b in zip(as_list(jax.tree.map(lambda x: x[r], got)), want[r]):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=atol)


CASES = {   # strategy, reference (params, residuals, anchor)
    "bsp-topk": (lambda: jaxsel.BSP(compress="topk:0.3"), lambda: reference_bsp("topk", 0.3)),
    "bsp-sign": (lambda: jaxsel.BSP(compress="sign"), lambda: reference_bsp("sign", None)),
    "localsgd-topk": (lambda: jaxsel.LocalSGD(period=2, compress="topk:0.3"),
                      lambda: ref.simulate_local_sgd(PROBLEM.init(), PROBLEM.grad, R, STEPS, 2, LR, "topk", 0.3)),
    "localsgd-sign-no-feedback": (
        lambda: jaxsel.LocalSGD(period=2, compress="sign", error_feedback=False),
        lambda: ref.simulate_local_sgd(PROBLEM.init(), PROBLEM.grad, R, STEPS, 2, LR, "sign", None, False)),
    "triggered-params-sign": (
        lambda: build_strategy("triggered", {"trigger": "periodic", "trigger.period": 2, "sync": "params",
                                             "compress": "sign"}),
        lambda: ref.simulate_local_sgd(PROBLEM.init(), PROBLEM.grad, R, STEPS, 2, LR, "sign", mode="params")),
}


@pytest.mark.parametrize("case, layout", layouts(*CASES, every=("bsp-topk", "localsgd-topk")))
def test_strategies_match_the_reference(case, layout):
    """Every replica's parameters, residual and anchor after 4 steps, as NumPy computes them."""
    make, reference = CASES[case]
    state, _ = train(make(), mesh_of(layout))
    ws, res, anchor = reference()
    check_replicas(state.params, ws)
    fb = state.strategy_state.feedback
    if fb.residual is None:
        assert "no-feedback" in case
    else:
        check_replicas(fb.residual, res)
    if anchor is not None:
        check_replicas(fb.anchor, [anchor] * R)


@pytest.mark.parametrize("spec, layout", layouts("topk:0.5", "sign", "streaming-topk:0.5", every=("topk:0.5",)))
def test_diloco_pseudo_gradient_matches_the_reference(spec, layout):
    """DiLoCo (H = 2, Nesterov 0.7 / 0.9) sends global - w_i with error feedback; so does
    Streaming DiLoCo (one fragment: DiLoCo's schedule)."""
    streaming = spec.startswith("streaming-")
    spec = spec.removeprefix("streaming-")
    codec, fraction = ("sign", None) if spec == "sign" else ("topk", 0.5)
    strategy = (jaxsel.StreamingDiLoCo(period=2, fragments=1, compress=spec) if streaming
                else jaxsel.DiLoCo(period=2, compress=spec))
    state, _ = train(strategy, mesh_of(layout))
    history, _, _ = simulate_diloco(PROBLEM.init(), PROBLEM.grad, R, 2, STEPS // 2, LR,
                                    codec=codec, fraction=fraction)
    check_replicas(state.strategy_state.global_params, [history[-1]] * R)
    check_replicas(state.params, [history[-1]] * R)
    assert state.strategy_state.residual is not None and np.abs(state.strategy_state.residual["w"]).max() > 0


def test_selsync_params_matches_the_reference_on_its_own_decisions():
    """SelSync (sync="params") with sign: the reference replays the run's recorded
    sync decisions (some steps sync, some do not)."""
    state, metrics = train(jaxsel.SelSync(compress="sign", delta=0.3, window=2), mesh_of("2x4"), steps=6)
    synced = [bool(np.asarray(m["synced"]).ravel()[0]) for m in metrics]
    assert any(synced) and not all(synced)
    ws, res, anchor = ref.simulate_local_sgd(PROBLEM.init(), PROBLEM.grad, R, 6, lambda t: synced[t], LR,
                                             "sign", mode="params")
    check_replicas(state.params, ws)
    check_replicas(state.strategy_state.feedback.residual, res)
    check_replicas(state.strategy_state.feedback.anchor, [anchor] * R)


# ------------------------------------------------------------------ the sync core alone


def feedback_sync(mesh, x, e, codec, spec="mean", w=None):
    """Every replica's (aggregate, new residual, bytes) of one `sync_where(compress=codec,
    residual=e[r])` on replica r's `x[r]` (weight `w[r]`), packed on `mesh` as the step
    packs them."""
    k = R // mesh.shape["data"]
    w = np.ones(R, np.float32) if w is None else w

    def body(x, e, w):
        def one(xr, er, wr, r):
            ctx = StepContext(axis="data", n=R, step=jnp.int32(0), optimizer=None, weight=wr, replica=r)
            out, res = sync_where(jnp.asarray(True), xr, Bound(get_aggregator(spec), "data", ctx), ctx,
                                  compress=codec, residual={"w": er})
            return out, res["w"], ctx.ledger.report().payload_bytes

        replica = jax.lax.axis_index("data") * k + jnp.arange(k, dtype=jnp.int32)
        return jax.vmap(one, axis_name=LOCAL, axis_size=k)(x, e, w, replica)

    put = lambda v: jax.device_put(v, NamedSharding(mesh, P("data")))
    fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("data"),) * 3, out_specs=P("data")))
    return jax.device_get(fn(jax.tree.map(put, x), put(e), put(w)))


def test_weighted_mean_weights_what_was_sent(mesh):
    """A linear aggregator's weights c_i multiply what was sent, never the residual."""
    rng = np.random.default_rng(2)
    x = {"w": rng.normal(size=(R, 6, 7)).astype(np.float32)}
    e = rng.normal(size=(R, 6, 7)).astype(np.float32)
    w = np.arange(1, R + 1, dtype=np.float32)
    out, new_e, _ = feedback_sync(mesh, x, e, "topk:0.2", spec="weighted", w=w)
    agg, e_ref, _ = ref.ef_round([[x["w"][r]] for r in range(R)], [[e[r]] for r in range(R)], "topk", 0.2,
                                 weights=w / w.sum())
    np.testing.assert_allclose(out["w"][0], agg[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(new_e, np.stack([r[0] for r in e_ref]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("codec", ["topk:0.1", "sign"])
def test_telescoping_and_layouts(mesh, codec):
    """Three rounds: sum of what was sent + the last residual == sum of the payloads, per
    replica; the aggregate is the reference's; every replica and the 2 x 4 layout get the
    same bits; an integer leaf goes through exactly, at its own size."""
    rng = np.random.default_rng(0)
    packed = jaxsel.data_mesh(replicas=R, devices=2)
    e = np.zeros((R, 6, 7), np.float32)
    e_ref = zeros_like_replicas([e[0]], R)
    total_sent, total_payload = np.zeros((R, 6, 7)), np.zeros((R, 6, 7))
    kind, fraction = ("topk", 0.1) if codec != "sign" else ("sign", None)
    for _ in range(3):
        x = {"w": rng.normal(size=(R, 6, 7)).astype(np.float32), "n": np.tile(np.arange(3, dtype=np.int32), (R, 1))}
        out, new_e, nbytes = feedback_sync(mesh, x, e, codec)
        out4, new_e4, _ = feedback_sync(packed, x, e, codec)
        for a, b in [(out["w"], out4["w"]), (new_e, new_e4)]:
            np.testing.assert_array_equal(a, b)
        assert all(np.array_equal(out["w"][r], out["w"][0]) for r in range(R))
        np.testing.assert_array_equal(out["n"], x["n"])
        assert set(nbytes.tolist()) == {ref.payload_bytes([(6, 7)], kind, fraction) + 12}
        agg, e_ref, _ = ref.ef_round([[x["w"][r]] for r in range(R)], e_ref, kind, fraction)
        np.testing.assert_allclose(out["w"][0], agg[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(new_e, np.stack([r[0] for r in e_ref]), rtol=1e-5, atol=1e-6)
        total_sent += x["w"] + e - new_e          # what replica r sent: u - e_new
        total_payload += x["w"]
        e = new_e
    np.testing.assert_allclose(total_sent + e, total_payload, rtol=1e-5, atol=1e-5)


def test_topk_one_is_the_exact_mean_with_zero_residual(mesh):
    rng = np.random.default_rng(1)
    x = {"w": rng.normal(size=(R, 6, 7)).astype(np.float32)}
    out, e, _ = feedback_sync(mesh, x, np.zeros((R, 6, 7), np.float32), "topk:1")
    assert not e.any()
    np.testing.assert_allclose(out["w"][0], x["w"].astype(np.float64).mean(0), rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------- bytes and memory


@pytest.mark.parametrize("shape, codec, expected", [
    ((100,), "topk:0.07", 56), ((4, 5), "topk:0.1", 16), ((), "topk:0.01", 8), ((7,), "topk:0.5", 32),
    ((16,), "sign", 6), ((17,), "sign", 7), ((1,), "sign", 5), ((3, 3), "sign", 6),
])
def test_bytes_per_tensor(shape, codec, expected):
    assert compression.payload_bytes({"x": jnp.zeros(shape)}, codec, {"x": jnp.zeros(shape)}) == expected
    kind, _, f = codec.partition(":")
    assert ref.payload_bytes([shape], kind, float(f) if f else None) == expected


def test_step_metrics_count_the_bytes_and_the_cost_model_gathers(mesh):
    """BSP on w (5,) and b (1,): topk:0.3 keeps 2 + 1 entries (24 bytes), sign 5 + 5."""
    for codec, nbytes in [("topk:0.3", 24), ("sign", 10)]:
        _, metrics = train(jaxsel.BSP(compress=codec), mesh, steps=1)
        assert set(np.asarray(metrics[0]["bytes_allreduced"]).ravel().tolist()) == {nbytes}
        assert strategy_timing(jaxsel.BSP(compress=codec)).collective == "allgather"
    assert strategy_timing(jaxsel.DiLoCo(compress="sign")).collective == "allgather"


def test_residual_and_anchor_are_state_counted_in_memory(mesh):
    """The residual (and a parameter-averaging strategy's anchor) are params-sized
    per-replica state, so the memory estimate (the abstract state's bytes) grows by them;
    without a top-k / sign codec the state is what it was."""
    params = {"w": jnp.zeros((10, 3)), "b": jnp.zeros(3)}
    size = lambda s: sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(
        jax.eval_shape(lambda: jaxsel.init_state(params, optax.sgd(0.1), s, mesh, replicas=R))))
    one = R * 33 * 4
    assert size(jaxsel.BSP(compress="topk:0.1")) == size(jaxsel.BSP()) + one
    assert size(jaxsel.BSP(compress="sign", error_feedback=False)) == size(jaxsel.BSP())
    assert size(jaxsel.LocalSGD(compress="sign")) == size(jaxsel.LocalSGD()) + 2 * one
    assert size(jaxsel.DiLoCo(compress="sign")) == size(jaxsel.DiLoCo()) + one
    assert jaxsel.BSP().init(params, None, R).feedback is None


# ------------------------------------------------------------------------------ resume


@pytest.mark.slow
def test_interrupted_run_resumes_bit_for_bit(tmp_path):
    """LocalSGD with top-k: residual and anchor are checkpointed and restored exactly."""
    from run_hooks import signal_at, trees_equal
    from jaxsel.training.faults import TrainingInterrupted
    from jaxsel.training.train import TrainConfig, plan_run, train as train_run

    def config(where):
        return TrainConfig(strategy="localsgd", strategy_options={"period": 2, "compress": "topk:0.05"},
                           steps=8, batch_size=8, log_every=2, eval_every=8, checkpoint_every=2, keep=2,
                           progress=False, seed=3, checkpoint_dir=str(where / "ckpt"), out_dir=str(where / "out"))
    full = train_run(config(tmp_path / "ref"))
    cfg = config(tmp_path / "cut")
    with pytest.raises(TrainingInterrupted):
        train_run(signal_at(plan_run(cfg), 3))
    done = train_run(dataclasses.replace(cfg, resume=True))
    assert 0 < done.final["resumed_from_step"] < 8
    assert done.state.strategy_state.feedback.residual is not None
    for field in ("params", "opt_state", "strategy_state"):
        assert trees_equal(getattr(done.state, field), getattr(full.state, field)), field


# ------------------------------------------------------------------------ the options


@pytest.mark.parametrize("codec", ["topk:0", "topk:x", "topk:1.5", "topk:", "topk:-0.1"])
def test_bad_fraction_is_one_line(codec):
    with pytest.raises(ValueError, match=r"topk:F needs a fraction 0 < F <= 1 .* got F="):
        jaxsel.BSP(compress=codec)


def test_codec_with_median_and_inside_a_composition_is_refused():
    with pytest.raises(ValueError, match="needs a mean, weighted mean or sum aggregator"):
        jaxsel.LocalSGD(aggregator="median", compress="topk:0.1")
    with pytest.raises(ValueError, match="needs a mean, weighted mean or sum aggregator"):
        jaxsel.DiLoCo(aggregator="trimmed:1", compress="sign")
    with pytest.raises(ValueError, match=r"compress='sign' \(error feedback\) is not supported inside a composition"):
        jaxsel.PostLocalSGD(switch_step=2, compress="sign")
    with pytest.raises(ValueError, match=r"the inner level: compress='topk:0.1' \(error feedback\)"):
        build_strategy("hierarchical", {"inner.compress": "topk:0.1", "groups": 2})


def test_help_variants_and_cli_errors(tmp_path, capsys):
    assert cli_main(["strategies", "localsgd"]) == 0   # a strategy's options are listed in its entry's help
    out = capsys.readouterr().out
    assert "topk:F" in out and "sign" in out and "error_feedback" in out
    variants = parse_strategies("bsp:compress=topk:0.01, bsp:compress=sign, "
                                "diloco:compress=topk:0.01:error_feedback=false")
    assert [v.name for v in variants] == ["bsp", "bsp", "diloco"]
    assert [v.options.get("compress") for v in variants] == ["topk:0.01", "sign", "topk:0.01"]
    assert variants[2].options["error_feedback"] is False
    code = cli_main(["train", "--no-progress", "--steps", "2", "--out", str(tmp_path / "o"),
                     "--checkpoint-dir", str(tmp_path / "c"), "--strategy", "bsp", "--opt", "compress=topk:2"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "'2'" in err, err
