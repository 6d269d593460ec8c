"""Krum, Multi-Krum, Bulyan references: hand-computed cases, ties, validity."""
import numpy as np
import pytest

from reference import robust

# 1-D points 0, 1, 2, 3, 100 (F = 1: 2 neighbours). Squared distances give scores
# 0: 1+4=5, 1: 1+1=2, 2: 1+1=2, 3: 1+4=5, 100: 97^2+98^2=19013.
POINTS = [[np.array([v])] for v in (0.0, 1.0, 2.0, 3.0, 100.0)]


def test_krum_scores_by_hand():
    np.testing.assert_array_equal(robust.krum_scores(robust.flatten(POINTS), 1), [5, 2, 2, 5, 19013])


def test_krum_takes_lowest_index_on_tie():
    assert robust.krum_index(POINTS, 1) == 1
    np.testing.assert_array_equal(robust.krum(POINTS, 1)[0], [1.0])


@pytest.mark.parametrize("m, expected", [(1, 1.0), (2, 1.5), (3, 1.0), (4, 1.5), (5, 21.2)])
def test_multikrum_by_hand(m, expected):
    # m = 3: the tie 0 vs 3 at score 5 keeps index 0 -> mean(1, 2, 0)
    np.testing.assert_allclose(robust.multikrum(POINTS, 1, m)[0], [expected])


def test_payload_is_all_tensors_flattened_together():
    """Distances over the concatenation: two tensors' squared distances add up."""
    a = [[np.array([0.0, 0.0]), np.array(0.0)], [np.array([1.0, 0.0]), np.array(2.0)]]
    np.testing.assert_array_equal(robust.squared_distances(robust.flatten(a)), [[0, 5], [5, 0]])
    out = robust.multikrum([a[0], a[1], a[0], a[0], a[1]], 1, 2)
    assert [np.shape(t) for t in out] == [(2,), ()]


def test_closest_to_median_by_hand():
    v = np.array([[1.0], [2.0], [4.0], [8.0], [16.0]])          # median 4: distances 3, 2, 0, 4, 12
    np.testing.assert_allclose(robust.closest_to_median_mean(v, 3), [7 / 3])
    v = np.array([[1.0], [2.0], [4.0], [8.0]])                  # even: median (2+4)/2 = 3
    np.testing.assert_allclose(robust.closest_to_median_mean(v, 2), [3.0])
    v = np.array([[1.0], [3.0], [5.0], [7.0]])                  # median 4: 1 and 7 tie at 3
    np.testing.assert_allclose(robust.closest_to_median_mean(v, 3), [3.0])   # lowest row: 1
    v = np.array([[7.0], [5.0], [3.0], [1.0]])
    np.testing.assert_allclose(robust.closest_to_median_mean(v, 3), [5.0])   # lowest row: 7


def test_bulyan_by_hand():
    """N = 7, F = 1: theta = 5 by repeated Krum, beta = 3 around the coordinate median."""
    pts = [[np.array([v, -v])] for v in (0.0, 1.0, 2.0, 3.0, 4.0, 50.0, -60.0)]
    x = robust.flatten(pts)
    assert robust.bulyan_selection(x, 1) == [2, 1, 3, 0, 4]
    np.testing.assert_allclose(robust.bulyan(pts, 1)[0], [2.0, -2.0])   # median 2: 1, 2, 3


def test_bulyan_selection_shrinks_krum_neighbours():
    """Round r scores the N - r remaining replicas with max(1, n - F - 2) neighbours."""
    x = robust.flatten([[np.array([v])] for v in (0.0, 1.0, 2.0, 4.0, 7.0, 11.0, 16.0)])
    sel = robust.bulyan_selection(x, 1)
    rest = list(range(7))
    for s in sel:
        assert s == rest[int(np.argmin(robust.krum_scores(x[rest], 1)))]
        rest.remove(s)
    assert len(sel) == 5 and len(set(sel)) == 5


def test_bulyan_ignores_outliers_and_f0_is_the_mean():
    rng = np.random.default_rng(3)
    honest = [[rng.normal(size=(2, 3)), rng.normal(size=4)] for _ in range(9)]
    bad = [[np.full((2, 3), 1e6), np.full(4, -1e6)] for _ in range(2)]
    out = robust.bulyan(honest + bad, 2)
    assert all(np.all(np.abs(t) < 10) for t in out)
    mean = robust.unflatten(robust.flatten(honest).mean(0), honest[0])
    for a, b in zip(robust.bulyan(honest, 0), mean):
        np.testing.assert_allclose(a, b, atol=1e-12)


def test_krum_survives_one_garbage_replica():
    rng = np.random.default_rng(4)
    payloads = [[rng.normal(size=3)] for _ in range(8)]
    payloads[5] = [np.full(3, 1e9)]
    assert robust.krum_index(payloads, 1) != 5
    assert 5 not in robust.multikrum_indices(payloads, 1, 7)


@pytest.mark.parametrize("fn, n, f", [
    (robust.krum, 4, 1), (robust.krum, 6, 2), (robust.bulyan, 6, 1), (robust.bulyan, 10, 2),
    (robust.krum, 5, -1),
])
def test_invalid_f_for_n(fn, n, f):
    with pytest.raises(ValueError, match=f"N={n}"):
        fn([[np.array([float(i)])] for i in range(n)], f)


def test_multikrum_m_range():
    with pytest.raises(ValueError, match="M=6"):
        robust.multikrum(POINTS, 1, 6)
    with pytest.raises(ValueError, match="M=0"):
        robust.multikrum(POINTS, 1, 0)
