"""The suite's two tiers: the whole suite (README's test command, CI) and the fast tier,
`python -m pytest -q -n 2 -m "not slow"`. `slow` marks end-to-end runs of whole processes
(the newcomer's commands, multi-host runs, experiment scripts and whole commands, runs
stopped and resumed, the CLI in a subprocess) and the layout matrices (marked `layouts` as
well: every packed layout of a case, whose 8-device run the fast tier keeps), never another
unit check, and the fast tier keeps a test of every jaxsel module that has one.

Read from the tests' source, per test: the jaxsel modules it names (`jaxsel.X`, what it
imports, `"-m", "jaxsel.cli"`), through the test file's own functions, fixtures and
constants and the local helpers it imports (helpers.py, run_hooks.py, reference/,
conftest.py's fixtures), each name resolved to the module that defines it. A module reached
only through another module's code counts for that other module, not for itself.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import jaxsel

TESTS = Path(__file__).parent
PACKAGE = Path(jaxsel.__file__).parent
#: a slow test calls one of these (or a fixture of its file does): it starts another process...
PROCESS_CALLS = {"subprocess.run", "subprocess.Popen", "subprocess.check_output", "subprocess.check_call"}
#: ... or runs a whole command or script end to end: the CLI's or an experiment script's `main`
WHOLE_RUN = "main"
#: ... or stops a training run and resumes it (a call with resume=True)
RESUMED = "resume"


def is_module(name: str) -> bool:
    path = PACKAGE.parent / name.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def jaxsel_modules() -> set[str]:
    def name(path: Path) -> str:
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return {name(path) for path in PACKAGE.rglob("*.py")}


def module_path(module: str) -> Path:
    path = PACKAGE.parent / module.replace(".", "/")
    return path / "__init__.py" if (path / "__init__.py").is_file() else path.with_suffix(".py")


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


@functools.cache
def origins(module: str) -> dict[str, tuple[str, str]]:
    """name -> (module, name) it is imported from, for each `from M import name` anywhere
    in `module`'s source (jaxsel's package imports its exports lazily and names them again
    for static tools)."""
    here = module if module_path(module).name == "__init__.py" else module.rpartition(".")[0]
    out = {}
    for node in ast.walk(parsed(module_path(module))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = here.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            out.update({alias.asname or alias.name: (base, alias.name) for alias in node.names})
    return out


@functools.cache
def defined_in(module: str, name: str) -> str:
    """Where `module`'s attribute `name` comes from: "MODULE.NAME" when the module defines
    it, else what it imports (a module, or a name defined further on)."""
    defined = {node.name for node in parsed(module_path(module)).body
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    base, original = origins(module).get(name, ("", ""))
    if name in defined or not base.startswith("jaxsel"):
        return f"{module}.{name}"
    full = f"{base}.{original}"
    return full if is_module(full) else defined_in(base, original)


@functools.cache
def owner(dotted: str) -> str | None:
    """The jaxsel module that defines what `dotted` (e.g. "jaxsel.data_mesh") names."""
    parts = dotted.split(".")
    if parts[0] != "jaxsel":
        return None
    module, i = "jaxsel", 1
    while i < len(parts) and is_module(f"{module}.{parts[i]}"):
        module, i = f"{module}.{parts[i]}", i + 1
    if i == len(parts):
        return module
    found = defined_in(module, parts[i])
    return module if found == f"{module}.{parts[i]}" else owner(".".join([found, *parts[i + 1:]]))


def dotted_name(node: ast.AST) -> str | None:
    """"a.b.c" for the expression a.b.c."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


