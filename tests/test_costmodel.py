"""Cost model: collective formulas by hand, presets, straggler and vote semantics, errors."""
import numpy as np
import pytest

from jaxsel import costmodel as cm
from jaxsel import stragglers as st


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
    assert set(cm.NETWORKS) == {"nvlink", "pcie", "100gbe", "25gbe", "10gbe", "1gbe"}
    assert cm.NETWORKS["10gbe"].bandwidth == pytest.approx(1.25e9)
    assert cm.NETWORKS["1gbe"].bandwidth == pytest.approx(1.25e8)
    assert cm.NETWORKS["100gbe"].bandwidth == pytest.approx(12.5e9)
    assert cm.NETWORKS["pcie"].bandwidth == pytest.approx(25e9)   # PCIe 4.0 x16, ~80% of 31.5 GB/s
    bws = [cm.NETWORKS[k].bandwidth for k in ("1gbe", "10gbe", "25gbe", "100gbe", "pcie", "nvlink")]
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
    strag = st.FixedStragglers(replicas=(2,), factor=3.0)
    times, summary = cm.project_run(records, "nvlink", 4, 1.0, stragglers=strag)
    np.testing.assert_allclose(times, [3.0, 6.0, 9.0])
    assert summary["compute"] == pytest.approx(3 * (1 + 1 + 1 + 3) / 4)
    assert summary["waiting"] == pytest.approx(9.0 - summary["compute"])


class Alternating(st.Stragglers):
    """Replica 0 is 3x slow on step 0, replica 1 on step 1."""

    def factors(self, steps, replicas, rng):
        f = np.ones((steps, replicas))
        f[0, 0] = 3.0
        f[1, 1] = 3.0
        return f


def test_local_steps_without_vote_run_ahead():
    # replica 0 is slow on step 0, replica 1 on step 1: run-ahead overlaps them.
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
    for model in (st.LogNormalStragglers(0.3), st.TransientStragglers(0.2, 4.0),
                  st.LogNormalStragglers(0.3, persistent=True)):
        a = st.straggler_factors(model, 50, 4, seed=1)
        b = st.straggler_factors(model, 50, 4, seed=1)
        c = st.straggler_factors(model, 50, 4, seed=2)
        assert a.shape == (50, 4)
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c)
    t = st.straggler_factors(st.TransientStragglers(0.2, 4.0), 2000, 4, seed=0)
    assert set(np.unique(t)) == {1.0, 4.0}
    assert 0.15 < np.mean(t == 4.0) < 0.25
    p = st.straggler_factors(st.LogNormalStragglers(0.3, persistent=True), 10, 4)
    assert np.all(p == p[0])
    np.testing.assert_array_equal(st.straggler_factors(None, 3, 2), np.ones((3, 2)))
    both = st.straggler_factors([st.FixedStragglers((0,), 2.0), "fixed:factor=3,replicas=0+1"], 2, 3)
    np.testing.assert_array_equal(both[0], [6.0, 3.0, 1.0])


def test_parse_stragglers():
    assert st.parse_stragglers("none") == st.NoStragglers()
    assert st.parse_stragglers("fixed:factor=3,replicas=0+2") == st.FixedStragglers((0, 2), 3.0)
    assert st.parse_stragglers("lognormal:sigma=0.2") == st.LogNormalStragglers(0.2)
    assert st.parse_stragglers("transient:p=0.05,factor=4") == st.TransientStragglers(0.05, 4.0)


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
        (lambda: st.FixedStragglers((0,), 0.0), "factor"),
        (lambda: st.FixedStragglers((-1,), 2.0), "replicas"),
        (lambda: st.straggler_factors(st.FixedStragglers((5,), 2.0), 3, 4), r"\[5\].*0\.\.3"),
        (lambda: st.TransientStragglers(1.5, 2.0), "probability"),
        (lambda: st.LogNormalStragglers(-0.1), "sigma"),
        (lambda: st.parse_stragglers("gamma:k=2"), "unknown straggler model"),
        (lambda: st.parse_stragglers("fixed:speed=2"), "speed.*factor"),
        (lambda: st.get_stragglers(3.5), "stragglers must be"),
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


# ------------------------------------------------- background modes (SSD-SGD, SSP/ASP)
# A 2-replica ring all-reduce moves 2(N-1)/N * B = B bytes: with 1 MB/s and no latency
# it takes B / 1e6 seconds, so the expected times below are plain arithmetic.
SLOW_NET = cm.Network(bandwidth=1e6, latency=0.0, name="slow")


def local(step, nbytes):
    return rec(step, False, nbytes, vote_bytes=0)


def test_overlapped_steady_state_is_compute_bound():
    # compute 1 s, background all-reduce 0.5 s: each collective hides behind the next
    # step; the run ends when the last one finishes (4 + 0.5).
    records = [local(i, 500_000) for i in range(4)]
    times, summary = cm.project_run(records, SLOW_NET, 2, 1.0, background="overlapped")
    np.testing.assert_allclose(times, [1.5, 2.5, 3.5, 4.5])
    assert np.diff(times) == pytest.approx([1.0, 1.0, 1.0])   # max(compute 1, comm 0.5)
    assert summary["total"] == pytest.approx(4.5)
    assert summary["compute"] == pytest.approx(4.0)
    assert summary["waiting"] == pytest.approx(0.0)
    assert summary["communication"] == pytest.approx(0.5)      # only the tail shows
    assert summary["background"] == "overlapped"


