"""What a newcomer reads first: `jaxsel --help` says what the command does, long lines are
wrapped to the terminal (80-120 columns), and `jaxsel strategies` lists the methods without
importing JAX (read from their source, the same summaries the imported classes give)."""
import subprocess
import sys

import pytest

from jaxsel.cli import main as cli_main
from jaxsel.cli.command import DESCRIPTION
from jaxsel.cli.common import terminal_width, wrapped
from jaxsel.cli.strategies import listing, summaries
from jaxsel.cli.strategy_sources import declared


def _help(argv, capsys) -> str:
    with pytest.raises(SystemExit) as info:
        cli_main([*argv, "--help"])
    assert info.value.code == 0
    return capsys.readouterr().out


def test_the_top_level_help_opens_with_what_the_command_does(capsys):
    out = _help([], capsys)
    opening = " ".join(out.split("\n\n")[1].split())
    assert opening == DESCRIPTION and "docstring" not in out and "its dispatch" not in out, out


@pytest.mark.parametrize("columns", [60, 100, 200])
@pytest.mark.parametrize("command", [[], ["train"], ["compare"], ["frontier"], ["calibrate"]])
def test_help_lines_fit_the_terminal_within_80_to_120_columns(command, columns, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(columns))
    out = _help(command, capsys)
    limit = max(80, min(120, columns))
    long = [line for line in out.splitlines() if len(line) > limit and " " in line.strip()]
    assert not long, long
    assert terminal_width() == limit


def test_train_help_opens_with_what_train_does(capsys):
    assert _help(["train"], capsys).split("\n\n")[1].startswith("Train one strategy on a task")


def test_a_long_task_line_is_wrapped_with_its_words_kept(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    text = "task: " + " ".join(f"word{i}" for i in range(60))
    lines = wrapped(text).splitlines()
    assert len(lines) > 1 and all(len(line) <= 80 for line in lines)
    assert all(line.startswith("  ") for line in lines[1:]) and " ".join(wrapped(text).split()) == text


def test_the_listing_s_header_is_wrapped(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert all(len(line) <= 80 for line in listing(summaries(imported=True)).splitlines())


def test_the_strategies_source_declares_what_the_imported_classes_say():
    """The JAX-free listing and the imported catalog agree name for name, word for word."""
    from jaxsel.strategies import STRATEGIES, catalog

    assert list(declared()) == list(STRATEGIES)
    assert {name: d.summary for name, d in declared().items()} == {n: catalog.summary(n) for n in STRATEGIES}


def test_listing_the_strategies_imports_no_jax():
    """`jaxsel strategies` took 1.9-2.1 s, most of it importing JAX to read summaries."""
    code = ("import sys; from jaxsel.cli import main; code = main(['strategies']); "
            "print(code, sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'flax', 'optax')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "0 []", done.stdout[-500:] + done.stderr[-2000:]
    assert "  selsync          SelSync: synchronize only when" in done.stdout
