"""The host's Delta_bar (jaxsel.analysis.significance_stats, what `jaxsel calibrate` and the
frontier's delta points compute) equals the NumPy transcription of the authors' loop
(tests/reference/triggers.py) and the device trigger (core.triggers.Significance), for
both statistics and warm-ups; the quantile deltas against NumPy."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsel.analysis import significance_stats as stats
from jaxsel.core.triggers import Significance
from reference import triggers as ref

T, N = 40, 3
#: (statistic, window, alpha, warmup)
CASES = [("raw", 4, 0.1, None), ("smoothed", 4, 0.1, None), ("raw", 5, 0.01, 0), ("smoothed", 3, 0.3, 2),
         ("raw", 1, 0.0, None), ("smoothed", 1, 0.0, None)]


def trace(seed=0, steps=T, n=N) -> np.ndarray:
    """Gradient norms that wander and jump (a fall to near zero included)."""
    rng = np.random.default_rng(seed)
    s = np.exp(np.cumsum(rng.normal(0, 0.3, size=(steps, n)), axis=0)) * rng.uniform(0.5, 2, size=n)
    s[steps // 2] *= 1e-4
    return s


def reference_trace(s, statistic, window, alpha, warmup, delta=0.3):
    """(votes [T, N], Delta_bar [T, N], NaN where forced) of the authors' loop per replica."""
    sigs = [ref.Significance(delta=delta, window=window, alpha=alpha, statistic=statistic, warmup=warmup)
            for _ in range(s.shape[1])]
    out = [[sig.step(x) for sig, x in zip(sigs, row)] for row in s]
    return np.array([[v for v, _ in r] for r in out]), np.array([[d for _, d in r] for r in out])


def device_trace(s, statistic, window, alpha, warmup, delta=0.3):
    trig = Significance(delta=delta, window=window, alpha=alpha, statistic=statistic, warmup=warmup)

    def replica(column):
        def body(st, x):
            st, vote, d = trig.local_vote(st, x)
            return st, (vote, d)
        return jax.lax.scan(body, trig.init(), column)[1]

    votes, d = jax.jit(jax.vmap(replica, in_axes=1, out_axes=1))(jnp.asarray(s, jnp.float32))
    return np.asarray(votes), np.asarray(d, np.float64)


@pytest.mark.parametrize("statistic, window, alpha, warmup", CASES)
def test_host_equals_the_authors_loop(statistic, window, alpha, warmup):
    s = trace()
    _, want = reference_trace(s, statistic, window, alpha, warmup)
    got = stats.delta_bar(s, window, alpha, statistic)
    decided = ~np.isnan(want)
    np.testing.assert_allclose(got[decided], want[decided], rtol=1e-10, atol=1e-300)
    d = stats.decisions(s, window, alpha, statistic, warmup)
    assert d.warmup == np.isnan(want).all(axis=1).sum()
    np.testing.assert_array_equal(np.isnan(d.value), np.isnan(want).all(axis=1))
    np.testing.assert_allclose(d.decided, np.max(want[d.warmup:], axis=1), rtol=1e-10)


@pytest.mark.parametrize("statistic, window, alpha, warmup", CASES)
def test_device_trigger_equals_the_host_and_votes_as_the_authors_loop(statistic, window, alpha, warmup):
    """Delta_bar to float32 rounding; the votes exactly, with delta at the median of the
    decided values (no value within float32 rounding of it)."""
    s = trace(1)
    host = stats.delta_bar(s, window, alpha, statistic)
    _, d = device_trace(s, statistic, window, alpha, warmup)
    forced = np.isnan(d)
    assert forced.all(axis=1).sum() == stats.decisions(s, window, alpha, statistic, warmup).warmup
    np.testing.assert_allclose(d[~forced], host[~forced], rtol=2e-5, atol=1e-7)
    values = np.sort(host[~forced])
    delta = float(values[len(values) // 2])
    delta = (delta + values[len(values) // 2 + 1]) / 2
    assert np.min(np.abs(host[~forced] - delta)) > 1e-4 * delta
    want_votes, _ = reference_trace(s, statistic, window, alpha, warmup, delta)
    got_votes, _ = device_trace(s, statistic, window, alpha, warmup, delta)
    np.testing.assert_array_equal(got_votes, want_votes)
    assert want_votes[~forced].any() and not want_votes[~forced].all()


def test_quantile_deltas_against_numpy():
    rng = np.random.default_rng(2)
    for n in (1, 7, 10, 20, 30, 600):
        v = rng.gamma(2.0, 0.1, size=n)
        got = stats.fraction_deltas(v)
        for f, delta in got.items():
            k = int(np.ceil(round(f * n, 9)))
            k = max(k, 1)
            assert delta == -np.partition(-v, k - 1)[k - 1]      # the k-th largest
            assert (v >= delta).sum() == k and (v > delta).sum() < k
            assert stats.sync_fraction(v, delta) == k / n
    assert stats.fraction_deltas([]) == {}


def test_summary_is_numpy_median_p90_max():
    v = np.random.default_rng(3).uniform(size=101)
    assert stats.summary(v) == {"median": np.median(v), "p90": np.quantile(v, 0.9), "max": v.max()}
    assert stats.summary([]) == {"median": None, "p90": None, "max": None}


def test_bad_statistic_is_one_line():
    with pytest.raises(ValueError, match=r"^statistic must be 'smoothed' or 'raw', got 'released'$"):
        stats.delta_bar(trace(), statistic="released")
