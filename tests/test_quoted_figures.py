"""The figures the docs quote from runs are the recorded runs' (docs/quoted_figures.py):
calibrate's deltas in docs/COMPARE.md drifted from what the command printed (issue 61)."""
import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "docs" / "quoted_figures.py"


@pytest.fixture(scope="module")
def quoted():
    spec = importlib.util.spec_from_file_location("quoted_figures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_quoted_figure_is_its_record_s(quoted):
    assert quoted.stale() == [], "run `python docs/quoted_figures.py` to rewrite them from docs/recorded/"


def test_calibrate_s_quote_reads_the_record_as_the_command_prints_it(quoted):
    record = json.loads((quoted.RECORDED / "calibration.json").read_text())
    raw = [f"{float(v):.3g}" for v in record["statistics"]["raw"]["fires"].values()]
    assert quoted.calibrate_deltas(record).startswith(" / ".join(raw) + " raw, ")
    text = (quoted.DOCS / "COMPARE.md").read_text()
    assert f"(here {quoted.calibrate_deltas(record)};" in text


def test_a_quote_edited_by_hand_is_found_and_rewritten(quoted, tmp_path, monkeypatch):
    (tmp_path / "recorded").mkdir()
    (tmp_path / "recorded" / "r.json").write_text(json.dumps({"x": 0.4931}))
    (tmp_path / "DOC.md").write_text("the delta (here 0.46;\nmore")
    monkeypatch.setattr(quoted, "DOCS", tmp_path)
    monkeypatch.setattr(quoted, "RECORDED", tmp_path / "recorded")
    monkeypatch.setattr(quoted, "QUOTES", (quoted.Quote("DOC.md", r"\(here (?P<figures>[0-9.]+);", "r.json", "cmd",
                                                        lambda r: f"{r['x']:.3g}"),))
    assert quoted.stale() == ["DOC.md quotes '0.46'; r.json (cmd) gives '0.493'"]
    assert quoted.main(["--check"]) == 1 and quoted.main([]) == 0
    assert (tmp_path / "DOC.md").read_text() == "the delta (here 0.493;\nmore" and quoted.stale() == []


@pytest.mark.parametrize("task", ["label-skew", "paper"])
def test_the_selection_tables_hold_every_point_of_the_recorded_frontier(quoted, task):
    """BENCHMARKS.md's tables and the README's counts of issue 58's frontiers: one row per
    SelSync point with a same-order schedule, its lead the record's, and the counts the
    ones the frontier's own sentence (frontier.json's "selection") gives."""
    import re

    record = json.loads((quoted.RECORDED / f"frontier-{task}.json").read_text())
    judged = [r for r in record["own_budget"] if r.get("same_order")]
    rows = quoted.selection_table(record).splitlines()[2:]
    assert len(rows) == len(judged) == 14
    assert sorted(row.split(" | ")[5] for row in rows) == sorted(quoted._lead(r["same_order"]["lead"]) for r in judged)
    better, tied, worse = map(int, re.fullmatch(r"(\d+) of 14 better, (\d+) tied, (\d+) worse",
                                                quoted.selection_counts(record)).groups())
    sentence = record["selection"]
    assert better == 0 and sentence.startswith("Nowhere did selection beat its fixed schedule")
    assert f"Within the spread at {tied}." in sentence if tied else "Within" not in sentence
    assert f"lost to it beyond the spread at {worse}:" in sentence if worse else "lost" not in sentence


def test_a_printed_table_is_checked_line_for_line(quoted, tmp_path, monkeypatch):
    """README's and docs/COMPARE.md's compare tables are the record's as `jaxsel report`
    prints them: a figure edited in the doc, or a column the table gained since, is stale."""
    rows = json.loads((quoted.RECORDED / "compare-default.json").read_text())
    printed = quoted._table(legend_and_notes=False)(rows)
    assert printed.splitlines()[0].startswith("strategy") and "vs" in printed.splitlines()[0]
    assert "0.597 ± 0.009" in printed   # BSP's
    edited = printed.replace("0.597 ± 0.009", "0.601 ± 0.009", 1)
    (tmp_path / "recorded").mkdir()
    (tmp_path / "recorded" / "r.json").write_text(json.dumps(rows))
    (tmp_path / "DOC.md").write_text(f"ends with:\n\n```\n{edited}\n```\nafter")
    monkeypatch.setattr(quoted, "DOCS", tmp_path)
    monkeypatch.setattr(quoted, "RECORDED", tmp_path / "recorded")
    monkeypatch.setattr(quoted, "QUOTES", (quoted.Quote("DOC.md", r"(?s)ends with:\n\n```\n(?P<figures>.*?)\n```",
                                                        "r.json", "cmd", quoted._table(legend_and_notes=False)),))
    (line,) = quoted.stale()
    assert line.startswith("DOC.md's table from r.json (cmd) differs: 'bsp") and "0.601 ± 0.009" in line
    assert quoted.main([]) == 0 and quoted.stale() == []
    assert (tmp_path / "DOC.md").read_text() == f"ends with:\n\n```\n{printed}\n```\nafter"
