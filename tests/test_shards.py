"""A long job's cells split over processes (issue 62, item 4): `--shard I/N` and SLURM job
arrays' variables, which cells a shard owns, how a shard tells the others' state, and the
one-line refusals. Two shards training one job end to end: tests/test_long_jobs.py."""
import pytest

from jaxsel.analysis.cells import Cells, PendingCell
from jaxsel.analysis.progress import Progress
from jaxsel.analysis.shard import (Shard, lock_shard, parse_shard, refuse_running_shards, resolve_shard, shard_dir,
                                   shard_state, slurm_shard)
from jaxsel.cli import main
from jaxsel.training.config import ConfigError, TrainConfig
from jaxsel.training.rundir.lock import RunLocked


@pytest.mark.parametrize("text, index, count", [("0/1", 0, 1), ("1/2", 1, 2), ("15/16", 15, 16), (" 2 / 3 ", 2, 3)])
def test_a_shard_reads_as_i_of_n(text, index, count):
    assert parse_shard(text) == Shard(index, count, "--shard")


@pytest.mark.parametrize("text, message", [
    ("3/2", "the shard must be one of 0 .. 1 (0-based) of 2"), ("2/2", "one of 0 .. 1"),
    ("0/0", "the number of shards must be at least 1"), ("x", "must be I/N"), ("1", "must be I/N"),
    ("-1/2", "must be I/N"), ("1/2/3", "must be I/N"), ("", "must be I/N"), ("a/b", "must be I/N")])
def test_a_bad_shard_is_refused_naming_it(text, message):
    with pytest.raises(ConfigError, match="--shard") as err:
        parse_shard(text)
    assert message in str(err.value) and repr(text) in str(err.value)


def test_every_cell_belongs_to_exactly_one_shard_in_the_job_s_order():
    shards = [Shard(i, 3) for i in range(3)]
    owners = [[s.index for s in shards if s.owns(n)] for n in range(10)]
    assert owners == [[0], [1], [2], [0], [1], [2], [0], [1], [2], [0]]
    assert [Shard(0, 1).owns(n) for n in range(4)] == [True] * 4 and Shard(2, 3).owner(7) == 1


def test_a_slurm_array_task_is_its_id_less_the_first_of_its_count():
    assert slurm_shard({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "4"}) == Shard(
        1, 4, "SLURM_ARRAY_TASK_ID=1 of SLURM_ARRAY_TASK_COUNT=4")
    assert slurm_shard({"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "4",
                        "SLURM_ARRAY_TASK_MIN": "1"}).name == "3/4"   # --array=1-4
    assert slurm_shard({}) is None and slurm_shard({"SLURM_ARRAY_TASK_ID": "1"}) is None   # not an array task


