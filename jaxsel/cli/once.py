"""An option given twice is refused, not silently settled by its last value.

`jaxsel train --lr 0.1 ... --lr 0.2` is a typo or a pasted command line, and which value
was meant cannot be known (argparse keeps the last one). Every single-valued option of
every command (`--x VALUE`, a switch, `--x/--no-x`, an option with aliases) becomes a
subclass of its own action that remembers the namespace it last stored into: a second
store into the same parse is an `argparse.ArgumentError`, which argparse reports as its
other usage errors (the usage, one line naming the option, exit code 2). Options meant to
repeat (`--opt`, `--plugin`, `--partition-opt`, `--dataset-opt`: append actions) repeat.
"""
from __future__ import annotations

import argparse

#: actions that take a value more than once by design, or are no option at all
REPEATABLE = (argparse._AppendAction, argparse._AppendConstAction, argparse._CountAction, argparse._HelpAction,
              argparse._VersionAction, argparse._SubParsersAction)

_ONCE: dict[type, type] = {}


def refuse_repeats(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`parser` (and its sub-commands' parsers) with every single-valued option given once."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):   # aliases share a parser
                refuse_repeats(sub)
        elif action.option_strings and not isinstance(action, REPEATABLE):
            action.__class__ = _once(type(action))
    return parser


def _once(cls: type) -> type:
    """`cls` that refuses a second value within one parse."""
    if cls not in _ONCE:
        def __call__(self, parser, namespace, values, option_string=None):
            if getattr(self, "stored_into", None) is namespace:   # the same parse: a repeat
                raise argparse.ArgumentError(self, f"given twice ({_said(self.first, self.first_values)} and "
                                                   f"{_said(option_string, values)}); give it once")
            self.stored_into, self.first, self.first_values = namespace, option_string, values
            cls.__call__(self, parser, namespace, values, option_string)

        _ONCE[cls] = type(f"Once{cls.__name__}", (cls,), {"__call__": __call__})
    return _ONCE[cls]


def _said(option: str | None, values) -> str:
    return f"{option} {values}" if values not in (None, [], ()) else str(option)
