"""No write leaves the run directory (issue 60 items 1-2): a run directory made of symbolic
links (`cp -rs runA runB`) is refused in one line before anything is written, so runA is
never touched; a link planted where a record is created or appended fails the write
(O_NOFOLLOW) instead of writing through it (rundir/links.py)."""
import json
import os
import subprocess

import pytest

from jaxsel.cli import main as cli_main
from jaxsel.training.rundir.links import LinkedRunDir, links_in, refuse_links
from jaxsel.training.rundir.metrics_file import MetricsFile
from jaxsel.training.rundir.write import write_record, write_text


def snapshot(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.mark.slow
def test_a_resume_of_a_cp_rs_copy_is_refused_in_one_line_and_leaves_the_original_as_it_was(tmp_path, capsys):
    run_a, run_b = tmp_path / "runA", tmp_path / "runB"
    common = ["--strategy", "bsp", "--batch-size", "8", "--log-every", "2", "--no-progress",
              "--checkpoint-dir", str(tmp_path / "ck")]
    assert cli_main(["train", *common, "--steps", "4", "--out", str(run_a)]) == 0
    capsys.readouterr()
    before = snapshot(run_a)
    subprocess.run(["cp", "-rs", str(run_a), str(run_b)], check=True)
    code = cli_main(["train", "--out", str(run_b), "--resume", "--steps", "6", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "holds symbolic links" in err and "cp -r, not cp -rs" in err and str(run_b) in err
    assert snapshot(run_a) == before
    assert all(p.is_symlink() for p in run_b.iterdir())   # nothing was written into the copy either


def test_links_are_found_at_any_depth_and_a_directory_without_links_passes(tmp_path):
    (tmp_path / "seed0").mkdir()
    refuse_links(tmp_path)
    refuse_links(tmp_path / "absent")
    (tmp_path / "seed0" / "metrics.jsonl").symlink_to(tmp_path / "elsewhere")
    assert links_in(tmp_path) == [tmp_path / "seed0" / "metrics.jsonl"]
    with pytest.raises(LinkedRunDir, match=r"run directory .* holds symbolic links \(.*seed0/metrics.jsonl"):
        refuse_links(tmp_path)


def test_a_resume_appends_no_line_through_a_linked_bad_file(tmp_path):
    """Item 2: metrics.jsonl.bad -> a file outside the run directory; the resume that keeps
    a bad line aside fails on the link instead of appending to the outside file."""
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"theirs\n")
    run = tmp_path / "run"
    run.mkdir()
    rows = [json.dumps({"step": 0}), "not a row", json.dumps({"step": 1})]
    (run / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    (run / "metrics.jsonl.bad").symlink_to(outside)
    with pytest.raises(OSError, match="symbolic link") as err:
        MetricsFile(run / "metrics.jsonl", 2)
    assert err.value.filename == str(run / "metrics.jsonl.bad")
    assert outside.read_bytes() == b"theirs\n"


def test_the_metrics_file_writes_no_row_through_a_linked_log(tmp_path):
    """Item 1 at the writer: a fresh log replaces the link by a file of its own; a resumed
    one, cut back in place, fails on the link."""
    outside = tmp_path / "outside.jsonl"
    outside.write_text(json.dumps({"step": 0}) + "\n" + json.dumps({"step": 1}) + "\n")
    before = outside.read_bytes()
    log = tmp_path / "run" / "metrics.jsonl"
    log.parent.mkdir()
    log.symlink_to(outside)
    with pytest.raises(OSError, match="symbolic link"):
        MetricsFile(log, 1)
    fresh = MetricsFile(log, 0)
    fresh.write([{"step": 0}])
    fresh.close()
    assert outside.read_bytes() == before
    assert not log.is_symlink() and log.read_text() == json.dumps({"step": 0}) + "\n"


def test_a_record_replaces_a_link_at_its_name_and_never_writes_through_a_planted_temporary(tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text("theirs")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".final.json.tmp").symlink_to(outside)
    (tmp_path / "run" / "evals.json").symlink_to(outside)
    write_record(tmp_path / "run" / "final.json", {"step": 3})
    write_text(tmp_path / "run" / "evals.json", "[]")
    assert outside.read_text() == "theirs"
    assert json.loads((tmp_path / "run" / "final.json").read_text()) == {"step": 3}
    assert not (tmp_path / "run" / "evals.json").is_symlink() and not os.path.lexists(tmp_path / "run" / ".final.json.tmp")
