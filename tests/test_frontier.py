"""`jaxsel frontier` (issue 37, item 2): every method's declared budget grid, the points'
figures, the Pareto fronts, the verdict at budget levels, and its checks before anything
trains. The sweep end to end, killed and resumed: tests/test_long_jobs.py."""
import dataclasses
import json
import re

import numpy as np
import pytest

import jaxsel

from jaxsel.analysis.frontier import check_levels, declared_points, job_settings, plan_frontier
from jaxsel.analysis.frontier_points import DERIVED_FILE, derive_points, fired, points_for
from jaxsel.analysis.frontier_report import best_within, method_curves, verdict_row
from jaxsel.analysis.variants import parse_entry
from jaxsel.analysis.variants import entry_of
from jaxsel.cli import main
from jaxsel.core.budget import Budget, sweep
from jaxsel.strategies import STRATEGIES, build_strategy, traits_of
from jaxsel.training.config import ConfigError, TrainConfig

TASK = TrainConfig(dataset="mnist1d", partition="label_skew", lr_schedule="milestones", steps=600)


def test_every_method_declares_a_grid_that_builds_on_the_default_task():
    """Each registered method but the generic `triggered` declares its knob and a grid whose
    every point builds (checked as a comparison's entries are) and differs from the others."""
    plan = plan_frontier(TASK, None, None, 3)
    assert plan.left_out == ["triggered"] and list(plan.methods)[0] == "bsp"
    assert set(plan.methods) == set(STRATEGIES) - {"triggered"}
    assert plan.methods["bsp"][0].options == {}   # plain BSP: the reference of the budget levels
    for name, points in plan.methods.items():
        assert [v.options for v in points] == list(traits_of(STRATEGIES[name]).budget.grid), name
    # the default sweep's size: 40 points when the hour-long published verdict was planned,
    # 46 with issue 47's methods, 48 since SelSync's deltas are the paper's and four derived
    # from BSP (issue 42), 55 since SelSync's 7 points also run in local SGD's order (issue 58)
    assert len(plan.variants) == 55


def test_declared_points_that_do_not_fit_the_task_are_left_out_and_named():
    """On the paper task's 10 replicas hierarchical's groups of 4 and islands of 4 cannot be
    built: the frontier runs the other 53 points and names those two with the reason (it
    stopped before its first run); the same point given with --grid is the user's: an error."""
    paper = dataclasses.replace(TASK, replicas=10, batch_size=32, partition="seldp")
    plan = plan_frontier(paper, None, None, 3)
    assert [u.split(" (")[0] for u in plan.unfit] == ["hierarchical:groups=4", "islands:period=4:islands=4"]
    assert "must divide the 10 replicas" in plan.unfit[0] and "K must divide 10" in plan.unfit[1]
    assert len(plan.variants) == 53 and plan.methods["hierarchical"][0].options == {"groups": 2}
    assert "unfit" in job_settings(paper, plan, 3, (1.0,)) and "unfit" not in job_settings(
        TASK, plan_frontier(TASK, None, None, 3), 3, (1.0,))   # absent when empty: older jobs resume
    with pytest.raises(ValueError, match="groups=4 must divide the 10 replicas"):
        plan_frontier(paper, "hierarchical", "hierarchical:groups=4", 1)


def test_a_grid_point_reads_back_as_its_options():
    for name, cls in STRATEGIES.items():
        if traits_of(cls).budget is not None:
            assert [v.options for v in declared_points(name)] == list(traits_of(cls).budget.grid)
    assert entry_of("bsp", {"compress": "topk:0.1"}) == "bsp:compress=topk:0.1"
    assert (sweep("delta", None, 0.1) + sweep("max_local", 8)) == \
        Budget("delta, max_local", ({}, {"delta": 0.1}, {"max_local": 8}))
    with pytest.raises(ValueError, match="one or more dicts"):
        Budget("period", ())


