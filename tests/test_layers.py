"""The house's rules, read from the source (no JAX needed): imports only go down the layers,
the registry is a leaf, no import cycle, and no conditional but the sync core's.

Every `import` / `from ... import` anywhere in a module counts (inside functions and
`if TYPE_CHECKING:` blocks too), relative or absolute, aliased or not, and so does
`importlib.import_module("jaxsel...")`.
"""
import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

import jaxsel

PACKAGE = Path(jaxsel.__file__).parent
#: package -> the packages below it, the only ones it may import
BELOW = {
    "core": set(),
    "compat": {"core"},
    "models": {"core"},
    "data": {"core"},
    "strategies": {"core", "compat"},
    "costmodel": {"core", "strategies"},
    "training": {"core", "compat", "models", "data", "strategies", "costmodel"},
    "analysis": {"core", "compat", "models", "data", "strategies", "costmodel", "training"},
    "cli": {"core", "compat", "models", "data", "strategies", "costmodel", "training", "analysis"},
}
#: upward imports that remain until their redesign: (importer, imported) -> why
PENDING_LEAKS: dict = {}
#: modules that import nothing of jaxsel's
LEAVES = {"jaxsel.core.registry"}
#: the only functions that may build a conditional: module -> function names
CONDS_ALLOWED = {"jaxsel.core.sync": {"sync_where", "local_cond"}}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    path = PACKAGE.parent / name.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported(tree: ast.AST, name: str, is_package: bool) -> set[str]:
    """The jaxsel modules a module imports anywhere in its source (a `from M import X`
    counts as importing M.X where that is a module, else M)."""
    here = name if is_package else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = here.split(".")[: len(here.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            out |= {f"{base}.{a.name}" if is_module(f"{base}.{a.name}") else base for a in node.names}
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant)):
            target = node.args[0].value
            if isinstance(target, str) and target.startswith("."):
                target = f"{here}{target}"
            out.add(target)
    return {m for m in out if m == "jaxsel" or m.startswith("jaxsel.")}


@functools.cache
def graph() -> dict[str, set[str]]:
    """Every module's jaxsel imports, parsed once per process when a test first asks (not
    at collection: every xdist worker collects this file, and parsing the package's
    sources took about a second of each worker's start)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        out[name] = imported(ast.parse(path.read_text()), name, path.name == "__init__.py") - {name}
    return out


def layer(module: str) -> str | None:
    """The package of a module (None: the top-level `jaxsel` facade)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_module_lives_in_a_layer():
    flat = sorted(m for m in graph() if m != "jaxsel" and layer(m) not in BELOW)
    assert not flat, f"modules outside the layers {sorted(BELOW)}: {flat}"


def test_imports_only_go_down():
    """No module imports a package above (or beside) its own, nor the `jaxsel` facade."""
    leaks = {(m, d) for m, deps in graph().items() if m != "jaxsel" for d in deps
             if layer(d) != layer(m) and layer(d) not in BELOW[layer(m)]}
    assert leaks - set(PENDING_LEAKS) == set(), f"upward imports: {sorted(leaks - set(PENDING_LEAKS))}"
    assert set(PENDING_LEAKS) <= leaks, f"fixed, drop from PENDING_LEAKS: {sorted(set(PENDING_LEAKS) - leaks)}"


def test_the_registry_is_a_leaf():
    for leaf in LEAVES:
        assert not graph()[leaf], f"{leaf} imports {sorted(graph()[leaf])}"


def test_no_import_cycle():
    """No module reaches itself through imports (a package's `__init__` counts as a module)."""
    def reach(start):
        seen, todo = set(), [start]
        while todo:
            for d in graph().get(todo.pop(), ()):
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        return seen

    cyclic = sorted(m for m in graph() if m in reach(m) and m != "jaxsel")
    assert not cyclic, f"modules on an import cycle: {cyclic}"


def test_the_layer_check_sees_every_form_of_import():
    """Guard on the guard: function-level, relative, aliased and importlib imports all count."""
    src = """
import jaxsel.training.run as run
def f():
    from ..analysis import report
    from ..cli.command import main
    import importlib
    importlib.import_module("jaxsel.costmodel")
"""
    got = imported(ast.parse(src), "jaxsel.core.step", False)
    assert got == {"jaxsel.training.run", "jaxsel.analysis.report", "jaxsel.cli.command", "jaxsel.costmodel"}


# ------------------------------------------------------------------ the no-stray-cond guard

def stray_conds(tree: ast.AST) -> list[tuple[int, str | None]]:
    """(line, enclosing function) of every `cond`/`switch` of `jax.lax` however it is spelled:
    `lax.cond`, `jax.lax.switch`, `from jax.lax import cond [as c]`, `import jax.lax as L; L.cond`,
    `from jax import lax as L`, `L = jax.lax`."""
    lax_names, jax_names, found = set(), set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "jax.lax" and a.asname:
                    lax_names.add(a.asname)
                elif a.name in ("jax", "jax.lax"):
                    jax_names.add(a.asname or "jax")
        elif isinstance(node, ast.ImportFrom) and node.module == "jax":
            lax_names |= {a.asname or a.name for a in node.names if a.name == "lax"}
        elif isinstance(node, ast.ImportFrom) and node.module == "jax.lax":
            found += [(node.lineno, None) for a in node.names if a.name in ("cond", "switch", "*")]
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute) and node.value.attr == "lax":
            lax_names |= {t.id for t in node.targets if isinstance(t, ast.Name)}   # L = jax.lax

    def is_lax(value):
        return (isinstance(value, ast.Name) and value.id in lax_names) or (
            isinstance(value, ast.Attribute) and value.attr == "lax" and isinstance(value.value, ast.Name)
            and value.value.id in jax_names)

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Attribute) and child.attr in ("cond", "switch") and is_lax(child.value):
                found.append((child.lineno, function))
            visit(child, inner)

    visit(tree, None)
    return found


