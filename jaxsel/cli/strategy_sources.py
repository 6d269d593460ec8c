"""The built-in strategies read from their source files, not imported.

Importing `jaxsel.strategies` imports JAX (about 2 s on a laptop's CPU), and listing the
methods' names and summaries (`jaxsel strategies`) or suggesting an option for a mistyped
flag needs none of it: each method is a class under `@STRATEGIES.register("name")` in
jaxsel/strategies/, its summary the first sentence of its module's docstring (a module that
holds it alone) or else of its class's, as `strategies.catalog.summary` reads them from the
imported classes (tests/test_cli_help.py checks that both agree).
"""
from __future__ import annotations

import ast
from functools import cache
from pathlib import Path
from typing import NamedTuple

SOURCES = Path(__file__).resolve().parent.parent / "strategies"


class Declared(NamedTuple):
    """One registered strategy as its source declares it."""

    name: str
    summary: str
    fields: tuple[str, ...]   # the option names its class body declares (not its bases')


@cache
def declared() -> dict[str, Declared]:
    """name -> Declared, for every built-in strategy, sorted by name (as `STRATEGIES` lists them)."""
    found: dict[str, Declared] = {}
    for module in _modules():
        classes = {node.name: node for node in module.body if isinstance(node, ast.ClassDef)}
        registered = [(name, node) for node in classes.values() for name in _registered_names(node)]
        for name, node in registered:
            doc = ast.get_docstring(module) if len(registered) == 1 else None
            doc = doc or _class_doc(node, classes) or name
            found[name] = Declared(name, first_sentence(doc), _fields(node))
    return dict(sorted(found.items()))


def all_option_names() -> set[str]:
    """Every option a built-in strategy declares: its class's fields and its bases' (by name,
    across jaxsel/strategies/)."""
    classes = {node.name: node for module in _modules() for node in module.body if isinstance(node, ast.ClassDef)}
    names: set[str] = set()
    todo = [node for node in classes.values() if _registered_names(node)]
    while todo:
        node = todo.pop()
        names.update(_fields(node))
        todo += [classes[b.id] for b in node.bases if isinstance(b, ast.Name) and b.id in classes]
    return names


@cache
def _modules() -> tuple[ast.Module, ...]:
    """jaxsel/strategies/'s modules, parsed once for the listing and the flag suggestions."""
    return tuple(ast.parse(path.read_text(encoding="utf-8")) for path in sorted(SOURCES.glob("*.py")))


def first_sentence(doc: str) -> str:
    """A docstring's first sentence, on one line."""
    text = " ".join(doc.split())
    end = text.find(". ")
    return text if end < 0 else text[:end + 1]


def _registered_names(node: ast.ClassDef) -> list[str]:
    """The names of `@STRATEGIES.register("name")` decorators on a class."""
    return [d.args[0].value for d in node.decorator_list
            if isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "register"
            and isinstance(d.func.value, ast.Name) and d.func.value.id == "STRATEGIES"
            and d.args and isinstance(d.args[0], ast.Constant)]


def _class_doc(node: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> str | None:
    """A class's docstring, or (as `inspect.getdoc`) the first base's of this module that has one."""
    doc = ast.get_docstring(node)
    if doc:
        return doc
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            return _class_doc(classes[base.id], classes)
    return None


def _fields(node: ast.ClassDef) -> tuple[str, ...]:
    """The annotated fields of a class body, less ClassVars and private names."""
    return tuple(n.target.id for n in node.body
                 if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                 and not n.target.id.startswith("_") and "ClassVar" not in ast.unparse(n.annotation))
