"""Cost model: collective formulas by hand, presets, straggler and vote semantics, errors."""
import numpy as np
import pytest

from jaxsel import costmodel as cm


def rec(step, synced, nbytes, **extra):
    return {"step": step, "synced": synced, "bytes_allreduced": nbytes, **extra}


# ------------------------------------------------------------------ formulas


def test_allreduce_by_hand_10gbe():
    # N=4, B=100 MB over 10 GbE (1.25e9 B/s, 50 us): 2*3*50us + 2*3/4 * 1e8/1.25e9
    expected = 6 * 50e-6 + 1.5 * 0.08
    assert cm.allreduce_time(100e6, 4, "10gbe") == pytest.approx(expected)
    assert expected == pytest.approx(0.1203)


def test_allgather_by_hand():
    # N=4, B=100 MB: 3*50us + 3/4 * 4e8/1.25e9 = 150us + 0.24 s
    assert cm.allgather_time(100e6, 4, "10gbe") == pytest.approx(3 * 50e-6 + 0.24)
    assert cm.collective_time(100e6, 4, "10gbe", "allgather") == cm.allgather_time(100e6, 4, "10gbe")
    assert cm.collective_time(100e6, 4, "10gbe") == cm.allreduce_time(100e6, 4, "10gbe")


def test_single_replica_and_empty_payload_are_free():
    assert cm.allreduce_time(1e9, 1, "1gbe") == 0.0
    assert cm.allgather_time(1e9, 1, "1gbe") == 0.0
    assert cm.allreduce_time(0, 8, "1gbe") == 0.0


def test_vote_is_latency_bound():
    net = cm.Network(bandwidth=1e9, latency=1e-4)
    t = cm.vote_time(8, net)
    assert t == pytest.approx(2 * 7 * 1e-4 + 2 * 7 / 8 * 4 / 1e9)
    assert t / (2 * 7 * 1e-4) == pytest.approx(1.0, rel=1e-4)


def test_presets_and_custom_network():
    assert set(cm.NETWORKS) == {"nvlink", "100gbe", "25gbe", "10gbe", "1gbe"}
    assert cm.NETWORKS["10gbe"].bandwidth == pytest.approx(1.25e9)
    assert cm.NETWORKS["1gbe"].bandwidth == pytest.approx(1.25e8)
    assert cm.NETWORKS["100gbe"].bandwidth == pytest.approx(12.5e9)
    bws = [cm.NETWORKS[k].bandwidth for k in ("1gbe", "10gbe", "25gbe", "100gbe", "nvlink")]
    assert bws == sorted(bws)
    assert cm.get_network("10GbE") is cm.NETWORKS["10gbe"]
    custom = cm.Network(5e9, 2e-5)
    assert cm.get_network(custom) is custom
    assert "GB/s" in custom.describe() and "custom" in custom.describe()


# ----------------------------------------------------------------- projection


def test_bsp_projection_without_stragglers():
    records = [rec(i, True, 1_000_000) for i in range(5)]
    net = cm.NETWORKS["10gbe"]
    times, summary = cm.project_run(records, net, 4, 0.01)
    step = 0.01 + cm.allreduce_time(1_000_000, 4, net)
    np.testing.assert_allclose(times, step * np.arange(1, 6))
    assert summary["total"] == pytest.approx(5 * step)
    assert summary["compute"] == pytest.approx(0.05)
    assert summary["waiting"] == pytest.approx(0.0)
    assert summary["communication"] == pytest.approx(5 * cm.allreduce_time(1_000_000, 4, net))
    assert summary["syncs"] == 5 and "10gbe" in summary["network"]


def test_sync_waits_for_slowest():
    records = [rec(i, True, 0) for i in range(3)]
    strag = cm.FixedStragglers(replicas=(2,), factor=3.0)
    times, summary = cm.project_run(records, "nvlink", 4, 1.0, stragglers=strag)
    np.testing.assert_allclose(times, [3.0, 6.0, 9.0])
    assert summary["compute"] == pytest.approx(3 * (1 + 1 + 1 + 3) / 4)
    assert summary["waiting"] == pytest.approx(9.0 - summary["compute"])


