"""Runs that cannot corrupt each other or lie (issue 16): one test per defect.

Run locks, durable metrics across a signal during start-up, verified checkpoints, resume
checks, up-front resource and range checks, one line instead of a flood. Most run in this
process (tiny digits/MLP runs); a separate process only where that is the point (a lock
held by another process, two processes of a multi-host job).
"""
import dataclasses
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from run_hooks import flip_a_byte, signal_at, trees_equal

from jaxsel.cli import main as cli_main
from jaxsel.training.checkpoint import CheckpointError, CheckpointMismatch, existing_steps
from jaxsel.training.faults import TrainingInterrupted
from jaxsel.training.train import TrainConfig, build_run, plan_run, train


def config(tmp_path, **kw):
    base = dict(strategy="bsp", steps=8, batch_size=8, log_every=2, eval_every=8, checkpoint_every=4,
                progress=False, seed=2, checkpoint_dir=str(tmp_path / "ck"), out_dir=str(tmp_path / "out"))
    base.update(kw)
    return TrainConfig(**base)


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jaxsel train: error: "), err
    assert "Traceback" not in err
    return lines[0]


def rows(path: Path) -> list[dict]:
    keep = ("step", "loss", "synced", "bytes_allreduced")
    return [{k: r[k] for k in keep} for r in map(json.loads, path.read_text().splitlines())]


# 1. two runs on one directory ------------------------------------------------------------

HOLD = ("import sys, time; from jaxsel.training.rundir.lock import lock_run; lock_run(sys.argv[1], None); "
        "print('locked', flush=True); time.sleep(600)")


def test_a_second_run_on_a_locked_dir_exits_2_naming_the_holder_and_a_stale_lock_never_blocks(tmp_path, capsys):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "out")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        code = cli_main(["train", "--strategy", "bsp", "--steps", "2", "--no-progress", "--out",
                         str(tmp_path / "out"), "--checkpoint-dir", str(tmp_path / "ck")])
        line = one_error_line(capsys.readouterr().err)
        assert code == 2 and f"in use by process {holder.pid}" in line and "run directory" in line
        assert not (tmp_path / "out" / "metrics.jsonl").exists()
    finally:
        holder.kill()   # SIGKILL: the lock file stays behind, the OS lock dies with the process
        holder.wait()
    assert (tmp_path / "out" / ".jaxsel.lock").read_text() == str(holder.pid)
    result = train(config(tmp_path, steps=2, checkpoint_dir=None, checkpoint_every=None))
    assert int(result.state.step) == 2
    assert not (tmp_path / "out" / ".jaxsel.lock").exists()   # a finished run leaves no lock behind


def test_a_released_lock_removes_its_file_and_a_lock_on_a_removed_file_does_not_count(tmp_path):
    """A run's lock file goes when the run ends. A process that opened the file just before
    its holder removed it would lock a file no longer at the path: `acquire` sees that and
    locks the path's own file, so two processes never both hold the directory."""
    import fcntl

    from jaxsel.training.rundir.lock import LOCK_NAME, DirectoryLock, RunLocked, _same_file

    first = DirectoryLock(tmp_path, "run directory").acquire()
    path = tmp_path / LOCK_NAME
    late = os.open(path, os.O_RDWR)   # a second process, between its open and its flock
    first.release()
    assert not path.exists()
    fcntl.flock(late, fcntl.LOCK_EX | fcntl.LOCK_NB)   # it gets the lock of the removed file...
    assert not _same_file(late, path)                   # ...which acquire() does not count
    second = DirectoryLock(tmp_path, "run directory").acquire()
    try:
        assert path.read_text() == str(os.getpid())
        with pytest.raises(RunLocked):
            DirectoryLock(tmp_path, "run directory").check_free()
    finally:
        os.close(late)
        second.release()
    assert not path.exists()


def test_a_checkpoint_dir_in_use_is_refused_too(tmp_path):
    from jaxsel.training.rundir.lock import RunLocked, lock_run

    with lock_run(None, tmp_path / "ck"):
        with pytest.raises(RunLocked, match=rf"checkpoint dir .* in use by process {os.getpid()}"):
            train(config(tmp_path, out_dir=str(tmp_path / "other")))


