"""A mistyped flag: the subcommand's usage, one error line with the closest flag, exit 2."""
import pytest

from jaxsel.cli import main as cli_main
from jaxsel.cli.command import build_parser
from jaxsel.cli.typos import subcommand_parser, visible_flags

#: what a command needs besides the typo to get as far as it
POSITIONAL = {"prepare": ["mnist"], "report": ["runs/x"]}
COMMANDS = ["compare", "frontier", "calibrate", "train", "strategies", "datasets", "prepare", "bench", "report"]


def _refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as info:
        cli_main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and "Traceback" not in err, err
    assert len([line for line in err.splitlines() if "error:" in line]) == 1, err
    return err


def _typo(flag: str) -> str:
    """`flag` with two letters swapped in its middle (not a prefix of it, so argparse cannot
    take it as an abbreviation)."""
    i = len(flag) // 2
    return flag[:i] + flag[i + 1] + flag[i] + flag[i + 2:]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_names_its_own_usage_and_the_closest_flag(command, capsys):
    flags = [f for f in visible_flags(subcommand_parser(build_parser(), command)) if f != "--help"]
    flag = max(flags, key=len)   # the longest: its typo is close to it alone
    err = _refused([command, *POSITIONAL.get(command, []), _typo(flag)], capsys)
    assert err.startswith(f"usage: jaxsel {command} "), err
    assert f"jaxsel {command}: error: unrecognized arguments: {_typo(flag)}; did you mean {flag}?" in err, err


def test_the_issues_typo(capsys):
    err = _refused(["train", "--stratgy", "selsync"], capsys)
    assert err.splitlines()[0].startswith("usage: jaxsel train")
    assert "error: unrecognized arguments: --stratgy selsync; did you mean --strategy?" in err, err


def test_a_mistyped_strategy_option_suggests_it_with_opt(capsys):
    err = _refused(["train", "--deltta", "0.2"], capsys)
    assert "did you mean --opt delta=0.2?" in err, err
    err = _refused(["compare", "--perid=8"], capsys)
    assert "did you mean --opt period=8?" in err, err


def test_nothing_close_is_the_error_alone(capsys):
    err = _refused(["train", "--zzzzzz"], capsys)
    assert err.rstrip().endswith("error: unrecognized arguments: --zzzzzz"), err


def test_a_typo_before_the_subcommand_gets_the_top_level_usage(capsys):
    err = _refused(["--hlep"], capsys)
    assert err.startswith("usage: jaxsel [-h]") and "did you mean --help?" in err, err


def test_a_mistyped_command_names_the_closest(capsys):
    err = _refused(["trian", "--steps", "5"], capsys)
    assert err.startswith("usage: jaxsel [-h] COMMAND ...")
    assert "jaxsel: error: argument COMMAND: invalid choice: 'trian'; did you mean 'train'? choose from compare, " \
           "frontier, calibrate, train" in err, err