def test_local_steps_without_vote_run_ahead():
    # replica 0 is slow on step 0, replica 1 on step 1: run-ahead overlaps them.
    class Alternating(cm.Stragglers):
        def factors(self, steps, replicas, rng):
            f = np.ones((steps, replicas))
            f[0, 0] = 3.0
            f[1, 1] = 3.0
            return f

    records = [rec(0, False, 0), rec(1, False, 0), rec(2, True, 0)]
    times, summary = cm.project_run(records, "nvlink", 2, 1.0, stragglers=Alternating())
    # each replica's sum up to and including the sync step is 3+1+1 = 5
    assert times[-1] == pytest.approx(5.0)
    np.testing.assert_allclose(times[:2], [3.0, 4.0])  # the slowest replica's own clock
    assert summary["waiting"] == pytest.approx(0.0)
    # with BSP the same stragglers cost 3 + 3 + 1
    bsp, _ = cm.project_run([rec(i, True, 0) for i in range(3)], "nvlink", 2, 1.0, stragglers=Alternating())
    assert bsp[-1] == pytest.approx(7.0)


def test_run_ends_with_slowest_replica():
    records = [rec(i, False, 0) for i in range(4)]
    times, summary = cm.project_run(records, "1gbe", 3, 0.5, stragglers="fixed:factor=2,replicas=1")
    assert times[-1] == pytest.approx(4.0)
    assert summary["total"] == pytest.approx(summary["compute"] + summary["waiting"] + summary["communication"])
    assert summary["communication"] == 0.0


def test_vote_makes_local_steps_barriers():
    class Alternating(cm.Stragglers):
        def factors(self, steps, replicas, rng):
            f = np.ones((steps, replicas))
            f[0, 0] = 3.0
            f[1, 1] = 3.0
            return f

    net = cm.NETWORKS["10gbe"]
    records = [rec(0, False, 4), rec(1, False, 4), rec(2, True, 4 + 1000)]
    times, summary = cm.project_run(records, net, 2, 1.0, stragglers=Alternating())
    v = cm.vote_time(2, net, 4)
    payload = cm.allreduce_time(1000, 2, net)  # the vote is not part of the payload
    np.testing.assert_allclose(times, [3 + v, 6 + 2 * v, 7 + 3 * v + payload])
    assert summary["vote_bytes"] == 12 and summary["payload_bytes"] == 1000
    assert summary["communication"] == pytest.approx(3 * v + payload)


def test_vote_bytes_key_splits_payload():
    net = cm.NETWORKS["1gbe"]
    records = [rec(0, True, 104, vote_bytes=4), rec(1, True, 100, vote_bytes=0)]
    _, summary = cm.project_run(records, net, 4, 0.0)
    expected = cm.vote_time(4, net, 4) + 2 * cm.allreduce_time(100, 4, net)
    assert summary["communication"] == pytest.approx(expected)
    assert summary["payload_bytes"] == 200


def test_allgather_records_and_numpy_values():
    net = cm.NETWORKS["25gbe"]
    records = [rec(np.int32(0), np.bool_(True), np.int32(4000), collective="allgather")]
    times, _ = cm.project_run(records, net, 8, 0.0)
    assert times[0] == pytest.approx(cm.allgather_time(4000, 8, net))


def test_per_step_compute_times():
    times, summary = cm.project_run([rec(0, True, 0), rec(1, True, 0)], "nvlink", 2, [1.0, 2.0])
    np.testing.assert_allclose(times, [1.0, 3.0])


def test_empty_run():
    times, summary = cm.project_run([], "10gbe", 4, 0.1)
    assert times.shape == (0,) and summary["total"] == 0.0


# ------------------------------------------------------------------ stragglers


