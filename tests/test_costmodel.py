"""Cost model: collective formulas by hand, presets, straggler and vote semantics, errors."""
import numpy as np
import pytest

from jaxsel import costmodel as cm
from jaxsel.costmodel import stragglers as st


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


# ------------------------------------------------- two-level clusters (issue 17 item 5)
# Figures of the single-network projection before clusters existed (jaxsel at 9585164),
# on the records and cases below: a single network must project exactly as it did.


def _v1_records():
    out = []
    for i in range(12):
        if i % 4 == 0:
            out.append(rec(i, True, 4_000_004, vote_bytes=4))
        elif i % 3 == 0:
            out.append(rec(i, False, 4, vote_bytes=4))
        elif i == 5:
            out.append(rec(i, True, 2_000_000, vote_bytes=0, collective="allgather"))
        else:
            out.append(rec(i, False, 1_000_000, vote_bytes=0))
    return out


V1_CASES = [("10gbe", 8, None, "async", None), ("1gbe", 4, "lognormal:sigma=0.3", "async", 2),
            ("25gbe", 6, "fixed:factor=2,replicas=0+3", "overlapped", None),
            ("nvlink", 3, "transient:probability=0.3,factor=4", "async", None)]
V1_FIGURES = [
    ([0.0170000056, 0.0387000056, 0.07040000560000001, 0.0811000112, 0.1081000168, 0.1496500168, 0.16035002240000001, 0.1820500224, 0.219050028, 0.22975003360000001, 0.2514500336, 0.28315003359999996],
     {"total": 0.28315003359999996, "compute": 0.24, "communication": 0.0431500336, "waiting": 0.0}),
    ([0.06054438486081532, 0.10486621739852334, 0.16260436371041012, 0.17936524828033254, 0.2480693712337628, 0.331787043876673, 0.345213955408313, 0.38153848385410805, 0.4573765722038197, 0.4686742351322066, 0.5132865054103678, 0.556169880426716],
     {"total": 0.556169880426716, "compute": 0.22689084403845533, "communication": 0.278700288, "waiting": 0.05057874838826055}),
    ([0.022633335466666668, 0.06341666879999999, 0.12341666879999999, 0.1428833376, 0.18551667306666667, 0.24884167306666666, 0.2690916752, 0.30987500853333333, 0.37172501066666663, 0.39197501279999997, 0.4327583461333333, 0.4927583461333333],
     {"total": 0.4927583461333333, "compute": 0.31999999999999995, "communication": 0.012758346133333359, "waiting": 0.1599999999999999}),
    ([0.010066666693333334, 0.09008666669333334, 0.21010666669333333, 0.22012666672, 0.24019333341333332, 0.27022333341333327, 0.31024333343999994, 0.39026333343999997, 0.5103300001333333, 0.55035000016, 0.63037000016, 0.75039000016],
     {"total": 0.75039000016, "compute": 0.48999999999999994, "communication": 0.00039000016000000006, "waiting": 0.25999999999999984}),
]


@pytest.mark.parametrize("case, figures", list(zip(V1_CASES, V1_FIGURES)), ids=[c[0] for c in V1_CASES])
@pytest.mark.parametrize("as_cluster", [False, True], ids=["network", "cluster-of-1"])
def test_single_network_projection_is_unchanged(case, figures, as_cluster):
    net, n, strag, background, staleness = case
    times_v1, summary_v1 = figures
    compute = [0.01 * (1 + (i % 3)) for i in range(12)]
    network = cm.Cluster(net, "pcie", per_host=1) if as_cluster else net   # intra unused with 1 per host
    times, summary = cm.project_run(_v1_records(), network, n, compute, strag, 5, background=background,
                                    staleness=staleness)
    np.testing.assert_allclose(times, times_v1, rtol=1e-13, atol=0)
    assert {k: summary[k] for k in summary_v1} == pytest.approx(summary_v1, rel=1e-13)
    assert summary["network"] == cm.get_network(net).describe()
    assert not {"per_host", "intra_network", "group_level"} & set(summary)   # the summary it always had


