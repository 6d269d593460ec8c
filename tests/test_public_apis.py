"""jaxsel uses JAX's, Flax's, Orbax's and Optax's public APIs only, read from the source.

Every .py file of jaxsel/ and experiments/ is walked (no JAX needed) for:
- an import of a private module or name of those libraries (`jax._src`, `from flax.nnx
  import _x`);
- an underscore attribute (or `vars()`, `__dict__`, `getattr(x, "_y")`) of anything
  statically known to come from them: a name bound by an import (`jax._src`, `nnx.a._b`),
  a name assigned from such an expression in the same function (`mesh = jax.make_mesh(...)`
  then `mesh._foo`), a parameter annotated with one of their types (`mesh: Mesh`), or a
  loop variable over one;
- `object.__setattr__` anywhere but on `self` (or the object `__new__` just made) of a class
  this file defines that subclasses none of their classes (it bypasses a library object's
  own invariants: ReplicaMesh copied a Mesh's fields that way, and broke when JAX 0.11
  added one).

The few places where no public API exists are EXCEPTIONS, each with its reason and a test
below that fails when the internal moves; an exception that matches nothing fails too.
"""
import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = {"jax", "jaxlib", "flax", "orbax", "optax"}
#: underscore attributes that are public by their owner's design (namedtuple's API, os._exit)
PUBLIC_UNDERSCORE = {"_replace", "_asdict", "_fields", "_make", "_field_defaults", "_exit"}
#: (file, enclosing function, what) -> why no public API does it (and the test that pins it)
EXCEPTIONS = {
    ("jaxsel/training/distributed.py", "coordination_client", "from jax._src import distributed"):
        "the coordination service's key-value store and barriers (the peer watchdog, barrier, "
        "all_gather_text) have no public handle in jax 0.10.2 or 0.12.0.1; "
        "test_the_coordination_client_jaxsel_reads_is_there pins it",
}


#: builtins whose result comes from their arguments (`vars(x)`, `list(x)`, `getattr(x, n)`)
BUILTINS_THROUGH = {"vars", "getattr", "iter", "next", "list", "tuple", "dict", "set", "sorted", "reversed",
                    "enumerate", "zip"}


def shallow_walk(node: ast.AST):
    """`ast.walk` that leaves nested functions, lambdas and classes out."""
    yield node
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            yield from shallow_walk(child)


