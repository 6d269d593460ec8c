"""The command line's strategy flags, help text and plugins.

The flags are generated from the registered strategies' options (their dataclass fields):
one per option name, its help naming the strategies that take it; `--opt KEY=VALUE`
reaches any option, and alone those whose name a command flag has. A flag no chosen
strategy takes is an error naming the valid options, never dropped.
`--plugin MODULE` imports user code that calls `jaxsel.register_strategy`,
`register_trigger` or `register_aggregator` before the options are read.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, NamedTuple

from ..core.options import (OptionError, allowed_types, option_defaults, option_names, parse_kv, parse_value,
                            type_hints)
from ..training.declare import flag_name


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Every flag's default in its help line (unless its help says it in words: "(default
    all)"); the epilog's strategy list kept as written."""

    def _get_help_string(self, action):
        return action.help if "(default" in (action.help or "") else super()._get_help_string(action)


class StrategyFlag(NamedTuple):
    """One strategy option as a flag: the strategies that take it and how its text is read."""

    takers: tuple[str, ...]
    read: Any   # argparse `type`: int, float, parse_value (bool, mixed types) or None (text)


def strategy_flags() -> dict[str, StrategyFlag]:
    """Every registered strategy's options (and their aliases, e.g. --period for DiLoCo's
    inner_steps) by name, the union over the strategies in registration order; tables
    (`*_options`) are left out: `--opt PREFIX.FIELD=VALUE` sets their fields."""
    from ..strategies import STRATEGIES

    types: dict[str, dict[str, Any]] = {}
    for strategy, cls in STRATEGIES.items():
        hints, aliases = type_hints(cls), getattr(cls, "aliases", {})
        for name in [*option_names(cls), *aliases]:
            types.setdefault(name, {})[strategy] = hints.get(aliases.get(name, name), Any)
    return {name: StrategyFlag(tuple(by), _reader(list(by.values()))) for name, by in types.items()
            if not name.endswith("_options")}


def _reader(hints: list) -> Any:
    """One argparse type for a name every taker declares alike; text for words and `Any`
    (aggregator, trigger, levels), `--opt`'s reading (`parse_value`) otherwise."""
    kinds = {tuple(allowed_types(h)[0]) for h in hints}
    if len(kinds) == 1:
        (kind,) = kinds
        if kind in ((int,), (float,)):
            return kind[0]
        if kind in ((str,), ()):
            return None
    return parse_value


def add_strategy_args(p: argparse.ArgumentParser) -> None:
    """The strategy flags (`strategy_flags`; dest `strategy.NAME`), --opt and --plugin, added
    after the command's own flags: an option whose flag the command already has (e.g. the
    optimizer's --momentum, the run's --seed) is reached with `--opt NAME=VALUE` only."""
    flags = strategy_flags()
    opt_only = sorted(n for n in flags if flag_name(n) in p._option_string_actions)
    s = p.add_argument_group("strategy options (a flag no chosen strategy takes is an error; defaults: each "
                             f"strategy's own, listed below; --opt only: {', '.join(opt_only) or 'none'})")
    for name, flag in flags.items():
        if name not in opt_only:
            s.add_argument(flag_name(name), dest=f"strategy.{name}", type=flag.read, default=None, metavar=name.upper(),
                           help=f"taken by {', '.join(flag.takers)} (default: each one's own)")
    s.add_argument("--opt", action="append", metavar="KEY=VALUE",
                   help="any other strategy option; trigger.FIELD=VALUE for the 'triggered' strategy, "
                        "inner.FIELD=VALUE / outer.FIELD=VALUE for the levels of 'hierarchical'")
    s.add_argument("--plugin", action="append", metavar="MODULE",
                   help="import MODULE (a name or a .py file) that registers strategies, triggers or aggregators")


def strategy_epilog() -> str:
    """Each strategy's options with their defaults, for `--help`."""
    from ..strategies import STRATEGIES

    lines = ["strategies and their options (defaults):"]
    width = max(map(len, STRATEGIES))
    for name, cls in STRATEGIES.items():
        opts = ", ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}"
                         for k, v in option_defaults(cls).items() if not k.endswith("_options"))
        lines.append(f"  {name:<{width}}  {opts or '(no options)'}")
    lines.append("compress (payload codecs): none, bf16, int8, topk:F (the ceil(F*size) largest entries, "
                 "0 < F <= 1), sign (1 bit per entry and a scale); topk and sign keep what they did not "
                 "send as a residual for the next sync unless error_feedback=False")
    return "\n".join(lines)


def options_from_args(args) -> dict:
    """The strategy options the user set (flags and --opt), unfiltered."""
    flags = {k.partition(".")[2]: v for k, v in vars(args).items() if k.startswith("strategy.") and v is not None}
    opts = parse_kv(getattr(args, "opt", None))
    both = sorted(set(flags) & set(opts))
    if both:
        key = both[0]
        raise OptionError(f"{flag_name(key)} {flags[key]} and --opt {key}={opts[key]} both set {key}; give it once")
    return {**flags, **opts}


def load_plugins(argv: list[str]) -> None:
    """Import every `--plugin MODULE` of `argv` (before the parser lists the strategies)."""
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
