"""`jaxsel strategies [NAME]`: the methods, one line each, or one method's options.

Everything printed is generated from the strategies' declarations (strategies/catalog.py):
a plugin's strategy (`--plugin`) is listed like a built-in one.
"""
from __future__ import annotations

import shutil
import textwrap

from .common import UsageError


def add_parser(sub) -> None:
    p = sub.add_parser("strategies", help="list the strategies, or one strategy's options (NAME)")
    p.add_argument("name", nargs="?", default=None, help="a strategy: its description and options")
    p.add_argument("--plugin", action="append", metavar="MODULE",
                   help="import MODULE (a name or a .py file) that registers strategies first")
    p.set_defaults(func=cmd_strategies)


def cmd_strategies(args) -> int:
    from ..strategies import STRATEGIES

    if args.name is None:
        print(listing())
        return 0
    if args.name not in STRATEGIES:
        raise UsageError(STRATEGIES.unknown(args.name))
    print(details(args.name))
    return 0


def _width() -> int:
    return max(60, min(120, shutil.get_terminal_size((100, 24)).columns))


def listing() -> str:
    """Each strategy and its summary, one line each (cut to the terminal)."""
    from ..strategies import STRATEGIES, catalog

    width = _width()
    names = max(map(len, STRATEGIES))
    lines = ["strategies (`jaxsel strategies NAME` lists one's options; set them in the entry, "
             "--strategy NAME:KEY=VALUE, or with --opt KEY=VALUE):"]
    for name in STRATEGIES:
        summary = textwrap.shorten(catalog.summary(name), width - names - 4, placeholder=" ...")
        lines.append(f"  {name:<{names}}  {summary}")
    return "\n".join(lines)


def details(name: str) -> str:
    """Strategy `name`: its description, then a table of its options (type, default, meaning)."""
    from ..strategies import catalog

    width = _width()
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
