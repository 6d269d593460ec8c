"""A run's records are never overwritten, cut or mixed with another run's (issue 23, items
1-4 and the resume side of 9): a fresh run refuses a run directory that holds a run,
`--resume` keeps every readable row and names what is missing, each run directory gets its
own checkpoint folder, fractional LR milestones stay where the run put them, and the same
settings spelt differently resume.

One tiny finished run (digits, MLP, 8 steps, checkpoints at 4 and 8) is shared; tests
that change it work on a copy.
"""
import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from run_hooks import trees_equal

from jaxsel import TrainConfig, train
from jaxsel.cli import main as cli_main


def config(root: Path, **kw) -> TrainConfig:
    base = dict(strategy="bsp", steps=8, batch_size=8, log_every=2, eval_every=4, checkpoint_every=4,
                progress=False, seed=4, out_dir=str(root / "out"), checkpoint_dir=str(root / "ck"))
    return TrainConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("finished")
    train(config(root))
    return root


@pytest.fixture
def copy(finished, tmp_path) -> Path:
    """A copy of the finished run (its run directory and checkpoints) to change."""
    for name in ("out", "ck"):
        shutil.copytree(finished / name, tmp_path / name)
    return tmp_path


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in lines(path)]


def warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if "warning" in line]


TRAIN = ["train", "--strategy", "bsp", "--steps", "8", "--batch-size", "8", "--log-every", "2", "--seed", "4",
         "--no-progress"]


# 1. a run directory that holds a run is never overwritten ----------------------------------

@pytest.mark.parametrize("checkpoints", [["--checkpoint-dir", "{root}/other-ck"], ["--no-checkpoint"]])
def test_a_new_run_into_a_finished_run_directory_is_refused_in_one_line(copy, checkpoints, capsys):
    before = {name: (copy / "out" / name).read_bytes()
              for name in ("metrics.jsonl", "final.json", "evals.json", "config.json", "strategy.json")}
    argv = TRAIN + ["--out", str(copy / "out")] + [a.replace("{root}", str(copy)) for a in checkpoints]
    assert cli_main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""   # nothing printed before the error (no "run directory:" line)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "already holds a run (metrics.jsonl, evals.json, final.json)" in err and "--resume" in err, err
    assert {name: (copy / "out" / name).read_bytes() for name in before} == before
    assert not (copy / "other-ck").exists()


# 2. --resume never cuts a good row ---------------------------------------------------------

