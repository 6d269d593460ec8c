"""Run directories never share or mix what they hold (issue 35): a copied run dir forks the
original's newest checkpoint instead of writing into (and pruning) the original's folder; a
dir holding one kind of jaxsel run is refused by the other command; default run dirs
started in the same second get distinct names."""
import hashlib
import json
import shutil
import threading
from pathlib import Path

import pytest

from jaxsel.cli import main as cli_main

#: a constant lr: a run resumed to more steps then equals one run of them (the default
#: task's milestones are fractions of the length the run started with)
RUN = ["train", "--strategy", "bsp", "--batch-size", "8", "--log-every", "4", "--eval-every", "12",
       "--checkpoint-every", "4", "--keep", "2", "--seed", "1", "--lr-schedule", "constant", "--no-progress"]


def digest(folder: Path) -> dict[str, str]:
    """Every file under `folder` by relative path -> sha256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def rows(run_dir: Path) -> list[dict]:
    keep = ("step", "loss", "synced", "bytes_allreduced")
    return [{k: r[k] for k in keep} for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())]


def recorded_root(run_dir: Path) -> Path:
    return Path(json.loads((run_dir / "config.json").read_text())["checkpoint_root"])


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> list[dict]:
    """The rows of RUN's 12 steps in one go (checkpointed as the others), which the resumed
    runs below must end with."""
    root = tmp_path_factory.mktemp("uninterrupted")
    assert cli_main([*RUN, "--steps", "12", "--out", str(root / "ref"), "--checkpoint-dir", str(root / "ck")]) == 0
    return rows(root / "ref")


@pytest.mark.slow
def test_a_copied_run_dir_forks_the_newest_checkpoint_and_never_touches_the_original(tmp_path, monkeypatch, capsys,
                                                                                      uninterrupted):
    monkeypatch.chdir(tmp_path)   # default checkpoint folders: checkpoints/<run>-<hash>
    assert cli_main([*RUN, "--steps", "8", "--out", "a"]) == 0
    original = recorded_root(tmp_path / "a")
    assert sorted(p.name for p in original.iterdir() if p.name.isdigit()) == ["4", "8"]
    before, run_before = digest(original), digest(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    capsys.readouterr()

    assert cli_main([*RUN, "--steps", "12", "--out", "b", "--resume"]) == 0
    err = capsys.readouterr().err
    assert "forked its checkpoints (steps 4, 8)" in err, err
    assert digest(original) == before and digest(tmp_path / "a") == run_before   # byte-identical
    fork = recorded_root(tmp_path / "b")
    assert fork != original and fork.parent == original.parent
    assert sorted(p.name for p in fork.iterdir() if p.name.isdigit()) == ["12", "8"]   # its copy of 4 pruned
    assert rows(tmp_path / "b") == uninterrupted   # the same 12 steps in one go

    capsys.readouterr()
    assert cli_main([*RUN, "--steps", "12", "--out", "a", "--resume"]) == 0   # a continues its own
    err = capsys.readouterr().err
    assert "resuming from the checkpoint of step 8" in err and "warning" not in err, err
    assert rows(tmp_path / "a") == uninterrupted
    assert sorted(p.name for p in original.iterdir() if p.name.isdigit()) == ["12", "8"]


def test_resuming_a_copy_into_the_originals_explicit_checkpoint_dir_is_refused(tmp_path, capsys):
    ck = tmp_path / "ck"
    assert cli_main([*RUN, "--steps", "4", "--out", str(tmp_path / "a"), "--checkpoint-dir", str(ck)]) == 0
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    before = digest(ck)
    capsys.readouterr()
    code = cli_main([*RUN, "--steps", "8", "--out", str(tmp_path / "b"), "--resume", "--checkpoint-dir", str(ck)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert f"checkpoint dir {str(ck)!r} belongs to run directory {str(tmp_path / 'a')!r}" in err[0], err[0]
    assert digest(ck) == before


def fake_comparison(folder: Path) -> None:
    (folder / "bsp" / "seed0").mkdir(parents=True)
    (folder / "bsp" / "seed0" / "metrics.jsonl").write_text('{"step": 0}\n')
    (folder / "results.json").write_text("[]")


def test_train_refuses_a_comparison_dir_and_compare_refuses_a_train_run(tmp_path, capsys):
    cmp_dir = tmp_path / "cmp"
    fake_comparison(cmp_dir)
    before = digest(cmp_dir)
    for extra in ([], ["--resume"]):
        code = cli_main(["train", "--strategy", "bsp", "--steps", "2", "--no-progress", "--out", str(cmp_dir),
                         "--checkpoint-dir", str(tmp_path / "ck"), *extra])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and "holds a comparison" in err[0] and "results.json" in err[0], err
        assert digest(cmp_dir) == before and not (tmp_path / "ck").exists()

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"step": 0}\n')
    code = cli_main(["compare", "--strategies", "bsp", "--steps", "2", "--seeds", "1", "--no-match-budget",
                     "--no-progress", "--out", str(run_dir)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "holds a `jaxsel train` run" in err[0] and "metrics.jsonl" in err[0], err
    assert sorted(p.name for p in run_dir.iterdir()) == ["metrics.jsonl"]


def test_default_run_dirs_started_in_the_same_second_are_distinct(tmp_path, monkeypatch, capsys):
    import time

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time, "strftime", lambda fmt, *a: "20300101-000000")
    for _ in range(2):
        assert cli_main(["train", "--strategy", "bsp", "--steps", "2", "--no-progress", "--no-checkpoint"]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("run directory: ")]
    assert said == ["run directory: runs/bsp-20300101-000000", "run directory: runs/bsp-20300101-000000-2"]
    assert all((tmp_path / "runs" / name / "final.json").is_file()
               for name in ("bsp-20300101-000000", "bsp-20300101-000000-2"))


def test_claiming_a_default_name_is_atomic(tmp_path):
    from jaxsel.training.rundir.claim import claim_new_dir

    start, names = threading.Barrier(8), []

    def claim():
        start.wait()
        names.append(claim_new_dir(tmp_path / "runs" / "compare-20300101-000000"))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = ["compare-20300101-000000"] + [f"compare-20300101-000000-{i}" for i in range(2, 9)]
    assert sorted(Path(n).name for n in names) == sorted(expected)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(expected)


def test_a_resume_with_nothing_to_resume_from_never_replaces_a_finished_runs_records(tmp_path, monkeypatch, capsys):
    """Issue 48 item 1: a finished run made with --no-checkpoint, or whose checkpoints were
    deleted, resumed (with another strategy, even): one line, exit 2, nothing touched."""
    monkeypatch.chdir(tmp_path)
    assert cli_main([*RUN, "--steps", "4", "--out", "r1", "--no-checkpoint"]) == 0
    assert cli_main([*RUN, "--steps", "4", "--out", "r2"]) == 0
    shutil.rmtree(recorded_root(tmp_path / "r2"))   # its checkpoints deleted (or moved away)
    before = {name: digest(tmp_path / name) for name in ("r1", "r2")}
    capsys.readouterr()
    for name in ("r1", "r2"):
        argv = [a if a != "bsp" else "localsgd" for a in RUN]   # another strategy, even
        code = cli_main([*argv, "--steps", "2", "--out", name, "--resume"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1, err
        assert f"run directory {name!r} holds a run (metrics.jsonl, evals.json, final.json) but there is no " \
               f"checkpoint to continue it from" in err[0] and "nothing was touched" in err[0], err[0]
        assert digest(tmp_path / name) == before[name]
    assert not (tmp_path / "checkpoints").exists() or not any((tmp_path / "checkpoints").iterdir())


@pytest.mark.slow
def test_a_fork_of_a_folder_whose_newest_checkpoint_is_corrupt_continues_from_the_newest_good_one(tmp_path, monkeypatch,
                                                                                                   capsys,
                                                                                                   uninterrupted):
    """Issue 48 item 4 (and item 10's half copy of a fork killed by SIGKILL, cleared on the
    next resume): b, a copy of a whose newest checkpoint has a flipped byte, falls back to
    the step before, as a does, and a is only read."""
    from run_hooks import flip_a_byte

    monkeypatch.chdir(tmp_path)
    assert cli_main([*RUN, "--steps", "8", "--out", "a"]) == 0
    original = recorded_root(tmp_path / "a")
    flip_a_byte(original / "8")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    before = digest(original)
    capsys.readouterr()
    assert cli_main([*RUN, "--steps", "12", "--out", "b", "--resume"]) == 0
    err = capsys.readouterr().err
    assert "forked its checkpoints (steps 4, 8)" in err and "/8 is unreadable" in err, err
    assert "falling back to step 4" in err and "resuming from the checkpoint of step 4" in err, err
    assert digest(original) == before
    assert rows(tmp_path / "b") == uninterrupted

    fork = recorded_root(tmp_path / "b")
    (fork / ".fork-12-999999").mkdir()   # what a fork killed mid-copy leaves
    (fork / ".fork-12-999999" / "half").write_text("x")
    assert cli_main([*RUN, "--steps", "12", "--out", "b", "--resume"]) == 0
    assert not (fork / ".fork-12-999999").exists()


def test_a_checkpoint_folder_follows_its_run_directory_not_its_path(tmp_path, monkeypatch, capsys):
    """Issue 48 item 10: after `mv r8 r8old`, a new `--out r8 --resume` continued r8old's
    checkpoints (and its --keep would prune them); now the folder is refused to it, with
    and without --resume, and r8old continues its own. --checkpoint-dir naming a folder this
    run directory does not record is refused without advice to fork (nothing would fork)."""
    monkeypatch.chdir(tmp_path)
    assert cli_main([*RUN, "--steps", "4", "--out", "r8"]) == 0
    folder = recorded_root(tmp_path / "r8")
    (tmp_path / "r8").rename(tmp_path / "r8old")
    before = digest(folder)
    capsys.readouterr()
    for extra in (["--resume"], []):
        assert cli_main([*RUN, "--steps", "8", "--out", "r8", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "the run directory that was at" in err[0] and "before (moved or replaced" in err[0]
        assert "give this run a --checkpoint-dir of its own" in err[0] and "fork" not in err[0], err[0]
        assert digest(folder) == before
    assert cli_main([*RUN, "--steps", "8", "--out", "r8old", "--resume"]) == 0
    assert "resuming from the checkpoint of step 4" in capsys.readouterr().err
    assert recorded_root(tmp_path / "r8old") == folder

    assert cli_main([*RUN, "--steps", "8", "--out", "fresh", "--resume", "--checkpoint-dir", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"belongs to run directory {str(tmp_path / 'r8old')!r}" in err[0], err
    assert "give this run a --checkpoint-dir of its own (or none)" in err[0] and "fork" not in err[0], err[0]