@pytest.mark.parametrize("env, message", [
    ({"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "4"}, "not one of 4 consecutive tasks"),
    ({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "1"}, "sbatch --array=0-3"),
    ({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "0"}, "not one of 0 consecutive tasks"),
    ({"SLURM_ARRAY_TASK_ID": "x", "SLURM_ARRAY_TASK_COUNT": "2"}, "must be whole numbers")])
def test_slurm_ids_out_of_range_are_refused_naming_them(env, message):
    with pytest.raises(ConfigError, match="SLURM") as err:
        slurm_shard(env)
    assert message in str(err.value) and f"SLURM_ARRAY_TASK_ID={env['SLURM_ARRAY_TASK_ID']}" in str(err.value)


def test_shard_wins_over_slurm_and_nothing_means_every_cell():
    env = {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "2"}
    assert resolve_shard("0/3", env) == Shard(0, 3, "--shard")
    assert resolve_shard(None, env).name == "1/2"
    assert resolve_shard(None, {}) is None


def test_a_shard_s_progress_counts_its_own_share_of_the_planned_cells():
    progress = Progress(7)
    progress.shard = Shard(1, 3)
    assert progress.total == 2   # cells 1 and 4 of 0..6
    progress.skip(2)   # cells the job will not run (shared with others): 5 left
    assert progress.total == 2 and Progress(5).total == 5
    progress.shard = Shard(2, 3)
    assert progress.total == 1


def test_a_shard_is_not_started_running_then_stopped(tmp_path):
    shard = Shard(1, 2)
    assert shard_state(tmp_path, 1, 2) == "not started"
    lock = lock_shard(tmp_path, shard)
    try:
        assert shard_state(tmp_path, 1, 2) == "running"
        with pytest.raises(RunLocked, match="shard 1/2"):
            lock_shard(tmp_path, shard)   # the same shard twice
        with pytest.raises(RunLocked, match=r"being run by shard\(s\) 1/2"):
            refuse_running_shards(tmp_path)   # a job without --shard waits for them
    finally:
        lock.release()
    assert shard_state(tmp_path, 1, 2) == "stopped" and shard_dir(tmp_path, 1, 2).is_dir()
    refuse_running_shards(tmp_path)


def test_a_cell_needed_from_a_stopped_shard_says_how_to_finish(tmp_path):
    cells = Cells(tmp_path, Progress(4), shard=Shard(0, 2))
    cfg = TrainConfig(out_dir=str(tmp_path / "bsp" / "seed1"), seed=1)
    cells.ordinal = 1   # the job's second cell: shard 1's, not in
    missing = cells.get(cfg, "bsp, seed 1")
    assert missing == PendingCell(cfg, 1, "bsp, seed 1") and cells.ordinal == 2 and cells.progress.done == 0
    lock_shard(tmp_path, Shard(1, 2)).release()   # shard 1 ran and stopped without the cell
    with pytest.raises(ConfigError, match="needs cell bsp/seed1 of shard 1/2") as err:
        cells.need([missing])
    assert "run shard 1/2 again, then this one" in str(err.value)
    assert cells.settle([missing]) == ([missing], [missing])


@pytest.mark.parametrize("argv, env, message", [
    (["--shard", "3/2"], {}, "--shard '3/2': the shard must be one of 0 .. 1"),
    (["--shard", "x"], {}, "--shard 'x' must be I/N"),
    (["--shard", "0/0"], {}, "the number of shards must be at least 1"),
    ([], {"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "2"}, "SLURM_ARRAY_TASK_ID=2"),
    (["--shard", "0/2", "--no-out"], {}, "needs --out DIR")])
@pytest.mark.parametrize("command", ["frontier", "compare"])
def test_bad_shards_are_one_line_exit_2_before_anything_is_made(tmp_path, capsys, monkeypatch, command, argv, env,
                                                                  message):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "job"
    where = [] if "--no-out" in argv else ["--out", str(out)]
    assert main([command, *[a for a in argv if a != "--no-out"], *where, "--steps", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()


def test_shards_of_another_count_are_refused_while_one_runs(tmp_path):
    from jaxsel.analysis.shard import job_held

    lock = lock_shard(tmp_path, Shard(0, 2))
    try:
        with pytest.raises(RunLocked, match="shards 0/2, not of 3: give every shard of one job the same N"):
            with job_held(tmp_path, "frontier directory", Shard(1, 3), lambda joining: None):
                pass
        began = []
        with job_held(tmp_path, "frontier directory", Shard(1, 2), began.append):
            assert shard_state(tmp_path, 1, 2) == "running" and began == [False]   # no job.json: it records it
    finally:
        lock.release()
    assert shard_state(tmp_path, 1, 2) == "stopped"


def test_a_cell_directory_a_live_run_holds_is_never_cleared(tmp_path):
    """A job without --shard that reaches a cell a shard is training refuses, in one line,
    instead of clearing it as a stopped run's leftovers."""
    from jaxsel.training.rundir.lock import DirectoryLock

    cell = tmp_path / "bsp" / "seed0"
    held = DirectoryLock(cell, "run directory").acquire()
    try:
        with pytest.raises(RunLocked, match="cell directory .* is in use by process"):
            Cells(tmp_path, Progress(1)).get(TrainConfig(out_dir=str(cell)), "bsp, seed 0")
        assert cell.is_dir()
    finally:
        held.release()
