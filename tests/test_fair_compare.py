"""Fair comparisons (issue 22): variants of a strategy, seeds, budget-matched baselines,
each replica's own accuracy, the Pareto picture, and SelSync's delta calibration."""
import contextlib
import dataclasses
import io
import json
import math
import re

import jax
import numpy as np
import pytest

from jaxsel.analysis.compare import run_comparison
from jaxsel.analysis.matched_budget import is_adaptive, matched_syncs, matched_variant, verdict
from jaxsel.analysis.pareto import front
from jaxsel.analysis.significance_reach import delta_for_fractions
from jaxsel.analysis.variants import parse_strategies, split_entries
from jaxsel.cli import main
from jaxsel.strategies import build_strategy
from jaxsel.training.config import ConfigError, TrainConfig, check_config

FAST = ["--steps", "40", "--eval-every", "20", "--opt", "window=4", "--no-progress"]


def test_entries_split_on_commas_and_colons_only_between_entries_and_options():
    assert split_entries("bsp,localsgd:period=8,selsync,selsync:delta=0.05") == \
        ["bsp", "localsgd:period=8", "selsync", "selsync:delta=0.05"]
    # values holding ':' and ',' stay whole; a piece that starts with a strategy name starts an entry
    assert split_entries("selsync:aggregator=trimmed:2,bsp") == ["selsync:aggregator=trimmed:2", "bsp"]
    assert split_entries("localsgd:aggregator=multikrum:1,3:period=4, bsp") == \
        ["localsgd:aggregator=multikrum:1,3:period=4", "bsp"]
    trimmed, plain = parse_strategies("selsync:aggregator=trimmed:2:delta=0.05,bsp")
    assert trimmed.options == {"aggregator": "trimmed:2", "delta": 0.05} and plain.options == {}
    assert trimmed.label("ignored") == "selsync (aggregator=trimmed:2, delta=0.05)"
    assert plain.label("bsp [median]") == "bsp [median]"   # a plain entry keeps the strategy's own description
    assert trimmed.slug() == "selsync_aggregator=trimmed_2_delta=0.05"
    period = parse_strategies(["localsgd:period=8"])[0]
    assert period.options == {"period": 8} and isinstance(period.options["period"], int)
    # the global flags are defaults for every entry that takes them; an entry's own options win
    assert parse_strategies("selsync:delta=0.05")[0].effective({"delta": 0.1, "window": 5, "period": 3}) == \
        {"delta": 0.05, "window": 5}


