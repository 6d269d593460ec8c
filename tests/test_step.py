"""The shard_map'd step: BSP exactness, local SGD sync invariants, trace-time guard."""
import dataclasses

import jax
import numpy as np
import optax
import pytest

import jaxsel
from helpers import R, run, softmax_batches, softmax_loss, softmax_params
from jaxsel.core.triggers import Trigger

B, D, C = 4, 5, 3   # helpers' default sizes


def test_bsp_equals_single_device_on_concatenated_batch(mesh):
    batches = softmax_batches(5)
    state, _ = run(jaxsel.BSP(), mesh, batches)
    opt = optax.sgd(0.1, momentum=0.9)
    params = softmax_params()
    opt_state = opt.init(params)
    for batch in batches:  # one device, the whole N*b batch
        grads = jax.grad(softmax_loss)(params, batch)
        updates, opt_state = opt.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
    for name in params:
        got = np.asarray(state.params[name])
        for r in range(R):
            np.testing.assert_allclose(got[r], np.asarray(params[name]), rtol=1e-5, atol=1e-6)


def test_bsp_replicas_identical_and_bytes_counted(mesh):
    state, history = run(jaxsel.BSP(), mesh, softmax_batches(3))
    w = np.asarray(state.params["w"])
    assert all(np.array_equal(w[0], w[r]) for r in range(R))
    metrics = history[-1][1]
    assert bool(metrics["synced"])
    assert int(metrics["bytes_allreduced"]) == (D * C + C) * 4  # float32 gradients of w and b
    assert metrics["replica_loss"].shape == (R,) and "grad_norm" not in metrics   # off unless asked for


@pytest.mark.parametrize("strategy", [jaxsel.BSP(), jaxsel.SelSync(delta=0.05, window=2)], ids=["bsp", "selsync"])
def test_without_the_grad_norm_metric_the_trajectory_is_unchanged(mesh, strategy):
    """`grad_norm_metric=False` drops the metric, never what the strategy reads (SelSync's
    trigger still sees the norm and syncs on the same steps)."""
    batches = softmax_batches(6)
    opt = optax.sgd(0.1, momentum=0.9)
    results = []
    for metric in (True, False):
        state = jaxsel.init_state(softmax_params(), opt, strategy, mesh, replicas=R)
        step = jaxsel.make_train_step(softmax_loss, opt, strategy, mesh, grad_norm_metric=metric)
        synced = []
        for batch in batches:
            state, metrics = step(state, batch)
            synced.append(bool(metrics["synced"]))
        assert ("grad_norm" in metrics) == metric
        results.append((jax.device_get(state.params), synced))
    (full, synced_full), (lean, synced_lean) = results
    assert synced_full == synced_lean
    for name in full:
        np.testing.assert_array_equal(full[name], lean[name])


def test_nonfinite_guard_without_grad_norm_checks_the_loss(mesh):
    from jaxsel.training.faults import guard_nonfinite

    opt = optax.sgd(0.1)
    state = jaxsel.init_state(softmax_params(), opt, jaxsel.BSP(), mesh, replicas=R)
    step = guard_nonfinite(jaxsel.make_train_step(softmax_loss, opt, jaxsel.BSP(), mesh, grad_norm_metric=False),
                           donate=False)
    batch = softmax_batches(1)[0]
    before = jax.device_get(state.params)
    bad = {**batch, "x": np.full_like(batch["x"], np.nan)}
    state, metrics = step(state, bad)
    assert bool(metrics["nonfinite"]) and int(state.step) == 1
    np.testing.assert_array_equal(jax.device_get(state.params)["w"], before["w"])
    state, metrics = step(state, batch)
    assert not bool(metrics["nonfinite"])


def test_localsgd_identical_after_sync_and_different_between(mesh):
    period = 3
    _, history = run(jaxsel.LocalSGD(period=period), mesh, softmax_batches(9))
    for t, (state, metrics) in enumerate(history):
        w = state.params["w"]
        same = all(np.array_equal(w[0], w[r]) for r in range(R))
        if (t + 1) % period == 0:
            assert bool(metrics["synced"]) and same, f"step {t}: replicas differ right after a sync"
            assert int(metrics["bytes_allreduced"]) == (D * C + C) * 4
        else:
            assert not bool(metrics["synced"]) and not same, f"step {t}: replicas equal between syncs"
            assert int(metrics["bytes_allreduced"]) == 0


