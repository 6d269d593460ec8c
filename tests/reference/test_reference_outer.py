"""Outer-optimizer references (optax transcriptions, DiLoCo rounds): hand-computed steps and
the equivalences the strategies rely on."""
import numpy as np
import pytest

from reference import codecs, optim, outer
from reference.linreg import make_problem


def test_nesterov_sgd_by_hand():
    """optax.sgd(0.7, momentum=0.9, nesterov=True): trace = g + 0.9 trace; update =
    -0.7 (g + 0.9 trace)."""
    opt = outer.outer_optimizer("nesterov")
    state = opt.init([np.zeros(1)])
    u, state = opt.update([np.array([1.0])], state)
    np.testing.assert_allclose(u[0], [-0.7 * 1.9])
    u, state = opt.update([np.array([1.0])], state)           # trace 1.9
    np.testing.assert_allclose(u[0], [-0.7 * (1 + 0.9 * 1.9)])
    np.testing.assert_allclose(state["trace"][0], [1.9])


def test_heavy_ball_and_plain_sgd():
    opt = outer.outer_optimizer("sgd", lr=0.5, momentum=0.9)
    s = opt.init([np.zeros(1)])
    _, s = opt.update([np.array([2.0])], s)
    u, s = opt.update([np.array([2.0])], s)
    np.testing.assert_allclose(u[0], [-0.5 * 3.8])
    plain = outer.outer_optimizer("sgd", lr=0.5, momentum=0.0)
    assert plain.init([np.zeros(1)]) == {}
    np.testing.assert_allclose(plain.update([np.array([2.0])], {})[0][0], [-1.0])


def test_adam_first_steps_by_hand():
    opt = outer.outer_optimizer("adam", lr=0.1)
    s = opt.init([np.zeros(2)])
    u, s = opt.update([np.array([3.0, -0.5])], s)             # mu_hat = g, nu_hat = g^2
    np.testing.assert_allclose(u[0], -0.1 * np.array([3.0, -0.5]) / (np.array([3.0, 0.5]) + 1e-8))
    u, s = opt.update([np.array([1.0, 1.0])], s)
    mu = 0.1 * np.array([1.0, 1.0]) + 0.9 * 0.1 * np.array([3.0, -0.5])
    nu = 0.001 * 1.0 + 0.999 * 0.001 * np.array([9.0, 0.25])
    expected = -0.1 * (mu / (1 - 0.81)) / (np.sqrt(nu / (1 - 0.999 ** 2)) + 1e-8)
    np.testing.assert_allclose(u[0], expected, rtol=1e-12)
    assert s["count"] == 2


def test_adamw_adds_decoupled_decay_on_params():
    g, p = [np.array([0.2])], [np.array([5.0])]
    ua, _ = optim.Adam(0.1).update(g, optim.Adam(0.1).init(p), p)
    uw, _ = outer.outer_optimizer("adamw", lr=0.1).update(g, optim.Adam(0.1).init(p), p)
    np.testing.assert_allclose(uw[0] - ua[0], [-0.1 * 1e-4 * 5.0])


def test_unknown_outer_optimizer():
    with pytest.raises(ValueError, match="lion"):
        outer.outer_optimizer("lion")


def _local_sgd(prob, n, h, rounds, lr):
    """Plain local SGD with period h, averaging after every h-th step."""
    ws = [prob.init() for _ in range(n)]
    out = []
    for r in range(rounds):
        for k in range(h):
            ws = [[p - lr * g for p, g in zip(ws[i], prob.grad(i, r * h + k, ws[i]))] for i in range(n)]
        mean = [np.mean(np.stack(x), axis=0) for x in zip(*ws)]
        ws = [[m.copy() for m in mean] for _ in range(n)]
        out.append(mean)
    return out


def test_outer_sgd_lr1_no_momentum_is_local_sgd():
    prob = make_problem(n_replicas=4)
    hist, _, _ = outer.simulate_diloco(prob.init(), prob.grad, 4, 3, 4, 0.1, "sgd", 1.0, 0.0)
    for a, b in zip(hist, _local_sgd(prob, 4, 3, 4, 0.1)):
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, atol=1e-12)


def _replicas_after(prob, n, steps, lr):
    ws = [prob.init() for _ in range(n)]
    for t in range(steps):
        ws = [[p - lr * g for p, g in zip(ws[i], prob.grad(i, t, ws[i]))] for i in range(n)]
    return ws


def test_pseudo_gradient_is_global_minus_mean():
    prob = make_problem(n_replicas=3)
    hist, deltas, _ = outer.simulate_diloco(prob.init(), prob.grad, 3, 2, 1, 0.1, "adam", 0.01)
    ws = _replicas_after(prob, 3, 2, 0.1)
    for d, p0, *rep in zip(deltas[0], prob.init(), *ws):
        np.testing.assert_allclose(d, p0 - np.mean(rep, axis=0), atol=1e-14)


@pytest.mark.parametrize("name", outer.OUTER)
def test_every_outer_optimizer_reduces_the_loss(name):
    prob = make_problem(n_replicas=4)
    lr = {"nesterov": 0.7, "sgd": 0.7, "adam": 0.05, "adamw": 0.05}[name]
    hist, _, _ = outer.simulate_diloco(prob.init(), prob.grad, 4, 5, 20, 0.05, name, lr)
    loss = lambda p: np.mean([prob.loss(i, p) for i in range(4)])
    assert loss(hist[-1]) < 0.5 * loss(prob.init())


def test_compressed_pseudo_gradient():
    """topk:1.0 is the uncompressed run; with sign, the first round's pseudo-gradient is the
    mean of each replica's mean|global - w_i| * sign(global - w_i)."""
    prob = make_problem(n_replicas=3)
    a, _, _ = outer.simulate_diloco(prob.init(), prob.grad, 3, 2, 3, 0.1)
    b, _, _ = outer.simulate_diloco(prob.init(), prob.grad, 3, 2, 3, 0.1, codec="topk", fraction=1.0)
    for x, y in zip(a[-1], b[-1]):
        np.testing.assert_allclose(x, y, atol=1e-12)
    _, d, _ = outer.simulate_diloco(prob.init(), prob.grad, 3, 2, 1, 0.1, codec="sign")
    ws = _replicas_after(prob, 3, 2, 0.1)
    for j, p0 in enumerate(prob.init()):
        expected = np.mean([codecs.sign(p0 - w[j])[0] for w in ws], axis=0)
        np.testing.assert_allclose(d[0][j], expected, atol=1e-14)