def test_only_the_sync_core_calls_cond_or_switch():
    """`sync_where` (around collectives) and `local_cond` (replica-local work) are the only
    conditionals in the package; tests/test_sync_core.py checks the traced steps too."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        for line, function in stray_conds(ast.parse(path.read_text())):
            if function not in CONDS_ALLOWED.get(name, set()):
                offenders.append(f"{path.relative_to(PACKAGE)}:{line} ({function or 'module level'})")
    assert not offenders, f"lax.cond/switch outside sync_where and local_cond: {offenders}"


@pytest.mark.parametrize("src", [
    "from jax import lax\ndef f(p): return lax.cond(p, g, h)",
    "import jax\ndef f(p): return jax.lax.cond(p, g, h)",
    "import jax as J\ndef f(p): return J.lax.switch(i, [g, h])",
    "from jax import lax as L\ndef f(p): return L.switch(i, [g, h])",
    "import jax.lax as jl\ndef f(p): return jl.cond(p, g, h)",
    "import jax.lax\ndef f(p): return jax.lax.cond(p, g, h)",
    "from jax.lax import cond\ndef f(p): return cond(p, g, h)",
    "from jax.lax import switch as pick\ndef f(p): return pick(i, [g, h])",
    "from jax.lax import *\ndef f(p): return cond(p, g, h)",
    "import jax\nL = jax.lax\ndef f(p): return L.cond(p, g, h)",
])
def test_the_cond_guard_sees_every_spelling(src):
    assert stray_conds(ast.parse(src)), src


def test_the_cond_guard_lets_other_lax_calls_pass():
    src = "from jax import lax\nimport jax\nx = lax.psum(1, 'd') + jax.lax.pmax(1, 'd')\ncond = 3\nlax.select(a, b, c)"
    assert stray_conds(ast.parse(src)) == []


def test_the_sync_core_s_conds_are_where_it_says():
    """The allowed places are real: each allowed function does build a conditional."""
    for name, functions in CONDS_ALLOWED.items():
        path = PACKAGE.parent / (name.replace(".", "/") + ".py")
        assert {f for _, f in stray_conds(ast.parse(path.read_text()))} == functions


def test_the_layers_are_the_packages():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(BELOW), packages ^ set(BELOW)


# ------------------------------------------------------------------ the public API

def test_the_public_api_resolves():
    assert {"TrainConfig", "train", "build_strategy", "make_train_step", "sync_where"} <= set(jaxsel.__all__)
    for name in jaxsel.__all__:
        assert getattr(jaxsel, name) is not None, name
    assert jaxsel.train.__module__ == "jaxsel.training.train" and jaxsel.triggers.__name__ == "jaxsel.core.triggers"


def test_the_command_imports_no_jax_before_it_runs():
    """`jaxsel` installs its Ctrl-C handler before JAX loads (training/early_stop.py): the
    package, the command and the early-stop module import no JAX."""
    code = ("import sys, jaxsel, jaxsel.cli, jaxsel.training.early_stop; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'flax', 'optax')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_a_multi_host_supervisor_imports_no_jax():
    """The supervisor of a multi-host process (training/supervisor.py) checks the flags and
    starts its child without JAX (a second of start-up per process, measured): the child
    is stubbed here; a bad --coordinator is refused there in one line, without JAX too."""
    code = "\n".join([
        "import sys",
        "from jaxsel.training import supervisor",
        "supervisor.supervise = lambda command, who, *a, **k: print('child:', command[3:5]) or 0",
        "from jaxsel.cli import main",
        "layout = ['--num-processes', '2', '--process-id', '1']",
        "assert main(['train', '--steps', '2', '--coordinator', '127.0.0.1:4000', *layout]) == 0",
        "assert main(['train', '--steps', '2', '--coordinator', 'nohost', *layout]) == 2",
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'jax', 'jaxlib', 'flax', 'optax', 'numpy'}))"])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["child: ['train', '--steps']", "[]"], done.stdout
    assert done.stderr.strip() == ("jaxsel train: error: --coordinator must be HOST:PORT with a port in 1..65535, "
                                   "got 'nohost'"), done.stderr


def test_the_errors_the_command_tells_apart_are_named_where_they_are_defined():
    """cli/command.py tells a user's error (exit 2) and a run's fault (exit 1) from a bug by
    classes of the modules already imported (a class whose module was never imported cannot
    have been raised): so each must be named by the module that defines it."""
    import importlib

    from jaxsel.cli import command

    for name in (*command.USER_ERRORS, *command.RUN_FAULTS, *command.INTERRUPTED):
        module, _, cls = name.partition(":")
        found = getattr(importlib.import_module(f"jaxsel.{module}"), cls)
        assert isinstance(found, type) and issubclass(found, BaseException), name
        assert found.__module__ == f"jaxsel.{module}", (name, found.__module__)
