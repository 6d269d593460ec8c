"""DeMo reference: the DCT, chunking, top-k, the senders' mean and the signed update."""
import numpy as np
import pytest

from reference import demo


@pytest.mark.parametrize("n", [1, 2, 5, 64])
def test_dct_matrix_is_orthonormal_dct2(n):
    c = demo.dct_matrix(n)
    np.testing.assert_allclose(c @ c.T, np.eye(n), atol=1e-12)
    np.testing.assert_allclose(c[0], np.full(n, 1 / np.sqrt(n)))
    fft = pytest.importorskip("scipy.fft")
    np.testing.assert_allclose(c, fft.dct(np.eye(n), norm="ortho", axis=0), atol=1e-12)


@pytest.mark.parametrize("dim, chunk", [(768, 64), (100, 50), (67, 1), (10, 10), (64, 64), (128, 64),
                                        (96, 48)])
def test_chunk_length_is_the_largest_divisor_up_to_s(dim, chunk):
    assert demo.chunk_length(dim, 64) == chunk


def test_encode_is_a_blockwise_2d_dct_and_decode_inverts_it():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 100))                  # chunks 64 x 50: 2 x 2 blocks
    c = demo.encode(x)
    assert c.shape == (2, 2, 3200)
    block = x[64:, 50:]
    manual = demo.dct_matrix(64) @ block @ demo.dct_matrix(50).T
    np.testing.assert_allclose(c[1, 1], manual.ravel(), atol=1e-12)   # row-major (h, w)
    np.testing.assert_allclose(demo.decode(c, x.shape), x, atol=1e-12)
    for shape in [(), (7,), (96,), (4, 3, 8)]:
        y = rng.normal(size=shape)
        np.testing.assert_allclose(demo.decode(demo.encode(y), shape), y, atol=1e-12)


def test_topk_per_chunk_lowest_index_on_ties():
    c = np.array([[[1.0, -3.0, 3.0, 0.5], [2.0, 2.0, 2.0, 2.0]]])
    mask = demo.topk_chunks(c, 2)
    assert mask.tolist() == [[[False, True, True, False], [True, True, False, False]]]
    assert demo.topk_chunks(c, 9).all()              # k clamped to the chunk


def test_bytes():
    assert demo.tensor_bytes((128, 100)) == 4 * 32 * 8
    assert demo.tensor_bytes((10,)) == 10 * 8         # one chunk of 10, k clamped to 10
    assert demo.tensor_bytes((67,)) == 67 * 8         # prime: 67 chunks of 1


def test_full_k_single_replica_is_signsgd():
    """k >= chunk: everything is transmitted, the momentum is emptied each step, and the
    update is -lr * sign(g) (any beta)."""
    rng = np.random.default_rng(1)
    p = [rng.normal(size=(4, 6)), rng.normal(size=5)]
    g = [[rng.normal(size=(4, 6)), rng.normal(size=5)]]
    opt = demo.DeMo(lr=0.1, n=1, k=64, chunk=64)
    out = opt.step(p, g)
    for a, b, gg in zip(out, p, g[0]):
        np.testing.assert_allclose(a, b - 0.1 * np.sign(gg), atol=1e-12)
    assert all(np.abs(m).max() < 1e-12 for m in opt.momenta[0])


def test_two_replicas_by_hand():
    """Length-2 tensor, k = 1. DCT_2 = [[1, 1], [1, -1]] / sqrt2.
    Replica A: m = lr g = [1, 1] -> coefficients [sqrt2, 0] -> sends index 0 (sqrt2).
    Replica B: m = [1, -3] -> [-sqrt2, 2 sqrt2] -> sends index 1 (2 sqrt2), keeps [-1, -1].
    Each coefficient has one sender: Q = [sqrt2, 2 sqrt2] -> IDCT [3, -1] -> sign [1, -1]."""
    opt = demo.DeMo(lr=1.0, n=2, beta=0.5, k=1)
    out = opt.step([np.array([5.0, 5.0])], [[np.array([1.0, 1.0])], [np.array([1.0, -3.0])]])
    np.testing.assert_allclose(out[0], [4.0, 6.0])
    np.testing.assert_allclose(opt.momenta[0][0], [0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(opt.momenta[1][0], [-1.0, -1.0], atol=1e-12)


def test_senders_mean_vs_replicas_mean():
    """Per coefficient, the mean over the replicas that sent it (the code's scatter_reduce
    "mean", include_self=False), or the sum over all N replicas / N."""
    q = [(np.array([[[3.0, 0.0]]]), np.array([[[True, False]]])),
         (np.array([[[0.0, 1.0]]]), np.array([[[False, True]]])),
         (np.array([[[1.0, 0.0]]]), np.array([[[True, False]]]))]
    senders = demo.DeMo(lr=1.0, n=3)._combine(q)
    replicas = demo.DeMo(lr=1.0, n=3, average_over="replicas")._combine(q)
    np.testing.assert_allclose(senders, [[[2.0, 1.0]]])
    np.testing.assert_allclose(replicas, [[[4 / 3, 1 / 3]]])
    zero_sent = [(np.array([[[0.0]]]), np.array([[[True]]])), (np.array([[[4.0]]]), np.array([[[True]]]))]
    np.testing.assert_allclose(demo.DeMo(lr=1.0, n=2)._combine(zero_sent), [[[2.0]]])   # a sent 0 counts


def test_residual_momentum_and_decay():
    """k = 1 of a length-4 chunk: the untransmitted coefficients stay in the momentum and
    decay by beta next step; the momentum plus what was sent is beta m + lr g."""
    rng = np.random.default_rng(2)
    g1, g2 = rng.normal(size=4), rng.normal(size=4)
    opt = demo.DeMo(lr=0.5, n=1, beta=0.9, k=1)
    p = opt.step([np.zeros(4)], [[g1]])
    c = demo.encode(0.5 * g1)
    sent = np.where(demo.topk_chunks(c, 1), c, 0.0)
    np.testing.assert_allclose(opt.momenta[0][0], demo.decode(c - sent, (4,)), atol=1e-12)
    np.testing.assert_allclose(p[0], -0.5 * np.sign(demo.decode(sent, (4,))), atol=1e-12)
    m1 = opt.momenta[0][0].copy()
    opt.step(p, [[g2]])
    c2 = demo.encode(0.9 * m1 + 0.5 * g2)
    sent2 = np.where(demo.topk_chunks(c2, 1), c2, 0.0)
    np.testing.assert_allclose(opt.momenta[0][0], demo.decode(c2 - sent2, (4,)), atol=1e-12)


def test_weight_decay_scales_params_first():
    opt = demo.DeMo(lr=0.1, n=1, k=64, weight_decay=0.5)
    out = opt.step([np.array([2.0, -2.0])], [[np.array([1.0, 1.0])]])
    np.testing.assert_allclose(out[0], np.array([2.0, -2.0]) * 0.95 - 0.1)
