"""What a resume may not change (issue 60 items 3 and 5): the data it trains on (a
fingerprint of what was read is part of the checkpoint's identity), the test examples its
evaluations use, how packed replicas are computed, and the task, which its recorded
settings would silently override."""
import dataclasses

import numpy as np
import pytest

from jaxsel.cli import main as cli_main
from jaxsel.data.fingerprint import data_fingerprint
from jaxsel.data.records import ArrayTable
from jaxsel.training.checkpoint import CheckpointMismatch, check_identity, run_identity
from jaxsel.training.plan import plan_run
from jaxsel.training.train import TrainConfig, train


def test_the_fingerprint_sees_one_changed_byte_and_an_old_checkpoint_without_one_passes():
    x = np.arange(64, dtype=np.uint8).reshape(8, 8)
    y = np.arange(8)
    same = data_fingerprint(ArrayTable({"image": x.copy(), "label": y}))
    assert same == data_fingerprint(ArrayTable({"image": x, "label": y}))
    x[7, 7] += 1
    other = data_fingerprint(ArrayTable({"image": x, "label": y}))
    assert other != same
    cfg = TrainConfig(strategy="bsp")
    with pytest.raises(CheckpointMismatch, match="trained on other data"):
        check_identity(run_identity(cfg, same), run_identity(cfg, other), "ck/4")
    check_identity(run_identity(cfg), run_identity(cfg, other), "ck/4")   # written before fingerprints


@pytest.mark.slow
def test_a_resume_on_other_data_is_refused(tmp_path):
    cfg = TrainConfig(strategy="bsp", steps=4, batch_size=8, log_every=2, eval_every=4, checkpoint_every=2,
                      progress=False, seed=2, checkpoint_dir=str(tmp_path / "ck"), out_dir=str(tmp_path / "out"))
    train(cfg)
    plan = plan_run(dataclasses.replace(cfg, resume=True, steps=6))
    table = plan.data.loader.table
    plan.data.loader.table = ArrayTable({k: np.roll(v, 1, axis=0) for k, v in table.arrays.items()})
    with pytest.raises(CheckpointMismatch, match=r"trained on other data \(fingerprint [0-9a-f]{12}; this run"):
        train(plan)


RUN = ["train", "--strategy", "bsp", "--steps", "2", "--batch-size", "8", "--no-progress"]


@pytest.mark.slow
@pytest.mark.parametrize("flags, named", [(["--eval-examples", "50"], "eval_examples"),
                                          (["--packing", "vmap"], "packing"),
                                          (["--task", "paper"], "--task paper with --resume")])
def test_a_resume_that_would_report_another_run_is_refused_in_one_line(tmp_path, capsys, flags, named):
    out = str(tmp_path / "out")
    assert cli_main([*RUN, "--out", out, "--checkpoint-dir", str(tmp_path / "ck")]) == 0
    capsys.readouterr()
    code = cli_main(["train", "--out", out, "--resume", "--steps", "4", "--no-progress", *flags])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and named in err and "Traceback" not in err, err


@pytest.mark.slow
def test_a_resume_to_more_steps_says_its_fractional_milestones_stay_where_they_were(tmp_path, capsys):
    """(issue 60 item 13) The header names the first run's milestone steps, and keeps naming
    them on later resumes of the extended run (its record says 8 steps; its milestones are
    still the first run's)."""
    out = str(tmp_path / "out")
    assert cli_main([*RUN[:3], *RUN[5:], "--steps", "4", "--checkpoint-every", "2", "--lr-schedule", "milestones:0.5,0.75",
                     "--out", out, "--checkpoint-dir", str(tmp_path / "ck")]) == 0
    capsys.readouterr()
    assert cli_main(["train", "--out", out, "--resume", "--steps", "8", "--no-progress"]) == 0
    header = [line for line in capsys.readouterr().out.splitlines() if line.startswith("resumed:")]
    assert len(header) == 1 and header[0].endswith(
        "its LR milestones 0.5, 0.75 stay fractions of the first run's 4 steps (step 2, 3), not of 8: this is not "
        "the run a fresh --steps 8 trains"), header
    assert cli_main(["train", "--out", out, "--resume", "--no-progress"]) == 0
    assert "its LR milestones 0.5, 0.75 stay fractions of the first run's 4 steps" in capsys.readouterr().out


def test_what_a_field_declares_it_does_to_a_run_decides_the_checkpoint_and_the_resume():
    """Each field's `effect` (training/sections/), and no list kept by hand, says whether a
    checkpoint of another value is another run, another trajectory, or the same one, and
    what a resume may change."""
    from jaxsel.training import checkpoint, recorded
    from jaxsel.training.declare import EFFECTS, FREE, IDENTITY, RESULTS, with_effect

    fields = {f.name: f.metadata["effect"] for f in dataclasses.fields(TrainConfig)}
    assert set(fields.values()) <= set(EFFECTS)
    assert set(checkpoint.IDENTITY) == with_effect(TrainConfig, IDENTITY) == {"replicas", "model", "strategy",
                                                                              "dataset"}
    assert checkpoint.NOT_TRAJECTORY == set(fields) - with_effect(TrainConfig, IDENTITY, RESULTS)
    base = TrainConfig(strategy="bsp")
    for name, value in (("model", "cnn"), ("replicas", 4), ("dataset", "mnist1d")):
        with pytest.raises(CheckpointMismatch, match=f"run with {name}="):
            check_identity(run_identity(base), run_identity(dataclasses.replace(base, **{name: value})), "ck/4")
    with pytest.raises(CheckpointMismatch, match=r"other settings \(lr 0.05 -> 0.1\)"):
        check_identity(run_identity(base), run_identity(dataclasses.replace(base, lr=0.1)), "ck/4")
    for name, value in (("steps", 900), ("eval_every", 7), ("eval_examples", 50), ("out_dir", "elsewhere")):
        check_identity(run_identity(base), run_identity(dataclasses.replace(base, **{name: value})), "ck/4")
    changed = dataclasses.replace(base, steps=900, log_every=5, eval_examples=50, lr=0.1, out_dir="x",
                                  lr_schedule_steps=300)
    allowed, refused = recorded.resume_changes(dataclasses.asdict(base), changed)
    assert [line.split()[0] for line in allowed] == ["steps", "log_every"]
    assert sorted(line.split()[0] for line in refused) == ["eval_examples", "lr"]
    assert with_effect(TrainConfig, FREE) >= {"steps", "log_every"}