def test_overlapped_comm_bound():
    # compute 1 s, all-reduce 2 s, one collective at a time: each step waits 1 s for the
    # previous collective to end before starting its own; per step = 2 s = comm.
    records = [local(i, 2_000_000) for i in range(4)]
    times, summary = cm.project_run(records, SLOW_NET, 2, 1.0, background="overlapped")
    np.testing.assert_allclose(times, [3.0, 5.0, 7.0, 9.0])
    assert summary["total"] == pytest.approx(9.0)
    assert summary["compute"] == pytest.approx(4.0)
    assert summary["waiting"] == pytest.approx(0.0)
    assert summary["communication"] == pytest.approx(3 * 1.0 + 2.0)  # 3 stalls + the 2 s tail
    assert summary["total"] == pytest.approx(summary["compute"] + summary["waiting"] + summary["communication"])


def test_overlapped_with_straggler_is_bound_by_slowest_compute():
    # replica 0 computes 2 s, replica 1 1 s, comm 0.5 s: per step max(2, 0.5) = 2.
    records = [local(i, 500_000) for i in range(3)]
    times, summary = cm.project_run(records, SLOW_NET, 2, 1.0, stragglers="fixed:factor=2,replicas=0",
                                    background="overlapped")
    np.testing.assert_allclose(times, [2.5, 4.5, 6.5])
    assert summary["compute"] == pytest.approx(3 * 1.5)
    assert summary["waiting"] == pytest.approx(3 * 0.5)        # replica 1 idles 1 s a step
    assert summary["communication"] == pytest.approx(0.5)
    assert summary["total"] == pytest.approx(6.5)


def test_sync_step_waits_for_background_collective():
    # SSD-SGD's pull: the collective of step 1 runs 3..5 s; the synced step 2 finishes its
    # compute at 4 s, and its own all-reduce (2 s) may only start at 5 s -> 7 s.
    records = [local(0, 2_000_000), local(1, 2_000_000), rec(2, True, 2_000_000, vote_bytes=0)]
    times, summary = cm.project_run(records, SLOW_NET, 2, 1.0, background="overlapped")
    np.testing.assert_allclose(times, [3.0, 5.0, 7.0])
    assert summary["communication"] == pytest.approx(1.0 + 1.0 + 2.0)
    assert summary["total"] == pytest.approx(summary["compute"] + summary["waiting"] + summary["communication"])


def test_async_pays_push_pull_on_own_clock():
    # parameter server: 2*latency + 2*B/bandwidth = 2*0.01 + 2*0.1 = 0.22 s per step per
    # replica, independent of N; replica 0 (x2) never holds the others back.
    net = cm.Network(bandwidth=1e6, latency=0.01)
    assert cm.parameter_server_time(100_000, net) == pytest.approx(0.22)
    assert cm.parameter_server_time(0, net) == 0.0
    records = [local(i, 100_000) for i in range(3)]
    proj = cm.Projector(net, 3, 3, "fixed:factor=2,replicas=0")
    times = [proj.advance(i, False, 100_000, 0, 1.0) for i in range(3)]
    np.testing.assert_allclose(times, [2.22, 4.44, 6.66])
    np.testing.assert_allclose(proj.clock, [6.66, 3.66, 3.66])   # fast replicas ran ahead
    summary = proj.summary()
    assert summary["compute"] == pytest.approx(3 * (2 + 1 + 1) / 3)
    assert summary["communication"] == pytest.approx(3 * 0.22)
    assert summary["waiting"] == pytest.approx(6.66 - (6.66 + 3.66 + 3.66) / 3)
    assert summary["total"] == pytest.approx(6.66)
    # no ring: the same per-replica cost with 2 or 16 workers
    t2, _ = cm.project_run(records, net, 2, 1.0)
    t16, _ = cm.project_run(records, net, 16, 1.0)
    np.testing.assert_allclose(t2, [1.22, 2.44, 3.66])
    np.testing.assert_allclose(t16, t2)


@pytest.mark.parametrize(
    "staleness, fast_clock, waited",
    [
        (None, 4.8, 0.0),   # ASP: the fast replica runs 4 x 1.2 s
        (0, 7.8, 1.5),      # each step starts when the slow one finished the last: 6.6 + 1.2
        (1, 5.6, 0.4),      # step 3 waits for step 1's end (4.4 s, fast was at 3.6): +0.8
    ],
)
def test_async_staleness_bound_forces_waiting(staleness, fast_clock, waited):
    # replica 0 steps 2 s + 0.2 s push/pull, replica 1 1 s + 0.2 s.
    proj = cm.Projector(SLOW_NET, 2, 4, "fixed:factor=2,replicas=0", staleness=staleness)
    times = [proj.advance(i, False, 100_000, 0, 1.0) for i in range(4)]
    np.testing.assert_allclose(times, [2.2, 4.4, 6.6, 8.8])     # the straggler sets the pace
    np.testing.assert_allclose(proj.clock, [8.8, fast_clock])
    assert proj.state()["waiting"] == pytest.approx(waited)      # mean idle time during the run
    summary = proj.summary()
    assert summary["total"] == pytest.approx(8.8)
    assert summary["total"] == pytest.approx(summary["compute"] + summary["waiting"] + summary["communication"])
    assert summary["staleness"] == staleness