def bound_names(target: ast.AST) -> set[str]:
    """The plain names an assignment target binds (`a`, `a, (b, *c)`; not `x.a` or `x[i]`)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, ast.Starred):
        return bound_names(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(bound_names(t) for t in target.elts))
    return set()


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def library(dotted: str) -> bool:
    return dotted.split(".")[0] in LIBRARIES


class Checker(ast.NodeVisitor):
    """Findings (function, what) of one module's source."""

    def __init__(self):
        self.findings: list[tuple[str, str]] = []
        self.bound: set[str] = set()   # names bound to a library module or object
        self.scopes: list[tuple[str, set[str]]] = [("<module>", set())]   # (qualname, tainted names)
        self.classes: dict[str, bool] = {}   # class defined here -> subclasses a library class

    # ------------------------------------------------------------------ what is a library's
    def check(self, tree: ast.Module) -> list[tuple[str, str]]:
        for node in ast.walk(tree):   # imports anywhere bind for the whole file
            if isinstance(node, ast.Import):
                self.bound |= {(a.asname or a.name).split(".")[0] for a in node.names if library(a.name)}
            elif isinstance(node, ast.ImportFrom) and not node.level and library(node.module or ""):
                self.bound |= {a.asname or a.name for a in node.names}
        self.scopes[0][1].update(self.tainted_names(tree.body))
        self.visit(tree)
        return self.findings

    def root(self, node: ast.AST) -> ast.AST:
        while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
            node = node.func if isinstance(node, ast.Call) else node.value
        return node

    def from_library(self, node: ast.AST, extra: set[str] = frozenset()) -> bool:
        """`node` is (a value reached from) a library name or a name holding one; through a
        builtin call too (`vars(rngs).values()`, `list(nnx.state(m))`)."""
        base = self.root(node)
        if not isinstance(base, ast.Name):
            return False
        if base.id in BUILTINS_THROUGH:
            calls = [n for n in ast.walk(node) if isinstance(n, ast.Call) and n.func is base]
            return any(self.from_library(a, extra) for c in calls for a in c.args)
        return base.id in self.bound or base.id in extra or any(base.id in names for _, names in self.scopes)

    def mentions_library(self, node: ast.AST | None) -> bool:
        return node is not None and any(isinstance(n, ast.Name) and n.id in self.bound for n in ast.walk(node))

    def tainted_names(self, body: list[ast.stmt], args: ast.arguments | None = None) -> set[str]:
        """Names a function body (or the module) binds to library values, over-approximated
        (nested functions and classes have their own)."""
        out = set()
        if args is not None:
            out |= {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]
                    if self.mentions_library(a.annotation)}
        for _ in range(2):   # a value from a name tainted further down
            for node in (n for stmt in body for n in shallow_walk(stmt)):
                pairs = []
                if isinstance(node, ast.Assign):
                    pairs = [(t, node.value) for t in node.targets]
                elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                    pairs = [(node.target, node.value)]
                elif isinstance(node, (ast.For, ast.comprehension)):
                    pairs = [(node.target, node.iter)]
                elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                    pairs = [(node.optional_vars, node.context_expr)]
                for target, value in pairs:
                    if self.from_library(value, out):
                        out |= bound_names(target)
        return out - {"self", "cls"}

    # ------------------------------------------------------------------ scopes
    def where(self) -> str:
        return self.scopes[-1][0]

    def found(self, what: str) -> None:
        self.findings.append((self.where(), what))

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes[node.name] = any(self.from_library(b) for b in node.bases)
        self.scopes.append((self.qualname(node.name), set()))
        self.generic_visit(node)
        self.scopes.pop()

    def visit_FunctionDef(self, node) -> None:
        self.scopes.append((self.qualname(node.name), self.tainted_names(node.body, node.args)))
        self.generic_visit(node)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def qualname(self, name: str) -> str:
        return name if self.where() == "<module>" else f"{self.where()}.{name}"

    # ------------------------------------------------------------------ the rules
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if library(alias.name) and any(private(p) for p in alias.name.split(".")):
                self.found(f"import {alias.name}")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or not library(module):
            return
        for alias in node.names:
            if any(private(p) for p in module.split(".")) or private(alias.name):
                self.found(f"from {module} import {alias.name}")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if (private(node.attr) and node.attr not in PUBLIC_UNDERSCORE or node.attr == "__dict__") \
                and self.from_library(node.value):
            self.found(ast.unparse(node))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and node.args and self.from_library(node.args[0]):
            name = node.args[1] if len(node.args) > 1 else None
            if func.id == "vars" or (func.id in {"getattr", "setattr", "hasattr", "delattr"}
                                     and isinstance(name, ast.Constant) and isinstance(name.value, str)
                                     and private(name.value)):
                self.found(ast.unparse(node))
        if ast.unparse(func) == "object.__setattr__" and not self.own_setattr(node):
            first = ast.unparse(node.args[0]) if node.args else ""
            self.found(f"object.__setattr__({first}, ...)")
        self.generic_visit(node)

    def own_setattr(self, node: ast.Call) -> bool:
        """`object.__setattr__(self, ...)` in a method of a class this file defines, on no
        library base (in `__new__`: on the object it made with `object.__new__(cls)`)."""
        qualname = self.where().split(".")
        if len(qualname) != 2 or self.classes.get(qualname[0], True) or not node.args:
            return False
        first = node.args[0]
        return isinstance(first, ast.Name) and first.id in {"self", "obj"}


def findings_of(source: str) -> list[tuple[str, str]]:
    return Checker().check(ast.parse(source))