def test_localsgd_sync_is_the_mean_of_locally_updated_params(mesh):
    """At a sync step each replica updates locally, then parameters are averaged."""
    batches = softmax_batches(2)
    _, history = run(jaxsel.LocalSGD(period=2), mesh, batches, opt=optax.sgd(0.1))
    before = history[0][0].params
    grads = [jax.grad(softmax_loss)({k: v[r] for k, v in before.items()},
                                    {k: v[r * B:(r + 1) * B] for k, v in batches[1].items()}) for r in range(R)]
    expect = np.mean([before["w"][r] - 0.1 * np.asarray(grads[r]["w"]) for r in range(R)], axis=0)
    np.testing.assert_allclose(history[1][0].params["w"][3], expect, rtol=1e-5, atol=1e-6)


@dataclasses.dataclass(frozen=True)
class PerReplicaTrigger(Trigger):
    """Wrong on purpose: a per-replica decision with no pmax."""

    def __call__(self, tstate, stats, axis):
        return tstate, stats.grad_norm > 1.0, {}


def test_non_replicated_trigger_raises_at_trace_time(mesh):
    strategy = jaxsel.TriggeredStrategy(trigger=PerReplicaTrigger(), sync="params")
    opt = optax.sgd(0.1)
    state = jaxsel.init_state(softmax_params(), opt, strategy, mesh, replicas=R)
    step = jaxsel.make_train_step(softmax_loss, opt, strategy, mesh)
    with pytest.raises(jaxsel.NonReplicatedDecisionError, match="varies across the 'data' axis"):
        step.lower(state, softmax_batches(1)[0])


def test_consensus_is_replica_mean(mesh):
    state, _ = run(jaxsel.LocalSGD(period=100), mesh, softmax_batches(2))
    np.testing.assert_allclose(np.asarray(jaxsel.consensus(state)["w"]),
                               np.asarray(state.params["w"]).mean(0), rtol=1e-6)
    div = float(jaxsel.divergence(state.params))
    w = np.asarray(state.params["w"]).reshape(R, -1)
    b = np.asarray(state.params["b"]).reshape(R, -1)
    flat = np.concatenate([w, b], 1)
    assert div == pytest.approx(np.max(np.linalg.norm(flat - flat.mean(0), axis=1)), rel=1e-5)


def test_bad_strategy_arguments():
    with pytest.raises(ValueError, match="period must be an integer >= 1"):
        jaxsel.LocalSGD(period=0)
    with pytest.raises(ValueError, match="delta must be a finite number >= 0"):
        jaxsel.SelSync(delta=-0.1)
    with pytest.raises(ValueError, match="delta must be a finite number >= 0, got inf"):
        jaxsel.SelSync(delta=float("inf"))
    with pytest.raises(ValueError, match="window must be an integer >= 1"):
        jaxsel.SelSync(window=0)
    with pytest.raises(ValueError, match="sync must be one of"):
        jaxsel.SelSync(sync="both")


# Library misuse: a TypeError/ValueError naming what was given and what is expected, at
# trace time or before (issue 23), never an AttributeError from deep inside a strategy.

