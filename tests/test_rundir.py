"""The run directory's home (issue 44 item 3): `training/rundir/names.py` is the one module that
spells the names of the files jaxsel writes into a run's, a job's or a checkpoint folder's
directory; every other module takes them from it, so a reader cannot drift from its writer."""
import ast
from pathlib import Path

import jaxsel
from jaxsel.training.rundir import names as rundir

PACKAGE = Path(jaxsel.__file__).parent
#: "checkpoints" is also the name of a TrainConfig section and a --help group: not checked
NAMES = {value for key, value in vars(rundir).items()
         if key.isupper() and isinstance(value, str) and key != "CHECKPOINTS_DIR"}


def _spelled(path: Path) -> list[str]:
    """The run-directory file names `path` writes as string literals (whole strings only:
    prose that mentions a file is not a spelling of its name)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [f"{path.relative_to(PACKAGE)}:{node.lineno} {node.value!r}"
                      for name in NAMES if node.value in (name, f"/{name}") or node.value.endswith(f"/{name}")]
    return found


def test_only_rundir_spells_the_file_names():
    assert len(NAMES) >= 12   # every record, the lock, the owner file, the job's cache
    spelled = [hit for path in sorted(PACKAGE.rglob("*.py")) if path != Path(rundir.__file__)
               for hit in _spelled(path)]
    assert spelled == []


def test_run_dir_paths_are_the_named_files(tmp_path):
    files = rundir.RunDir(str(tmp_path))
    assert files.path == tmp_path
    assert (files.metrics, files.evals, files.final, files.config) == tuple(tmp_path / n for n in rundir.RUN_FILES)
    assert files.strategy == tmp_path / "strategy.json" and files.environment == tmp_path / "environment.json"
    assert (files.lock, files.owner, files.job, files.cell, files.results) == (
        tmp_path / ".jaxsel.lock", tmp_path / ".jaxsel-owner.json", tmp_path / "job.json", tmp_path / "cell.json",
        tmp_path / "results.json")


def test_modules_read_the_names_from_the_home():
    """The names other modules (and tests) import from their old homes are the home's."""
    from jaxsel.analysis import job
    from jaxsel.training import recorded, run_kinds
    from jaxsel.training.rundir import lock as runlock, owner as checkpoint_owner

    assert runlock.LOCK_NAME is rundir.LOCK_NAME and checkpoint_owner.OWNER_FILE is rundir.OWNER_FILE
    assert recorded.CONFIG_FILE is rundir.CONFIG_FILE and run_kinds.RUN_FILES is rundir.RUN_FILES
    assert job.CACHE_SEAL is rundir.CACHE_SEAL and job.JOB_FILE is rundir.JOB_FILE


def test_comparison_files_lists_results_then_runs(tmp_path):
    """run_kinds.comparison_files, now built on the home's names: the same files in the same order."""
    from jaxsel.training.run_kinds import comparison_files

    for rel in ("results.json", "b/seed0/metrics.jsonl", "a/seed1/metrics.jsonl", "old/metrics.jsonl"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}")
    assert comparison_files(tmp_path) == ["results.json", "a/seed1/metrics.jsonl", "b/seed0/metrics.jsonl",
                                          "old/metrics.jsonl"]


# ---- one writer (issue 44 item 3): what a run directory's records are written by --------

#: call names that write a file: a module that imports a run-dir name leaves them to the home
WRITING_METHODS = {"write_text", "write_bytes"}
WRITING_FUNCTIONS = {("json", "dump"), ("os", "replace"), ("os", "rename"), ("os", "truncate"), ("shutil", "move")}
HOME = PACKAGE / "training" / "rundir"
RUN_DIR_NAMES = {key for key, value in vars(rundir).items() if key.isupper() or key == "RunDir"}


def _imports_a_run_dir_name(tree: ast.AST) -> bool:
    return any(isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] in ("rundir", "names")
               and "rundir" in f"{node.module}" and any(a.name in RUN_DIR_NAMES for a in node.names)
               for node in ast.walk(tree))


def _opens_for_writing(node: ast.Call) -> bool:
    """open(path, "w"), open(path, mode="a"), path.open("wb"): a mode that writes (or one not
    spelled out, which may)."""
    if isinstance(node.func, ast.Name) and node.func.id == "open":
        mode = node.args[1] if len(node.args) > 1 else None
    elif isinstance(node.func, ast.Attribute) and node.func.attr == "open" and \
            not (isinstance(node.func.value, ast.Name) and node.func.value.id == "os"):
        mode = node.args[0] if node.args else None
    else:
        return False
    mode = next((k.value for k in node.keywords if k.arg == "mode"), mode)
    if mode is None:
        return False
    return not isinstance(mode, ast.Constant) or any(c in str(mode.value) for c in "wax+")


def _writes(source: str, where: str) -> list[str]:
    """The calls in `source` that write a file themselves, when it imports a run-dir name."""
    tree = ast.parse(source)
    if not _imports_a_run_dir_name(tree):
        return []
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        method = isinstance(func, ast.Attribute) and func.attr in WRITING_METHODS
        function = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
            (func.value.id, func.attr) in WRITING_FUNCTIONS
        if method or function or _opens_for_writing(node):
            found.append((node.lineno, f"{where}:{node.lineno} {ast.unparse(func)}"))
    return [hit for _, hit in sorted(found)]


