"""Long jobs users can trust (issue 37, item 3): `jaxsel compare` and `jaxsel frontier`
killed mid-run resume with --resume without running a finished cell again and end where an
uninterrupted job ends; `jaxsel report` makes their files again from the records; a
resume with other settings or other code is refused; a frontier cell is, bit for bit, the
lone `jaxsel compare` run its frontier.md names."""
import contextlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jaxsel.cli import main

COMPARE = ["compare", "--strategies", "selsync:delta=0.05", "--seeds", "2", "--steps", "12", "--eval-every", "6",
           "--opt", "window=2", "--no-progress"]
FRONTIER = ["frontier", "--methods", "localsgd,bsp", "--grid", "localsgd:period=3,bsp", "--seeds", "2", "--steps", "12",
            "--eval-every", "6", "--no-progress"]
#: figures that measure this host's time (or name the directory), not the training
TIMED = {"wall_time_s", "projected_time_s", "time_to_target_s", "measured_time_to_target_s", "speedup_vs_bsp",
         "run_dir", "train_time_s", "compile_time_s", "projection", "seconds", "model_step_s", "model_time_to_target_s",
         "measured_speedup_vs_bsp", "measured_speedup_ci", "measured_speedup_within_noise"}


def untimed(value):
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if k not in TIMED}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


def run_main(argv) -> tuple[int, str]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(argv)
    return code, printed.getvalue()


def cells(out: Path) -> dict[str, tuple[int, str]]:
    """Each finished cell's record: (its modification time, its text)."""
    return {p.parent.relative_to(out).as_posix(): (p.stat().st_mtime_ns, p.read_text())
            for p in sorted(out.glob("*/seed*/cell.json"))}


def killed_after_first_cell(argv: list[str], out: Path, log: Path, one_core: bool = False) -> dict:
    """Run `jaxsel ARGV --out OUT` in a process, SIGKILL it as soon as a cell has finished;
    the finished cells' records. `one_core`: the process may use one core, so its batches
    train on its own thread, none built ahead (analysis/batch_queue.py; with
    JAXSEL_BATCHES_AT_ONCE=2 two batches may both end before the kill)."""
    first = min(os.sched_getaffinity(0))
    with open(log, "w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "jaxsel.cli", *argv, "--out", str(out)], stdout=sink,
                                stderr=subprocess.STDOUT, env=os.environ.copy(),
                                preexec_fn=(lambda: os.sched_setaffinity(0, {first})) if one_core else None)
        deadline = time.monotonic() + 300
        try:
            while not list(out.glob("*/seed*/cell.json")):
                assert proc.poll() is None, f"exited {proc.returncode} before a cell finished: {log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, "no cell finished in 300 s"
                time.sleep(0.05)
        finally:
            proc.kill()
            proc.wait(timeout=60)
    return cells(out)


def shards_at_once(argv: list[str], out: Path, logs: Path, count: int = 2, slurm: bool = False) -> list[str]:
    """Run shards 0/N .. N-1/N of `jaxsel ARGV --out OUT` at once, each in its own process
    (`slurm`: as a SLURM job array's tasks, told by its variables); what each printed
    (every one exits 0)."""
    procs = []
    for i in range(count):
        shard = [] if slurm else ["--shard", f"{i}/{count}"]
        env = {**os.environ, **({"SLURM_ARRAY_TASK_ID": str(i), "SLURM_ARRAY_TASK_COUNT": str(count)} if slurm else {})}
        with open(logs / f"shard{i}.log", "w") as sink:
            procs.append(subprocess.Popen([sys.executable, "-m", "jaxsel.cli", *argv, "--out", str(out), *shard],
                                          stdout=sink, stderr=subprocess.STDOUT, env=env))
    codes = [proc.wait(timeout=900) for proc in procs]
    printed = [(logs / f"shard{i}.log").read_text() for i in range(count)]
    assert codes == [0] * count, printed
    return printed