# 2. durable metrics ----------------------------------------------------------------------

@pytest.mark.slow
def test_sigterm_during_the_start_of_a_resumed_run_loses_no_row(tmp_path):
    ref = train(config(tmp_path / "ref", steps=12))
    cfg = config(tmp_path, steps=12)
    with pytest.raises(TrainingInterrupted) as first:
        train(signal_at(plan_run(cfg), 6))
    stopped = first.value.step
    before = rows(tmp_path / "out" / "metrics.jsonl")
    assert [r["step"] for r in before] == list(range(stopped))

    resumed = dataclasses.replace(cfg, resume=True)
    with pytest.raises(TrainingInterrupted) as second:   # SIGTERM while the step compiles
        train(signal_at(plan_run(resumed), stopped))
    assert second.value.step == stopped and second.value.exit_code == 143
    assert rows(tmp_path / "out" / "metrics.jsonl") == before          # no row lost

    train(resumed)
    assert rows(tmp_path / "out" / "metrics.jsonl") == rows(tmp_path / "ref" / "out" / "metrics.jsonl")


@pytest.mark.slow
def test_rows_past_the_checkpoint_are_cut_on_resume(tmp_path):
    """As if killed -9 after writing step 5 (half of step 6) with the checkpoint of step 4."""
    import shutil

    cfg = config(tmp_path, steps=8)
    train(cfg)
    log = tmp_path / "out" / "metrics.jsonl"
    log.write_text("".join(line + "\n" for line in log.read_text().splitlines()[:6]) + '{"step": 6, "lo')
    shutil.rmtree(tmp_path / "ck" / "8")
    train(dataclasses.replace(cfg, resume=True))
    assert [r["step"] for r in rows(log)] == list(range(8))


# 3. verified checkpoints -----------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_flipped_byte_falls_back_with_one_warning_and_all_bad_exits_2(tmp_path, capsys):
    cfg = config(tmp_path, steps=8)
    train(cfg)
    flip_a_byte(tmp_path / "ck" / "8")
    capsys.readouterr()
    done = train(dataclasses.replace(cfg, steps=10, resume=True))
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "/8 is unreadable" in warnings[0] and "falling back to step 4" in warnings[0], err
    assert "Traceback" not in err and len(err.splitlines()) <= 3, err
    assert done.final["resumed_from_step"] == 4
    ref = train(config(tmp_path / "ref", steps=10))
    assert trees_equal(done.state.params, ref.state.params)

    for step in existing_steps(tmp_path / "ck"):
        flip_a_byte(tmp_path / "ck" / str(step))
    with pytest.raises(CheckpointError, match="no readable checkpoint"):
        train(dataclasses.replace(cfg, steps=12, resume=True))
    code = cli_main(["train", "--strategy", "bsp", "--steps", "12", "--batch-size", "8", "--log-every", "2",
                     "--eval-every", "8", "--checkpoint-every", "4", "--seed", "2", "--no-progress", "--resume",
                     "--out", str(tmp_path / "out"), "--checkpoint-dir", str(tmp_path / "ck")])
    err = capsys.readouterr().err
    assert code == 2
    # the command's own error lines (a warning may quote a TensorStore read "error": which of
    # a checksum mismatch or a failed read a flipped byte gives depends on the file layout)
    errors = [line for line in err.splitlines() if line.startswith("jaxsel train: error:")]
    assert len(errors) == 1 and "no readable checkpoint" in errors[0] and "Traceback" not in err, err
    assert len([line for line in err.splitlines() if line.startswith("jaxsel: warning:")]) == 6, err


# 5. resume checks ------------------------------------------------------------------------

@pytest.mark.slow
def test_resume_with_steps_below_the_checkpoint_is_refused(tmp_path):
    cfg = config(tmp_path, steps=8)
    train(cfg)
    with pytest.raises(CheckpointMismatch, match="holds step 8, --steps is 4"):
        train(dataclasses.replace(cfg, steps=4, resume=True))


