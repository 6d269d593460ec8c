"""Every stop line ends with the command to type next (issue 61): a signal before training
(nothing written: the same command), during a run (its directory resumed, from step 0
when no checkpoint was saved), in a job's cell, or a second Ctrl-C on a comparison."""
import signal

from jaxsel.cli import main as cli_main
from jaxsel.cli.next_command import resumed, stop_line
from jaxsel.training.early_stop import StoppedEarly
from jaxsel.training.faults import TrainingInterrupted


def test_a_stop_before_anything_was_written_gives_the_same_command():
    assert stop_line(StoppedEarly(signal.SIGINT), None, ["train", "--steps", "5"]) == (
        "received SIGINT while starting up; stopped before training, nothing written; "
        "run it again: jaxsel train --steps 5")


def test_the_command_that_continues_names_the_run_directory_once_and_quotes_it():
    assert resumed(["compare", "--seeds", "2"], "runs/a b") == "jaxsel compare --seeds 2 --out 'runs/a b' --resume"
    assert resumed(["train", "--out", "r", "--resume"], "r") == "jaxsel train --out r --resume"
    assert resumed(["train", "--out=r"], "r") == "jaxsel train --out=r --resume"


def test_an_early_ctrl_c_in_train_ends_with_the_command_that_continues(tmp_path, monkeypatch, capsys):
    import jaxsel.training.train as train_module

    def stopped(plan):
        raise TrainingInterrupted(signal.SIGINT, 0, None)

    monkeypatch.setattr(train_module, "train", stopped)
    out = tmp_path / "run"
    argv = ["train", "--steps", "5", "--no-progress", "--out", str(out)]
    assert cli_main(argv) == 130
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"jaxsel train: received SIGINT: stopped after step 0, no checkpoint saved; "
        f"continue with: jaxsel train --steps 5 --no-progress --out {out} --resume")


def test_a_saved_checkpoint_is_named_and_the_resume_is_the_next_command(tmp_path):
    stop = TrainingInterrupted(signal.SIGTERM, 40, str(tmp_path / "ck"))
    args = type("Args", (), {"run_dir": "runs/selsync-1"})()
    assert stop_line(stop, args, ["train"]) == (f"received SIGTERM: stopped after step 40, saved checkpoint at step 40 "
                                                f"in {tmp_path / 'ck'}; continue with: jaxsel train --out "
                                                f"runs/selsync-1 --resume")


def test_two_quick_ctrl_c_on_compare_end_with_the_command_that_continues(tmp_path, monkeypatch, capsys):
    import jaxsel.analysis.compare as compare_module

    def aborted(*args, on_start=None, **kwargs):
        on_start()
        raise KeyboardInterrupt

    monkeypatch.setattr(compare_module, "run_comparison", aborted)
    out = tmp_path / "cmp"
    assert cli_main(["compare", "--steps", "4", "--strategies", "bsp", "--out", str(out), "--no-progress"]) == 130
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"jaxsel compare: interrupted; continue with: jaxsel compare --steps 4 --strategies bsp --out {out} "
        f"--no-progress --resume")
