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


def test_compare_rejects_unknown_strategy(tmp_path, capsys):
    assert main(["compare", "--strategies", "bsp,nope", "--out", str(tmp_path)]) == 2
    assert "unknown strategy 'nope'" in capsys.readouterr().err
