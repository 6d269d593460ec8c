"""Issue 59, items 4 and 6: every registered strategy is whole. Its constructor is its
dataclass's own, so `inspect.signature`, `help()` and editors list its fields with their
defaults; and it has a golden case (tests/golden/), an entry in docs/STRATEGIES.md and its
place in the public API (`jaxsel.__all__`, `_EXPORTS` and the names static tools read). A
new strategy that misses one fails here, naming it; one whose module the package does not
import fails tests/test_cli_help.py (its source's registrations against `STRATEGIES`)."""
import ast
import dataclasses
import inspect
import pydoc
import re
import warnings
from pathlib import Path

import pytest

import jaxsel
from jaxsel.compat.renamed_options import REMOVED_IN, RenamedOptionWarning
from jaxsel.core.options import option_names
from jaxsel.core.sync import Strategy
from jaxsel.strategies import STRATEGIES

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jaxsel"
#: the strategies jaxsel ships (a test's plugin registered in this process is not one)
BUILT_IN = {name: cls for name, cls in STRATEGIES.items() if cls.__module__.startswith("jaxsel.strategies.")}


def field_defaults(cls) -> dict:
    """Each init field's default as the dataclass declares it (a factory's: MISSING)."""
    return {f.name: f.default for f in dataclasses.fields(cls) if f.init}


def type_checking_imports() -> dict[str, str]:
    """The names jaxsel/__init__.py imports under `if TYPE_CHECKING:` (what editors and type
    checkers see), name -> the module, as `_EXPORTS` spells it."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", None) == "TYPE_CHECKING")
    return {alias.asname or alias.name: (node.module or "").lstrip(".")
            for node in ast.walk(block) if isinstance(node, ast.ImportFrom) and node.level
            for alias in node.names}


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_the_signature_lists_every_field_with_its_default(name):
    """inspect.signature, and so help() and an editor's call tip, show the options in the
    constructor's order with the dataclass's defaults, not `(*args, **kwargs)`."""
    cls = BUILT_IN[name]
    params = inspect.signature(cls).parameters
    assert list(params) == option_names(cls), f"{name}: {inspect.signature(cls)}"
    for field, default in field_defaults(cls).items():
        shown = params[field].default
        assert shown is not inspect.Parameter.empty, f"{name}.{field} shows no default"
        if default is not dataclasses.MISSING:
            assert shown == default, f"{name}.{field}: shows {shown!r}, declares {default!r}"
    assert inspect.unwrap(cls.__init__).__qualname__ == f"{cls.__qualname__}.__init__"   # the dataclass's own
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    assert all(str(p) in text for p in params.values()), f"help({cls.__name__}) lacks a field"


def test_no_metaclass_call_stands_in_front_of_the_constructor():
    """A metaclass `__call__` is what hid every field (tools read it before `__init__`)."""
    assert type(Strategy).__call__ is type.__call__
    assert str(inspect.signature(jaxsel.SelSync)).startswith(
        "(delta: 'float' = 0.3, window: 'int' = 25, alpha: 'float' = 0.01, statistic: 'str' = 'raw'")


@pytest.mark.parametrize("name", sorted(n for n, c in BUILT_IN.items() if c.aliases))
def test_a_renamed_option_is_read_from_python_for_one_release_and_not_shown(name):
    """`@renamed(old="new")` keeps last release's keyword working, warned once, without
    putting it into the signature; the release that drops it is named."""
    cls = BUILT_IN[name]
    assert not set(cls.aliases) & set(inspect.signature(cls).parameters)
    assert re.fullmatch(r"\d+\.\d+\.\d+", REMOVED_IN) and REMOVED_IN != jaxsel.__version__
    for old, new in cls.aliases.items():
        value = field_defaults(cls)[new]
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            assert cls(**{old: value}) == cls()
        assert [w.category for w in record] == [RenamedOptionWarning]
        assert record[0].filename == __file__   # the warning names the caller's line


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_every_strategy_has_a_golden_case_a_docs_entry_and_its_place_in_the_api(name):
    cls = BUILT_IN[name]
    assert (ROOT / "tests" / "golden" / f"{name}.json").is_file(), f"{name}: no golden case (docs/ARCHITECTURE.md §5)"
    docs = (ROOT / "docs" / "STRATEGIES.md").read_text()
    assert re.search(rf"`{name}[`:]|--strategy {name}\b", docs), f"{name}: no entry in docs/STRATEGIES.md"
    public = cls.__name__
    assert public in jaxsel.__all__ and getattr(jaxsel, public) is cls, f"{public} is not in jaxsel's API"
    assert getattr(jaxsel.strategies, public) is cls
    assert type_checking_imports().get(public) == "strategies", f"{public}: editors do not see jaxsel.{public}"


def test_the_two_lists_of_the_public_api_agree():
    """jaxsel/__init__.py names each public name twice, in `_EXPORTS` (run time, imported on
    first use) and under `if TYPE_CHECKING:` (static tools): one list without the other
    is an editor that cannot find a name, or a name that fails at run time."""
    from jaxsel import _EXPORTS, _SUBMODULES

    static = type_checking_imports()
    assert {n: static.get(n) for n in _EXPORTS} == _EXPORTS
    assert {n: f"{static.get(n)}.{n}" for n in _SUBMODULES} == _SUBMODULES   # `from .core import sync`
    assert set(static) == set(_EXPORTS) | set(_SUBMODULES)
