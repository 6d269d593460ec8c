"""Values that Python reads but a run would not record as used (issue 60 item 12): an LR
factor that is 0 in float32, numbers in other scripts' digits or with '_', and an --out
holding a line break; each one line, exit 2, before anything is created."""
import pytest

from jaxsel.cli import main as cli_main
from jaxsel.core.options import OptionError
from jaxsel.core.pairs import parse_value
from jaxsel.strategies import build_strategy
from jaxsel.training.lr_schedule import read_lr_schedule

BAD_SCHEDULES = ["every:1@1e-320", "every:5@1e39", "every:\uff11", "every:1_0", "milestones:0.\u0665",
                 "sample-epochs:1,2/1_000"]


@pytest.mark.parametrize("spec", BAD_SCHEDULES)
def test_an_lr_schedule_the_run_would_not_use_as_typed_is_refused(spec):
    with pytest.raises(ValueError, match="numbers in ASCII digits, got"):
        read_lr_schedule(spec)


def test_the_smallest_factor_float32_holds_still_passes():
    assert read_lr_schedule("every:5@1e-44").gamma == 1e-44


@pytest.mark.parametrize("raw", ["\u0661", "\uff11", "1_0"])
def test_an_option_number_in_other_digits_is_no_number(raw):
    assert parse_value(raw) == raw
    with pytest.raises(OptionError, match="delta"):
        build_strategy("selsync", {"delta": raw}, replicas=8, total_steps=10)


@pytest.mark.parametrize("flags", [["--lr-schedule", "every:1@1e-320"], ["--strategy", "selsync:delta=\u0661"],
                                   ["--out", "run\nname"], ["--out", "run\x1b[2Jname"]])
def test_the_command_refuses_them_in_one_line(flags, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = cli_main(["train", "--steps", "2", "--no-progress", "--no-checkpoint", *flags])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not any(p.name.startswith("run") for p in tmp_path.iterdir())
