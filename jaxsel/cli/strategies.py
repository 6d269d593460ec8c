"""`jaxsel strategies [NAME]`: the methods, one line each, or one method's options.

Everything printed is generated from the strategies' declarations (strategies/catalog.py):
a plugin's strategy (`--plugin`) is listed like a built-in one. The list of built-in ones
alone is read from their source (cli/strategy_sources.py): importing them imports JAX,
which took the listing from 0.3 to 2 s.
"""
from __future__ import annotations

import sys
import textwrap

from .common import UsageError, terminal_width, wrapped


def add_parser(sub) -> None:
    p = sub.add_parser("strategies", help="list the strategies, or one strategy's options (NAME)")
    p.add_argument("name", nargs="?", default=None, help="a strategy: its description and options")
    p.add_argument("--plugin", action="append", metavar="MODULE",
                   help="import MODULE (a name or a .py file) that registers strategies first")
    p.set_defaults(func=cmd_strategies)


def cmd_strategies(args) -> int:
    if args.name is None:
        print(listing(summaries(imported=bool(args.plugin))))
        return 0
    from ..strategies import STRATEGIES

    if args.name not in STRATEGIES:
        raise UsageError(STRATEGIES.unknown(args.name))
    print(details(args.name))
    return 0


def summaries(imported: bool) -> dict[str, str]:
    """Each registered strategy's summary, by name: read from the built-in ones' source, or
    from the imported classes where a plugin may have registered more (`imported`)."""
    if not imported and "jaxsel.strategies" not in sys.modules:
        from .strategy_sources import declared

        return {name: d.summary for name, d in declared().items()}
    from ..strategies import STRATEGIES, catalog

    return {name: catalog.summary(name) for name in STRATEGIES}


def listing(summary_of: dict[str, str]) -> str:
    """Each strategy and its summary, one line each (cut to the terminal)."""
    width = terminal_width()
    names = max(map(len, summary_of))
    lines = [wrapped("strategies (`jaxsel strategies NAME` lists one's options; set them in the entry, "
                     "--strategy NAME:KEY=VALUE, or with --opt KEY=VALUE):")]
    for name, summary in summary_of.items():
        lines.append(f"  {name:<{names}}  {textwrap.shorten(summary, width - names - 4, placeholder=' ...')}")
    return "\n".join(lines)


def details(name: str) -> str:
    """Strategy `name`: its description, then a table of its options (type, default, meaning)."""
    from ..strategies import catalog

    width = terminal_width()
    text = [f"{name}: {catalog.summary(name)}", ""]
    text += [textwrap.fill(par, width) for par in catalog.description(name).split("\n\n")]
    options = catalog.options(name)
    text += ["", f"options (--strategy {name}:KEY=VALUE[:KEY=VALUE...], or --opt KEY=VALUE):"]
    if not options:
        text.append("  (none)")
    key = max([len(o.name) for o in options] + [4])
    kind = max([len(o.kind) for o in options] + [4])
    default = max([len(_shown(o.default)) for o in options] + [7])
    indent = 2 + key + 2 + kind + 2 + default + 2
    for o in options:
        head = f"  {o.name:<{key}}  {o.kind:<{kind}}  {_shown(o.default):<{default}}  "
        body = textwrap.wrap(o.meaning, max(30, width - indent)) or [""]
        text.append(head + body[0])
        text += [" " * indent + line for line in body[1:]]
    aliases = catalog.aliases(name)
    if aliases:
        text.append("deprecated (read for one more release): " + ", ".join(f"{old}, now {new}"
                                                                            for old, new in aliases.items()))
    return "\n".join(text)


def _shown(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{}" if not value else str(value)
    return str(value)