# 6. disk full, unusable --out ------------------------------------------------------------

@pytest.mark.parametrize("full", ["metrics.jsonl", ".evals.json.tmp"])
def test_disk_full_is_one_line_naming_the_file(tmp_path, capsys, monkeypatch, full):
    """(issue 48 item 10: a JSON record's failed write named no file) The file is opened on
    /dev/full, where every write fails with ENOSPC (a link to it is refused: rundir/links.py)."""
    from jaxsel.training.rundir import links, metrics_file, write

    def on_a_full_disk(path, flags, mode=0o666):
        return os.open("/dev/full", os.O_WRONLY) if Path(path).name == full else links.open_own(path, flags, mode)
    monkeypatch.setattr(metrics_file, "open_own", on_a_full_disk)
    monkeypatch.setattr(write, "open_own", on_a_full_disk)
    code = cli_main(["train", "--strategy", "bsp", "--steps", "4", "--log-every", "2", "--no-progress",
                     "--out", str(tmp_path / "out"), "--no-checkpoint"])
    line = one_error_line(capsys.readouterr().err)
    named = tmp_path / "out" / full.strip(".").removesuffix(".tmp")
    assert code == 2 and line.endswith(f"No space left on device: {named}"), line


#: fills the checkpoint disk once the checkpoint of step 4 is on it (the loader builds step
#: 10's batch while the later saves are still to come), then runs `jaxsel train`
FILL_THEN_TRAIN = """
import os, sys, time
from pathlib import Path
import jaxsel.training.train as T
from jaxsel.cli import main
ck = Path(sys.argv[1])
assemble = T.assemble_run

def fill(batch):
    deadline = time.monotonic() + 120
    while not (ck / "4").is_dir() and time.monotonic() < deadline:
        time.sleep(0.05)
    st = os.statvfs(ck)
    (ck.parent / "filler").write_bytes(bytes(max(0, st.f_bavail * st.f_frsize - 64 * 1024)))
    return batch

def assemble_and_fill(cfg):
    run = assemble(cfg)
    make = run.loader.batch
    run.loader.batch = lambda t: fill(make(t)) if t == 10 else make(t)
    return run

T.assemble_run = assemble_and_fill
sys.exit(main(["train", "--strategy", "bsp", "--steps", "40", "--batch-size", "8", "--log-every", "2",
               "--checkpoint-every", "4", "--keep", "1", "--no-progress", "--out", sys.argv[2],
               "--checkpoint-dir", str(ck)]))
"""


