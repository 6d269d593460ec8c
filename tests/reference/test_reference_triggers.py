"""SelSync (significance, both statistics and warm-ups, + max_local) and Accordion
references: hand-computed sequences."""
import numpy as np
import pytest

from reference import triggers


def test_significance_by_hand():
    """W = 1, alpha = 0: G_t = s_t, D_t = |s_t - s_{t-1}| / s_{t-1}; warm-up is step 0."""
    sig = triggers.Significance(delta=0.3, window=1, alpha=0.0, statistic="smoothed")
    out = [sig.step(s) for s in (1.0, 1.0, 2.0, 2.0, 1.0)]
    assert [v for v, _ in out] == [True, False, True, False, True]
    np.testing.assert_allclose([d for _, d in out[1:]], [0.0, 1.0, 0.0, 0.5])
    assert np.isnan(out[0][1])


def test_significance_warmup_is_2w_minus_1_steps():
    sig = triggers.Significance(delta=0.3, window=4, alpha=0.01, statistic="smoothed")
    votes = [sig.step(1.0)[0] for _ in range(12)]
    assert votes == [True] * 7 + [False] * 5     # constant norms: no change after the warm-up


def test_significance_window_2_by_hand():
    """W = 2, alpha = 0: weights (1/2, 1/2). G_1 = (s1+s0)/2; Delta from t = 2 on."""
    sig = triggers.Significance(delta=0.1, window=2, alpha=0.0, statistic="smoothed")
    s = [1.0, 3.0, 3.0, 5.0, 5.0]
    out = [sig.step(x) for x in s]
    # G: 0.5, 2, 3, 4, 5; Delta_2 = 1/2, Delta_3 = 1/3, Delta_4 = 1/4
    # D_t = mean of the last two Deltas (zeros before t = 2): D_3 = (1/3 + 1/2)/2, D_4 = (1/4 + 1/3)/2
    assert [v for v, _ in out] == [True, True, True, True, True]
    np.testing.assert_allclose([out[3][1], out[4][1]], [(1 / 3 + 1 / 2) / 2, (1 / 4 + 1 / 3) / 2])


def test_ewma_meter_is_zero_until_its_window_fills_then_the_weighted_mean():
    m = triggers.EWMAMeter(3, 0.5)
    values = []
    for v in (1.0, 2.0, 4.0, 8.0):
        m.smoothendata(v)
        values.append(m.smooth_val())
    w = np.array([0.5, 0.25, 0.125])      # (1 - alpha)^k, k = 1 newest ... 3 oldest
    np.testing.assert_allclose(values, [0.0, 0.0, (w @ [4, 2, 1]) / w.sum(), (w @ [8, 4, 2]) / w.sum()])


def test_raw_by_hand():
    """W = 1, alpha = 0: Delta_bar_t = |s_t - s_{t-1}| / s_{t-1} with s_{-1} = 1.0 (the
    authors' initial prev_gradnorm); the warm-up is W - 1 = 0 steps."""
    sig = triggers.Significance(delta=0.3, window=1, alpha=0.0, statistic="raw")
    out = [sig.step(s) for s in (1.0, 1.0, 2.0, 2.0, 1.0)]
    assert [v for v, _ in out] == [False, False, True, False, True]
    np.testing.assert_allclose([d for _, d in out], [0.0, 0.0, 1.0, 0.0, 0.5])
    first = triggers.Significance(delta=0.3, window=1, alpha=0.0, statistic="raw").step(3.0)
    assert first == (True, 2.0)            # |3 - 1| / 1: the first change is against 1.0


def test_raw_window_2_by_hand():
    """W = 2, alpha = 0: Delta = 1, 1/2, 0, 1 (the first against 1.0); Delta_bar = the mean
    of the last two from t = 1 (= W - 1), the first step forced."""
    sig = triggers.Significance(delta=0.4, window=2, alpha=0.0, statistic="raw")
    out = [sig.step(s) for s in (2.0, 3.0, 3.0, 6.0)]
    assert [v for v, _ in out] == [True, True, False, True]
    assert np.isnan(out[0][1])
    np.testing.assert_allclose([d for _, d in out[1:]], [0.75, 0.25, 0.5])


def test_warmup_defaults_w_minus_1_raw_and_2w_minus_1_smoothed():
    for statistic, forced in (("raw", 3), ("smoothed", 7)):
        sig = triggers.Significance(delta=0.3, window=4, alpha=0.01, statistic=statistic)
        votes = [sig.step(1.0)[0] for _ in range(12)]
        assert votes == [True] * forced + [False] * (12 - forced), statistic


