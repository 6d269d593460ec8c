"""DES-LOC's separate optimizer-state periods (issue 25, item 5) against tests/reference/desloc.py."""
import jax
import numpy as np
import optax
import pytest

import jaxsel
from helpers import R, identical, run, softmax_batches, softmax_grad_numpy, softmax_params
from reference import desloc, optim

B = 4


def _grad_fn(batches):
    def grad(i, t, params):
        rows = slice(i * B, (i + 1) * B)
        return softmax_grad_numpy(params, batches[t]["x"][rows], batches[t]["y"][rows])
    return grad


@pytest.mark.parametrize("devices, period, opt_state_period", [
    (8, 3, 2), (8, 3, {"mu": 2, "nu": 4}), (2, 2, {"nu": 3}), (1, 3, {"mu": 2, "nu": 4})],
    ids=["8-int", "8-dict", "2x4-nu", "8-on-1-dict"])
def test_local_sgd_adam_matches_numpy_reference(devices, period, opt_state_period):
    """Local SGD with Adam: parameters every P steps, Adam's moments on their own periods,
    every replica's parameters and moments equal to the reference's after 8 steps."""
    mesh = jaxsel.data_mesh(replicas=R, devices=devices)
    steps, lr = 8, 0.05
    batches = softmax_batches(steps, seed=4)
    final, _ = run(jaxsel.LocalSGD(period=period, opt_state_period=opt_state_period), mesh, batches,
                   opt=optax.adam(lr))
    p0 = [np.asarray(x, np.float64) for x in jax.tree.leaves(softmax_params())]
    ws, states = desloc.simulate(p0, _grad_fn(batches), R, steps, optim.Adam(lr), period, opt_state_period)
    final = jax.device_get(final)
    adam = final.opt_state[0]
    for r in range(R):
        for got, want in zip(jax.tree.leaves(final.params), ws[r]):
            np.testing.assert_allclose(got[r], want, rtol=2e-5, atol=2e-6)
        for field in ("mu", "nu"):
            for got, want in zip(jax.tree.leaves(getattr(adam, field)), states[r][field]):
                np.testing.assert_allclose(got[r], want, rtol=1e-4, atol=1e-7)


def test_moments_are_equal_exactly_after_their_own_syncs(mesh):
    """{"mu": 2, "nu": 4}: mu identical across replicas after steps 1 and 3, nu after 3 only."""
    _, hist = run(jaxsel.LocalSGD(period=100, opt_state_period={"mu": 2, "nu": 4}), mesh, softmax_batches(4),
                  opt=optax.adam(0.05))
    mu = [identical(state.opt_state[0].mu) for state, _ in hist]
    nu = [identical(state.opt_state[0].nu) for state, _ in hist]
    assert mu == [False, True, False, True] and nu == [False, False, False, True]


def test_the_period_holds_with_an_error_feedback_codec(mesh):
    """LocalSGD with top-k (its own step, anchored) still averages the momentum every 2 steps."""
    _, hist = run(jaxsel.LocalSGD(period=3, compress="topk:0.5", opt_state_period=2), mesh, softmax_batches(4))
    assert [identical(state.opt_state) for state, _ in hist] == [False, True, False, True]


def test_diloco_inner_state_period(mesh):
    """DiLoCo's inner momentum averaged every 2 steps, its rounds every 3."""
    _, hist = run(jaxsel.DiLoCo(period=3, opt_state_period=2), mesh, softmax_batches(4))
    trace = [identical(state.opt_state) for state, _ in hist]
    assert trace == [False, True, False, True]


@pytest.mark.parametrize("value, match", [
    (0, "opt_state_period must be an integer >= 1"),
    ({"mu": 0}, r"opt_state_period\['mu'\] must be an integer >= 1"),
    ("mu=3", "opt_state_period must be an integer >= 1 or FIELD:Q,FIELD:Q"),
])
def test_bad_periods_are_one_line(value, match):
    with pytest.raises(ValueError, match=match):
        jaxsel.LocalSGD(period=2, opt_state_period=value)


def test_a_field_the_optimizer_lacks_is_named(mesh):
    with pytest.raises(ValueError, match="opt_state_period names 'mu', not a floating field of the optimizer's "
                                         "state; its fields: trace"):
        jaxsel.init_state(softmax_params(), optax.sgd(0.1, momentum=0.9),
                          jaxsel.LocalSGD(period=2, opt_state_period={"mu": 2}), mesh, replicas=R)


def test_command_line_spelling():
    from jaxsel.strategies import build_strategy

    assert build_strategy("localsgd", {"opt_state_period": "mu:12,nu:24"}).opt_state_period == {"mu": 12, "nu": 24}
    assert build_strategy("fedavg", {"opt_state_period": "6"}).opt_state_period == 6
