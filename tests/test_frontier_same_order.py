"""`jaxsel frontier` asks the real question (issue 58, item 4): every adaptive, trigger-based
point is followed by its same-order baseline (the same method with only its trigger replaced
by a spread schedule of exactly its mean sync count), run on the same seeds, and the report
says per budget whether the selection beat it beyond the seed spread."""
import json

import pytest

from jaxsel.analysis.frontier import gets_baseline, plan_frontier, planned_cells, report_frontier, run_frontier
from jaxsel.analysis.frontier_report import selection_sentence
from jaxsel.analysis.variants import parse_entry
from jaxsel.training.config import TrainConfig

TINY = TrainConfig(dataset="digits", partition="label_skew", lr_schedule="milestones", steps=16, batch_size=4,
                   eval_every=16, strategy_options={"window": 2})
GRID = "selsync:delta=0.3,selsync:sync=model:max_local=4,selsync:delta=fires:0.5"


def synced(out, slug, seed):
    rows = [json.loads(line) for line in (out / slug / f"seed{seed}" / "metrics.jsonl").read_text().splitlines()]
    return sum(bool(r["synced"]) for r in rows if "synced" in r)


@pytest.fixture(scope="module")
def frontier(tmp_path_factory):
    out = tmp_path_factory.mktemp("same-order") / "front"
    plan = plan_frontier(TINY, "selsync", GRID, 2)
    said = []
    result = run_frontier(TINY, plan, out, seeds=2, announce=said.append)
    return out, plan, result, said


def test_each_adaptive_point_runs_its_same_order_baseline_on_the_same_seeds(frontier):
    out, plan, result, said = frontier
    assert planned_cells(TINY, plan, 2) == (4 + 3) * 2   # BSP and 3 SelSync points, each SelSync one baselined
    assert said[-1].startswith("14 cells (14 trained now")
    points = {p["entry"]: p for c in result["methods"] for p in c["points"]}
    baselines = [p for p in points.values() if p.get("matches")]
    assert sorted(p["matches"] for p in baselines) == sorted(e for e in points if e.startswith("selsync"))
    for b in baselines:
        adaptive = points[b["matches"]]
        mean = sum(s["syncs"] for s in adaptive["per_seed"]) / 2
        k = int(mean + 0.5)
        o = b["options"]
        assert (b["method"], o["trigger"], o["trigger.syncs"], o["trigger.steps"]) == ("triggered", "spread", k, 16)
        assert o.get("sync", "params") == adaptive["options"].get("sync", "params")   # the point's own order
        assert [s["seed"] for s in b["per_seed"]] == [0, 1]
        for s in (0, 1):   # exactly K syncs in every seed, as the recorded steps say
            assert b["per_seed"][s]["syncs"] == k == synced(out, b["dir"], s)
        row = next(r for r in result["own_budget"] if r["point"]["entry"] == adaptive["entry"])
        assert row["same_order"]["baseline"]["entry"] == b["entry"]
        assert row["same_order"]["lead"] == pytest.approx(adaptive["accuracy"] - b["accuracy"])
    assert result["selection"] == selection_sentence(result["own_budget"])


def test_the_baseline_trains_the_point_s_configuration_but_its_trigger(frontier):
    out, _, result, _ = frontier
    b = next(p for c in result["methods"] for p in c["points"] if p.get("matches") == "selsync:sync=model:max_local=4")
    mine = json.loads((out / "selsync_sync=model_max_local=4" / "seed0" / "config.json").read_text())
    theirs = json.loads((out / b["dir"] / "seed0" / "config.json").read_text())
    differ = {k for k in mine if mine[k] != theirs[k]}
    assert differ <= {"strategy", "strategy_options", "out_dir", "run_id"}, differ
    assert theirs["strategy"] == "triggered" and theirs["strategy_options"]["sync"] == "model"
    assert mine["strategy_options"]["window"] == 2 and "window" not in theirs["strategy_options"]   # SelSync's own


def test_the_report_made_again_from_the_records_is_the_same(frontier):
    out, _, result, _ = frontier
    md = (out / "frontier.md").read_text()
    assert "## Does selection beat a fixed schedule?" in md and result["selection"] in md
    assert report_frontier(out) == json.loads((out / "frontier.json").read_text())


def test_a_frontier_recorded_before_the_baselines_plans_none(frontier):
    """A job whose settings lack "same_order" (recorded before issue 58) is reported without
    baselines: its plan counts none of their cells."""
    import dataclasses

    from jaxsel.analysis.frontier import job_settings

    _, plan, _, _ = frontier
    assert job_settings(TINY, plan, 2, (1.0,))["same_order"] is True
    assert planned_cells(TINY, dataclasses.replace(plan, same_order=False), 2) == 4 * 2


def test_only_adaptive_trigger_based_points_get_one():
    assert [gets_baseline(TINY, parse_entry(e)) for e in
            ("selsync", "selsync:delta=fires:0.1", "selsync:max_local=8", "localsgd:period=4", "bsp",
             "triggered:trigger=spread:trigger.syncs=4:trigger.steps=16")] == [True, True, True, False, False, False]


def row(label, share, lead, beyond):
    point = {"label": label, "sync_fraction": share}
    return {"point": point, "same_order": {"baseline": {"label": "b"}, "lead": lead, "beyond_spread": beyond}}


def test_the_selection_verdict_says_per_budget_whether_selection_beat_its_schedule():
    nowhere = selection_sentence([row("a", 0.5, 0.01, False), row("b", 0.1, -0.05, True), {"same_order": None}])
    assert nowhere == ("Nowhere did selection beat its fixed schedule of as many syncs (same method, same order) "
                       "beyond the seed spread: at none of 2 budgets. It lost to it beyond the spread at 1: b (10 % "
                       "of steps, -0.05). Within the spread at 1.")
    somewhere = selection_sentence([row("a", 0.25, 0.03, True), row("c", 0.05, 0.0, None)])
    assert somewhere.startswith("Selection beat its fixed schedule of as many syncs (same method, same order) beyond "
                                "the seed spread at 1 of 2 budgets: a (25 % of steps, +0.03).")
    assert somewhere.endswith(" One seed at 1.")
    assert "no spread to judge by" in selection_sentence([row("c", 0.05, 0.0, None)])
    assert selection_sentence([{"same_order": None}]) is None