def test_given_points_replace_a_method_s_grid_and_bsp_always_runs():
    plan = plan_frontier(TASK, "localsgd,selsync", "localsgd:period=3,localsgd:syncs=100", 1)
    assert list(plan.methods) == ["bsp", "localsgd", "selsync"] and plan.given == ["localsgd"]
    assert [v.entry for v in plan.methods["bsp"]] == ["bsp"]
    assert [v.entry for v in plan.methods["localsgd"]] == ["localsgd:period=3", "localsgd:syncs=100"]
    assert len(plan.methods["selsync"]) == len(traits_of(STRATEGIES["selsync"]).budget.grid)
    with_plain = plan_frontier(TASK, "bsp", "bsp:compress=int8", 1)
    assert [v.entry for v in with_plain.methods["bsp"]] == ["bsp", "bsp:compress=int8"]
    # job.json keeps the methods' order (its settings are written with sorted keys)
    ordered = plan_frontier(TASK, "selsync,localsgd", "localsgd:period=3", 1)
    recorded = json.loads(json.dumps(job_settings(TASK, ordered, 1, (1.0,)), sort_keys=True))
    assert [m for m, _ in recorded["points"]] == ["bsp", "selsync", "localsgd"]


@pytest.mark.parametrize("argv, message", [
    (["--methods", "bsp,nope"], "--methods: unknown strategy 'nope'"),
    (["--methods", "bsp,,localsgd"], "has an empty name"),
    (["--methods", "bsp,bsp"], "names a method twice"),
    (["--methods", "bsp", "--grid", "localsgd:period=2"], "names method 'localsgd', which is not among the methods"),
    (["--methods", "triggered"], "method 'triggered' declares no budget grid"),
    (["--methods", "bsp", "--grid", "bsp,bsp"], "lists 'bsp' twice"),
    (["--levels", "0.1,2"], "budget levels must be distinct shares of BSP's bytes in (0, 1]"),
    (["--levels", "a"], "--levels 'a' must be comma-separated shares"),
    (["--seeds", "0"], "seeds must be an integer >= 1"),
    (["--methods", "localsgd", "--opt", "window=4"], "no strategy of bsp, localsgd:period=2"),
    (["--methods", "selsync", "--grid", "selsync:delta=fires:1.5"], "share F of steps in (0, 1]"),
    (["--methods", "localsgd", "--grid", "localsgd:period=fires:0.1"], "gives the delta of SelSync's significance"),
])
def test_bad_input_is_one_line_exit_2_before_anything_is_made(tmp_path, capsys, argv, message):
    out = tmp_path / "front"
    assert main(["frontier", *argv, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jaxsel frontier: error: ") and message in err[0], err
    assert captured.out == "" and not out.exists()


def point(method, entry, mb, acc, std, failed=None):
    return {"method": method, "entry": entry, "label": entry, "mb": mb, "accuracy": acc, "accuracy_std": std,
            "sync_fraction": 1.0, "failed": failed, "dir": entry, "command_entry": entry}


def test_fronts_and_the_verdict_at_each_budget():
    figures = [point("bsp", "bsp", 100.0, 0.60, 0.01), point("bsp", "bsp:topk", 2.0, 0.55, 0.01),
               point("localsgd", "p2", 50.0, 0.58, 0.005), point("localsgd", "p8", 12.5, 0.50, 0.01),
               point("localsgd", "p50", 2.0, 0.40, 0.02), point("localsgd", "p4", 25.0, 0.45, 0.01),
               point("diloco", "h8", 12.5, 0.545, 0.02), point("diloco", "bad", 1.0, None, None, failed="seed 0: NaN")]
    curves = method_curves(figures, {"bsp": "compress", "localsgd": "period"})
    assert [c["front"] for c in curves] == [["bsp:topk", "bsp"], ["p50", "p8", "p2"], ["h8"]]   # p4 dominated by p8
    assert curves[2]["knob"] == "given with --grid" and curves[2]["points"][-1]["entry"] == "bad"
    assert best_within(curves[1], 30.0)["entry"] == "p8" and best_within(curves[2], 0.5) is None
    # 2 %: BSP's top-k 0.55 +- 0.01 against local SGD's 0.40 +- 0.02: beyond the spread
    low = verdict_row(curves, 0.02, 100.0)
    assert (low["best"]["entry"], low["runner_up"]["entry"], low["beyond_spread"]) == ("bsp:topk", "p50", True)
    # 30 %: top-k 0.55 against DiLoCo 0.545 (the runner-up is another method): within the spread
    mid = verdict_row(curves, 0.3, 100.0)
    assert (mid["best"]["entry"], mid["runner_up"]["entry"], mid["beyond_spread"]) == ("bsp:topk", "h8", False)
    assert mid["lead"] == pytest.approx(0.005) and "within the seed spread" in mid["sentence"]
    full = verdict_row(curves, 1.0, 100.0)
    assert (full["best"]["entry"], full["runner_up"]["entry"]) == ("bsp", "p2") and full["beyond_spread"] is True
    assert "At 100 % of BSP's bytes (100 MB per replica) bsp is best: 0.6 ± 0.01 on 100 MB, ahead of p2" in \
        full["sentence"]
    none = verdict_row(curves, 0.005, 100.0)
    assert none["best"] is None and none["sentence"].endswith("no method fits.")
    one_seed = verdict_row(method_curves([point("a", "a", 1.0, 0.5, None), point("b", "b", 1.0, 0.4, None)], {}),
                           1.0, 1.0)
    assert one_seed["beyond_spread"] is None and "with one seed" in one_seed["sentence"]


def test_adaptive_points_are_judged_against_local_sgd_at_their_own_budget():
    """Against the local SGD point with exactly as many syncs where the frontier has one,
    else local SGD's most accurate point within the adaptive point's MB; the standing as
    compare's (beyond the seed spread: the difference exceeds the sum of the stds)."""
    from jaxsel.analysis.frontier_report import format_verdict, own_budget, own_budget_lines, standing

    def seeds(*syncs):
        return {"per_seed": [{"syncs": k} for k in syncs]}

    figures = [point("localsgd", "p4", 25.0, 0.60, 0.01), {**point("localsgd", "k49", 8.0, 0.55, 0.01),
                                                           "options": {"syncs": 49}},
               point("localsgd", "p16", 6.0, 0.50, 0.01), point("localsgd", "p50", 2.0, 0.45, 0.01)]
    for f in figures:
        f.setdefault("options", {})
    figures += [{**point("selsync", "smoothed", 7.0, 0.48, 0.02), **seeds(49, 49, 49)},      # k49 matches it
                {**point("selsync", "raw", 24.0, 0.61, 0.02), **seeds(400, 401, 402)},      # k49: best within 24 MB
                {**point("selsync", "tiny", 1.0, 0.30, 0.02), **seeds(3, 3, 3)},            # nothing within 1 MB
                {**point("selsync", "bad", 9.0, None, None, failed="seed 0: NaN"), **seeds(1)},
                {**point("bsp", "bsp", 100.0, 0.62, 0.01), **seeds(600)}]
    rows = own_budget(figures, {"smoothed", "raw", "tiny", "bad"})
    assert [(r["point"]["entry"], r["syncs"], r["baseline"] and r["baseline"]["entry"], r["how"]) for r in rows] == [
        ("smoothed", 49, "k49", "matched"), ("raw", 401, "k49", "within its MB"), ("tiny", 3, None, "within its MB")]
    assert [standing(r) for r in rows] == ["worse beyond the seed spread", "better beyond the seed spread",
                                           "no local SGD point within its MB"]
    assert rows[0]["lead"] == pytest.approx(-0.07)
    close = own_budget([*figures[:4], {**point("selsync", "near", 7.0, 0.53, 0.02), **seeds(49, 48, 50)}], {"near"})
    assert close[0]["baseline"]["entry"] == "k49" and standing(close[0]) == "within the seed spread"
    table = own_budget_lines(rows)
    assert "| smoothed | 7 | 1 | 0.48 ± 0.02 | k49 | matched | 8 | 0.55 ± 0.01 | worse beyond the seed spread |" in table
    text = format_verdict({"verdict": [], "beyond_spread": "b", "own_budget": rows})
    assert "  raw: 0.61 ± 0.02 on 24 MB; k49 (within its MB) 0.55 ± 0.01 on 8 MB: better beyond the seed spread" in text


def test_adaptive_points_are_also_judged_against_their_same_order_schedule():
    """A `triggered` spread point with exactly an adaptive point's sync count, averaging in
    its order (given with --grid, as `same_order_variant` builds it), is its same-order
    baseline: the selection alone, in frontier.json and frontier.md (issue 58)."""
    from jaxsel.analysis.frontier_report import own_budget, own_budget_lines

    def spread(label, syncs, acc, **order):
        return {**point("triggered", label, 7.0, acc, 0.01),
                "options": {"trigger": "spread", "trigger.syncs": syncs, "trigger.steps": 600, **order}}

    figures = [{**point("localsgd", "k49", 7.0, 0.55, 0.01), "options": {"syncs": 49}},
               spread("before49", 49, 0.47), spread("after49", 49, 0.56, sync="model"), spread("before50", 50, 0.2),
               {**point("selsync", "authors", 7.0, 0.48, 0.02), "options": {}, "per_seed": [{"syncs": 49}] * 3},
               {**point("selsync", "model", 7.0, 0.50, 0.02), "options": {"sync": "model"},
                "per_seed": [{"syncs": 49}] * 3},
               {**point("selsync", "alone", 7.0, 0.50, 0.02), "options": {}, "per_seed": [{"syncs": 7}] * 3}]
    rows = own_budget(figures, {"authors", "model", "alone"})
    same = [r["same_order"] and r["same_order"]["baseline"]["entry"] for r in rows]
    assert same == ["before49", "after49", None]
    assert rows[0]["same_order"]["lead"] == pytest.approx(0.01) and rows[0]["same_order"]["beyond_spread"] is False
    assert rows[1]["same_order"]["beyond_spread"] is True and rows[1]["same_order"]["lead"] == pytest.approx(-0.06)
    table = own_budget_lines(rows)
    assert "| authors | 1 | 0.48 ± 0.02 | before49 | 0.47 ± 0.01 | +0.01 | within the seed spread |" in table
    assert "| model | 1 | 0.5 ± 0.02 | after49 | 0.56 ± 0.01 | -0.06 | worse beyond the seed spread |" in table
    text = "\n".join(table)
    assert text.index("| authors |") < text.index("| model |")   # the authors' order first


def test_selsync_s_frontier_points_run_in_both_orders():
    """Every declared SelSync point averages before the update (the authors' order) and
    again after it (local SGD's), so the frontier asks whether selection beats a schedule
    in both orders (issue 58)."""
    grid = traits_of(STRATEGIES["selsync"]).budget.grid
    authors = [p for p in grid if "sync" not in p]
    assert [p for p in grid if "sync" in p] == [{**p, "sync": "model"} for p in authors] and len(authors) == 7


def test_levels_are_shares_of_bsp_in_increasing_order():
    assert check_levels([1, 0.02, 0.3]) == (0.02, 0.3, 1.0)
    for bad in ([], [0], [1.5], [0.1, 0.1]):
        with pytest.raises(ValueError, match="budget levels"):
            check_levels(bad)


def test_budget_knobs_reach_from_about_one_percent_to_all_of_bsp_s_bytes():
    """The declared grids span the budget axis on the default task: local SGD's periods and
    BSP's top-k fraction reach about 2 %, the plain methods 100 %."""
    ctx = {"total_steps": 600, "replicas": 8, "steps_per_epoch": 31}
    periods = [build_strategy("localsgd", p, **ctx).period for p in traits_of(STRATEGIES["localsgd"]).budget.grid]
    assert min(600 // p for p in periods) / 600 == pytest.approx(0.02, abs=0.005) and max(periods) == 50
    assert build_strategy("bsp", {"compress": "topk:0.01"}, **ctx).compress == "topk:0.01"


def test_a_diverging_cell_is_recorded_as_failed_and_never_run_again(tmp_path, monkeypatch):
    """`jaxsel frontier` records a non-finite stop (one diverging configuration must not end
    a sweep of dozens) and loads it as failed on a resume; its point is named, never ranked."""
    import jaxsel.analysis.cells as cells_module
    from jaxsel.analysis.cells import Cells, FailedCell
    from jaxsel.analysis.frontier import Point
    from jaxsel.analysis.frontier_report import markdown
    from jaxsel.analysis.progress import Progress
    from jaxsel.analysis.cells import row_config
    from jaxsel.analysis.variants import parse_entry
    from jaxsel.training.faults import NonFiniteError

    trained = []

    def diverges(plan):
        trained.append(plan.cfg.seed)
        raise NonFiniteError("non-finite loss at step 13; training stopped", 13)

    monkeypatch.setattr(cells_module, "train", diverges)
    variant = parse_entry("localsgd:period=3")
    cfg = row_config(TASK, variant, str(tmp_path / "localsgd_period=3" / "seed0"), 0)
    said = []
    got = Cells(tmp_path, Progress(1, said.append), tolerate_faults=True).get(cfg, "localsgd:period=3, seed 0")
    assert isinstance(got, FailedCell) and got.step == 13 and trained == [0]
    again = Cells(tmp_path, Progress(1, said.append), tolerate_faults=True).get(cfg, "localsgd:period=3, seed 0")
    assert isinstance(again, FailedCell) and again.error == got.error and trained == [0]   # loaded, not retried
    assert "finished earlier, loaded from localsgd_period=3/seed0/" in said[-1]
    with pytest.raises(NonFiniteError):   # compare stops, as a lone run does
        Cells(tmp_path, Progress(1)).get(row_config(TASK, variant, str(tmp_path / "other" / "seed0"), 0), "x")
    from jaxsel.analysis.frontier_report import point_figures

    figures = point_figures(Point("localsgd", variant, "localsgd_period=3", [got]), {})
    assert figures["failed"] == "seed 0: non-finite loss at step 13; training stopped"
    curves = method_curves([point("bsp", "bsp", 10.0, 0.5, 0.01), {**figures, "label": "localsgd (period=3)"}], {})
    assert curves[1]["front"] == [] and verdict_row(curves, 1.0, 10.0)["runner_up"] is None
    result = {"seeds": [0], "setting": "task", "reference": {"mb": 10.0}, "verdict": [], "beyond_spread": "b",
              "methods": curves, "left_out": [], "task_file": "task.json"}
    assert "| localsgd | localsgd (period=3) | - | - | failed: seed 0: non-finite loss at step 13" in \
        markdown(result, tmp_path)


def test_progress_says_how_many_cells_are_done_and_about_how_long_is_left():
    from jaxsel.analysis.progress import Progress, clock

    said = []
    progress = Progress(4, said.append)
    progress.started("a")
    assert said[-1].startswith("[cell 1 of 4 · 0 done · 0:00 elapsed · time left: known after the first cell] a")
    progress.finished(30.0)
    progress.loaded("b", "b/seed0")
    progress.started("c")
    assert said[-2] == "[cell 2 of 4] b: finished earlier, loaded from b/seed0/"
    assert "[cell 3 of 4 · 2 done · " in said[-1] and "about 1:00 left] c" in said[-1]   # 2 left x 30 s
    progress.skip(1)
    assert progress.total == 3 and clock(3725) == "1:02:05" and clock(59.6) == "1:00"


class Recorded:
    """A run as the frontier reads it: its per-step records."""

    def __init__(self, s):
        self.records = [{"step": t, "grad_norm": list(row)} for t, row in enumerate(s)]


def bsp_runs(seeds=2, steps=80, seed=0):
    rng = np.random.default_rng(seed)
    return [Recorded(np.exp(rng.normal(0, 0.3, size=(steps, 8)))) for _ in range(seeds)]


@pytest.mark.parametrize("statistic", [None, "smoothed"])
def test_selsync_s_deltas_are_derived_from_plain_bsp_s_gradient_norms(statistic):
    """Each fires:F point's delta: the share-F delta of the pooled post-warm-up Delta_bar of
    plain BSP's recorded norms, under the point's statistic (the global one here), rounded
    to 4 digits; the other points stay as declared."""
    from jaxsel.analysis import significance_stats as stats

    base = dataclasses.replace(TASK, strategy_options={} if statistic is None else {"statistic": statistic})
    variants = [v for v in declared_points("selsync") if "sync" not in v.options]   # the authors' order
    assert [v.entry for v in variants if fired(v)] == [f"selsync:delta=fires:{f:g}" for f in (0.05, 0.1, 0.25, 0.5)]
    runs = bsp_runs()
    derived = derive_points(base, variants, runs, base.optim.steps)
    used = statistic or jaxsel.SelSync().statistic
    pooled = np.concatenate([stats.decisions(stats.recorded_grad_norms(r.records), 25, 0.01, used).decided
                             for r in runs])
    for entry, point in derived.items():
        share = float(entry.rpartition(":")[2])
        want = float(f"{stats.fraction_deltas(pooled, [share])[share]:.4g}")
        assert point["delta"] == want and point["entry"] == f"selsync:delta={want}" and point["statistic"] == used
        assert point["fires_on"] == pytest.approx(np.mean(pooled >= want)) and point["same_as"] is None
    assert derived["selsync:delta=fires:0.05"]["delta"] > derived["selsync:delta=fires:0.5"]["delta"]


def test_a_derived_point_that_trains_another_point_s_configuration_is_marked_the_same():
    flat = [Recorded(np.ones((80, 8)))]   # every Delta_bar 0: every share's delta is 0
    derived = derive_points(TASK, [parse_entry("selsync:delta=0"), parse_entry("selsync:delta=fires:0.5"),
                                   parse_entry("selsync:delta=fires:0.1")], flat, TASK.optim.steps)
    assert derived["selsync:delta=fires:0.5"]["same_as"] == "selsync:delta=0"
    assert derived["selsync:delta=fires:0.1"]["same_as"] == "selsync:delta=0"


def test_a_resumed_frontier_uses_the_recorded_points_once_plain_bsp_s_runs_derive_them_again(tmp_path):
    """derived_points.json is read back as written where plain BSP's runs give those very
    points; one that does not hold the plan's derived points, one edited (issue 60 item 4:
    a delta of 5, frontier.md quoted it), one other runs made, or one with no runs to check
    it against is refused."""
    variants = declared_points("selsync")
    first = points_for(tmp_path, TASK, variants, bsp_runs(), TASK.optim.steps)
    assert json.loads((tmp_path / DERIVED_FILE).read_text())["points"] == first
    assert points_for(tmp_path, TASK, variants, bsp_runs(), TASK.optim.steps) == first
    with pytest.raises(ConfigError, match="but plain BSP's runs derive delta"):
        points_for(tmp_path, TASK, variants, bsp_runs(seed=1), TASK.optim.steps)   # other runs
    record = json.loads((tmp_path / DERIVED_FILE).read_text())
    edited = next(iter(record["points"]))
    record["points"][edited]["delta"] = 5
    (tmp_path / DERIVED_FILE).write_text(json.dumps(record))
    with pytest.raises(ConfigError, match=rf"records {re.escape(edited)} as .*\"delta\": 5.* edited"):
        points_for(tmp_path, TASK, variants, bsp_runs(), TASK.optim.steps)
    with pytest.raises(ConfigError, match="cannot be checked"):
        points_for(tmp_path, TASK, variants, None, TASK.optim.steps)
    with pytest.raises(ConfigError, match="records the points"):
        points_for(tmp_path, TASK, [parse_entry("selsync:delta=fires:0.3")], None, TASK.optim.steps)
    with pytest.raises(ConfigError, match="cannot be derived"):
        points_for(tmp_path / "empty", TASK, variants, None, TASK.optim.steps)


@pytest.mark.slow
def test_a_frontier_derives_selsync_s_deltas_from_its_bsp_cells_and_a_resume_keeps_them(tmp_path, capsys):
    """End to end: the fires:F points run at the deltas derived_points.json records (and
    frontier.json and .md show); a resumed frontier runs a missing point at its recorded
    delta once plain BSP's cells derive it again, and refuses a record edited since (issue
    60 item 4: it trained at the edited delta)."""
    out = tmp_path / "front"
    argv = ["frontier", "--methods", "selsync", "--grid", "selsync:delta=fires:0.5,selsync:delta=fires:0.1",
            "--dataset", "digits", "--steps", "16", "--batch-size", "4", "--opt", "window=2", "--seeds", "1",
            "--eval-every", "16", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    assert "3 points of 2 methods + 2 same-order baselines (at most) x 1 seeds = 5 cells" in capsys.readouterr().out
    assert len(list(out.glob("same-order_syncs=*-matches-selsync_delta=fires_0.*/seed0/cell.json"))) == 2
    derived = json.loads((out / DERIVED_FILE).read_text())["points"]
    assert sorted(derived) == ["selsync:delta=fires:0.1", "selsync:delta=fires:0.5"]
    assert json.loads((out / "frontier.json").read_text())["derived"] == derived
    assert "## Derived points" in (out / "frontier.md").read_text()
    for entry, p in derived.items():
        cfg = json.loads((out / entry.replace(":", "_") / "seed0" / "config.json").read_text())
        assert cfg["strategy_options"]["delta"] == p["delta"] and cfg["strategy_options"]["window"] == 2
    tampered = {**derived["selsync:delta=fires:0.5"], "delta": 0.123, "entry": "selsync:delta=0.123"}
    (out / DERIVED_FILE).write_text(json.dumps({"points": {**derived, "selsync:delta=fires:0.5": tampered}}))
    import shutil

    shutil.rmtree(out / "selsync_delta=fires_0.5")
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "records selsync:delta=fires:0.5 as" in err and "edited" in err, err
    assert not (out / "selsync_delta=fires_0.5").exists()
    (out / DERIVED_FILE).write_text(json.dumps({"points": derived}))
    assert main([*argv, "--resume"]) == 0
    assert "finished earlier, loaded from bsp/seed0/" in capsys.readouterr().out
    cfg = json.loads((out / "selsync_delta=fires_0.5" / "seed0" / "config.json").read_text())
    assert cfg["strategy_options"]["delta"] == derived["selsync:delta=fires:0.5"]["delta"]
