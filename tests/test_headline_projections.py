"""experiments/headline_projections.py: the --quick run writes finite, positive ratios and a
real Hierarchical(BSP, SelSync) row, and its replay of a run's sync pattern charges
ResNet-sized payloads as the cost model says."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxsel import costmodel as cm

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "headline_projections.py"
sys.path.insert(0, str(ROOT))

from experiments import headline_projections as hp  # noqa: E402


def positive(x):
    return x is not None and math.isfinite(x) and x > 0


@pytest.mark.slow
def test_quick_run_writes_finite_positive_ratios(tmp_path):
    # A fresh process: the script needs 10 CPU devices, this one already started JAX with 8.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    res = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "accuracy_vs_projected_time.png").stat().st_size > 0

    model = res["model"]
    assert model["params"] > 40_000_000 and model["param_bytes"] == 4 * model["params"]
    assert positive(model["flops_per_step"]) and positive(res["compute_s"]["gpu-class"])
    assert res["settings"]["replicas"] == 10 and res["machine"]["devices"].startswith("10 x")

    pairs = {r["pair"] for r in res["comparisons"]}
    assert pairs == {"selsync_vs_bsp", "ssdsgd_vs_bsp", "syncswitch_vs_bsp"}
    for r in res["comparisons"]:
        assert positive(r["throughput_ratio"]) and positive(r["bsp_total_s"]) and positive(r["other_total_s"])
    head = [r for r in res["comparisons"] if r["pair"] == "selsync_vs_bsp" and r["stragglers"] == "none"
            and r["network"] == "10gbe" and r["target_frac"] == res["settings"]["target_frac"]]
    assert head and all(positive(r["time_to_accuracy_ratio"]) for r in head)
    assert {row["pair"] for row in res["table"]} == pairs
    assert "selsync_vs_bsp" in proc.stdout and "paper claims" in proc.stdout

    # the two-level cluster table: BSP, SelSync and BSP inside hosts / SelSync across, 4 x 8 GPUs
    cluster = [r for r in res["cluster_table"] if r["compute"] == "gpu-class"]
    assert [r["method"] for r in cluster] == ["bsp", "selsync", "hierarchical"]
    assert cluster[2]["label"] == "BSP inside 8-GPU hosts, SelSync across 10 GbE"
    assert all(r["cluster_label"] == "4 hosts x 8 (nvlink inside, 10gbe between)" for r in cluster)
    assert all(positive(r["total_s"]) for r in cluster) and cluster[0]["speedup_vs_bsp"] == 1.0
    assert cluster[0]["group_syncs"] == cluster[1]["group_syncs"] == 0
    check_hierarchical_row(res, cluster[2])
    assert "BSP inside 8-GPU hosts, SelSync across 10 GbE" in proc.stdout
    assert "groups = hosts of 8" in proc.stdout and "2 groups of 5" in proc.stdout


def check_hierarchical_row(res, row):
    """The row is a real Hierarchical(BSP, SelSync) run: BSP's payload inside its groups on every
    step the outer level did not sync, its own syncs, and its own evaluations to the target."""
    run, steps = res["runs"]["hierarchical"], res["settings"]["steps"]
    assert run["strategy"] == "hierarchical" and run["groups"] == 2 and "bsp | selsync" in run["describe"]
    assert run["options"]["outer_options"] == res["runs"]["selsync"]["options"]
    synced = run["synced_steps"]
    assert synced == sorted(set(synced)) and set(synced) <= set(range(steps)) and len(synced) < steps
    assert row["syncs"] == len(synced) and run["sync_fraction"] == len(synced) / steps
    assert len(run["group_bytes"]) == steps
    assert all(run["group_bytes"][i] == res["small_model_bytes"] for i in set(range(steps)) - set(synced))
    assert row["group_syncs"] == sum(b > 0 for b in run["group_bytes"]) >= steps - len(synced)
    assert row["run_groups"] == 2 and "groups = hosts of 8" in row["group_level"]
    first = next((s for s, a in run["evals"] if a >= row["target_accuracy"]), None)
    assert row["steps_to_target"] == first


def _run(records, background="async", staleness=None, groups=None):
    records = [{"group": 0, "group_synced": False, **r} for r in records]
    return {"records": records, "background": background, "staleness": staleness, "groups": groups,
            "evals": [(0, 0.1), (2, 0.5), (4, 0.9)]}


def test_replay_scales_payload_to_the_big_model():
    # The small model moved 1000 B per sync; the big one 10 MB. SelSync-like pattern:
    # 4-byte vote every step, syncs on steps 0 and 3.
    small, big, c = 1000, 10_000_000, 0.05
    recs = [{"synced": s, "bytes": (small if s else 0) + 4, "vote": 4} for s in (True, False, False, True)]
    out = hp.project(_run(recs), small, big, c, "10gbe", 4, None, 0)
    vote, ar = cm.vote_time(4, "10gbe"), cm.allreduce_time(big, 4, "10gbe")
    assert out["total_s"] == pytest.approx(4 * (c + vote) + 2 * ar)
    assert out["steps_per_s"] == pytest.approx(4 * 4 / out["total_s"])   # lock-step: N x steps / time
    step, t = hp.time_to_accuracy(_run(recs), out["cumulative"], 0.8)
    assert step == 4 and t == pytest.approx(out["total_s"])
    assert hp.time_to_accuracy(_run(recs), out["cumulative"], 0.95) == (None, None)


def test_hierarchical_run_of_two_groups_on_four_hosts_of_eight():
    # Hierarchical(BSP, SelSync)-like pattern, 2 groups: BSP inside groups every step, vote
    # every step, outer syncs on steps 0 and 3. On 4 x 8 the 2 groups (16 of 32 each) do not fit
    # a host, so the group level is each host's 8 over NVLink.
    small, big, c = 1000, 10_000_000, 0.05
    recs = [{"synced": s, "bytes": (small if s else 0) + small + 4, "vote": 4, "group": small,
             "group_synced": True} for s in (True, False, False, True)]
    cluster = cm.Cluster("10gbe", "nvlink", 8)
    out = hp.project(_run(recs, groups=2), small, big, c, cluster, 32, None, 0)
    vote, outer = cm.cluster_collective_time(4, 32, cluster), cm.cluster_collective_time(big, 32, cluster)
    inner = cm.allreduce_time(big, 8, "nvlink")
    assert out["total_s"] == pytest.approx(4 * (c + vote + inner) + 2 * outer)
    assert out["summary"]["group_syncs"] == 4 and out["summary"]["syncs"] == 2
    assert "groups = hosts of 8" in out["summary"]["group_level"]
    # plain SelSync on the same cluster: no group level
    plain = hp.project(_run([{**r, "bytes": r["bytes"] - small, "group": 0, "group_synced": False} for r in recs]),
                       small, big, c, cluster, 32, None, 0)
    assert plain["total_s"] == pytest.approx(out["total_s"] - 4 * inner)


def test_replay_async_throughput_sums_each_workers_rate():
    # ASP steps: every worker pays compute + push/pull on its own clock; worker 0 is 2x slow.
    small, big, c = 1000, 1_000_000, 0.1
    recs = [{"synced": False, "bytes": small, "vote": 0} for _ in range(5)]
    out = hp.project(_run(recs), small, big, c, "10gbe", 4, "fixed:factor=2,replicas=0", 0)
    ps = cm.parameter_server_time(big, "10gbe")
    expected = 5 / (5 * (2 * c + ps)) + 3 * 5 / (5 * (c + ps))
    assert out["steps_per_s"] == pytest.approx(expected)


def test_replicas_the_two_groups_cannot_split_are_refused(capsys):
    with pytest.raises(SystemExit):
        hp.parse_args(["--replicas", "9"])
    assert "2 replica groups" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        hp.parse_args(["--hosts", "3", "--gpus-per-host", "3"])
