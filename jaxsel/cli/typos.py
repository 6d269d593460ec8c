"""A mistyped flag: the subcommand's usage and the flag it most likely meant (a mistyped
command: the closest command).

argparse leaves an unknown flag of a subcommand to the top-level parser, which prints the
top-level usage (`usage: jaxsel [-h] {compare,...}`) and "unrecognized arguments", no
hint. Here the subcommand's own parser reports it, with the closest of its visible flags
(`--stratgy` -> `--strategy`) or, for a command that takes strategy options, the closest
option a strategy declares (`--delt 0.2` -> `--opt delta=0.2`), read from the strategies'
source (cli/strategy_sources.py) so that a typo costs no JAX import. One line, exit 2.
"""
from __future__ import annotations

import argparse
import difflib


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """`parser.parse_args(argv)`, with an unknown argument reported by its subcommand's parser
    and a mistyped command with the closest one."""
    check_command(parser, argv)
    args, extras = parser.parse_known_args(argv)
    if extras:
        own = subcommand_parser(parser, getattr(args, "command", None)) or parser
        hint = suggestion(own, extras)
        own.error(f"unrecognized arguments: {' '.join(extras)}" + (f"; did you mean {hint}?" if hint else ""))
    return args


def check_command(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """A command that is none (`jaxsel trian`): one line naming the closest and every command."""
    commands = command_parsers(parser)
    given = next((a for a in argv if not a.startswith("-")), None)
    if given is None or given in commands:
        return
    close = difflib.get_close_matches(given, list(commands), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    parser.error(f"argument COMMAND: invalid choice: {given!r}; {hint}choose from {', '.join(commands)}")


def command_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands' parsers by name ({} for a parser without subcommands)."""
    return next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


def subcommand_parser(parser: argparse.ArgumentParser, command: str | None) -> argparse.ArgumentParser | None:
    """The parser of subcommand `command` (None when none was given)."""
    return command_parsers(parser).get(command)


def suggestion(parser: argparse.ArgumentParser, extras: list[str]) -> str | None:
    """What the first unknown flag of `extras` most likely meant, or None."""
    typed = next((e for e in extras if e.startswith("--")), None)
    if typed is None:
        return None
    name, _, value = typed.partition("=")
    candidates = {flag: flag for flag in visible_flags(parser)}
    if "--opt" in parser._option_string_actions:   # a strategy option typed as a flag of its own
        from .strategy_sources import all_option_names

        at = extras.index(typed) + 1
        following = extras[at] if at < len(extras) and not extras[at].startswith("-") else ""
        shown = value or following or "VALUE"
        for key in sorted(all_option_names()):
            candidates.setdefault("--" + key.replace("_", "-"), f"--opt {key}={shown}")
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return candidates[close[0]] if close else None


def visible_flags(parser: argparse.ArgumentParser) -> list[str]:
    """The long flags `--help` lists (hidden ones, such as last release's, left out)."""
    return [flag for action in parser._actions if action.help != argparse.SUPPRESS
            for flag in action.option_strings if flag.startswith("--")]
