"""`jaxsel compare` end to end at a small size (the default task, fewer steps)."""
import json

from jaxsel.cli import main

PICTURES = ("comparison.png", "accuracy_vs_time.png", "sync_timeline.png", "divergence.png")


def test_compare_runs_end_to_end(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["compare", "--steps", "60", "--eval-every", "15", "--out", str(out), "--no-progress"])
    assert code == 0
    rows = json.loads((out / "results.json").read_text())
    assert [r["strategy"] for r in rows] == ["bsp", "localsgd", "selsync"]
    for r in rows:
        assert {"strategy", "final_test_accuracy", "sync_fraction", "bytes_allreduced", "wall_time_s",
                "steps_to_target", "bytes_to_target", "time_to_target_s", "speedup_vs_bsp",
                "target_accuracy", "reached_target"} <= set(r)
        assert 0.0 <= r["final_test_accuracy"] <= 1.0 and 0.0 <= r["sync_fraction"] <= 1.0
        assert r["reached_target"] == (r["steps_to_target"] is not None) == (r["time_to_target_s"] is not None)
    by = {r["strategy"]: r for r in rows}
    assert by["bsp"]["sync_fraction"] == 1.0 and by["localsgd"]["sync_fraction"] < 1.0
    assert by["bsp"]["final_test_accuracy"] > 0.2  # it learns (10 classes: chance is 0.1)
    assert by["bsp"]["reached_target"] and by["bsp"]["speedup_vs_bsp"] == 1.0
    assert by["bsp"]["target_accuracy"] == 0.99 * by["bsp"]["final_test_accuracy"]
    for png in PICTURES:
        assert (out / png).stat().st_size > 10_000, png
    lines = (out / "selsync" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 60 and "delta" in json.loads(lines[-1])
    printed = capsys.readouterr().out
    assert "sync frac" in printed and "proj s>tgt" in printed and str(out) in printed
    # SelSync after its warm-up (t >= 2W-1 = 49): it syncs, or the table says why it did not
    sel = by["selsync"]
    assert sel["warmup_steps"] == 49
    assert sel["syncs_after_warmup"] >= 1 or ("one-step jump" in sel["quiet_note"] and sel["quiet_note"] in printed)
    layout = "8 replicas on 8 x CPU (cpu), 1 per device"   # what the test host really has
    assert f"layout: {layout}" in printed and all(r["layout"] == layout for r in rows)


def test_compare_packed_says_so(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["compare", "--strategies", "selsync", "--devices", "2", "--steps", "6", "--eval-every", "6",
                 "--out", str(out), "--no-progress"]) == 0
    layout = "8 replicas on 2 x CPU (cpu), 4 per device"
    assert f"layout: {layout}" in capsys.readouterr().out
    assert json.loads((out / "results.json").read_text())[0]["layout"] == layout
    assert json.loads((out / "selsync" / "config.json").read_text())["layout"] == layout


def test_compare_options_go_to_the_strategies_that_take_them(tmp_path, capsys):
    from jaxsel.strategy_args import options_for

    shared = {"delta": 0.05, "window": 2, "period": 5, "aggregator": "median"}
    assert options_for("selsync", shared) == {"delta": 0.05, "window": 2, "aggregator": "median"}
    assert options_for("localsgd", shared) == {"period": 5, "aggregator": "median"}
    assert options_for("diloco", shared) == {"period": 5, "aggregator": "median"}   # --period sets H
    assert options_for("bsp", shared) == {"aggregator": "median"}
    assert main(["compare", "--strategies", "bsp", "--period", "5", "--out", str(tmp_path / "x")]) == 2
    assert "no strategy of bsp has option 'period'" in capsys.readouterr().err


def test_compare_two_level_flags(tmp_path, capsys):
    from jaxsel.compare import format_table, network_label
    from jaxsel.config import TrainConfig

    for argv, text in ((["--gpus-per-host", "3"], "3 must divide replicas 8"),
                       (["--intra-network", "ib"], "unknown network preset 'ib'")):
        assert main(["compare", *argv, "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and text in err[0] and err[0].startswith("jaxsel compare: error: ")
    two = TrainConfig(project_gpus_per_host=4, project_intra_network="pcie")
    assert network_label(two) == "2 hosts x 4 (pcie inside, 10gbe between)"
    assert network_label(TrainConfig(project_network="1gbe")) == "1gbe"   # one network: as given
    row = {"strategy": "bsp", "final_test_accuracy": 0.5, "sync_fraction": 1.0, "bytes_allreduced": 1,
           "wall_time_s": 1.0, "target": "99%", "project_network": network_label(two)}
    assert "projected wall-clock on 2 hosts x 4 (pcie inside, 10gbe between)" in format_table([row])


def test_compare_rejects_unknown_strategy_and_bad_target(tmp_path, capsys):
    assert main(["compare", "--strategies", "bsp,nope", "--out", str(tmp_path)]) == 2
    assert "unknown strategy 'nope'" in capsys.readouterr().err
    assert main(["compare", "--target", "150%", "--out", str(tmp_path)]) == 2
    assert "--target" in capsys.readouterr().err
