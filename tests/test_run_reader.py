"""The run directory's one reader (issue 44 item 3): `rundir.records.read_run` says what each
record holds or what is wrong with it, and decides nothing; the report (tolerant) and a job's
cells (strict) are adapters over it that keep their own policies."""
import json

import pytest

from jaxsel.training.rundir.records import Found, read_run

ROW = {"step": 0, "train_time_s": 0.5, "synced": True, "bytes_allreduced": 100}
EVAL = {"step": 1, "test_accuracy": 0.5, "test_loss": 1.0, "train_time_s": 0.5}
FINAL = {"final_test_accuracy": 0.5, "bytes_allreduced": 100, "sync_fraction": 1.0, "wall_time_s": 1.0,
         "steps": 2, "strategy": "bsp"}


def _run(tmp_path, metrics: str, **files):
    (tmp_path / "metrics.jsonl").write_text(metrics)
    for name, content in files.items():
        (tmp_path / f"{name}.json").write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    return tmp_path


def test_read_run_says_what_each_file_holds(tmp_path):
    cut = json.dumps({**ROW, "step": 1})[:20]
    run = read_run(_run(tmp_path, f"{json.dumps(ROW)}\n\n{cut}\n{json.dumps({**ROW, 'step': 2})}\n",
                        final=b"\xff{}", strategy=[1], config=b"{not json"))
    assert run.metrics.found is Found.VALUE
    assert [(n, row["step"]) for n, row in run.metrics.rows] == [(1, 0), (4, 2)]   # line numbers as in the file
    assert [n for n, _ in run.metrics.cut] == [3]
    assert (run.evals.found, run.evals.value) == (Found.MISSING, None)
    assert run.final.found is Found.NOT_TEXT and isinstance(run.final.error, UnicodeDecodeError)
    assert run.config.found is Found.NOT_JSON and run.config.error is not None
    assert (run.strategy.found, run.strategy.found_kind, run.strategy.kind) == (Found.WRONG_KIND, "list", dict)


def test_report_skips_a_cut_line_and_a_cell_refuses_it(tmp_path):
    from jaxsel.analysis.cells import DamagedCell, cell_result
    from jaxsel.analysis.report import load_run
    from jaxsel.training.config import TrainConfig

    path = _run(tmp_path, json.dumps(ROW) + "\n" + '{"step": 1, "tr', evals=[EVAL], final=FINAL, strategy={})
    run = load_run(path)
    assert [r["step"] for r in run["records"]] == [0] and run["evals"] == [EVAL] and run["config"] == {}
    with pytest.raises(DamagedCell, match="its metrics.jsonl has a line that is not JSON"):
        cell_result(TrainConfig(), path)
    (path / "metrics.jsonl").write_text(json.dumps(ROW) + "\n")
    assert cell_result(TrainConfig(), path).final == FINAL
    (path / "evals.json").unlink()
    assert load_run(path)["evals"] == []   # a report reads a run that wrote no evaluation
    with pytest.raises(DamagedCell, match="its evals.json is missing"):
        cell_result(TrainConfig(), path)


def test_report_names_a_damaged_record_in_one_line(tmp_path):
    from jaxsel.analysis.report import load_run

    path = _run(tmp_path, json.dumps(ROW) + "\n", evals={"step": 1})
    with pytest.raises(ValueError, match=r"evals.json holds a JSON dict, not the list a run writes there; restore"):
        load_run(path)


def test_a_metrics_file_that_is_not_text_is_named_by_both(tmp_path):
    from jaxsel.analysis.cells import DamagedCell, cell_result
    from jaxsel.analysis.report import load_run
    from jaxsel.training.config import TrainConfig

    path = tmp_path / "run"
    path.mkdir()
    (path / "metrics.jsonl").write_bytes(b'{"step": 0}\n\xff\n')
    assert read_run(path).metrics.found is Found.NOT_TEXT
    with pytest.raises(ValueError, match=r"metrics.jsonl is not UTF-8 text \(invalid start byte at byte 12\); restore"):
        load_run(path)
    with pytest.raises(DamagedCell, match=r"its metrics.jsonl is not UTF-8 text \(invalid start byte\)"):
        cell_result(TrainConfig(), path)