class Source:
    """One Python file of the tests: its top-level definitions and what its imports bind."""

    def __init__(self, path: Path):
        self.path, self.tree = path, parsed(path)
        self.defs: dict[str, ast.AST] = {}
        self.aliases: dict[str, str] = {}   # name -> "jaxsel.x.y" or "local:FILE:NAME"
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defs[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            self.defs[name.id] = node
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    local = local_source(node.module)
                    self.aliases[a.asname or a.name] = (f"local:{local}:{a.name}" if local
                                                        else f"{node.module}.{a.name}")

    @functools.cached_property
    def fixtures(self) -> set[str]:
        return {name for name, node in self.defs.items() if isinstance(node, ast.FunctionDef)
                and any("fixture" in ast.unparse(d) for d in node.decorator_list)}


def local_source(module: str) -> str | None:
    """The tests' own file behind `module` (helpers, run_hooks, reference.x), if any."""
    path = TESTS / module.replace(".", "/")
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return str(candidate)
    return None


@functools.cache
def source(path: str) -> Source:
    return Source(Path(path))


CONFTEST = str(TESTS / "conftest.py")


@functools.cache
def names(path: str, name: str) -> tuple[frozenset, frozenset]:
    """What one top-level definition of a test file names itself: (jaxsel modules, the
    definitions it uses: its file's, local helpers', the fixtures its parameters name)."""
    src = source(path)
    node = src.defs[name]
    modules, uses = set(), set()
    inner = {id(n.value) for n in ast.walk(node) if isinstance(n, ast.Attribute)}   # a.b of a.b.c
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value.startswith("jaxsel.") \
                and is_module(sub.value):
            modules.add(sub.value)
        elif isinstance(sub, ast.arg):
            uses |= {(where, sub.arg) for where in (path, CONFTEST) if sub.arg in source(where).fixtures}
        elif isinstance(sub, (ast.Name, ast.Attribute)) and id(sub) not in inner and dotted_name(sub):
            head, _, rest = dotted_name(sub).partition(".")
            target = src.aliases.get(head, "")
            if target.startswith("local:"):
                _, where, defined = target.split(":")
                uses |= {(where, defined)} if defined in source(where).defs else set()
            elif target:
                modules |= {owner(".".join(filter(None, [target, rest])))} - {None}
            elif head in src.defs and head != name:
                uses.add((path, head))
    return frozenset(modules), frozenset(uses)


def reach(*roots: tuple[str, str]) -> set[str]:
    """The jaxsel modules `roots` name, directly or through the definitions they use."""
    modules, todo, seen = set(), list(roots), set()
    while todo:
        ref = todo.pop()
        if ref not in seen:
            seen.add(ref)
            found, uses = names(*ref)
            modules |= found
            todo.extend(uses)
    return modules


def is_slow(src: Source, test: ast.FunctionDef) -> bool:
    marks = [ast.unparse(d) for d in test.decorator_list]
    file_marks = ast.unparse(src.defs["pytestmark"]) if "pytestmark" in src.defs else ""
    return any(m.startswith("pytest.mark.slow") for m in marks) or "pytest.mark.slow" in file_marks


def suite_tests():
    """(file name, test name, source, node) of every test in the suite."""
    for path in sorted(TESTS.rglob("test_*.py")):
        src = source(str(path))
        for name, node in src.defs.items():
            if name.startswith("test_") and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield str(path.relative_to(TESTS)), name, src, node


@functools.cache
def tiers() -> dict[str, dict[str, set[str]]]:
    """jaxsel module -> {"fast": tests naming it, "slow": tests naming it}."""
    out = {m: {"fast": set(), "slow": set()} for m in jaxsel_modules()}
    for file, name, src, node in suite_tests():
        autouse = [(where, f) for where in (str(src.path), CONFTEST) for f in source(where).fixtures
                   if "autouse=True" in ast.unparse(source(where).defs[f])]
        for module in reach((str(src.path), name), *autouse) & set(out):
            out[module]["slow" if is_slow(src, node) else "fast"].add(f"{file}::{name}")
    return out


@pytest.fixture(scope="module")
def by_module():
    """tiers(), read once: a module-scoped fixture also keeps these tests on one xdist worker."""
    return tiers()


def test_the_fast_tier_keeps_a_test_of_every_module_that_has_one(by_module):
    only_slow = {m: sorted(t["slow"]) for m, t in by_module.items() if t["slow"] and not t["fast"]}
    assert not only_slow, f"modules whose every test is marked slow: {only_slow}"


def test_most_modules_are_named_by_a_test_of_their_own(by_module):
    """The check above is not empty: a test names most modules directly (the rest are
    reached through their callers: a package's __init__, the CLI's parts, ...)."""
    named = {m for m, t in by_module.items() if t["fast"]}
    assert len(named) >= 2 / 3 * len(jaxsel_modules()), sorted(set(jaxsel_modules()) - named)


def end_to_end(nodes, defs: dict | None = None, seen: set | None = None, aliases: dict | None = None) -> bool:
    """Whether the code starts a process, runs a command's main, or resumes a run, itself
    or through the module's own functions it calls (`defs`); `aliases`: the file's imported
    names (`from jaxsel.cli import main as cli_main` runs a command's main too)."""
    defs, seen, aliases = defs or {}, seen if seen is not None else set(), aliases or {}
    calls = [n for node in nodes for n in ast.walk(node) if isinstance(n, ast.Call)]
    called = {dotted_name(c.func) or "" for c in calls}
    if bool(called & PROCESS_CALLS) or any(aliases.get(n, n).rpartition(".")[2] == WHOLE_RUN for n in called) or any(
            k.arg == RESUMED and isinstance(k.value, ast.Constant) and k.value.value is True
            for c in calls for k in c.keywords):
        return True
    helpers = [n for n in called if isinstance(defs.get(n), ast.FunctionDef) and n not in seen]
    seen.update(helpers)
    return bool(helpers) and end_to_end([defs[n] for n in helpers], defs, seen, aliases)


def is_layout_matrix(test: ast.FunctionDef) -> bool:
    """Marked `layouts`: a matrix of every packed layout, slow without being end to end."""
    return any(ast.unparse(d).startswith("pytest.mark.layouts") for d in test.decorator_list)


def test_only_end_to_end_process_tests_and_layout_matrices_are_slow():
    for file, name, src, node in suite_tests():
        if is_layout_matrix(node):
            assert is_slow(src, node), f"{file}::{name} is marked layouts but not slow: the fast tier would run it"
        elif is_slow(src, node):
            fixtures = [src.defs[a.arg] for a in node.args.args if a.arg in src.fixtures]
            assert end_to_end([node, *fixtures], src.defs, aliases=src.aliases), \
                f"{file}::{name} is marked slow but starts no process, runs no command's main, resumes no run"


@pytest.mark.parametrize("reference, module", [
    ("jaxsel.data_mesh", "jaxsel.core.parallel"),
    ("jaxsel.strategies.build_strategy", "jaxsel.strategies.build"),
    ("jaxsel.triggers.Trigger", "jaxsel.core.triggers"),
    ("jaxsel.core.parallel.AXIS", "jaxsel.core.parallel"),
    ("jaxsel.training", "jaxsel.training"),
])
def test_a_name_is_credited_to_the_module_that_defines_it(reference, module):
    assert owner(reference) == module


def test_a_test_is_credited_through_its_fixtures_functions_and_conftest(tmp_path):
    path = tmp_path / "test_example.py"
    path.write_text(
        "import pytest\nimport jaxsel\nfrom jaxsel.core.step import make_train_step\n\n"
        "@pytest.fixture\ndef state():\n    return helper()\n\n"
        "def helper():\n    return jaxsel.init_state\n\n"
        "def test_it(state, mesh):\n    assert make_train_step\n\n"
        "def test_other():\n    assert jaxsel.collectives\n")
    assert reach((str(path), "test_it")) == {"jaxsel.core.step", "jaxsel.core.state", "jaxsel.core.parallel"}
    assert reach((str(path), "test_other")) == {"jaxsel.core.collectives"}


def test_a_command_s_main_counts_as_end_to_end_under_any_name(tmp_path):
    path = tmp_path / "test_example.py"
    path.write_text(
        "from jaxsel.cli import main as cli_main\nfrom jaxsel.cli import main\n\n"
        "def run(argv):\n    return cli_main(argv)\n\n"
        "def test_aliased():\n    assert run(['train']) == 0\n\n"
        "def test_plain():\n    assert main(['train']) == 0\n\n"
        "def test_unit():\n    assert sorted([2, 1]) == [1, 2]\n")
    src = Source(path)
    verdict = {name: end_to_end([src.defs[name]], src.defs, aliases=src.aliases)
               for name in ("test_aliased", "test_plain", "test_unit")}
    assert verdict == {"test_aliased": True, "test_plain": True, "test_unit": False}