def test_hierarchical_allreduce_by_hand():
    # 4 hosts x 8 replicas, B = 100 MB, NVLink inside (200 GB/s, 5 us), 10 GbE between (1.25 GB/s, 50 us):
    # intra reduce-scatter + all-gather: 2*7*5us + 2*7/8 * 1e8/2e11 = 70 us + 875 us
    # inter all-reduce of the host's shards:  2*3*50us + 2*3/4 * 1e8/1.25e9 = 300 us + 0.12 s
    cluster = cm.Cluster(inter="10gbe", intra="nvlink", per_host=8)
    assert cm.cluster_collective_time(100e6, 32, cluster) == pytest.approx(945e-6 + 0.1203, rel=1e-12)
    # all-gather: inter 3*50us + 3 * 8e8/1.25e9 = 1.92015 s; intra 7*5us + 7 * 4e8/2e11 = 0.014035 s
    assert cm.cluster_collective_time(100e6, 32, cluster, "allgather") == pytest.approx(1.92015 + 0.014035,
                                                                                          rel=1e-12)
    # the flat ring over 32 on 10 GbE pays the 31 hops' latency: the hierarchy saves 25 of them
    assert cm.allreduce_time(100e6, 32, "10gbe") - cm.cluster_collective_time(100e6, 32, cluster) == \
        pytest.approx(2 * 31 * 50e-6 + 2 * 31 / 32 * 0.08 - 945e-6 - 0.1203)
    # one level only: the flat ring of that level
    assert cm.cluster_collective_time(1e6, 8, cluster) == cm.allreduce_time(1e6, 8, "nvlink")
    assert cm.cluster_collective_time(1e6, 8, cm.Cluster("10gbe")) == cm.allreduce_time(1e6, 8, "10gbe")
    assert cm.cluster_collective_time(0, 32, cluster) == 0.0


def test_two_level_describes_both_networks_and_checks_its_hosts():
    cluster = cm.Cluster("10gbe", "nvlink", 8)
    assert cluster.two_level and cluster.hosts(32) == 4
    text = cluster.describe(32)
    assert text.startswith("4 hosts x 8 replicas") and "inside a host nvlink" in text and "between hosts 10gbe" in text
    assert cluster.label(32) == "4 hosts x 8 (nvlink inside, 10gbe between)"
    assert cm.Cluster("1gbe").describe() == cm.NETWORKS["1gbe"].describe() and cm.Cluster("1gbe").label(4) == "1gbe"
    _, summary = cm.project_run([rec(0, True, 1000)], cluster, 32, 0.1)
    assert summary["per_host"] == 8 and summary["hosts"] == 4 and "nvlink" in summary["intra_network"]
    assert summary["network"] == text
    with pytest.raises(ValueError, match="replicas 12 must be a multiple of the replicas per host"):
        cm.project_run([rec(0, True, 1000)], cluster, 12, 0.1)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="gpus per host"):
            cm.Cluster("10gbe", per_host=bad)
    with pytest.raises(ValueError, match="unknown network preset 'ib'"):
        cm.Cluster("10gbe", "ib", 8)


@pytest.mark.parametrize("collective", ["allreduce", "allgather"])
def test_bsp_on_one_host_is_the_intra_network_alone(collective):
    # 8 replicas on 1 host of 8: the inter-host network never carries a byte
    records = [rec(i, True, 1_000_004 if i % 2 else 1_000_000, vote_bytes=4 if i % 2 else 0,
                   collective=collective) for i in range(10)]
    kw = dict(stragglers="lognormal:sigma=0.3", seed=2)
    two, s2 = cm.project_run(records, cm.Cluster(inter="1gbe", intra="nvlink", per_host=8), 8, 0.02, **kw)
    one, s1 = cm.project_run(records, "nvlink", 8, 0.02, **kw)
    np.testing.assert_allclose(two, one, rtol=1e-13)
    assert s2["total"] == pytest.approx(s1["total"]) and s2["communication"] == pytest.approx(s1["communication"])
    # while 8 hosts of 1 over 1 GbE would cost far more
    assert cm.project_run(records, "1gbe", 8, 0.02, **kw)[1]["communication"] > 100 * s1["communication"]


