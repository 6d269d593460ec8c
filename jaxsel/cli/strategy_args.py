"""The command line's strategy section: `--opt`, `--plugin`, and a strategy's entry.

A strategy's options go in its entry, `NAME:KEY=VALUE[:KEY=VALUE...]` (train's
`--strategy`, each of compare's `--strategies`), or in `--opt KEY=VALUE` (train: the
strategy's; compare and frontier: defaults for every entry that takes them). No strategy
option is a flag of its own (`jaxsel strategies NAME` lists a method's options, from its
declaration); the last release's flags still work, noted (`deprecated.py`). This module
declares the flags; `settings_args` reads them into the run's settings (an option set
twice, in the entry and by `--opt`, is an error naming both). `--plugin MODULE` imports
user code that calls `jaxsel.register_strategy`, `register_trigger` or
`register_aggregator` before anything reads a strategy's name.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from ..core.options import OptionError
from .deprecated import add_old_strategy_flags


def add_strategy_args(group) -> None:
    """--opt and --plugin in the strategy section `group` (and the old flags, hidden)."""
    group.add_argument("--opt", action="append", metavar="KEY=VALUE",
                       help="a strategy option (repeatable); trigger.FIELD=VALUE for 'triggered', "
                            "inner.FIELD=VALUE / outer.FIELD=VALUE for the levels of 'hierarchical'")
    group.add_argument("--plugin", action="append", metavar="MODULE",
                       help="import MODULE (a name or a .py file) that registers strategies, triggers or aggregators")
    add_old_strategy_flags(group)


def load_plugins(argv: list[str]) -> None:
    """Import every `--plugin MODULE` of `argv` (before anything reads a strategy's name)."""
    for i, arg in enumerate(argv):
        if arg == "--plugin" and i + 1 < len(argv):
            _import(argv[i + 1])
        elif arg.startswith("--plugin="):
            _import(arg.split("=", 1)[1])


def _import(spec: str) -> None:
    """Import one plugin; whatever goes wrong in it is one line naming the plugin and the
    error's first line (the plugin's own traceback is the author's business)."""
    if not spec.strip():
        raise OptionError("--plugin needs a module name or a .py file, got ''")
    path = Path(spec)
    if spec.endswith(".py") and not path.is_file():
        raise OptionError(f"--plugin {spec!r}: no such file")
    try:
        if spec.endswith(".py"):
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[path.stem] = module
            module_spec.loader.exec_module(module)
        else:
            importlib.import_module(spec)
    except ImportError as err:
        raise OptionError(f"--plugin {spec!r} could not be imported ({err})") from None
    except Exception as err:  # noqa: BLE001 - a plugin may raise anything while it loads
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise OptionError(f"--plugin {spec!r} failed while loading: {type(err).__name__}"
                          + (f": {first}" if first else "")) from None