def test_staleness_gate_includes_step_i_minus_s_minus_1():
    # s=0 with no stragglers and per-step compute that varies only on replica 1 via a
    # custom model: replica 0 can never be more than one step ahead.
    class Slow1(st.Stragglers):
        def factors(self, steps, replicas, rng):
            f = np.ones((steps, replicas))
            f[0, 1] = 5.0
            return f

    proj = cm.Projector(SLOW_NET, 2, 2, Slow1(), staleness=0)
    proj.advance(0, False, 0, 0, 1.0)
    np.testing.assert_allclose(proj.clock, [1.0, 5.0])
    proj.advance(1, False, 0, 0, 1.0)
    np.testing.assert_allclose(proj.clock, [6.0, 6.0])          # replica 0 waited 4 s
    unbounded = cm.Projector(SLOW_NET, 2, 2, Slow1())
    unbounded.advance(0, False, 0, 0, 1.0)
    unbounded.advance(1, False, 0, 0, 1.0)
    np.testing.assert_allclose(unbounded.clock, [2.0, 6.0])


def _mixed_records(steps=24):
    """BSP / SelSync-vote / local-with-payload steps interleaved."""
    out = []
    for i in range(steps):
        if i % 5 == 0:
            out.append(rec(i, True, 40_004, vote_bytes=4))
        elif i % 3 == 0:
            out.append(rec(i, False, 4, vote_bytes=4))
        else:
            out.append(rec(i, False, 40_000, vote_bytes=0))
    return out


def _advance_all(proj, records, start=0, stop=None):
    out = []
    for r in records[start:stop]:
        vote = r["vote_bytes"]
        out.append(proj.advance(r["step"], r["synced"], r["bytes_allreduced"] - vote, vote, 0.01))
    return out


@pytest.mark.parametrize("background, staleness", [("async", None), ("async", 2), ("overlapped", None)])
def test_projector_incremental_equals_project_run(background, staleness):
    records = _mixed_records()
    net = cm.NETWORKS["1gbe"]
    times, summary = cm.project_run(records, net, 4, 0.01, stragglers="lognormal:sigma=0.3", seed=3,
                                    background=background, staleness=staleness)
    proj = cm.Projector(net, 4, len(records), "lognormal:sigma=0.3", seed=3, background=background,
                        staleness=staleness)
    np.testing.assert_allclose(_advance_all(proj, records), times)
    assert proj.summary() == pytest.approx(summary)


@pytest.mark.parametrize("background, staleness", [("async", 1), ("overlapped", None)])
def test_projector_state_round_trip(background, staleness):
    import json

    records = _mixed_records()
    kw = dict(stragglers="transient:probability=0.3,factor=4", seed=7, background=background, staleness=staleness)
    one_go = cm.Projector("10gbe", 3, len(records), **kw)
    expected = _advance_all(one_go, records)

    first = cm.Projector("10gbe", 3, len(records), **kw)
    head = _advance_all(first, records, 0, 11)
    saved = json.loads(json.dumps(first.state()))              # what a checkpoint stores
    resumed = cm.Projector("10gbe", 3, len(records), **kw, state=saved)
    tail = _advance_all(resumed, records, 11)
    np.testing.assert_allclose(head + tail, expected)
    assert resumed.summary() == pytest.approx(one_go.summary())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(background="sync"), r"background must be one of \('async', 'overlapped'\), got 'sync'"),
        (dict(staleness=-1), "staleness must be an integer >= 0 or None"),
        (dict(staleness=True), "staleness must be an integer"),
        (dict(staleness=1.5), "staleness must be an integer"),
        (dict(collective="gossip"), "collective must be one of"),
        (dict(state={"clock": [0.0, 0.0, 0.0]}), "projector state is for 3 replicas, this run has 2"),
    ],
)
def test_projector_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cm.Projector("10gbe", 2, 4, **kwargs)


def test_projector_step_out_of_range_and_project_run_mode_errors():
    proj = cm.Projector("10gbe", 2, 2)
    with pytest.raises(ValueError, match="step 2 is beyond the projector's total_steps=2"):
        proj.advance(2, True, 10, 0, 0.1)
    with pytest.raises(ValueError, match="background must be one of"):
        cm.project_run([rec(0, True, 4)], "10gbe", 2, 0.1, background="eager")
    with pytest.raises(ValueError, match="staleness must be"):
        cm.project_run([rec(0, True, 4)], "10gbe", 2, 0.1, staleness=-2)