def same_job(got: Path, want: Path, table: str) -> None:
    """Two job directories hold the same cells, bit for bit, and the same table (less this host's times)."""
    digests = lambda d: {k: json.loads(text)["state_sha256"] for k, (_, text) in cells(d).items()}
    assert digests(got) == digests(want) and digests(want)
    assert untimed(json.loads((got / table).read_text())) == untimed(json.loads((want / table).read_text()))
    assert not (got / ".shards").exists() and not (got / ".xla-cache").exists()


@pytest.fixture(scope="module")
def whole_frontier(tmp_path_factory):
    """An uninterrupted frontier in one process (BSP and local SGD at period 3, 2 seeds)."""
    out = tmp_path_factory.mktemp("jobs") / "whole-frontier"
    assert run_main([*FRONTIER, "--out", str(out)])[0] == 0
    return out


@pytest.mark.slow
def test_two_shards_at_once_give_the_one_process_frontier(tmp_path, whole_frontier):
    out = tmp_path / "sharded"
    printed = shards_at_once(FRONTIER, out, tmp_path)
    same_job(out, whole_frontier, "frontier.json")
    assert "shard 0/2 (from --shard): cells 0, 2, 4" in printed[0] and "shard 1/2 (from --shard)" in printed[1]
    assert all("[cell 2 of 2" in p for p in printed)   # each trains its own two of the four


@pytest.mark.slow
def test_two_shards_of_a_comparison_give_its_results(tmp_path, finished):
    """Two SLURM array tasks: shard 1 trains SelSync's seed 1, which shard 0 waits for (its
    matched baselines are planned from both seeds' syncs)."""
    out = tmp_path / "sharded"
    printed = shards_at_once(COMPARE, out, tmp_path, slurm=True)
    same_job(out, finished[1], "results.json")
    assert "shard 1/2 (from SLURM_ARRAY_TASK_ID=1 of SLURM_ARRAY_TASK_COUNT=2)" in printed[1]


@pytest.mark.slow
def test_a_killed_shard_resumes_its_own_cells_only(tmp_path, whole_frontier):
    out = tmp_path / "sharded"
    own = ["bsp/seed0", "localsgd_period=3/seed0"]   # cells 0 and 2 of the job's order
    killed = killed_after_first_cell([*FRONTIER, "--shard", "0/2"], out, tmp_path / "log")
    assert killed and set(killed) <= set(own)
    code, printed = run_main([*FRONTIER, "--shard", "0/2", "--out", str(out)])   # the same command again
    assert code == 0
    assert sorted(cells(out)) == own and cells(out).items() >= killed.items()   # its finished cell kept
    assert "2 cell(s) of shard(s) 1/2 (not started) are still missing" in printed
    assert not (out / "frontier.json").exists()
    code, printed = run_main([*FRONTIER, "--shard", "1/2", "--out", str(out)])   # the last shard writes the tables
    assert code == 0 and "finished earlier" not in printed   # the others' cells are not this shard's progress
    same_job(out, whole_frontier, "frontier.json")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """An uninterrupted comparison (SelSync at delta = 0.05 and its two matched baselines, 2 seeds)."""
    out = tmp_path_factory.mktemp("jobs") / "whole"
    assert run_main([*COMPARE, "--out", str(out)])[0] == 0
    return COMPARE, out


@pytest.mark.slow
def test_a_killed_compare_resumes_to_the_results_of_an_uninterrupted_one(tmp_path, finished):
    stopped, whole = tmp_path / "stopped", finished[1]
    finished = killed_after_first_cell(COMPARE, stopped, tmp_path / "log")
    assert 1 <= len(finished) < 6 and not (stopped / "results.json").exists()
    code, printed = run_main([*COMPARE, "--out", str(stopped), "--resume"])
    assert code == 0
    assert cells(stopped).items() >= finished.items()   # the finished cells were not run again
    assert printed.count("finished earlier, loaded from") == len(finished)
    assert f"6 cells ({6 - len(finished)} trained now, {len(finished)} loaded from earlier runs)" in printed
    got, want = (json.loads((d / "results.json").read_text()) for d in (stopped, whole))
    assert untimed(got) == untimed(want)
    digests = lambda d: {k: json.loads(text)["state_sha256"] for k, (_, text) in cells(d).items()}
    assert digests(stopped) == digests(whole) and len(digests(whole)) == 6   # every run ended bit for bit alike
    assert [r["entry"] for r in got][::2] == ["selsync:delta=0.05", f"localsgd:syncs={got[2]['options']['syncs']}"]
    assert got[1]["entry"].startswith("triggered:trigger=spread:") and got[1]["baseline"] == "same order"
    assert not (stopped / ".xla-cache").exists() and not (whole / ".xla-cache").exists()   # gone with the job