# A 1 MB/s link without latency: a 2-member ring all-reduce of B bytes takes B / 1e6 s.
TWO_BY_TWO = cm.Cluster(inter=SLOW_NET, intra=SLOW_NET, per_host=2)


def group_step(step, group_bytes, synced=False, payload=0):
    return rec(step, synced, group_bytes + payload, vote_bytes=0, group_bytes=group_bytes, group_synced=True)


def test_group_sync_is_a_barrier_only_within_its_group():
    # 2 hosts x 2; replica 0 is 3x slow. Steps 0, 1: group-level all-reduce (0.1 s) only;
    # step 2: global sync, hierarchical: 0.1 s inside + 0.1 s between the hosts.
    records = [group_step(0, 100_000), group_step(1, 100_000), rec(2, True, 100_000, vote_bytes=0)]
    proj = cm.Projector(TWO_BY_TWO, 4, 3, "fixed:factor=3,replicas=0", groups=2)
    steps = cm.step_records(records)
    times = [proj.advance(i, s.synced, s.payload, s.vote, 1.0, group_payload=s.group_payload,
                          group_synced=s.group_synced) for i, s in enumerate(steps[:2])]
    np.testing.assert_allclose(times, [3.1, 6.2])
    np.testing.assert_allclose(proj.clock, [6.2, 6.2, 2.2, 2.2])   # group 1 never waited for replica 0
    times, summary = cm.project_run(records, TWO_BY_TWO, 4, 1.0, "fixed:factor=3,replicas=0", groups=2)
    np.testing.assert_allclose(times, [3.1, 6.2, 9.4])              # the global sync waits for everyone
    assert summary["compute"] == pytest.approx(3 * 6 / 4)
    assert summary["waiting"] == pytest.approx(2 * 2 / 4 + (9.2 - (9.2 + 7.2 + 3.2 + 3.2) / 4))
    assert summary["communication"] == pytest.approx(0.1 + 0.1 + 0.2)
    assert summary["total"] == pytest.approx(summary["compute"] + summary["waiting"] + summary["communication"])
    assert summary["group_syncs"] == 2 and summary["group_bytes"] == 200_000 and summary["payload_bytes"] == 100_000
    assert "one group per host" in summary["group_level"]
    # the same stragglers under an all-replica sync every step: everyone at the slowest's pace
    bsp, _ = cm.project_run([rec(i, True, 100_000, vote_bytes=0) for i in range(3)], TWO_BY_TWO, 4, 1.0,
                            "fixed:factor=3,replicas=0")
    np.testing.assert_allclose(bsp, [3.2, 6.4, 9.6])


def test_group_level_uses_the_intra_network_and_a_vote_stays_global():
    # Hierarchical(BSP, SelSync) on 4 hosts x 8: group all-reduce of B over NVLink every
    # step, the 4-byte vote hierarchical; the outer sync (step 2) the hierarchical all-reduce.
    cluster, big = cm.Cluster("10gbe", "nvlink", 8), 10_000_000
    records = [rec(i, s, big + 4, vote_bytes=4, group_bytes=0 if s else big, group_synced=not s)
               for i, s in enumerate((False, False, True))]
    times, summary = cm.project_run(records, cluster, 32, 0.1, groups=4)
    g, v, a = (cm.allreduce_time(big, 8, "nvlink"), cm.cluster_collective_time(4, 32, cluster),
               cm.cluster_collective_time(big, 32, cluster))
    np.testing.assert_allclose(times, np.cumsum([0.1 + g + v, 0.1 + g + v, 0.1 + v + a]))
    assert summary["group_syncs"] == 2 and summary["vote_bytes"] == 12