@pytest.mark.slow
def test_a_bad_line_before_the_checkpoint_is_set_aside_and_the_rows_after_it_kept(copy, capsys):
    log = copy / "out" / "metrics.jsonl"
    rows = lines(log)
    rows[2] = rows[2][: len(rows[2]) // 2]   # step 2's row damaged (the checkpoint is at step 8)
    log.write_text("\n".join(rows) + "\n")
    capsys.readouterr()
    train(config(copy, steps=10, resume=True))
    said = warnings(capsys.readouterr().err)
    assert len(said) == 2, said
    assert "metrics.jsonl line(s) 3 are not metrics rows" in said[0] and "metrics.jsonl.bad" in said[0]
    assert "has no rows for step(s) 2 before the checkpoint of step 8" in said[1]
    assert steps(log) == [0, 1, *range(3, 10)]
    assert lines(log)[:7] == rows[:2] + rows[3:8]   # the good rows, byte for byte
    assert (copy / "out" / "metrics.jsonl.bad").read_text() == rows[2] + "\n"


@pytest.mark.slow
@pytest.mark.parametrize("keep", [5, 0, None])   # a short log, an empty one, none at all
def test_missing_rows_before_the_checkpoint_are_named_in_one_warning(copy, keep, capsys):
    log = copy / "out" / "metrics.jsonl"
    if keep is None:
        log.unlink()
    else:
        log.write_text("".join(line + "\n" for line in lines(log)[:keep]))
    capsys.readouterr()
    train(config(copy, steps=10, resume=True))
    said = warnings(capsys.readouterr().err)
    gap = f"{keep}-7" if keep else "0-7"
    what = "is missing: no rows for" if keep is None else "has no rows for"
    assert len(said) == 1 and f"metrics.jsonl {what} step(s) {gap} before the checkpoint of step 8" in said[0], said
    assert steps(log) == [*range(keep or 0), 8, 9]


# 3. every run directory has its own checkpoint folder ---------------------------------------

@pytest.mark.slow
def test_run_directories_with_one_name_never_share_a_checkpoint_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        assert cli_main(TRAIN[:3] + ["--steps", "4", "--checkpoint-every", "2", "--batch-size", "8", "--no-progress",
                                     "--out", f"{run}/x"]) == 0, capsys.readouterr().err
    folders = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert len(folders) == 2 and all(f.startswith("x-") for f in folders), folders
    roots = {run: json.loads((tmp_path / run / "x" / "config.json").read_text())["checkpoint_root"] for run in "ab"}
    assert roots["a"] != roots["b"]
    assert TrainConfig(out_dir="a/x", checkpoint_every=2).checkpoint_root() == \
        TrainConfig(out_dir=str(tmp_path / "a" / "x"), checkpoint_every=2).checkpoint_root()   # one dir, two spellings
    capsys.readouterr()
    assert cli_main(TRAIN[:3] + ["--steps", "6", "--batch-size", "8", "--no-progress", "--resume", "--out", "b/x"]) == 0
    assert "resumed_from_step: 4" in capsys.readouterr().out
    assert steps(tmp_path / "b" / "x" / "metrics.jsonl") == list(range(6))   # b/x's own log, continued


def test_a_run_directory_of_an_earlier_jaxsel_resumes_from_its_former_default_folder(tmp_path, monkeypatch):
    from jaxsel.training.run import resumed_settings

    monkeypatch.chdir(tmp_path)
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "config.json").write_text(json.dumps({"out_dir": "x", "checkpoint_dir": None}))
    cfg = TrainConfig(out_dir="x", resume=True)
    assert resumed_settings(cfg).checkpoint_root() == cfg.checkpoint_root()   # no checkpoints there: the new default
    (tmp_path / "checkpoints" / "x" / "40").mkdir(parents=True)
    assert resumed_settings(cfg).checkpoint_root() == Path("checkpoints") / "x"


# 4. fractional LR milestones stay fixed to the run's first length; lr is logged --------------

@pytest.mark.slow
def test_resume_with_more_steps_keeps_the_lr_milestones_where_they_were(tmp_path):
    first = config(tmp_path, lr_schedule="milestones")   # x0.1 at 50% and 75% of 8 steps: 4 and 6
    train(first)
    done = train(dataclasses.replace(first, steps=16, resume=True))
    lr = [r["lr"] for r in map(json.loads, lines(tmp_path / "out" / "metrics.jsonl"))]
    assert lr == pytest.approx([0.05] * 4 + [0.005] * 2 + [0.0005] * 10, rel=1e-12)
    ref = train(config(tmp_path / "ref", steps=16, lr_schedule="milestones:4,6", checkpoint_every=None))
    assert trees_equal(done.state.params, ref.state.params)


def test_milestones_that_never_fire_are_said():
    """The run's plan holds the line (`created_dirs` prints it once every check has passed)."""
    from jaxsel.training.plan import plan_run

    said = plan_run(TrainConfig(strategy="bsp", steps=20, lr_schedule="milestones:0.5,1000", progress=False)).warnings
    assert len(said) == 1 and "milestones:0.5,1000: milestone step(s) 1000 lie at or past this 20-step run's end" \
        in said[0], said


# 9. a setting spelt out equals its default; damaged run files are named ------------------------

def test_resume_with_the_default_aggregator_spelt_out_continues(copy):
    done = train(config(copy, steps=10, resume=True, strategy_options={"aggregator": "mean"}))
    assert done.final["resumed_from_step"] == 8


@pytest.mark.parametrize("name", ["evals.json", "strategy.json", "config.json"])
def test_report_on_a_damaged_run_file_names_it(copy, name, capsys):
    (copy / "out" / name).write_text("{not json")
    assert cli_main(["report", str(copy / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{copy / 'out' / name} is not valid JSON" in err, err


def test_report_creates_only_the_last_component_of_out(finished, tmp_path, capsys):
    assert cli_main(["report", str(finished / "out"), "--out", str(tmp_path / "no" / "such" / "r.png")]) == 2
    assert "jaxsel creates only the last component" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()
