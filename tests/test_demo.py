"""DeMo (issue 25, item 7): the chunked DCT and the strategy against tests/reference/demo.py."""
import jax
import numpy as np
import optax
import pytest

import jaxsel
from helpers import R, run, softmax_batches, softmax_grad_numpy, softmax_params
from jaxsel.core import dct
from reference import demo as ref

SHAPES = [(), (7,), (67,), (6, 100), (3, 4, 10), (128, 96)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("chunk", [64, 8])
def test_chunked_dct_matches_reference_and_inverts(shape, chunk):
    x = np.random.default_rng(len(shape)).normal(size=shape)
    coeffs = np.asarray(dct.encode(jax.numpy.asarray(x, np.float32), chunk))
    np.testing.assert_allclose(coeffs, ref.encode(x, chunk).reshape(coeffs.shape), rtol=1e-4, atol=1e-5)
    back = np.asarray(dct.decode(jax.numpy.asarray(coeffs), shape, chunk))
    np.testing.assert_allclose(back, x, rtol=1e-4, atol=1e-5)


def test_chunk_lengths_are_the_largest_divisors():
    assert [dct.chunk_length(d, 64) for d in (768, 100, 96, 67, 1)] == [64, 50, 48, 1, 1]


def test_top_coefficients_break_ties_towards_the_lowest_index():
    values, indices = dct.top_coefficients(jax.numpy.array([[1.0, -3.0, 3.0, 0.5]]), 2)
    assert indices.tolist() == [[1, 2]] and values.tolist() == [[-3.0, 3.0]]


def _reference_run(batches, steps, **options):
    """The NumPy DeMo on the same per-replica batches: the parameters after each step."""
    params = [np.asarray(p, np.float64) for p in jax.tree.leaves(softmax_params())]
    demo = ref.DeMo(n=R, **options)
    b = len(batches[0]["y"]) // R
    out = []
    for t in range(steps):
        rows = [slice(i * b, (i + 1) * b) for i in range(R)]
        grads = [softmax_grad_numpy(params, batches[t]["x"][r], batches[t]["y"][r]) for r in rows]
        params = demo.step(params, grads)
        out.append(params)
    return out


@pytest.mark.parametrize("devices, average_over", [(8, "senders"), (1, "senders"), (8, "replicas")])
def test_demo_matches_numpy_reference(devices, average_over):
    """Four steps on 8 devices and 8 packed on 1: every replica holds the reference's
    parameters, and each step's bytes are 8 per coefficient sent."""
    options = dict(lr=0.01, chunk=4, k=2, average_over=average_over, weight_decay=0.1)
    mesh = jaxsel.data_mesh(replicas=R, devices=devices)
    batches = softmax_batches(4, seed=9)
    strategy = jaxsel.DeMo(lr=0.01, chunk=4, topk=2, average_over=average_over, weight_decay=0.1)
    _, hist = run(strategy, mesh, batches, opt=optax.sgd(0.0))
    want = _reference_run(batches, 4, **options)
    for (state, metrics), expected in zip(hist, want):
        for leaf, e in zip(jax.tree.leaves(state.params), expected):
            for r in range(R):
                np.testing.assert_allclose(leaf[r], e, rtol=1e-5, atol=1e-6)
        shapes = [np.shape(e) for e in expected]
        assert int(metrics["bytes_allreduced"]) == sum(ref.tensor_bytes(s, 4, 2) for s in shapes)
        assert bool(metrics["synced"])


@pytest.mark.parametrize("options, match", [
    ({"lr": 0.0}, "lr must be a finite number > 0"),
    ({"topk": 0}, "topk must be an integer >= 1"),
    ({"beta": 1.0}, r"beta must be in \[0, 1\)"),
    ({"average_over": "all"}, "average_over must be one of senders, replicas"),
])
def test_demo_options_are_checked(options, match):
    with pytest.raises(ValueError, match=match):
        jaxsel.DeMo(**options)


def test_a_run_gives_demo_its_learning_rate_and_weight_decay_unless_set():
    """DeMo is the run's optimizer: --lr and --weight-decay reach it, --opt overrides them."""
    from jaxsel import TrainConfig
    from jaxsel.training.run import configured_strategy

    strategy = configured_strategy(TrainConfig(strategy="demo", lr=0.2, weight_decay=0.01))
    assert (strategy.lr, strategy.weight_decay) == (0.2, 0.01)
    own = configured_strategy(TrainConfig(strategy="demo", lr=0.2, strategy_options={"lr": 0.003}))
    assert (own.lr, own.weight_decay) == (0.003, 0.0)