@pytest.mark.parametrize("argv, message", [
    (["--strategies", "selsync:delt=0.05"], "entry 'selsync:delt=0.05': strategy 'selsync' has no option 'delt'"),
    (["--strategies", "selsync:delta=abc"], "entry 'selsync:delta=abc': strategy 'selsync' option 'delta' must be"),
    (["--strategies", "localsgd:period=0"], "entry 'localsgd:period=0'"),
    (["--strategies", "selsync:0.05"], "expected NAME:KEY=VALUE"),
    (["--strategies", "bsp,nope"], "unknown strategy 'nope'"),
    (["--strategies", ""], "names no strategy"),
    (["--strategies", " , "], "names no strategy"),
    (["--strategies", "bsp,,selsync"], "has an empty entry"),
    (["--strategies", "selsync:delta=0.05,"], "has an empty entry"),
    (["--strategies", "bsp,bsp"], "lists 'bsp' twice"),
    (["--strategies", "selsync,selsync:delta=0.3"], "train the same configuration"),
    (["--strategies", "selsync:delta=0.05,bsp", "--opt", "delta=0.1"], "reaches no row"),
    (["--seeds", "0"], "seeds must be an integer >= 1"),
    (["--attribution", "--no-match-budget"], "--attribution splits an adaptive row's gap to its budget-matched"),
])
def test_bad_entries_are_one_line_exit_2_before_anything_trains(tmp_path, capsys, argv, message):
    out = tmp_path / "cmp"
    assert main(["compare", *argv, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jaxsel compare: error: ") and message in err[0], err
    assert captured.out == "" and not out.exists()


def test_adaptive_methods_are_those_whose_syncs_are_decided_during_the_run():
    ctx = {"replicas": 8, "total_steps": 600, "steps_per_epoch": 10}
    adaptive = [("selsync", {}), ("syncswitch", {"policy": "online"}), ("hierarchical", {"groups": 2}),
                ("triggered", {"trigger": "significance"})]
    fixed = [("bsp", {}), ("localsgd", {}), ("diloco", {}), ("postlocal", {}), ("syncswitch", {}), ("ssp", {}),
             ("hierarchical", {"groups": 2, "outer": "localsgd"}), ("ssdsgd", {})]
    assert all(is_adaptive(build_strategy(n, o, **ctx)) for n, o in adaptive)
    assert not any(is_adaptive(build_strategy(n, o, **ctx)) for n, o in fixed)


def test_the_matched_baseline_syncs_on_the_adaptive_row_s_mean_count_rounded():
    """Any count is matched exactly (local SGD on K of the run's steps, evenly spread),
    dense ones too, where an integer period falls between two counts (600 steps, 358.3
    syncs: P = 2 gives 300, P = 1 600). A global --period does not reach the matched row."""
    assert [matched_syncs(x) for x in (0.0, 0.4, 0.5, 1.6, 358.3, 358.5, 358.7, 600.0)] == [0, 0, 1, 2, 358, 359, 359,
                                                                                            600]
    twin = matched_variant(parse_strategies("selsync:delta=0.05")[0], 358.3)
    assert twin.entry == "localsgd:syncs=358"
    assert twin.effective({"period": 8, "aggregator": "median", "delta": 0.1}) == {"syncs": 358, "aggregator": "median"}
    built = build_strategy("localsgd", twin.effective({"period": 8}), total_steps=600)
    assert built.describe() == "localsgd (358 of 600 steps)"


def test_verdict_sentences():
    row = lambda label, acc, std: {"strategy": label, "final_test_accuracy": acc, "final_test_accuracy_std": std,
                                   "per_seed": [{}] * 3}
    base = row("localsgd (period 12, matches selsync)", 0.45, 0.01)
    assert verdict(row("selsync", 0.26, 0.02), base).startswith("selsync did not beat its budget-matched baseline")
    assert "beat its budget-matched baseline localsgd" in verdict(row("selsync", 0.50, 0.02), base)
    assert "within the seed spread" in verdict(row("selsync", 0.47, 0.02), base)   # 0.02 <= 0.02 + 0.01
    assert "no spread to judge by" in verdict(row("selsync", 0.47, None), {**base, "final_test_accuracy_std": None})


def test_pareto_front_keeps_the_non_dominated_points():
    points = [(55.0, 0.59), (1.1, 0.35), (4.5, 0.26), (4.6, 0.46), (30.0, 0.44)]
    assert front(points) == [1, 3, 0]   # (4.5, 0.26) and (30, 0.44) are dominated


def test_delta_calibration_counts_post_warmup_steps():
    warm = [{"step": t, "synced": True, "delta": [None] * 2} for t in range(5)]
    later = [{"step": 5 + i, "synced": False, "delta": [v / 2, v]} for i, v in enumerate(np.arange(1, 101) / 100)]
    deltas = delta_for_fractions(warm + later)
    maxima = np.arange(1, 101) / 100
    for f, d in deltas.items():
        assert np.sum(maxima >= d) == math.ceil(f * 100)   # exactly that share would have synced
    assert delta_for_fractions(warm) == {}


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """The issue's command, CI-sized: variants, 2 seeds, matched baselines."""
    out = tmp_path_factory.mktemp("grid") / "cmp"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["compare", "--strategies", "bsp,localsgd:period=8,selsync:delta=0.05", "--seeds", "2",
                     "--match-budget", *FAST, "--out", str(out)])
    assert code == 0
    return out, json.loads((out / "results.json").read_text()), printed.getvalue()


@pytest.mark.slow
@pytest.mark.pictures
def test_grid_rows_follow_the_results_contract(grid):
    out, rows, _ = grid
    labels = [r["strategy"] for r in rows]
    sel = "selsync (delta=0.05; averages before the update)"
    assert labels[:3] == ["bsp", "localsgd (period=8; averages after the update)", sel]
    same, matched = rows[3], rows[4]
    syncs = matched["options"]["syncs"]
    assert labels[4] == f"localsgd ({syncs} of 40 steps, averages after the update, matches selsync:delta=0.05)" \
        and matched["options"] == {"syncs": syncs}
    assert labels[3] == \
        f"triggered spread ({syncs} of 40 steps, averages before the update, matches selsync:delta=0.05)"
    assert same["options"]["trigger.syncs"] == syncs and same["options"]["trigger.warmup"] == 3   # W-1 at W = 4
    assert matched["matched_to"] == same["matched_to"] == sel and "matched_to" not in rows[2]
    # each row's averaging order, and each baseline's schedule and kind (issue 58)
    assert [r.get("sync_mode") for r in rows] == ["grads", "model", "params", "params", "model"]
    assert same["baseline"] == "same order" and matched["baseline"] == "local SGD"
    assert same["baseline_trigger"] == (f"spread: {syncs} of 40 steps, the first 3 forced (the method's warm-up), "
                                        f"averages before the update")
    assert matched["baseline_trigger"] == f"spread: {syncs} of 40 steps, averages after the update"
    for r in rows:
        accs = [s["final_test_accuracy"] for s in r["per_seed"]]
        assert [s["seed"] for s in r["per_seed"]] == r["seeds"] == [0, 1]
        assert r["final_test_accuracy"] == pytest.approx(np.mean(accs))
        assert r["final_test_accuracy_std"] == pytest.approx(np.std(accs, ddof=1))
        assert r["sync_fraction"] == pytest.approx(np.mean([s["sync_fraction"] for s in r["per_seed"]]))
        assert r["bytes_allreduced"] == pytest.approx(np.mean([s["bytes_allreduced"] for s in r["per_seed"]]))
        assert set(r["replica_accuracy"]) == {"mean", "min", "max"} and isinstance(r["options"], dict)
        assert {"steps_to_target", "time_to_target_s", "speedup_vs_bsp", "reached_target"} <= set(r)
        assert all({"seed", "final_test_accuracy", "sync_fraction", "bytes_allreduced", "replica_accuracy"}
                   <= set(s) for s in r["per_seed"])
    # the matched row syncs exactly the adaptive row's mean count, rounded, in every seed (issue 37)
    target = np.mean([s["syncs"] for s in rows[2]["per_seed"]])
    assert matched["matched_syncs"] == target and syncs == matched_syncs(target)
    assert [s["syncs"] for s in matched["per_seed"]] == [syncs, syncs] and matched["syncs"] == syncs
    assert [s["syncs"] for s in same["per_seed"]] == [syncs, syncs] and same["matched_syncs"] == target
    for png in ("comparison.png", "accuracy_vs_time.png", "sync_timeline.png", "divergence.png", "pareto.png"):
        assert (out / png).stat().st_size > 10_000, png
    assert (out / "selsync_delta=0.05" / "seed1" / "metrics.jsonl").is_file()


@pytest.mark.slow
def test_replica_accuracy_equals_the_evaluated_model_right_after_a_sync(grid):
    """BSP syncs every step, local SGD with period 8 after step 40: the replicas hold one
    model, so each replica's accuracy is the replica average's."""
    _, rows, _ = grid
    for r in rows[:2]:
        for s in r["per_seed"]:
            own = s["replica_accuracy"]
            assert own["min"] == own["max"] == own["mean"] == s["final_test_accuracy"], (r["strategy"], own)


def _comparable(run) -> str:
    timing = ("train_time_s", "projected_time_s", "wall_time_s", "compile_time_s", "projection")
    strip = lambda d: {k: v for k, v in d.items() if k not in timing}
    return json.dumps({"records": [strip(r) for r in run.records], "evals": [strip(e) for e in run.evals],
                       "final": strip(run.final)}, sort_keys=True)   # exact floats; NaN equals NaN


def test_a_grid_seed_is_the_lone_run_of_that_seed_bit_for_bit(tmp_path, monkeypatch):
    # the runs are compared, not their pictures (drawn by the grid's tests): 2 x 3 CPU-s saved
    base = TrainConfig(dataset="mnist1d", partition="label_skew", steps=30, eval_every=15, progress=False,
                       strategy_options={"window": 3})
    grid = run_comparison(base, "selsync:delta=0.05", tmp_path / "grid", seeds=2, keep_states=True)
    lone = run_comparison(dataclasses.replace(base, seed=1), "selsync:delta=0.05", tmp_path / "lone",
                          keep_states=True)
    ours, theirs = grid.row_runs[0].runs[1], lone.row_runs[0].runs[0]
    assert ours.config.seed == theirs.config.seed == 1
    assert _comparable(ours) == _comparable(theirs)
    for a, b in zip(jax.tree.leaves(jax.device_get(ours.state)), jax.tree.leaves(jax.device_get(theirs.state))):
        assert np.array_equal(a, b)
    assert grid.rows[0]["per_seed"][1]["final_test_accuracy"] == lone.rows[0]["final_test_accuracy"]
    first = grid.row_runs[0].runs[0]
    assert any(r["synced"] for r in ours.records[5:])   # it syncs after its warm-up: the decisions are compared too
    assert first.records[0]["loss"] != ours.records[0]["loss"]   # the seed matters


def test_replicas_are_evaluated_one_by_one_packed_and_at_every_evaluation(tmp_path):
    """Packed (4 replicas per device), local SGD syncing after steps 3 and 6 of 6: at every
    evaluation (steps 0, 3, 6) the replicas agree with the evaluated model."""
    out = tmp_path / "run"
    assert main(["train", "--strategy", "localsgd:period=3", "--steps", "6", "--eval-every", "3",
                 "--devices", "2", "--eval-replicas", "every", "--no-checkpoint", "--no-progress",
                 "--out", str(out)]) == 0
    evals = json.loads((out / "evals.json").read_text())
    assert [e["step"] for e in evals] == [0, 3, 6]
    for e in evals:
        own = e["replica_accuracy"]
        assert len(own["per_replica"]) == 8 and own["min"] == own["max"] == e["test_accuracy"]
    final = json.loads((out / "final.json").read_text())
    assert final["replica_accuracy"] == evals[-1]["replica_accuracy"]
    with pytest.raises(ConfigError, match="eval_replicas must be one of final, every, off"):
        check_config(TrainConfig(eval_replicas="sometimes"))


def test_a_compare_directory_is_never_overwritten_nor_shared(tmp_path, capsys):
    from jaxsel.training.rundir.lock import DirectoryLock

    out = tmp_path / "cmp"
    out.mkdir()
    (out / "results.json").write_text("[]")
    assert main(["compare", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "already holds a comparison (results.json)" in captured.err
    busy = tmp_path / "busy"
    lock = DirectoryLock(busy, "compare directory").acquire()   # a compare running there
    try:
        assert main(["compare", "--seeds", "1", "--out", str(busy)]) == 2
    finally:
        lock.release()
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1 and "is in use by process" in captured.err


@pytest.mark.slow
def test_grid_prints_the_table_the_verdict_and_the_true_layout(grid):
    out, rows, printed = grid
    assert f"run directory: {out}" in printed and "[entry 3 of 3, matched baseline] localsgd:syncs=" in printed
    assert "[entry 1 of 3] bsp, seeds 0, 1: 2 cells as one batch" in printed
    # the test host's 8 CPU devices, the replicas packed on one by the job (analysis/job_layout.py)
    layout = "8 replicas on 1 x CPU (cpu), 8 per device, packed by vmap"
    assert f"layout: {layout} (a job that batches its cells packs" in printed
    assert all(r["layout"] == f"{layout} (forced)" for r in rows)
    assert "replicas' own" in printed and "acc (min-max)" in printed and "means over 2 seeds (0, 1)" in printed
    table = printed[printed.index("\nstrategy "):printed.rindex("\nwrote ")]
    assert max(len(line) for line in table.splitlines()) <= 120   # the table, its legend and notes wrapped
    assert "strategy options for every row that takes them: window=4" in printed
    syncs = by_entry(rows)["selsync:delta=0.05"]["syncs"]
    flat = " ".join(printed.split())   # notes are wrapped to 100 columns
    sel = re.escape("selsync (delta=0.05; averages before the update)")
    for baseline in ("localsgd", "triggered spread"):   # one sentence for each matched baseline
        assert len(re.findall(f"{sel}( did not beat| beat| against) its budget-matched baseline {baseline} \\(",
                              flat)) == 1, baseline
    # the attribution: the gap to local SGD is the selection's part plus the order's (issue 58)
    a = by_entry(rows)["selsync:delta=0.05"]["attribution"]
    assert set(a["parts"]) == {"selection", "averaging order"}
    assert a["gap_to_local_sgd"]["difference"] == pytest.approx(sum(p["difference"] for p in a["parts"].values()))
    assert "attribution of selsync (delta=0.05; averages before the update)'s gap to local SGD on as many syncs" \
        in flat
    assert f"exactly {matched_syncs(syncs)} syncs in every seed, selsync (delta=0.05; averages before the update)'s " \
        f"{syncs:.4g} (mean over " \
        f"seeds) rounded" in flat
    assert "[cells 1-2 of 10 · 0 done" in printed and "about" in printed and "left]" in printed   # progress (a row's two seeds as one batch), ETA
    assert "the difference of the two mean accuracies exceeds the sum of their standard deviations" in flat
    by = by_entry(rows)
    assert by["bsp"]["sync_fraction"] == 1.0 and by["bsp"]["speedup_vs_bsp"] == 1.0
    assert by["bsp"]["target_accuracy"] == pytest.approx(0.99 * by["bsp"]["final_test_accuracy"])
    sel = by["selsync:delta=0.05"]
    assert sel["warmup_steps"] == 3 and sel["warmup_syncs"] == 3   # W-1 at W = 4: the raw statistic's
    assert [s["syncs_after_warmup"] for s in sel["per_seed"]] and \
        sel["syncs_after_warmup"] == np.mean([s["syncs_after_warmup"] for s in sel["per_seed"]])
    lines = (out / "selsync_delta=0.05" / "seed0" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 40 and "delta" in json.loads(lines[-1])


def by_entry(rows: list[dict]) -> dict:
    return {r["entry"]: r for r in rows}


def test_a_matched_row_of_an_already_trained_configuration_shares_its_runs(tmp_path):
    """Two adaptive rows with as many syncs get the same matched baseline: it trains once."""
    import jaxsel.analysis.compare as cmp
    from jaxsel.analysis.progress import Progress
    from jaxsel.training.train import RunResult

    said, trained = [], []

    class FakeCells:
        progress = Progress(cmp.planned_cells([(None, True)] * 2, 2), said.append)
        load_only = False

        def get(self, cfg, what):
            trained.append((cfg.strategy, cfg.strategy_options, cfg.seed))
            self.progress.started(what)
            self.progress.finished(0.0)
            synced = [{"synced": t < 10} for t in range(100)]   # 10 syncs in 100 steps
            return RunResult(cfg, synced, [], {"strategy": cfg.strategy}, None, cfg.strategy)

        def get_all(self, wanted, row=None):   # a row's seeds (batched by the real Cells)
            return [self.get(cfg, what) for cfg, what in wanted]

    plan = cmp.plan_rows(TrainConfig(steps=100), "selsync,selsync:delta=0.1", 2, True)
    cells = FakeCells()
    rows = cmp.run_rows(TrainConfig(steps=100), plan, 2, tmp_path, cells)
    same = {"trigger": "spread", "trigger.syncs": 10, "trigger.steps": 100, "trigger.warmup": 10}   # the rest default
    assert [(name, opts) for name, opts, seed in trained[::2]] == [
        ("selsync", {}), ("triggered", same), ("localsgd", {"syncs": 10}), ("selsync", {"delta": 0.1})]
    before, after = "averages before the update", "averages after the update"
    assert [r.label for r in rows] == [
        "selsync", f"triggered spread (10 of 100 steps, {before}, matches selsync)",
        f"localsgd (10 of 100 steps, {after}, matches selsync)", f"selsync (delta=0.1; {before})",
        f"triggered spread (10 of 100 steps, {before}, matches selsync:delta=0.1)",
        f"localsgd (10 of 100 steps, {after}, matches selsync:delta=0.1)"]
    assert rows[4].runs is rows[1].runs and rows[5].runs is rows[2].runs
    assert rows[4].matched_to is rows[5].matched_to is rows[3] and rows[1].matched_to is rows[2].matched_to is rows[0]
    assert any("its runs are reused" in line for line in said)
    assert cells.progress.total == 8 and cells.progress.done == 8   # 12 planned, 4 shared
    # a report of a comparison recorded before the same-order baseline existed goes without it
    FakeCells.load_only, FakeCells.progress = True, Progress(cmp.planned_cells(plan, 2))
    (tmp_path / "selsync").mkdir()
    old = cmp.run_rows(TrainConfig(steps=100), plan, 2, tmp_path, FakeCells())
    assert [r.label for r in old] == [rows[i].label for i in (0, 2, 3, 5)]
    (tmp_path / "same-order_syncs=10-matches-selsync").mkdir()   # recorded: reported
    assert len(cmp.run_rows(TrainConfig(steps=100), plan, 2, tmp_path, FakeCells())) == 6


@pytest.mark.parametrize("entry", ["selsync", "selsync:sync=model:sync_opt_state=true:aggregator=median",
                                   "selsync:max_local=8:compress=int8:statistic=smoothed:warmup=5",
                                   "selsync:sync=grads:sync_model_state=true:compress=topk:0.5:error_feedback=false",
                                   "triggered:trigger=significance:trigger.delta=0.2:sync=model:aggregator=trimmed:1",
                                   "accordion"])
def test_the_same_order_baseline_differs_from_its_method_only_in_the_trigger(entry):
    """Every trigger-based adaptive method's same-order baseline (`same_order_variant`) has
    its sync mode, optimizer-state handling, aggregator, codec, error feedback and
    model-state sync; only its trigger differs: exactly K syncs, the method's forced
    warm-up first, the rest evenly spread (issue 58, item 1)."""
    from jaxsel.analysis.matched_budget import built, same_order_variant
    from jaxsel.core.triggers import Spread
    from jaxsel.strategies import TriggeredStrategy

    base, adaptive = TrainConfig(steps=100), parse_strategies(entry)[0]
    method = built(base, adaptive)
    assert is_adaptive(method)
    baseline = built(base, same_order_variant(base, adaptive, 30.4, 100))
    same = {f.name for f in dataclasses.fields(TriggeredStrategy)} - {"trigger", "trigger_options"}
    assert {k: getattr(baseline, k) for k in same} == {k: getattr(method, k) for k in same}
    warmup = getattr(getattr(method.trigger, "inner", method.trigger), "warmup_steps", 0)
    assert baseline.trigger == Spread(30, 100, warmup=warmup) != method.trigger
    fires = np.asarray([bool(baseline.trigger.fires(t)) for t in range(100)])
    assert fires.sum() == 30 and fires[:warmup].all()


def test_a_composition_gets_local_sgd_alone():
    """A two-level method has no one trigger to replace: no same-order baseline."""
    from jaxsel.analysis.matched_budget import same_order_variant

    entry = parse_strategies("hierarchical:inner=localsgd:outer=selsync:groups=2")[0]
    assert same_order_variant(TrainConfig(steps=100), entry, 30.0, 100) is None


def test_the_run_seed_also_seeds_a_strategy_s_own_sampling():
    """FedAvg's client sampling and Sync-Switch's simulated stragglers follow the run's seed
    unless their own `seed` is set, so the seeds of a grid differ there too (and Sync-Switch
    draws the stragglers its cost-model projection charges)."""
    from jaxsel.training.run import configured_strategy

    cfg = TrainConfig(seed=3, strategy="fedavg", strategy_options={"fraction": 0.5})
    assert configured_strategy(cfg).seed == 3
    assert configured_strategy(dataclasses.replace(cfg, strategy_options={"fraction": 0.5, "seed": 7})).seed == 7
    assert configured_strategy(dataclasses.replace(cfg, strategy="syncswitch", strategy_options={})).seed == 3


@pytest.mark.slow
def test_report_on_a_grid_names_each_seed_and_calibrates_delta(grid, capsys):
    out, _, _ = grid
    assert main(["report", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "bsp/seed0" in printed and "selsync_delta=0.05/seed1" in printed
    assert "delta that would have synced 5% / 10% / 25% / 50% of the steps after the warm-up" in printed
    line = next(line for line in printed.splitlines() if line.startswith("  selsync_delta=0.05/seed0:"))
    assert "(37 steps after the warm-up," in line and "a calibration aid, not a prediction" in printed