def sources() -> list[Path]:
    return sorted([*(ROOT / "jaxsel").rglob("*.py"), *(ROOT / "experiments").rglob("*.py")])


def test_jaxsel_and_experiments_use_public_apis_only():
    found = {(str(path.relative_to(ROOT)), where, what)
             for path in sources() for where, what in findings_of(path.read_text())}
    assert len(sources()) > 100
    unexplained = sorted(found - set(EXCEPTIONS))
    assert not unexplained, "private API use (move to a public API, or list it in EXCEPTIONS with why):\n" + \
        "\n".join(f"  {p}: {w}: {what}" for p, w, what in unexplained)
    stale = sorted(set(EXCEPTIONS) - found)
    assert not stale, f"EXCEPTIONS that match nothing any more (delete them): {stale}"


@pytest.mark.parametrize("source, expected", [
    ("""
     from jax.sharding import Mesh
     class ReplicaMesh(Mesh):
         def __new__(cls, mesh, replicas):
             obj = object.__new__(cls)
             for name in ("devices", "axis_names"):
                 object.__setattr__(obj, name, getattr(mesh, name))
             return obj
     """, [("ReplicaMesh.__new__", "object.__setattr__(obj, ...)")]),
    ("""
     def _client():
         from jax._src import distributed as _dist
         return getattr(_dist.global_state, "client", None)
     """, [("_client", "from jax._src import distributed")]),
    ("""
     import jax
     def varying(x):
         aval = jax.typeof(x)
         return aval._vma, jax._src.core, jax.typeof(x).__dict__
     """, [("varying", "aval._vma"), ("varying", "jax._src"), ("varying", "jax.typeof(x).__dict__")]),
    ("""
     from flax import nnx
     def model_rngs(seed):
         rngs = nnx.Rngs(seed)
         for stream in vars(rngs).values():
             stream._count = getattr(stream, "_tag")
     """, [("model_rngs", "vars(rngs)"), ("model_rngs", "stream._count"),
           ("model_rngs", "getattr(stream, '_tag')")]),
    ("""
     import orbax.checkpoint as ocp
     from jax.sharding import Mesh
     def f(mesh: Mesh, other):
         return mesh._devices, other._devices, ocp._src, optax_free._x
     """, [("f", "mesh._devices"), ("f", "ocp._src")]),
    ("""
     import dataclasses, collections
     import jax
     @dataclasses.dataclass(frozen=True)
     class Own:
         x: int
         def __post_init__(self):
             object.__setattr__(self, "x", int(self.x))
     def g(t: jax.Array, pair):
         return pair._replace(a=1), pair._asdict(), os._exit, t.shape
     """, []),
])
def test_the_rules_catch_what_they_name(source, expected):
    """Each rule on the code that motivated it (ReplicaMesh, the coordination client,
    varying_axes' fallback, model_rngs' reads) and on what stays allowed."""
    assert sorted(findings_of(textwrap.dedent(source))) == sorted(expected)


# ---------------------------------------------------------------- the internals jaxsel reads

PIN_CLIENT = """
import json, socket, sys
import jax
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=1, process_id=0, initialization_timeout=60)
from jaxsel.training import distributed
client = distributed.coordination_client()
client.key_value_set("jaxsel/status/0", "running")
client.key_value_set("jaxsel/status/0", "done", allow_overwrite=True)
client.key_value_increment("jaxsel/beat/0", 1)
client.wait_at_barrier("jaxsel/pin", 10_000)
out = {"get": client.blocking_key_value_get("jaxsel/status/0", 10_000),
       "dir": sorted(dict(client.key_value_dir_get("jaxsel/")).items()),
       "watchdog": distributed.Watchdog(60.0).check()}
jax.distributed.shutdown()
print(json.dumps(out))
"""


