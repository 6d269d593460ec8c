"""DES-LOC reference: separate periods for parameters and optimizer-state fields."""
import numpy as np
import pytest

from reference import desloc, optim
from reference.linreg import make_problem

N = 3


@pytest.fixture(scope="module")
def prob():
    return make_problem(n_replicas=N)


def _same_across(states, field):
    return all(np.array_equal(a, b) for s in states[1:] for a, b in zip(s[field], states[0][field]))


def test_state_local_by_default(prob):
    """None: replicas' momenta never averaged (they differ), parameters synced every P."""
    ws, states = desloc.simulate(prob.init(), prob.grad, N, 6, optim.SGD(0.05, 0.9), period=3)
    assert not _same_across(states, "trace")
    assert all(np.array_equal(a, b) for w in ws[1:] for a, b in zip(w, ws[0]))


def test_p1_q1_momentum_is_synchronous_momentum_on_the_mean_gradient(prob):
    """Averaging parameters and the (linear) momentum every step is one SGD-momentum run on
    the replicas' mean gradient."""
    ws, _ = desloc.simulate(prob.init(), prob.grad, N, 7, optim.SGD(0.05, 0.9, nesterov=True), 1, 1)
    opt, p = optim.SGD(0.05, 0.9, nesterov=True), prob.init()
    s = opt.init(p)
    for t in range(7):
        g = [np.mean(x, axis=0) for x in zip(*[prob.grad(i, t, p) for i in range(N)])]
        u, s = opt.update(g, s, p)
        p = optim.apply(p, u)
    for a, b in zip(ws[0], p):
        np.testing.assert_allclose(a, b, atol=1e-12)


def test_per_field_periods_for_adam(prob):
    """{"mu": 2, "nu": 4} with P = 1: mu equal across replicas after steps 1, 3, 5; nu after
    step 3 only, of steps 0..4; count is never touched."""
    def run(steps):
        return desloc.simulate(prob.init(), prob.grad, N, steps, optim.Adam(0.01), 1, {"mu": 2, "nu": 4})[1]
    for steps, mu_equal, nu_equal in [(1, False, False), (2, True, False), (3, False, False), (4, True, True),
                                      (5, False, False)]:
        states = run(steps)
        assert _same_across(states, "mu") == mu_equal, steps
        assert _same_across(states, "nu") == nu_equal, steps
        assert all(s["count"] == steps for s in states)


def test_averaged_field_is_the_replica_mean(prob):
    """One step, Q = 1: every replica's trace is the mean of the replicas' new traces."""
    opt = optim.SGD(0.05, 0.9)
    _, states = desloc.simulate(prob.init(), prob.grad, N, 1, opt, period=5, opt_state_period=1)
    grads = [prob.grad(i, 0, prob.init()) for i in range(N)]   # first trace = gradient
    for j in range(2):
        np.testing.assert_allclose(states[0]["trace"][j], np.mean([g[j] for g in grads], axis=0), atol=1e-15)


@pytest.mark.parametrize("bad, match", [({"trace": 2}, "trace"), ({"count": 2}, "count"), ({"mu": 0}, "mu"),
                                        (2.5, "integer")])
def test_bad_periods(prob, bad, match):
    with pytest.raises(ValueError, match=match):
        desloc.simulate(prob.init(), prob.grad, N, 1, optim.Adam(0.01), 1, bad)
