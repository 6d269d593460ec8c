"""`jaxsel compare` end to end at a small size."""
import json

from jaxsel.cli import main


def test_compare_runs_end_to_end(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["compare", "--steps", "30", "--eval-every", "15", "--out", str(out), "--no-progress"])
    assert code == 0
    rows = json.loads((out / "results.json").read_text())
    assert [r["strategy"] for r in rows] == ["bsp", "localsgd", "selsync"]
    for r in rows:
        assert {"strategy", "final_test_accuracy", "sync_fraction", "bytes_allreduced", "wall_time_s"} <= set(r)
        assert 0.0 <= r["final_test_accuracy"] <= 1.0 and 0.0 <= r["sync_fraction"] <= 1.0
    by = {r["strategy"]: r for r in rows}
    assert by["bsp"]["sync_fraction"] == 1.0 and by["localsgd"]["sync_fraction"] < 1.0
    assert by["bsp"]["final_test_accuracy"] > 0.5  # it learns
    assert (out / "comparison.png").stat().st_size > 10_000
    lines = (out / "selsync" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 30 and "delta" in json.loads(lines[-1])
    printed = capsys.readouterr().out
    assert "sync frac" in printed and str(out) in printed
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


def test_compare_rejects_unknown_strategy(tmp_path, capsys):
    assert main(["compare", "--strategies", "bsp,nope", "--out", str(tmp_path)]) == 2
    assert "unknown strategy 'nope'" in capsys.readouterr().err