def test_a_state_used_with_another_strategy_or_optimizer_is_named_at_trace_time(mesh):
    sgd = optax.sgd(0.1, momentum=0.9)
    bsp_state = jaxsel.init_state(softmax_params(), sgd, jaxsel.BSP(), mesh, replicas=R)
    batch = softmax_batches(1)[0]
    with pytest.raises(TypeError, match=r"strategy state is TriggeredState\(trigger=\(\), .*SelSync keeps "
                                        r"TriggeredState\(trigger=RawSignificanceState"):
        jaxsel.make_train_step(softmax_loss, sgd, jaxsel.SelSync(), mesh)(bsp_state, batch)
    adam_state = jaxsel.init_state(softmax_params(), optax.adam(0.1), jaxsel.BSP(), mesh, replicas=R)
    with pytest.raises(TypeError, match=r"optimizer state is \(ScaleByAdamState.*this optimizer keeps \(TraceState"):
        jaxsel.make_train_step(softmax_loss, sgd, jaxsel.BSP(), mesh)(adam_state, batch)
    with pytest.raises(TypeError, match=r"consensus: the state's strategy state is TriggeredState.*DiLoCo keeps "
                                        r"DiLoCoState"):
        jaxsel.consensus(bsp_state, jaxsel.DiLoCo())
    with pytest.raises(TypeError, match="consensus needs a TrainState .*, got None"):
        jaxsel.consensus(None, jaxsel.BSP())


def test_a_state_of_other_options_or_parameters_is_named_at_trace_time(mesh):
    """Issue 48 item 9: the layouts agree but the leaves do not (SelSync's window sizes its
    state; parameters replaced by others that no longer match the optimizer state, or that
    lost the replica axis): one TypeError naming the leaf, not an error from inside the step."""
    sgd = optax.sgd(0.1, momentum=0.9)
    batch = softmax_batches(1)[0]
    wide = jaxsel.init_state(softmax_params(), sgd, jaxsel.SelSync(window=25), mesh, replicas=R)
    with pytest.raises(TypeError, match=r"the train step: the state was built for other options or parameters than "
                                        r"selsync \(delta=0.3, W=10, raw, averages before the update\) runs with "
                                        r"\(strategy_state.trigger.d_hist is "
                                        r"float32\(25,\) per replica where float32\(10,\) is expected\)"):
        jaxsel.make_train_step(softmax_loss, sgd, jaxsel.SelSync(window=10), mesh)(wide, batch)
    state = jaxsel.init_state(softmax_params(), sgd, jaxsel.BSP(), mesh, replicas=R)
    step = jaxsel.make_train_step(softmax_loss, sgd, jaxsel.BSP(), mesh)
    other = jaxsel.init_state(softmax_params(d=6), sgd, jaxsel.BSP(), mesh, replicas=R).params
    with pytest.raises(TypeError, match=r"parameters and optimizer state do not belong together \(opt_state\[0\]"
                                        r".trace\['w'\] is float32\(5, 3\) per replica where float32\(6, 3\)"):
        step(state.replace(params=other), batch)
    with pytest.raises(TypeError, match=r"state.params\['w'\] has shape \(5, 3\), but every leaf of a TrainState but "
                                        r"its step starts with the replica axis \(3 replicas in its first parameter\)"):
        step(state.replace(params=softmax_params()), batch)   # one replica's parameters, no replica axis


@pytest.mark.parametrize("strategy, named", [
    ("selsync", r"got str 'selsync'; build one by name with jaxsel.build_strategy\('selsync'\)"),
    (jaxsel.SelSync, r"got the class SelSync; pass an instance, e.g. SelSync\(\)"),
    (optax.sgd(0.1), r"got optax\.\w+ \(an optimizer\?\); the optimizer goes before the strategy"),
], ids=["name", "class", "optimizer"])
def test_make_train_step_needs_a_strategy_instance(mesh, strategy, named):
    with pytest.raises(TypeError, match=named):
        jaxsel.make_train_step(softmax_loss, optax.sgd(0.1), strategy, mesh)


def test_a_batch_that_does_not_split_over_the_replicas_is_named(mesh):
    opt = optax.sgd(0.1)
    state = jaxsel.init_state(softmax_params(), opt, jaxsel.BSP(), mesh, replicas=R)
    batch = {k: v[:12] for k, v in softmax_batches(1)[0].items()}
    with pytest.raises(ValueError, match=r"batch\['x'\] has shape \(12, 5\): its leading dimension must be a "
                                         r"multiple of the 8 replicas"):
        jaxsel.make_train_step(softmax_loss, opt, jaxsel.BSP(), mesh)(state, batch)
