"""Faults: a NaN at a known step, stop signals.

The NaN comes from the data: the batch of step k gets an out-of-range label, which makes
that step's cross-entropy NaN on one replica (and so the replica-mean loss).
"""
import dataclasses
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from run_hooks import poison_at, signal_at, trees_equal

from jaxsel.cli import main as cli_main
from jaxsel.training.checkpoint import existing_steps
from jaxsel.training.faults import NonFiniteError, TrainingInterrupted
from jaxsel.training.train import TrainConfig, plan_run, train


def config(tmp_path, **kw):
    base = dict(strategy="selsync", strategy_options={"window": 3, "delta": 0.05}, steps=16,
                batch_size=8, log_every=2, eval_every=8, progress=False, seed=5,
                checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=4, out_dir=str(tmp_path / "out"))
    base.update(kw)
    return TrainConfig(**base)


@pytest.mark.slow
def test_nan_stops_naming_the_step_and_the_last_good_checkpoint_resumes(tmp_path):
    cfg = config(tmp_path)
    with pytest.raises(NonFiniteError, match=r"non-finite loss=nan at step 9.*last good checkpoint is step 8"):
        train(poison_at(plan_run(cfg), 9))
    assert existing_steps(cfg.checkpoint_dir) == [4, 8]    # nothing saved after the bad step
    last = json.loads((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["step"] == 9 and last["loss"] is None

    resumed = train(dataclasses.replace(cfg, resume=True))   # the data is clean again
    ref = train(config(tmp_path / "ref"))
    assert resumed.final["resumed_from_step"] == 8
    assert trees_equal(resumed.state.params, ref.state.params)


def test_nan_skip_leaves_the_state_unchanged(tmp_path):
    cfg = config(tmp_path, steps=6, nonfinite="skip", checkpoint_dir=None, checkpoint_every=None,
                 out_dir=None)
    skipped = train(poison_at(plan_run(cfg), 5))
    before = train(dataclasses.replace(cfg, steps=5))
    assert [r["step"] for r in skipped.records if r["nonfinite"]] == [5]
    assert skipped.final["skipped_steps"] == 1
    assert int(skipped.state.step) == 6
    for field in ("params", "opt_state", "model_state", "strategy_state"):
        assert trees_equal(getattr(skipped.state, field), getattr(before.state, field)), field


def test_diverging_run_stops_with_one_line_and_exit_code_1(tmp_path, capsys):
    code = cli_main(["train", "--strategy", "bsp", "--lr", "1e30", "--steps", "12", "--log-every", "4",
                     "--batch-size", "4", "--no-progress", "--out", str(tmp_path / "out"),
                     "--checkpoint-dir", str(tmp_path / "ck")])
    err = capsys.readouterr().err
    assert code == 1
    lines = [line for line in err.splitlines() if line.startswith("jaxsel train: error:")]
    assert len(lines) == 1 and "non-finite" in lines[0] and "at step" in lines[0], err
    assert "Traceback" not in err


def test_sigint_saves_and_reports_exit_code_130(tmp_path):
    cfg = config(tmp_path, steps=12)
    plan = signal_at(plan_run(cfg), 3, signal.SIGINT)
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(TrainingInterrupted) as info:
        train(plan)
    assert info.value.exit_code == 130 and "SIGINT" in str(info.value)
    assert info.value.step in existing_steps(cfg.checkpoint_dir)
    assert signal.getsignal(signal.SIGINT) is before   # the handler is put back


@pytest.mark.slow
def test_sigterm_from_outside_saves_exits_143_and_resumes(tmp_path):
    """The CLI end to end: SIGTERM mid-run -> checkpoint, exit 143 (128 + SIGTERM, as a shell
    reports it: an interrupted run never passes for a finished one), message; --resume finishes."""
    base = [sys.executable, "-m", "jaxsel.cli", "train", "--strategy", "bsp", "--batch-size", "4",
            "--log-every", "5", "--no-progress", "--out", str(tmp_path / "run"), "--checkpoint-every", "100000"]
    proc = subprocess.Popen(base + ["--steps", "1000000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path)
    log = tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (log.exists() and log.stat().st_size) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    saved = [line for line in err.splitlines() if "received SIGTERM: stopped after step" in line]
    assert saved and "saved checkpoint at step" in saved[0], err[-2000:]
    step = int(saved[0].split("stopped after step ")[1].split(",")[0])
    root = Path(json.loads((tmp_path / "run" / "config.json").read_text())["checkpoint_root"])
    assert root.parent == tmp_path / "checkpoints" and root.name.startswith("run-")   # the default root
    assert existing_steps(root) == [step]
    done = subprocess.run(base + ["--steps", str(step + 3), "--resume"], capture_output=True, text=True,
                          timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"resumed_from_step: {step}" in done.stdout
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == list(range(step + 3))


@pytest.mark.parametrize("after", [0.1, 0.3, 0.6, 1.0])
@pytest.mark.slow
def test_ctrl_c_early_in_start_up_is_one_line_and_exit_130(tmp_path, after):
    """A Python launcher (a shell's background jobs ignore SIGINT) sends Ctrl-C `after`
    seconds into `jaxsel train`: exit 130 and one line, never a traceback nor a swallowed
    interrupt ("Exception ignored") that lets the run train in full afterwards. Before any
    jaxsel code runs (the interpreter still starting, on a busy machine), Python's own
    handling applies: death by the signal, or a traceback that shows no jaxsel frame."""
    proc = subprocess.Popen([sys.executable, "-m", "jaxsel.cli", "train", "--strategy", "bsp", "--steps", "1000000",
                             "--log-every", "5", "--no-progress", "--out", "run"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(after)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)   # a run that trained on would time out here
    if proc.returncode != 130:   # the interpreter was still starting (site, .pth files): Python's doing
        assert proc.returncode != 0 and "/jaxsel/" not in err and out == "", err   # no frame of the package
        assert list(tmp_path.iterdir()) == []
    else:
        assert "Traceback" not in err and "Exception ignored" not in err, err[-2000:]
        lines = err.strip().splitlines()
        assert "received SIGINT" in lines[-1], err[-2000:]
        if "while starting up" in lines[-1]:   # before the run was set up: one line, nothing made
            assert len(lines) == 1 and out == "", err
            assert list(tmp_path.iterdir()) == []
    log = tmp_path / "run" / "metrics.jsonl"
    assert not log.exists() or log.read_text() == ""   # not one step trained


def test_the_stop_line_promises_a_checkpoint_only_where_the_run_saves_one(capsys):
    """A run without checkpoints (--no-checkpoint, a comparison's cells) does not say it is
    saving one when Ctrl-C arrives."""
    import signal

    from jaxsel.training.faults import StopSignals

    for checkpointing, then in ((True, "and saving a checkpoint"), (False, "(this run saves no checkpoints)")):
        StopSignals(checkpointing)._handle(signal.SIGINT, None)
        line = capsys.readouterr().err.strip()
        assert line == f"jaxsel: received SIGINT; finishing the step in flight {then} (Ctrl-C again aborts)"


def test_a_ctrl_c_before_the_start_up_handler_exists_is_the_same_one_line(monkeypatch, capsys):
    """Python 3.13 under load: a Ctrl-C 0.3 s in landed in early_stop's own import, before its
    handler, and showed a traceback through jaxsel/cli (issue 57's slow tier)."""
    import jaxsel.cli

    class Interrupting:
        def find_spec(self, name, path=None, target=None):
            if name == "jaxsel.training.early_stop":
                raise KeyboardInterrupt

    monkeypatch.delitem(sys.modules, "jaxsel.training.early_stop", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Interrupting(), *sys.meta_path])
    assert jaxsel.cli.main(["train", "--steps", "3"]) == 130
    assert capsys.readouterr().err.splitlines() == [
        "jaxsel: received SIGINT while starting up; stopped before training, nothing written; run it again: "
        "jaxsel train --steps 3"]