@pytest.mark.slow
def test_a_killed_frontier_resumes_and_its_cell_is_the_lone_compare_run(tmp_path):
    out = tmp_path / "frontier"
    finished = killed_after_first_cell(FRONTIER, out, tmp_path / "log", one_core=True)
    assert 1 <= len(finished) < 4 and not (out / "frontier.json").exists()
    code, printed = run_main([*FRONTIER, "--out", str(out), "--resume"])
    assert code == 0, printed
    assert cells(out).items() >= finished.items() and len(cells(out)) == 4
    assert printed.count("finished earlier, loaded from") == len(finished)
    for name in ("frontier.json", "frontier.md", "frontier.png"):
        assert (out / name).stat().st_size > 500, name
    result = json.loads((out / "frontier.json").read_text())
    assert [c["method"] for c in result["methods"]] == ["bsp", "localsgd"]
    assert result["verdict"][-1]["level"] == 1.0 and result["verdict"][-1]["best"] is not None

    # the md's command for localsgd's seed 1 trains that very cell
    md = (out / "frontier.md").read_text()
    line = next(x for x in md.splitlines() if "localsgd:period=3" in x and "--seed 1 " in x)
    argv = shlex.split(line)
    assert argv[0] == "jaxsel"
    lone = tmp_path / "lone"
    argv[argv.index("--out") + 1] = str(lone)
    assert run_main([*argv[1:], "--no-progress"])[0] == 0
    mine, theirs = out / "localsgd_period=3" / "seed1", lone / "localsgd_period=3" / "seed1"
    record = lambda d: json.loads((d / "cell.json").read_text())
    assert record(mine)["state_sha256"] == record(theirs)["state_sha256"]
    assert record(mine)["settings"] == record(theirs)["settings"]
    for name in ("final.json", "evals.json"):
        assert untimed(json.loads((mine / name).read_text())) == untimed(json.loads((theirs / name).read_text()))
    rows = lambda d: [untimed(json.loads(x)) for x in (d / "metrics.jsonl").read_text().splitlines()]
    assert rows(mine) == rows(theirs) and len(rows(mine)) == 12

    # `jaxsel report` makes the three files again from the records
    (out / "frontier.png").unlink()
    (out / "frontier.md").unlink()
    code, printed = run_main(["report", str(out)])
    assert code == 0 and "wrote" in printed and "from the records" in printed
    assert (out / "frontier.png").is_file() and (out / "frontier.md").read_text() == md
    assert json.loads((out / "frontier.json").read_text()) == result


@pytest.mark.slow
@pytest.mark.pictures
def test_report_remakes_a_comparison_s_results_and_pictures(finished, tmp_path, monkeypatch):
    argv, out = finished
    copy = tmp_path / "cmp"
    shutil.copytree(out, copy)
    want = json.loads((copy / "results.json").read_text())
    for name in ("results.json", "comparison.png", "pareto.png"):
        (copy / name).unlink()
    code, printed = run_main(["report", str(copy)])
    assert code == 0 and "from the records" in printed and "test acc" in printed
    got = json.loads((copy / "results.json").read_text())
    assert untimed(got) == untimed(want) and (copy / "pareto.png").is_file() and (copy / "comparison.png").is_file()
    # a resume of a finished comparison trains nothing and writes the same results (its
    # pictures are the report's, just checked: not drawn again, 3 CPU-s)
    monkeypatch.setattr("jaxsel.analysis.compare.write_pictures", lambda *args: None)
    code, printed = run_main([*argv, "--out", str(copy), "--resume"])
    assert code == 0 and "6 cells (0 trained now, 6 loaded from earlier runs)" in printed
    assert untimed(json.loads((copy / "results.json").read_text())) == untimed(want)


