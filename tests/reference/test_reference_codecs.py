"""The top-k / sign codecs' reference: hand-computed cases and error-feedback invariants."""
import numpy as np
import pytest

from reference import codecs
from reference.linreg import make_problem
from reference.trees import zeros_like_replicas


@pytest.mark.parametrize("size, fraction, k", [
    (100, 0.07, 7),      # 0.07 * 100 == 7.000000000000001 in floats: still 7
    (100, 0.01, 1), (1, 0.01, 1), (10, 0.25, 3), (3, 1.0, 3), (1000, 0.001, 1), (7, 0.5, 4),
])
def test_topk_count_is_the_exact_ceiling(size, fraction, k):
    assert codecs.topk_count(size, fraction) == k


@pytest.mark.parametrize("fraction", [0, -0.1, 1.5])
def test_topk_fraction_out_of_range(fraction):
    with pytest.raises(ValueError, match="fraction"):
        codecs.topk_count(10, fraction)


def test_topk_keeps_largest_magnitudes_lowest_index_on_ties():
    u = np.array([[0.5, -2.0], [1.0, 2.0]])          # flat: 0.5, -2, 1, 2
    sent, kept = codecs.topk(u, 0.25)                  # k = 1: |-2| == |2|, index 1 first
    assert kept.tolist() == [1]
    np.testing.assert_array_equal(sent, [[0, -2.0], [0, 0]])
    sent, kept = codecs.topk(u, 0.5)
    assert kept.tolist() == [1, 3]
    np.testing.assert_array_equal(sent, [[0, -2.0], [0, 2.0]])


def test_sign_scale_and_zero_convention():
    u = np.array([1.0, -3.0, 0.0, 2.0, -0.0])
    sent, scale = codecs.sign(u)
    assert scale == pytest.approx(6.0 / 5)
    np.testing.assert_allclose(sent, [1.2, -1.2, 1.2, 1.2, 1.2])   # sign(0) = sign(-0) = +1


@pytest.mark.parametrize("shape, codec, fraction, expected", [
    ((100,), "topk", 0.07, 56), ((4, 5), "topk", 0.1, 16), ((), "topk", 0.01, 8),
    ((16,), "sign", None, 6), ((17,), "sign", None, 7), ((1,), "sign", None, 5), ((3, 3), "sign", None, 6),
])
def test_bytes(shape, codec, fraction, expected):
    assert codecs.payload_bytes([shape], codec, fraction) == expected


def test_ef_round_by_hand():
    """Two replicas, one tensor, top-k 1 of 2, with residuals carried over two rounds."""
    p = [[np.array([3.0, 1.0])], [np.array([-1.0, 2.0])]]
    res = zeros_like_replicas([np.zeros(2)], 2)
    agg, res, sent = codecs.ef_round(p, res, "topk", 0.5)
    np.testing.assert_array_equal(sent[0][0], [3, 0])
    np.testing.assert_array_equal(sent[1][0], [0, 2])
    np.testing.assert_array_equal(agg[0], [1.5, 1.0])
    np.testing.assert_array_equal(res[0][0], [0, 1])
    np.testing.assert_array_equal(res[1][0], [-1, 0])
    agg, res, sent = codecs.ef_round(p, res, "topk", 0.5)   # u0 = [3, 2], u1 = [-2, 2]
    np.testing.assert_array_equal(sent[0][0], [3, 0])
    np.testing.assert_array_equal(sent[1][0], [-2, 0])       # tie |-2| == |2|: index 0
    np.testing.assert_array_equal(res[1][0], [0, 2])


@pytest.mark.parametrize("codec, fraction", [("topk", 0.2), ("sign", None)])
def test_error_feedback_telescopes(codec, fraction):
    """sum of what was sent + the last residual == sum of the payloads, per replica."""
    rng = np.random.default_rng(1)
    shapes = [(3, 4), (5,)]
    res = [[np.zeros(s) for s in shapes] for _ in range(3)]
    total_p = [[np.zeros(s) for s in shapes] for _ in range(3)]
    total_s = [[np.zeros(s) for s in shapes] for _ in range(3)]
    for _ in range(6):
        p = [[rng.normal(size=s) for s in shapes] for _ in range(3)]
        _, res, sent = codecs.ef_round(p, res, codec, fraction)
        for i in range(3):
            for j in range(2):
                total_p[i][j] += p[i][j]
                total_s[i][j] += sent[i][j]
    for i in range(3):
        for j in range(2):
            np.testing.assert_allclose(total_s[i][j] + res[i][j], total_p[i][j], atol=1e-12)


def test_no_error_feedback_and_full_topk():
    rng = np.random.default_rng(2)
    p = [[rng.normal(size=(4,))] for _ in range(3)]
    res = zeros_like_replicas([np.zeros(4)], 3)
    agg, res2, _ = codecs.ef_round(p, res, "topk", 0.25, error_feedback=False)
    assert all(np.all(r[0] == 0) for r in res2)
    np.testing.assert_allclose(agg[0], np.mean([codecs.topk(x[0], 0.25)[0] for x in p], axis=0))
    agg, res2, _ = codecs.ef_round(p, res, "topk", 1.0)              # F = 1: exact mean, no residual
    np.testing.assert_allclose(agg[0], np.mean([x[0] for x in p], axis=0))
    assert all(np.all(r[0] == 0) for r in res2)
    agg, _, _ = codecs.ef_round(p, res, "topk", 1.0, weights=[1, 1, 1])   # a sum aggregator
    np.testing.assert_allclose(agg[0], np.sum([x[0] for x in p], axis=0))


@pytest.mark.parametrize("mode", ["model", "params"])
def test_parameter_averaging_payload_rule(mode):
    prob = make_problem(n_replicas=3)
    p0 = prob.init()
    plain, _, _ = codecs.simulate_local_sgd(p0, prob.grad, 3, 8, 4, 0.1, None, mode=mode)
    full, res, _ = codecs.simulate_local_sgd(p0, prob.grad, 3, 8, 4, 0.1, "topk", 1.0, mode=mode)
    for a, b in zip(plain, full):                          # F = 1 is the uncompressed run
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, atol=1e-12)
    ws, res, anchor = codecs.simulate_local_sgd(p0, prob.grad, 3, 8, 4, 0.1, "topk", 0.3, mode=mode)
    if mode == "model":                                    # synced at the last step: all at the anchor
        for w in ws:
            for x, a in zip(w, anchor):
                np.testing.assert_array_equal(x, a)
    assert any(np.any(r[0] != 0) for r in res)             # 2 of 5 weights sent: residuals remain


def test_parameter_averaging_by_hand():
    """One replica pair, one weight pair, one step then a sync: anchor + mean of top-1 changes."""
    grads = {0: [np.array([1.0, 0.0])], 1: [np.array([0.0, -2.0])]}
    ws, res, anchor = codecs.simulate_local_sgd([np.array([1.0, 1.0])], lambda i, t, w: grads[i],
                                                2, 1, 1, 0.5, "topk", 0.5)
    # changes: replica 0 [-0.5, 0] sends it all; replica 1 [0, 1] sends it all
    np.testing.assert_allclose(anchor[0], [0.75, 1.5])
    np.testing.assert_allclose(ws[1][0], [0.75, 1.5])
    assert all(np.all(r[0] == 0) for r in res)