@pytest.mark.parametrize("statistic, fill", [("raw", 1), ("smoothed", 3)])
def test_a_short_warmup_decides_on_zero_until_the_window_fills(statistic, fill):
    """warmup=0: nothing is forced; Delta_bar is EWMAMeter's 0. until its window fills, so
    no vote there (delta > 0), a vote at delta = 0."""
    s = [5.0, 1.0, 9.0, 2.0, 8.0, 1.0]
    sig = triggers.Significance(delta=0.01, window=2, alpha=0.0, statistic=statistic, warmup=0)
    out = [sig.step(x) for x in s]
    assert [d for _, d in out[:fill]] == [0.0] * fill and not any(v for v, _ in out[:fill])
    assert all(v for v, _ in out[fill:]) and all(d > 0.01 for _, d in out[fill:])
    sig = triggers.Significance(delta=0.0, window=2, alpha=0.0, statistic=statistic, warmup=0)
    assert all(sig.step(x)[0] for x in s)


def test_significance_validation():
    with pytest.raises(ValueError, match="statistic"):
        triggers.Significance(statistic="released")


def test_any_replica_vote_syncs():
    sel = triggers.SelSync(2, delta=0.3, window=1, alpha=0.0, statistic="smoothed")
    steps = [(1.0, 1.0), (1.0, 1.0), (1.0, 2.0), (1.0, 2.0)]
    assert triggers.run(sel, steps) == [True, False, True, False]


@pytest.mark.parametrize("k", [1, 2, 5])
def test_max_local_caps_runs_of_local_steps(k):
    """Constant norms: only the warm-up step votes; the cap then syncs every (k+1)-th step."""
    sel = triggers.SelSync(1, max_local=k, delta=0.3, window=1, alpha=0.0, statistic="smoothed")
    decisions = triggers.run(sel, [(1.0,)] * 20)
    expected = [t % (k + 1) == 0 for t in range(20)]
    assert decisions == expected


def test_max_local_counts_from_the_last_sync_of_any_kind():
    sel = triggers.SelSync(1, max_local=3, delta=0.3, window=1, alpha=0.0, statistic="smoothed")
    norms = [1, 1, 1, 2, 2, 2, 2, 2, 2]          # step 3 votes (change 1.0)
    expected = [True, False, False, True, False, False, False, True, False]
    assert triggers.run(sel, [(x,) for x in norms]) == expected


def test_max_local_validation():
    for bad in (0, -1, 2.0):
        with pytest.raises(ValueError, match="max_local"):
            triggers.SelSync(1, max_local=bad)


def _accordion(grads_per_step, n=1, **kw):
    acc = triggers.Accordion(n, **kw)
    return triggers.run(acc, grads_per_step), acc.periods


def test_accordion_by_hand():
    """I = 4, low = 2, high = 4. Intervals 0 and 1 run at low (start critical; interval 0 has
    no predecessor). Interval norms: 4, 4 (change 0 -> high), 4 (0 -> high), 12 (2 -> low)."""
    g = [np.array([1.0])] * 12 + [np.array([3.0])] * 4 + [np.array([1.0])] * 4
    decisions, periods = _accordion([[x] for x in g], interval=4, eta=0.5, low=2, high=4)
    assert periods == [2, 2, 4, 4, 2, 2]
    synced = [t for t, d in enumerate(decisions) if d]
    assert synced == [1, 3, 5, 7, 11, 15, 17, 19]


def test_accordion_accumulates_the_gradient_vector_not_its_norms():
    """Alternating +1/-1 gradients: the interval's sum is 0 (sum of norms would be 4)."""
    g = [np.array([1.0]), np.array([-1.0])] * 2 + [np.array([1.0])] * 4 + [np.array([1.0])] * 4
    _, periods = _accordion([[x] for x in g], interval=4, low=2, high=16)
    assert periods == [2, 2, 2, 16]     # 0 -> 4: previous norm 0 counts as critical; 4 -> 4: not


def test_accordion_any_replica_and_threshold():
    g = {0: [np.array([1.0, 0.0])] * 8, 1: [np.array([0.0, 1.0])] * 4 + [np.array([0.0, 1.5])] * 4}
    steps = [[g[0][t], g[1][t]] for t in range(8)]
    _, periods = _accordion(steps, n=2, interval=4, eta=0.5)
    assert periods == [2, 2, 2]         # replica 1 changed by exactly eta: critical (>=)
    _, periods = _accordion(steps, n=2, interval=4, eta=0.51)
    assert periods == [2, 2, 16]


def test_accordion_period_counts_from_the_interval_start():
    """I = 6, high = 4: interval 2 (steps 12..17) syncs at its 4th step, 15; steps 16 and 17
    stay local and the count restarts at step 18."""
    g = [[np.array([1.0])]] * 18
    decisions, periods = _accordion(g, interval=6, low=2, high=4)
    assert periods == [2, 2, 4, 4]
    assert [t for t, d in enumerate(decisions) if d] == [1, 3, 5, 7, 9, 11, 15]


def test_accordion_validation():
    with pytest.raises(ValueError, match="interval"):
        triggers.Accordion(1, interval=0)
    with pytest.raises(ValueError, match="low"):
        triggers.Accordion(1, interval=4, low=0)
