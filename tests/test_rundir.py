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