def test_the_coordination_client_jaxsel_reads_is_there():
    """EXCEPTIONS' one JAX internal: jax._src.distributed.global_state.client, and every
    method of it the watchdog, `barrier` and `all_gather_text` call, on the installed JAX
    (a one-process job starts the same coordination service)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", PIN_CLIENT], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"get": "done", "dir": [["jaxsel/beat/0", "1"], ["jaxsel/status/0", "done"]], "watchdog": None}


def test_a_moved_coordination_client_stops_a_multihost_run_in_one_line(monkeypatch):
    import jax._src.distributed as jax_distributed   # noqa: the internal itself, to move it

    from jaxsel.core.library_changes import LibraryChanged
    from jaxsel.training import distributed

    monkeypatch.delattr(jax_distributed, "global_state")
    with pytest.raises(LibraryChanged, match=r"moved its coordination-service client"):
        distributed.coordination_client()


def test_orbax_barriers_go_to_the_coordination_service_once_the_flag_is_set(monkeypatch):
    """Orbax has no public option for it (training/distributed.py says why), so jaxsel sets
    its absl flag; this pins that the flag still exists and still switches Orbax's barrier
    from a device collective to the coordination service's (the barrier_sync_fn)."""
    import orbax.checkpoint as ocp
    from absl import flags
    from jax.experimental import multihost_utils

    from jaxsel.training.distributed import ORBAX_BARRIER_FLAG, orbax_barriers_via_coordinator

    flag = flags.FLAGS[ORBAX_BARRIER_FLAG]
    monkeypatch.setattr(flag, "value", False)
    monkeypatch.setattr(flag, "present", 1)
    monkeypatch.setattr(jax, "process_count", lambda: 2)   # Orbax skips barriers in one process
    calls = []
    monkeypatch.setattr(multihost_utils, "sync_global_devices", lambda name: calls.append(("collective", name)))
    service = lambda *, key, timeout_ms: calls.append(("service", key))   # noqa: E731
    ocp.multihost.sync_global_processes("before", barrier_sync_fn=service)
    orbax_barriers_via_coordinator()
    ocp.multihost.sync_global_processes("after", barrier_sync_fn=service)
    assert calls == [("collective", "before"), ("service", "after")]


def test_an_orbax_without_the_barrier_flag_is_refused(monkeypatch):
    from absl import flags

    from jaxsel.core.library_changes import LibraryChanged
    from jaxsel.training import distributed

    monkeypatch.setattr(distributed, "ORBAX_BARRIER_FLAG", "no_such_orbax_flag")
    assert "no_such_orbax_flag" not in flags.FLAGS
    with pytest.raises(LibraryChanged, match=r"orbax-checkpoint \S+ has no absl flag --no_such_orbax_flag"):
        distributed.orbax_barriers_via_coordinator()


def test_varying_axes_reads_the_manual_axis_type_and_refuses_a_type_without_it(monkeypatch):
    """The sync core's deadlock guard reads which mesh axes a value varies over from
    `jax.typeof(x).manual_axis_type` (a public jax.sharding.ManualAxisType); a JAX whose
    types lack it is LibraryChanged, not an empty set that passes every decision."""
    from jax.sharding import PartitionSpec as P

    from jaxsel.core.library_changes import LibraryChanged
    from jaxsel.core.sync import varying_axes

    mesh = jax.make_mesh((2,), ("data",), axis_types=(jax.sharding.AxisType.Auto,), devices=jax.devices()[:2])
    seen = {}

    def body(x):
        seen["varying"], seen["summed"] = varying_axes(x), varying_axes(jax.lax.psum(x, "data"))
        return x

    jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data")))(jax.numpy.ones(2))
    assert seen == {"varying": frozenset({"data"}), "summed": frozenset()}
    assert varying_axes(jax.numpy.ones(3)) == frozenset()

    class Bare:
        pass

    monkeypatch.setattr(jax, "typeof", lambda x: Bare())
    with pytest.raises(LibraryChanged, match="Bare.*has no manual_axis_type"):
        varying_axes(jax.numpy.ones(3))