@pytest.mark.slow
@pytest.mark.parametrize("change, message", [
    (["--steps", "13"], 'holds a compare job started with base.steps=12 where this has base.steps=13'),
    (["--seeds", "3"], "seeds=2 where this has seeds=3"),
], ids=["steps", "seeds"])
def test_a_resume_with_other_settings_is_refused_naming_the_first_difference(finished, tmp_path, capsys, change,
                                                                            message):
    argv, out = finished
    copy = tmp_path / "cmp"
    shutil.copytree(out, copy)
    before = sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*"))
    flag, value = change
    changed = [value if i and argv[i - 1] == flag else a for i, a in enumerate(argv)]   # an option is given once
    assert changed != argv
    assert main([*changed, "--out", str(copy), "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "resume with its settings" in err[0], err
    assert sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*")) == before


@pytest.mark.slow
def test_cells_of_other_code_or_settings_are_never_mixed(finished, tmp_path, capsys, monkeypatch):
    argv, out = finished
    copy = tmp_path / "cmp"
    shutil.copytree(out, copy)
    job = json.loads((copy / "job.json").read_text())
    (copy / "job.json").write_text(json.dumps({**job, "code": {**job["code"], "sources": "0" * 64}}))
    assert main([*argv, "--out", str(copy), "--resume"]) == 2
    assert "was started by other jaxsel code (" in capsys.readouterr().err
    (copy / "job.json").write_text(json.dumps(job))   # the job agrees, one cell does not
    cell = copy / "selsync_delta=0.05" / "seed0" / "cell.json"
    record = json.loads(cell.read_text())
    cell.write_text(json.dumps({**record, "settings": {**record["settings"], "lr": 0.5}}))
    assert main([*argv, "--out", str(copy), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "selsync_delta=0.05/seed0/cell.json was computed with lr=0.5 where this has lr=0.05" in err
    cell.write_text(json.dumps({**record, "code": {**record["code"], "jax": "0.0.1"}}))
    assert main(["report", str(copy)]) == 2   # a report reads the job's records, by any code, never two codes'
    assert "was computed by other jaxsel code (" in capsys.readouterr().err
    code = {**record["code"], "sources": "1" * 64}   # every record of one other code: reported as it is
    (copy / "job.json").write_text(json.dumps({**job, "code": code}))
    cell.write_text(json.dumps(record))
    for path in copy.glob("*/seed*/cell.json"):
        path.write_text(json.dumps({**json.loads(path.read_text()), "code": code}))
    assert run_main(["report", str(copy)])[0] == 0


def test_resume_needs_a_job_to_continue(tmp_path, capsys):
    assert main(["compare", "--resume", "--strategies", "bsp"]) == 2
    assert "--resume needs --out DIR" in capsys.readouterr().err
    empty = tmp_path / "empty"
    assert main(["compare", "--resume", "--strategies", "bsp", "--out", str(empty)]) == 2
    err = capsys.readouterr().err
    assert "holds no compare job to continue" in err and not empty.exists()
    assert main(["frontier", "--resume", "--methods", "bsp", "--out", str(empty)]) == 2
    assert "holds no frontier job to continue" in capsys.readouterr().err and not empty.exists()


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_train_never_writes_into_a_jobs_cell_and_an_edited_cell_is_refused(finished, tmp_path, capsys):
    """Issue 48 item 2: `jaxsel train --resume` into a comparison's cell (its config.json as
    --config) or a new directory inside the job: one line, nothing touched; a cell's figure
    file edited by hand: `report` and `--resume` refuse it naming the cell and the file."""
    argv, out = finished
    copy = tmp_path / "cmp"
    shutil.copytree(out, copy)
    before = snapshot(copy)
    cell = copy / "selsync_delta=0.05" / "seed1"
    for target, extra in ((cell, ["--config", str(cell / "config.json"), "--resume", "--steps", "6"]),
                          (copy / "bsp" / "seed0", ["--steps", "2", "--no-checkpoint"])):
        assert main(["train", "--no-progress", "--out", str(target), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"lies inside the job in {str(copy)!r} (job.json)" in err[0], err
        assert "never writes into a job's cells" in err[0]
        assert snapshot(copy) == before

    final = json.loads((cell / "final.json").read_text())
    (cell / "final.json").write_text(json.dumps({**final, "final_test_accuracy": 0.99}))
    edited = snapshot(copy)
    for command in (["report", str(copy)], [*argv, "--out", str(copy), "--resume"]):
        assert main(command) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"cell selsync_delta=0.05/seed1 of {str(copy)!r}: its final.json is not the one " \
                                 f"its run wrote" in err[0], err
        assert snapshot(copy) == edited


DAMAGE = {
    "metrics.jsonl missing": (lambda cell: (cell / "metrics.jsonl").unlink(), "its metrics.jsonl is missing"),
    "evals.json missing": (lambda cell: (cell / "evals.json").unlink(), "its evals.json is missing"),
    "metrics.jsonl []": (lambda cell: (cell / "metrics.jsonl").write_text("[]\n"),
                         "its metrics.jsonl entry 1 is not what a run writes (not a JSON object)"),
    "final.json cut": (lambda cell: (cell / "final.json").write_text((cell / "final.json").read_text()[:40]),
                       "its final.json is not valid JSON"),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize("kind", ["recorded", "legacy"])
def test_report_on_a_damaged_cell_is_one_line_naming_the_cell(finished, tmp_path, capsys, damage, kind):
    """Issue 48 item 5: a cell's file missing, [] or cut short is one line naming the cell
    and the file, for cells recorded with their files' digests and for cells recorded
    before (read as they are: each file's content is checked as it is read)."""
    argv, out = finished
    copy = tmp_path / "cmp"
    shutil.copytree(out, copy)
    cell = copy / "selsync_delta=0.05" / "seed1"
    if kind == "legacy":
        record = json.loads((cell / "cell.json").read_text())
        record.pop("files")
        (cell / "cell.json").write_text(json.dumps(record))
    spoil, legacy_says = DAMAGE[damage]
    spoil(cell)
    assert main(["report", str(copy)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"cell selsync_delta=0.05/seed1 of {str(copy)!r}: " in err[0], err
    assert "remove the cell's directory and resume the job" in err[0] and "Traceback" not in err[0]
    expected = legacy_says if kind == "legacy" or "missing" in damage else "is not the one its run wrote"
    assert expected in err[0], err[0]


@pytest.mark.slow
def test_a_resumed_job_runs_the_packing_loop_its_first_cell_ran(tmp_path, monkeypatch):
    """Issue 48 item 3: a comparison whose first cell measured its packing loop (vmap here,
    a fake measurement) and was stopped during its second cell resumes without measuring
    (a CPU's static unroll): its later cells run vmap too, and results.json's layout is
    what every seed ran."""
    from jaxsel.core import packing

    monkeypatch.setenv("JAXSEL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(packing.MEASURE_ENV, "1")
    monkeypatch.setattr(packing, "measure_candidates", lambda *a, **k: ({"vmap": 1.0, "unroll": 2.0}, {}))
    packing.forget_in_memory()
    argv = ["compare", "--strategies", "bsp", "--replicas", "4", "--devices", "1", "--steps", "4", "--eval-every",
            "4", "--seeds", "2", "--no-match-budget", "--no-progress", "--out", str(tmp_path / "cm")]
    assert run_main(argv)[0] == 0
    stopped = tmp_path / "cm" / "bsp" / "seed1"
    (stopped / "cell.json").unlink()   # as if killed during cell 2
    (tmp_path / "cm" / "results.json").unlink()
    monkeypatch.delenv(packing.MEASURE_ENV)
    packing.forget_in_memory()
    code, printed = run_main([*argv, "--resume"])
    assert code == 0, printed
    loops = [json.loads((tmp_path / "cm" / "bsp" / f"seed{s}" / "config.json").read_text())["packing_choice"]["loop"]
             for s in (0, 1)]
    assert loops == ["vmap", "vmap"]
    rows = json.loads((tmp_path / "cm" / "results.json").read_text())
    assert "packed by vmap" in rows[0]["layout"]
    packing.forget_in_memory()


def test_a_jobs_compilation_cache_is_loaded_only_where_this_user_made_it(tmp_path, monkeypatch, capsys):
    """Issue 48 item 10: a job directory handed over with an .xla-cache of compiled code
    (another user's, another machine's: no valid seal) has it removed, not loaded; the
    cache a stopped job of this user left is kept for its resume."""
    import jax

    from jaxsel.analysis.job import CACHE_SEAL, kept_compilations, seal_cache, trusted_cache

    monkeypatch.setenv("JAXSEL_CACHE_DIR", str(tmp_path / "home-cache"))
    folder = tmp_path / "job" / ".xla-cache"
    trusted_cache(folder)   # a job of this user starts
    folder.mkdir(parents=True)
    (folder / "compiled-entry").write_bytes(b"native code")
    seal_cache(folder)      # and stops: what it compiled is sealed
    trusted_cache(folder)   # its resume keeps it
    assert (folder / "compiled-entry").is_file() and capsys.readouterr().err == ""
    for seal in ("0" * 64, None):   # someone else's seal, or none
        (folder / "compiled-entry").write_bytes(b"foreign code")
        if seal is None:
            (folder / CACHE_SEAL).unlink()
        else:
            (folder / CACHE_SEAL).write_text(seal)
        trusted_cache(folder)
        assert not (folder / "compiled-entry").exists()
        assert "not sealed by this user on this machine" in capsys.readouterr().err
    saved = jax.config.jax_compilation_cache_dir   # the suite sets one; a job's own is used without
    jax.config.update("jax_compilation_cache_dir", None)
    try:
        (folder / "compiled-entry").write_bytes(b"foreign code")
        (folder / CACHE_SEAL).write_text("0" * 64)
        with kept_compilations(tmp_path / "job"):
            assert not (folder / "compiled-entry").exists()
    finally:
        jax.config.update("jax_compilation_cache_dir", saved)


def test_ctrl_c_in_a_cell_says_what_the_job_keeps_and_how_to_continue(tmp_path, monkeypatch):
    """A signal in a comparison's cell stops the job (exit 130 for Ctrl-C): the line says
    which cell stopped at which step, that it runs again from its start, how many finished
    cells are kept and the command that continues, never "no checkpoint saved" (a job's
    cells save none: it resumes from its finished cells)."""
    import signal

    from jaxsel.analysis import cells as cells_module
    from jaxsel.analysis.progress import Progress
    from jaxsel.training.config import TrainConfig
    from jaxsel.training.faults import TrainingInterrupted

    def interrupted(cfg, **_):
        raise TrainingInterrupted(signal.SIGINT, 37, None)

    monkeypatch.setattr(cells_module, "train", interrupted)
    monkeypatch.setattr(cells_module, "plan_run", lambda cfg, **_: cfg)   # its input is not read here (3 CPU-s)
    progress = Progress(12)
    progress.done = 4
    job = cells_module.Cells(tmp_path, progress)
    cfg = TrainConfig(out_dir=str(tmp_path / "selsync" / "seed1"), steps=600)
    with pytest.raises(TrainingInterrupted) as info:
        job.get(cfg, "[entry 3 of 3] selsync, seed 1 (2 of 3)")
    assert info.value.exit_code == 130 and "\n" not in str(info.value)
    assert str(info.value) == (f"received SIGINT: stopped in cell 5 of 12 ([entry 3 of 3] selsync, seed 1 (2 of 3)) at "
                               f"step 37 of 600, which runs again from its start on resume; the 4 finished cells are "
                               f"kept in {tmp_path}: run the same command with --out {tmp_path} --resume to continue")
    assert info.value.what == str(info.value).split(": run the same command")[0]   # the command line adds its own
    assert not (tmp_path / "selsync" / "seed1" / "cell.json").exists()