def test_groups_that_differ_from_the_hosts():
    cluster = cm.Cluster("10gbe", "nvlink", 8)
    # 2 groups of 16 (simulated on one process) cannot lie in hosts of 8: projected as the hosts
    level = cm.group_level(cluster, 32, 2)
    assert level.size == 8 and level.network.name == "nvlink"
    assert "2 groups of 16 replicas do not fit in a host of 8" in level.note and "within one host" in level.note
    _, summary = cm.project_run([group_step(0, 1000)], cluster, 32, 0.1, groups=2)
    assert summary["group_level"] == level.note
    # groups that fit are kept: 4 groups of 2 on one host of 8
    level = cm.group_level(cluster, 8, 4)
    assert level.size == 2 and "4 groups per host" in level.note
    times, _ = cm.project_run([group_step(0, 1000)], cluster, 8, 0.1, groups=4)
    assert times[-1] == pytest.approx(0.1 + cm.allreduce_time(1000, 2, "nvlink"))
    # a single network: the strategy's groups over it (every replica its own host)
    level = cm.group_level(cm.Cluster("10gbe"), 8, 2)
    assert level.size == 4 and level.network.name == "10gbe"
    times, _ = cm.project_run([group_step(0, 1000)], "10gbe", 8, 0.1, groups=2)
    assert times[-1] == pytest.approx(0.1 + cm.allreduce_time(1000, 4, "10gbe"))


def test_group_bytes_are_not_taken_for_the_vote():
    # no vote_bytes keys: local steps move 4 (vote) + the group level's bytes
    records = [rec(0, False, 1004, group_bytes=1000), rec(1, True, 2004, group_bytes=0),
               rec(2, False, 4, group_bytes=0)]
    steps = cm.step_records(records)
    assert [(s.payload, s.vote, s.group_payload, s.group_synced) for s in steps] == \
        [(0, 4, 1000, True), (2000, 4, 0, False), (0, 4, 0, False)]


def test_live_group_projection_survives_a_checkpoint():
    import json

    records = [group_step(i, 1000) if i % 3 else rec(i, True, 1000, vote_bytes=0) for i in range(9)]
    kw = dict(stragglers="lognormal:sigma=0.5", seed=1, groups=2)
    steps = cm.step_records(records)

    def advance(p, part):
        return [p.advance(i, s.synced, s.payload, s.vote, 0.1, group_payload=s.group_payload,
                          group_synced=s.group_synced) for i, s in part]

    whole = cm.Projector(TWO_BY_TWO, 4, 9, **kw)
    expected = advance(whole, list(enumerate(steps)))
    first = cm.Projector(TWO_BY_TWO, 4, 9, **kw)
    head = advance(first, list(enumerate(steps))[:4])
    resumed = cm.Projector(TWO_BY_TWO, 4, 9, **kw, state=json.loads(json.dumps(first.state())))
    tail = advance(resumed, list(enumerate(steps))[4:])
    np.testing.assert_allclose(head + tail, expected)
    assert resumed.summary() == whole.summary() and resumed.summary()["group_syncs"] == 6


@pytest.mark.parametrize(
    "records, kwargs, match",
    [
        ([rec(0, False, 10, group_bytes=20)], {}, r"group_bytes must be in \[0, 10\]"),
        ([rec(0, False, 10, vote_bytes=4, group_bytes=8)], {}, r"group_bytes must be in \[0, 6\]"),
        ([rec(0, False, 10, group_bytes=10, group_synced=False)], {}, "group_synced is false"),
        ([rec(0, False, 10, group_bytes=10)], {}, "knows no replica groups"),
        ([rec(0, True, 10)], {"groups": 3}, "groups must be an integer >= 1 that divides the replicas"),
    ],
)
def test_group_record_errors(records, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cm.project_run(records, "10gbe", 4, 0.1, **kwargs)
