"""A job's own files in the run directory's home (issue 59 item 3): frontier.json, task.json,
derived_points.json, report.json, calibration.json and job.json are read and written through
`training/rundir/job_files.py`: written atomically by the one `JobFile` its reader checks, a
damaged or foreign file refused in one line that names it and what to do."""
import json

import pytest

from jaxsel.training.config import ConfigError
from jaxsel.training.rundir import names
from jaxsel.training.rundir.job_files import (CALIBRATION, DERIVED, FRONTIER, JOB, REPORT, TASK, DamagedRecord,
                                              read_job_file, read_strict, write_job_file)
from jaxsel.training.rundir.lock import DirectoryLock

#: a record of each file, as its writer makes it (the fields each must hold, and one more)
VALUES = {   # by file name
    JOB.name: {"kind": "frontier", "settings": {"seeds": 2}, "code": {"sources": "ab"}, "command": "jaxsel frontier"},
    DERIVED.name: {"about": "...", "points": {"selsync:delta=fires:0.1": {"delta": 0.25}}},
    CALIBRATION.name: {"setting": "a task", "window": 25, "alpha": 0.01, "delta": 0.3, "seeds": [0], "statistics": {}},
    FRONTIER.name: {"setting": "a task", "seeds": [0, 1], "levels": [0.5, 1.0], "verdict": [], "methods": [],
               "task_file": "task.json"},
    TASK.name: {"dataset": "synthetic", "steps": 40},
    REPORT.name: {"networks": ["10gbe"], "runs": [{"name": "bsp"}], "target": None},
}


def test_each_job_file_is_named_by_the_home():
    assert (JOB.name, DERIVED.name, CALIBRATION.name, FRONTIER.name, TASK.name, REPORT.name) == (
        names.JOB_FILE, "derived_points.json", "calibration.json", "frontier.json", "task.json", "report.json")


@pytest.mark.parametrize("file", [JOB, DERIVED, CALIBRATION, FRONTIER, TASK, REPORT], ids=lambda f: f.name)
def test_a_job_file_reads_back_what_its_writer_wrote_and_none_before(tmp_path, file):
    assert read_job_file(tmp_path, file, "redo it") is None
    path = write_job_file(tmp_path, file, VALUES[file.name])
    assert path == tmp_path / file.name and json.loads(path.read_text()) == VALUES[file.name]
    assert read_job_file(tmp_path, file, "redo it") == VALUES[file.name]
    assert [p.name for p in tmp_path.iterdir()] == [file.name]   # no temporary left: written atomically


FOREIGN = [
    (DERIVED, [1, 2], "holds a JSON array, not an object"),
    (DERIVED, {"about": "x"}, "has no points"),
    (DERIVED, {"points": []}, "holds a JSON array as points"),
    (JOB, {"kind": "compare", "settings": {}}, "has no code"),
    (JOB, {"kind": None, "settings": {}, "code": {}}, "holds a JSON null as kind"),
    (CALIBRATION, {**VALUES[CALIBRATION.name], "window": True}, "holds a JSON boolean as window"),
    (CALIBRATION, {**VALUES[CALIBRATION.name], "delta": "0.3"}, "holds a JSON string as delta"),
    (FRONTIER, {"setting": "a task"}, "has no seeds, levels, verdict, methods, task_file"),
    (TASK, "task", "holds a JSON string, not an object"),
    (REPORT, {"networks": "10gbe", "runs": []}, "holds a JSON string as networks"),
]


@pytest.mark.parametrize("file,value,problem", FOREIGN, ids=lambda x: getattr(x, "name", None))
def test_a_foreign_job_file_is_refused_in_one_line_naming_it(tmp_path, file, value, problem):
    (tmp_path / file.name).write_text(json.dumps(value))
    with pytest.raises(DamagedRecord) as err:
        read_job_file(tmp_path, file, "remove it and resume")
    assert str(err.value) == f"{tmp_path / file.name} is not a {file.what} ({problem}); remove it and resume"
    with pytest.raises(ValueError, match=f"{file.name}: the value written {problem}"):
        write_job_file(tmp_path / "w", file, value)   # a writer cannot leave what its reader refuses
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("data,why", [(b'{"points": {', "not valid JSON"), (b"\xff\xfe{}", "not valid JSON")])
def test_a_damaged_job_file_is_refused_in_one_line(tmp_path, data, why):
    (tmp_path / DERIVED.name).write_bytes(data)
    with pytest.raises(DamagedRecord, match=rf"^{tmp_path / DERIVED.name} is not valid JSON \(.*\); remove it$") as err:
        read_job_file(tmp_path, DERIVED, "remove it")
    assert isinstance(err.value, ConfigError) and "\n" not in str(err.value)
    with pytest.raises(DamagedRecord, match="remove it"):
        read_strict(tmp_path / DERIVED.name, "remove it")


def test_a_directory_where_a_job_file_should_be_is_no_record(tmp_path):
    (tmp_path / DERIVED.name).mkdir()
    assert read_job_file(tmp_path, DERIVED, "x") is None


def test_a_foreign_derived_points_file_stops_a_frontier_in_one_line(tmp_path):
    """derived_points.json was read with a raw json.loads: a list under "points" passed it."""
    from jaxsel.analysis.frontier_points import recorded_points
    from jaxsel.analysis.variants import parse_entry

    (tmp_path / DERIVED.name).write_text(json.dumps({"points": ["selsync:delta=fires:0.1"]}))
    with pytest.raises(ConfigError, match=r"is not a record of derived points \(holds a JSON array as points\); "
                                          r"remove it to derive them again$"):
        recorded_points(tmp_path, [parse_entry("selsync:delta=fires:0.1")])


def test_report_refuses_a_foreign_calibration_and_a_job_that_is_running(tmp_path, capsys):
    """`jaxsel report` on a calibration whose calibration.json is not one: one line, exit 2;
    on a job whose directory is locked (the job still running): one line, exit 2, nothing
    remade."""
    from jaxsel.analysis import job
    from jaxsel.cli import main

    out = tmp_path / "cal"
    out.mkdir()
    job.begin(out, "calibrate", {"seeds": 1}, resume=False, held=[])
    (out / CALIBRATION.name).write_text(json.dumps({"setting": "a task", "statistics": []}))
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not a calibration (has no window" in err and "--resume" in err, err
    running = DirectoryLock(out, "calibration directory").acquire()
    try:
        assert main(["report", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "is in use by process" in err, err
    finally:
        running.release()
    assert not (out / names.CALIBRATION_PICTURE).exists()