def test_straggler_distributions_are_seeded_and_shaped():
    for model in (cm.LogNormalStragglers(0.3), cm.TransientStragglers(0.2, 4.0),
                  cm.LogNormalStragglers(0.3, persistent=True)):
        a = cm.straggler_factors(model, 50, 4, seed=1)
        b = cm.straggler_factors(model, 50, 4, seed=1)
        c = cm.straggler_factors(model, 50, 4, seed=2)
        assert a.shape == (50, 4)
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c)
    t = cm.straggler_factors(cm.TransientStragglers(0.2, 4.0), 2000, 4, seed=0)
    assert set(np.unique(t)) == {1.0, 4.0}
    assert 0.15 < np.mean(t == 4.0) < 0.25
    p = cm.straggler_factors(cm.LogNormalStragglers(0.3, persistent=True), 10, 4)
    assert np.all(p == p[0])
    np.testing.assert_array_equal(cm.straggler_factors(None, 3, 2), np.ones((3, 2)))
    both = cm.straggler_factors([cm.FixedStragglers((0,), 2.0), "fixed:factor=3,replicas=0+1"], 2, 3)
    np.testing.assert_array_equal(both[0], [6.0, 3.0, 1.0])


def test_parse_stragglers():
    assert cm.parse_stragglers("none") == cm.NoStragglers()
    assert cm.parse_stragglers("fixed:factor=3,replicas=0+2") == cm.FixedStragglers((0, 2), 3.0)
    assert cm.parse_stragglers("lognormal:sigma=0.2") == cm.LogNormalStragglers(0.2)
    assert cm.parse_stragglers("transient:p=0.05,factor=4") == cm.TransientStragglers(0.05, 4.0)


# ----------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: cm.Network(-1.0, 1e-5), "bandwidth"),
        (lambda: cm.Network(0.0, 1e-5), "bandwidth"),
        (lambda: cm.Network(1e9, -1e-5), "latency"),
        (lambda: cm.Network(float("nan"), 0.0), "bandwidth"),
        (lambda: cm.get_network("infiniband"), "unknown network preset 'infiniband'.*10gbe"),
        (lambda: cm.allreduce_time(100, 0, "10gbe"), "replicas must be an integer >= 1, got 0"),
        (lambda: cm.allreduce_time(100, 2.5, "10gbe"), "replicas"),
        (lambda: cm.allreduce_time(-5, 2, "10gbe"), "nbytes"),
        (lambda: cm.collective_time(5, 2, "10gbe", "broadcast"), "allreduce.*'broadcast'"),
        (lambda: cm.FixedStragglers((0,), 0.0), "factor"),
        (lambda: cm.FixedStragglers((-1,), 2.0), "replicas"),
        (lambda: cm.straggler_factors(cm.FixedStragglers((5,), 2.0), 3, 4), r"\[5\].*0\.\.3"),
        (lambda: cm.TransientStragglers(1.5, 2.0), "probability"),
        (lambda: cm.LogNormalStragglers(-0.1), "sigma"),
        (lambda: cm.parse_stragglers("gamma:k=2"), "unknown straggler model"),
        (lambda: cm.parse_stragglers("fixed:speed=2"), "speed.*factor"),
        (lambda: cm.get_stragglers(3.5), "stragglers must be"),
    ],
)
def test_errors_name_the_bad_value(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(replicas=0), "replicas"),
        (dict(network="token-ring"), "token-ring"),
        (dict(compute_time_s=-1.0), "compute_time_s"),
        (dict(compute_time_s=[0.1, 0.2, 0.3]), "one value per record"),
        (dict(records=[{"step": 0, "synced": True}]), "bytes_allreduced"),
        (dict(records=[rec(0, True, -4)]), "bytes_allreduced"),
        (dict(records=[rec(0, True, 4, collective="gossip")]), "gossip"),
        (dict(records=[rec(0, True, 4, vote_bytes=8)]), "vote_bytes"),
        (dict(records=[rec(0, False, 4), rec(1, False, 8)]), "vote_bytes"),
        (dict(records={"step": 0}), "list of per-step metric dicts"),
    ],
)
def test_project_run_errors(kwargs, match):
    args = dict(records=[rec(0, True, 4), rec(1, False, 4)], network="10gbe", replicas=4, compute_time_s=0.1)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        cm.project_run(**args)