@pytest.mark.slow
def test_a_disk_that_fills_during_an_async_save_is_one_line_and_keeps_the_last_checkpoint(tmp_path):
    """The checkpoint dir on an 8 MiB tmpfs of its own (a private mount namespace, so no root
    needed where user namespaces are allowed), filled while the run trains."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = f"mount -t tmpfs -o size=8m tmpfs {disk} && exec \"$0\" \"$@\""
    prefix = ["unshare", "--mount", "--map-root-user", "sh", "-c", mount]
    if subprocess.run(prefix + ["true"], capture_output=True).returncode != 0:
        pytest.skip("needs a private tmpfs (unshare --mount --map-root-user)")
    done = subprocess.run(prefix + [sys.executable, "-c", FILL_THEN_TRAIN, str(disk / "ck"), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    said = [x for x in done.stderr.splitlines() if "building the embedded dataset" not in x]   # a fresh data dir
    line = one_error_line("\n".join(said))
    found = re.search(r"the checkpoint of step (\d+) could not be written \(No space left on device: (a file under )?"
                      r"(\S+)\); the checkpoint of step (\d+) in (\S+) is intact; make room", line)
    assert found, line   # the file, or where it was, when the failing write did not say (a write on an open file)
    failed, kept = int(found[1]), int(found[4])
    assert kept < failed and kept >= 4 and f"{disk}/ck" in found[5]
    assert ("orbax-checkpoint-tmp" in found[3]) if found[2] is None else found[3] == f"{disk}/ck"


def test_an_out_path_that_is_not_utf8_is_one_line(tmp_path, capsys):
    bad = os.fsdecode(os.fsencode(str(tmp_path)) + b"/run\xff")
    code = cli_main(["train", "--steps", "2", "--no-progress", "--out", bad, "--no-checkpoint"])
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and "--out" in line and "not valid UTF-8" in line


# 8-10. up-front checks: one line, exit 2, within seconds -----------------------------------

UPFRONT = [
    (["--strategy", "selsync:window=1000000000"], ["needs about", " GB", "state"]),
    (["--batch-size", "1000000"], ["needs about", " GB", "activations"]),
    (["--steps", "3000000000"], ["steps", "<= 2147483647"]),
    (["--steps", "2000000000"], ["needs about", " GB", "projection tables"]),
    (["--eval-examples", "-5"], ["eval_examples", ">= 1", "-5"]),
    (["--lr", "nan"], ["lr", "finite"]),
    (["--momentum", "inf"], ["momentum", "finite"]),
    (["--peer-timeout", "inf"], ["--peer-timeout", "finite", "inf"]),
    (["--peer-timeout", "1e30"], ["--peer-timeout", "1e+30"]),
]


@pytest.mark.parametrize("args, expected", UPFRONT, ids=[" ".join(a) for a, _ in UPFRONT])
def test_impossible_requests_exit_2_with_one_line_within_seconds(args, expected, tmp_path, capsys):
    argv = ["train", "--no-progress", "--out", str(tmp_path / "out"), "--checkpoint-dir", str(tmp_path / "ck")]
    if "--steps" not in args:
        argv += ["--steps", "2"]
    began = time.monotonic()
    code = cli_main(argv + args)
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and time.monotonic() - began < 30
    for text in expected:
        assert text in line, (text, line)
    assert not (tmp_path / "out" / "metrics.jsonl").exists()


def test_checkpoints_that_cannot_fit_on_disk_are_refused_up_front(tmp_path, monkeypatch):
    import shutil

    from jaxsel.training.config import ConfigError

    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**12, 10**12, 1000))
    with pytest.raises(ConfigError, match=r"checkpoints need about [\d.]+ [kMG]B .* but 1.00 kB is free"):
        build_run(config(tmp_path))


def test_an_unexpected_error_prints_its_traceback_once_and_where_to_report(tmp_path, capsys, monkeypatch):
    import jaxsel.training.train

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(jaxsel.training.train, "train", broken)
    code = cli_main(["train", "--steps", "2", "--no-progress", "--out", str(tmp_path / "out"), "--no-checkpoint"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("Traceback") == 1 and "RuntimeError: boom" in err
    assert err.strip().splitlines()[-1].endswith("please report it with the command line and the traceback above")


# 4. settings agreed across the processes of a multi-host run -----------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_processes_with_different_settings_both_exit_2_naming_the_setting(tmp_path):
    env = {**os.environ, "JAX_NUM_CPU_DEVICES": "4", "JAX_PLATFORMS": "cpu"}
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "jaxsel.cli", "train", "--strategy", f"selsync:delta={delta}",
                               "--steps", "4", "--no-progress", "--no-checkpoint", "--out", str(tmp_path / "o"),
                               "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, delta in enumerate((0.3, 0.5))]
    try:
        outs = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 2, err[-2000:]
        lines = [line for line in err.splitlines() if "error" in line]
        assert len(lines) == 1 and "'delta'" in lines[0] and "0.3" in lines[0] and "0.5" in lines[0], err[-2000:]
        assert "Traceback" not in err


def two_processes(tmp_path, *args, timeout=180, devices=(4, 4)):
    """`jaxsel train ARGS` as the 2 processes of one job on loopback (`devices` CPU devices
    each), `{i}` in ARGS replaced by the process's index: [(exit code, stderr)] once both ended."""
    env = lambda i: {**os.environ, "JAX_NUM_CPU_DEVICES": str(devices[i]), "JAX_PLATFORMS": "cpu"}
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "jaxsel.cli", "train", *(a.format(i=i) for a in args),
                               "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i)],
                              env=env(i), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    try:
        return [(p.wait(timeout), p.communicate()[1]) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


@pytest.mark.slow
def test_a_run_directory_per_host_is_refused_at_start_on_every_host_unless_one_checkpoint_dir_is_named(tmp_path):
    """(issue 60 item 6: each host's default checkpoint folder is named for its own run
    directory, and the final save waited forever for the other's)"""
    common = ("--strategy", "bsp", "--steps", "4", "--log-every", "2", "--no-progress", "--out", str(tmp_path / "run{i}"))
    for code, err in two_processes(tmp_path, *common):
        lines = [line for line in err.splitlines() if "error" in line]
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, err[-2000:]
        assert "'checkpoint folder'" in lines[0] and "the same --checkpoint-dir" in lines[0], lines[0]
    for code, err in two_processes(tmp_path, *common, "--checkpoint-dir", str(tmp_path / "ck")):
        assert code == 0, err[-2000:]
    assert existing_steps(tmp_path / "ck") == [4]


@pytest.mark.slow
def test_processes_with_different_device_counts_both_exit_2_in_one_line(tmp_path):
    """(issue 60 item 9: process 0 said "a multiple of 6 (2 processes x 4 devices)", process 1
    died in a C++ check and advised --resume)"""
    for code, err in two_processes(tmp_path, "--steps", "2", "--no-progress", "--no-checkpoint", "--out",
                                   str(tmp_path / "run"), devices=(4, 2)):
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1 and "Traceback" not in err and "--resume" not in err, err[-2000:]
        assert "process 0 has local devices=4, process 1 has local devices=2" in lines[0], lines[0]


# 10. a fallback is one line, not a flood -------------------------------------------------

def test_asyncio_s_late_record_of_an_unreadable_checkpoint_is_dropped(tmp_path, caplog, capsys):
    """Orbax's read tasks hold the failed read; asyncio logs each when it is collected ("Task
    exception was never retrieved" and a traceback), which can come after the fallback's
    quiet block (it did on CI's Python 3.12 leg): once the warning line has named the
    checkpoint, those records are dropped, and a record about anything else is not."""
    from jaxsel.training import checkpoint

    where = str(tmp_path / "ck" / "8")
    checkpoint._warn_unreadable(where, ValueError("OUT_OF_RANGE: a short read"), [8], [4, 8])
    assert "checkpoint " + where + " is unreadable" in capsys.readouterr().err
    log = logging.getLogger("asyncio")
    try:
        raise ValueError(f'Error reading local file "{where}/state/d/3ddc": Requested byte range is not valid')
    except ValueError:
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            log.error("Task exception was never retrieved\nfuture: <Task finished exception=ValueError(...)>",
                      exc_info=True)
            log.error(f"Task exception was never retrieved\nfuture: <Task finished {tmp_path}/other/8/state/>")
    assert [r.getMessage().split("future: ")[1] for r in caplog.records] == [
        f"<Task finished {tmp_path}/other/8/state/>"]



@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.slow
def test_a_truncated_checkpoint_fallback_prints_one_line_not_a_flood(tmp_path):
    """A separate process: Orbax's leftover callbacks print through the interpreter's
    unraisable-exception hook, which pytest would otherwise capture."""
    cfg = config(tmp_path, steps=8, log_every=4)
    train(cfg)
    for path in (tmp_path / "ck" / "8" / "state").rglob("*"):
        if path.is_file() and path.parent.name == "d":
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    done = subprocess.run([sys.executable, "-m", "jaxsel.cli", "train", "--strategy", "bsp", "--steps", "10",
                           "--batch-size", "8", "--log-every", "4", "--eval-every", "8", "--checkpoint-every", "4",
                           "--seed", "2", "--no-progress", "--resume", "--out", str(tmp_path / "out"),
                           "--checkpoint-dir", str(tmp_path / "ck")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    err = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and len(err) == 2, done.stderr[-3000:]
    assert "/8 is unreadable" in err[0] and "falling back to step 4" in err[0]
    assert "resuming from the checkpoint of step 4" in err[1]
