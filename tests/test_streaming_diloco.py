"""Streaming DiLoCo: the fragment rule, the per-fragment schedule, the blend against a NumPy
reference, bytes per sync, and its reduction to DiLoCo (P = 1, alpha = 1)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import helpers
import jaxsel
from helpers import R, identical, softmax_batches
from jaxsel.core.options import OptionError
from jaxsel.core.triggers import Never
from jaxsel.strategies import TriggeredStrategy, build_strategy
from jaxsel.strategies.fragments import split_leaves

D, K, C = 5, 4, 3   # D, C: the batches (helpers' default sizes)
LR = 0.1
# tree order of the model's leaves: b1 (K), w1 (D x K), w2 (K x C); float32 bytes each
LEAF_BYTES = [4 * K, 4 * D * K, 4 * K * C]


def loss_fn(params, batch):
    hidden = jnp.tanh(batch["x"] @ params["w1"] + params["b1"])
    return optax.softmax_cross_entropy_with_integer_labels(hidden @ params["w2"], batch["y"]).mean()


def init_params():
    k1, k2 = jax.random.split(jax.random.key(0))
    return {"w1": 0.5 * jax.random.normal(k1, (D, K)), "b1": jnp.zeros(K), "w2": 0.5 * jax.random.normal(k2, (K, C))}


def run(strategy, mesh, data, opt=None):
    return helpers.run(strategy, mesh, data, loss=loss_fn, params=init_params(), opt=opt)


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def due(t, p, H, P):
    """The documented schedule, written out: offset floor(p*H/P), then every H steps."""
    o = p * H // P
    return t >= o and (t - o + 1) % H == 0


# ------------------------------------------------------------------------ the fragment rule

def test_contiguous_fragments_are_runs_balanced_by_size():
    assert split_leaves([4, 20, 12], 1) == ((0, 1, 2),)
    assert split_leaves([4, 20, 12], 2) == ((0, 1), (2,))     # cut nearest 18 of 36: after 24
    assert split_leaves([4, 20, 12], 3) == ((0,), (1,), (2,))
    assert split_leaves([10, 1, 1, 1, 1, 10], 2) == ((0, 1, 2), (3, 4, 5))
    assert split_leaves([100, 1, 1], 3) == ((0,), (1,), (2,))  # never an empty fragment


def test_strided_fragments_take_every_pth_tensor():
    assert split_leaves([1] * 7, 3, "strided") == ((0, 3, 6), (1, 4), (2, 5))


def test_more_fragments_than_tensors_is_a_one_line_error(mesh):
    with pytest.raises(ValueError, match="fragments=4 needs 1 <= fragments <= the model's 3") as err:
        jaxsel.init_state(init_params(), optax.sgd(LR), jaxsel.StreamingDiLoCo(fragments=4), mesh, replicas=R)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("options, match", [
    ({"fragments": 0}, "fragments must be an integer >= 1"),
    ({"alpha": 0}, "alpha must be in"),
    ({"alpha": 1.5}, "alpha must be in"),
    ({"fragment_by": "random"}, "fragment_by must be one of contiguous, strided"),
    ({"period": 0}, "period must be an integer >= 1"),
    ({"outer_momentum": 1.0}, "outer_momentum"),
])
def test_bad_options_are_one_line_errors(options, match):
    with pytest.raises(OptionError, match=match) as err:
        build_strategy("streamingdiloco", options)
    assert "\n" not in str(err.value)


def test_period_sets_h_and_describe_names_h_p_alpha():
    strat = build_strategy("streamingdiloco", {"period": 6, "fragments": 3, "alpha": 0.5})
    assert strat.period == 6 and [strat.offset(p) for p in range(3)] == [0, 2, 4]
    assert "H=6" in strat.describe() and "P=3" in strat.describe() and "alpha 0.5" in strat.describe()


# ------------------------------------------------------------------ reduction to DiLoCo

@pytest.mark.parametrize("compress, outer", [(None, "nesterov"), ("int8", "nesterov"), (None, "adam")])
def test_one_fragment_with_alpha_one_is_exactly_diloco(mesh, compress, outer):
    """Bit for bit, outer optimizer included (DiLoCo's is checked against NumPy in test_methods)."""
    data, lr = softmax_batches(8), 0.7 if outer == "nesterov" else 0.05
    _, ref = run(jaxsel.DiLoCo(period=3, compress=compress, outer_optimizer=outer, outer_lr=lr), mesh, data)
    _, got = run(jaxsel.StreamingDiLoCo(period=3, fragments=1, alpha=1.0, compress=compress,
                                        outer_optimizer=outer, outer_lr=lr), mesh, data)
    for t, ((a, ma), (b, mb)) in enumerate(zip(ref, got)):
        for x, y in zip(leaves((a.params, a.opt_state, a.strategy_state.global_params)),
                        leaves((b.params, b.opt_state, b.strategy_state.global_params))):
            np.testing.assert_array_equal(x, y, err_msg=f"step {t}")
        for x, y in zip(leaves(a.strategy_state.outer_opt), leaves(b.strategy_state.outer_opt), strict=True):
            np.testing.assert_array_equal(x, y, err_msg=f"outer state, step {t}")
        assert bool(ma["synced"]) == bool(mb["synced"]) == ((t + 1) % 3 == 0)
        assert int(ma["bytes_allreduced"]) == int(mb["bytes_allreduced"])
        np.testing.assert_array_equal(ma["loss"], mb["loss"])


# ------------------------------------------------------------------- the schedule

@pytest.mark.parametrize("H, P, fragment_by", [(4, 2, "contiguous"), (4, 3, "contiguous"), (3, 2, "strided")])
def test_each_fragment_syncs_on_its_own_steps_and_moves_its_own_bytes(mesh, H, P, fragment_by):
    T = 3 * H
    strat = jaxsel.StreamingDiLoCo(period=H, fragments=P, fragment_by=fragment_by)
    plan = strat.plan(init_params())
    _, hist = run(strat, mesh, softmax_batches(T))
    glob_before = [np.broadcast_to(x, (R,) + x.shape) for x in leaves(init_params())]
    for t, (state, m) in enumerate(hist):
        syncing = [p for p in range(P) if due(t, p, H, P)]
        assert bool(m["synced"]) == bool(syncing), f"step {t}"
        assert int(m["bytes_allreduced"]) == sum(LEAF_BYTES[i] for p in syncing for i in plan[p]), f"step {t}"
        local, glob = leaves(state.params), leaves(state.strategy_state.global_params)
        for p, frag in enumerate(plan):
            for i in frag:
                # a fragment just synced is identical across replicas (alpha = 1) and equals
                # its new global weights; one not due keeps its replicas apart and its global
                # weights where they were
                assert identical(local[i]) == (p in syncing), f"step {t}, fragment {p}"
                assert identical(glob[i])
                if p in syncing:
                    np.testing.assert_array_equal(local[i], glob[i])
                else:
                    np.testing.assert_array_equal(glob[i], glob_before[i])
        glob_before = glob


def test_the_run_is_evaluated_on_the_global_weights(mesh):
    strat = jaxsel.StreamingDiLoCo(period=2, fragments=2)
    state, _ = run(strat, mesh, softmax_batches(3))
    for c, g in zip(leaves(jaxsel.consensus(state, strat)), leaves(state.strategy_state.global_params)):
        np.testing.assert_allclose(c, g[0], rtol=1e-6)   # the same on every replica; a mean of equal floats


# ------------------------------------------------------------------- the blend

def test_a_blended_sync_matches_a_numpy_reference(mesh):
    """H = 2, P = 2: fragment 0 (b1, w1) syncs after step 1, fragment 1 (w2) after step 2."""
    alpha, outer_lr, mom, data = 0.3, 0.7, 0.9, softmax_batches(2, seed=3)
    strat = jaxsel.StreamingDiLoCo(period=2, fragments=2, alpha=alpha, outer_lr=outer_lr, outer_momentum=mom)
    _, hist = run(strat, mesh, data)
    _, apart = run(TriggeredStrategy(trigger=Never(), sync="model"), mesh, data)   # the local drafts
    state, m = hist[-1]
    assert bool(m["synced"]) and int(m["bytes_allreduced"]) == LEAF_BYTES[0] + LEAF_BYTES[1]
    start = init_params()
    for name in ("b1", "w1"):   # fragment 0: one Nesterov step on delta, then the blend
        local = np.asarray(apart[-1][0].params[name])
        delta = np.asarray(start[name]) - local.mean(0)
        glob = np.asarray(start[name]) - outer_lr * (1 + mom) * delta   # first step: momentum = delta
        np.testing.assert_allclose(state.strategy_state.global_params[name][0], glob, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(state.params[name], alpha * glob + (1 - alpha) * local, rtol=1e-5, atol=1e-6)
        assert not identical(np.asarray(state.params[name]))   # alpha < 1 keeps the replicas apart
        momentum = state.strategy_state.outer_opt[0][0].trace[("b1", "w1").index(name)]
        np.testing.assert_allclose(momentum[0], delta, rtol=1e-5, atol=1e-6)
    # fragment 1 is not due yet: local as the unsynchronized run, global at its start
    np.testing.assert_array_equal(state.params["w2"], apart[-1][0].params["w2"])
    np.testing.assert_array_equal(state.strategy_state.global_params["w2"][0], start["w2"])
    assert not any(x.any() for x in leaves(state.strategy_state.outer_opt[1]))   # no outer step yet


# ----------------------------------------------------------- one sync_where per fragment

def sync_conds(jaxpr):
    """The sync core's conds in a traced step, however deeply nested: the shapes each one's
    collectives reduce."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "cond" and jaxsel.sync.SYNC_SCOPE in str(eqn.source_info.name_stack):
            yield {tuple(v.aval.shape) for b in eqn.params["branches"] for e in b.jaxpr.eqns
                   if e.primitive.name.startswith("psum") for v in e.invars}
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else [value]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from sync_conds(inner)


def test_each_fragment_has_its_own_guarded_collective_over_its_own_tensors(mesh):
    strat, opt = jaxsel.StreamingDiLoCo(period=3, fragments=3), optax.sgd(LR)
    state = jaxsel.init_state(init_params(), opt, strat, mesh, replicas=R)
    step = jaxsel.make_train_step(loss_fn, opt, strat, mesh)
    found = list(sync_conds(jax.make_jaxpr(step)(state, softmax_batches(1)[0]).jaxpr))
    assert found == [{(K,)}, {(D, K)}, {(K, C)}]   # b1, w1, w2: fragments 0, 1, 2 in turn


# ------------------------------------------------------------------- model state

def stateful_loss(params, model_state, batch):
    """A BatchNorm-like running mean of the inputs as the model state."""
    mu = 0.9 * model_state["mu"] + 0.1 * batch["x"].mean(0)
    return loss_fn(params, batch), {"mu": mu}


@pytest.mark.parametrize("sync_model_state", [True, False])
def test_model_state_is_averaged_with_fragment_zero_only(mesh, sync_model_state):
    strat, opt = jaxsel.StreamingDiLoCo(period=2, fragments=2, sync_model_state=sync_model_state), optax.sgd(LR)
    state = jaxsel.init_state(init_params(), opt, strat, mesh, model_state={"mu": jnp.zeros(D)}, replicas=R)
    step = jaxsel.make_train_step(stateful_loss, opt, strat, mesh, stateful=True)
    for t, batch in enumerate(softmax_batches(4)):   # fragment 0 syncs after steps 1 and 3, fragment 1 after 2
        state, m = step(state, batch)
        extra = 4 * D if sync_model_state and t in (1, 3) else 0
        fragment_bytes = {1: LEAF_BYTES[0] + LEAF_BYTES[1], 2: LEAF_BYTES[2], 3: LEAF_BYTES[0] + LEAF_BYTES[1]}
        assert int(m["bytes_allreduced"]) == fragment_bytes.get(t, 0) + extra, f"step {t}"
        assert identical(np.asarray(state.model_state["mu"])) == (sync_model_state and t in (1, 3)), f"step {t}"


def test_a_run_shorter_than_the_first_round_is_warned_about():
    from jaxsel.training.sync_horizon import never_syncs_warning

    line = never_syncs_warning(jaxsel.StreamingDiLoCo(period=100), 50)
    assert line and "\n" not in line and "first fires after step 100" in line and "outer step" in line
    assert never_syncs_warning(jaxsel.StreamingDiLoCo(period=10), 50) is None