def test_only_the_home_writes_run_dir_records():
    """A module that takes a run-dir file name from the home (so may build a record's path)
    writes no file itself: every record is written by rundir/write.py (atomically) or
    rundir/metrics_file.py, the one writer, so no writer can drift from another."""
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if HOME not in path.parents
             for hit in _writes(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE)))]
    assert found == []


def test_the_writers_check_catches_a_module_that_writes_a_record_itself():
    writes = """
from ..training.rundir import METRICS_FILE, RunDir
import json, os
def save(out, rows, mode):
    (out / METRICS_FILE).write_text("")
    with open(RunDir(out).final, "w") as f:
        json.dump(rows, f)
    with open(out / "x", mode) as f:
        pass
    (out / "y").open("ab")
    os.replace(out / "a", out / "b")
    open(out / "z").read()   # reading: not a write
"""
    assert [hit.split(" ")[0] for hit in _writes(writes, "m.py")] == \
        ["m.py:5", "m.py:6", "m.py:7", "m.py:8", "m.py:10", "m.py:11"]
    assert _writes(writes.replace("from ..training.rundir import METRICS_FILE, RunDir", ""), "m.py") == []


def test_the_writer_writes_the_bytes_written_before_it_existed(tmp_path, capsys):
    """The records' bytes are those of the writers it replaced (train.py's and runlog.py's
    write_json, runlog.MetricsFile, owner.claim's own write): each expected value below is
    what those wrote for the same input."""
    import numpy as np
    import jax.numpy as jnp
    from jaxsel.training.rundir.metrics_file import MetricsFile
    from jaxsel.training.rundir.owner import claim
    from jaxsel.training.rundir.write import write_record

    files = rundir.RunDir(tmp_path)
    write_record(files.final, {"a": 1, "b": [1.5, float("nan"), np.float32(0.25)], "c": (np.int64(3), True, None),
                               "d": {"x": jnp.arange(3, dtype=jnp.float32), "y": "s\u00e9"}, "e": np.bool_(False)})
    assert files.final.read_bytes() == (
        b'{\n  "a": 1,\n  "b": [\n    1.5,\n    null,\n    0.25\n  ],\n  "c": [\n    3,\n    true,\n    null\n  ],\n'
        b'  "d": {\n    "x": [\n      0.0,\n      1.0,\n      2.0\n    ],\n    "y": "s\\u00e9"\n  },\n  "e": false\n}')
    write_record(files.evals, [])
    assert files.evals.read_bytes() == b"[]"

    log = MetricsFile(files.metrics, 0)
    log.write([{"step": 0, "loss": np.float32(2.5), "synced": np.bool_(True)}, {"step": 1, "loss": float("inf"), "v": [1, 2]}])
    log.write([{"step": 2, "loss": 1.0}])
    log.close()
    assert files.metrics.read_bytes() == \
        b'{"step": 0, "loss": 2.5, "synced": true}\n{"step": 1, "loss": null, "v": [1, 2]}\n{"step": 2, "loss": 1.0}\n'

    def resumed(before: bytes | None, start: int) -> tuple[bytes, list]:
        if before is None:
            files.metrics.unlink()
        else:
            files.metrics.write_bytes(before)
        log = MetricsFile(files.metrics, start)
        log.write([{"step": start, "loss": 0.5}])
        log.close()
        return files.metrics.read_bytes(), log.earlier

    assert resumed(b'{"step": 0, "loss": 1}\n{"step": 1, "loss": 2}\nnot json\n{"step": 1, "loss": 3}\n{"step": 5', 2) == (
        b'{"step": 0, "loss": 1}\n{"step": 1, "loss": 2}\n{"step": 1, "loss": 3}\n{"step": 2, "loss": 0.5}\n',
        [{"step": 0, "loss": 1}, {"step": 1, "loss": 2}, {"step": 1, "loss": 3}])
    assert (tmp_path / "metrics.jsonl.bad").read_bytes() == b"not json\n"
    assert resumed(b'{"step": 0}\n{"step": 1}', 2) == (b'{"step": 0}\n{"step": 1}\n{"step": 2, "loss": 0.5}\n',
                                                       [{"step": 0}, {"step": 1}])
    assert resumed(b'{"step": 0}\n{"step": 1}\n{"step": 2}\n', 1) == (b'{"step": 0}\n{"step": 1, "loss": 0.5}\n',
                                                                      [{"step": 0}])
    assert resumed(None, 3) == (b'{"step": 3, "loss": 0.5}\n', [])
    assert "line(s) 3 are not metrics rows" in capsys.readouterr().err

    root = tmp_path / "ck"
    root.mkdir()
    claim(root, tmp_path / "run", "abc")
    owner = root / rundir.OWNER_FILE
    assert owner.read_bytes() == b'{"run_dir": "%s", "run_id": "abc"}' % str((tmp_path / "run").resolve()).encode()
    claim(root, tmp_path / "run")
    assert owner.read_bytes() == b'{"run_dir": "%s"}' % str((tmp_path / "run").resolve()).encode()
    assert sorted(p.name for p in root.iterdir()) == [rundir.OWNER_FILE]   # no temporary file left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "evals.json", "final.json", "metrics.jsonl",
                                                         "metrics.jsonl.bad"]
