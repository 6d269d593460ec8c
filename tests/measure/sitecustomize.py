"""Measurement only: what JAX compiles in every Python process of a suite run (pytest, its
xdist workers, the subprocesses tests start), when COMPILE_STATS_DIR names a folder.

Put this folder first on PYTHONPATH (Python imports `sitecustomize` at start-up, so every
process counts, subprocesses included) and run the suite; then
`python tests/measure/compile_report.py $COMPILE_STATS_DIR` sums it up. Each process keeps
COMPILE_STATS_DIR/<pid>.json current (every 5 s and at exit):
- "counts" / "secs": JAX's monitoring events ('/jax/compilation_cache/cache_hits',
  'cache_misses', '/jax/core/compile/jaxpr_trace_duration', 'jaxpr_to_mlir_module_duration',
  'backend_compile_duration': tracing, lowering and XLA's compiling, in seconds);
- "tests": the same per test (PYTEST_CURRENT_TEST, inherited by a test's subprocesses);
- "cpu": the process's own CPU seconds (user + sys) when the file was last written;
- "programs": every persistent-cache look-up: [test, "hit" | "miss", module name, key]
  (recorded by wrapping the two functions JAX calls to log a look-up).
Nothing of jaxsel or the suite imports this; without COMPILE_STATS_DIR it does nothing."""
import os
import sys

_DIR = os.environ.get("COMPILE_STATS_DIR")
if _DIR:
    import atexit
    import collections
    import importlib.abc
    import importlib.util
    import json
    import resource
    import time

    _counts, _secs = collections.Counter(), collections.Counter()
    _tests = collections.defaultdict(collections.Counter)
    _programs = []

    def _test() -> str:
        return os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0] or "-"

    def _event(name, **kw):
        _counts[name] += 1
        _tests[_test()][name] += 1

    def _duration(name, secs, **kw):
        _counts[name] += 1
        _secs[name] += secs
        _tests[_test()][name + ":secs"] += secs

    def _looked_up(kind):
        def record(module_name, cache_key, *args, **kwargs):
            _programs.append([_test(), kind, module_name, cache_key])
        return record

    def _register(monitoring):
        monitoring.register_event_listener(_event)
        monitoring.register_event_duration_secs_listener(_duration)

    def _wrap_lookups(compiler):
        """Every persistent-cache look-up, from the functions JAX calls to log it (patched
        rather than read from the log: a log level set here would reach the handlers of
        processes that print debug logs, and tests that read their output)."""
        for name, kind in (("log_persistent_cache_hit", "hit"), ("log_persistent_cache_miss", "miss")):
            original = getattr(compiler, name, None)
            if original is None:
                continue

            def wrapped(module_name, cache_key, *args, _original=original, _record=_looked_up(kind), **kwargs):
                _record(module_name, cache_key)
                return _original(module_name, cache_key, *args, **kwargs)
            setattr(compiler, name, wrapped)

    _HOOKS = {"jax._src.monitoring": _register, "jax._src.compiler": _wrap_lookups}

    class _Hook(importlib.abc.MetaPathFinder):
        """Runs _HOOKS[name] on module `name` as it is first imported."""
        def find_spec(self, name, path=None, target=None):
            if name not in _HOOKS or getattr(self, "_busy", False):
                return None
            self._busy = True
            try:
                spec = importlib.util.find_spec(name)
            finally:
                self._busy = False
            run, then = spec.loader.exec_module, _HOOKS.pop(name)

            def exec_module(module):
                run(module)
                then(module)
            spec.loader.exec_module = exec_module
            if not _HOOKS:
                sys.meta_path.remove(self)
            return spec

    sys.meta_path.insert(0, _Hook())
    _t0 = time.time()
    _written = [0]

    def _dump():
        """Writes this process's file (again) when something was counted since."""
        seen = sum(_counts.values()) + len(_programs)
        if not seen or seen == _written[0]:
            return
        _written[0] = seen
        path = os.path.join(_DIR, f"{os.getpid()}.json")
        try:
            with open(path + ".tmp", "w") as f:
                usage = resource.getrusage(resource.RUSAGE_SELF)
                jax = sys.modules.get("jax")
                json.dump({"argv": sys.argv[:6], "python": sys.version.split()[0],
                           "jax": getattr(jax, "__version__", None), "wall": time.time() - _t0,
                           "cpu": usage.ru_utime + usage.ru_stime, "counts": _counts, "secs": _secs,
                           "tests": _tests, "programs": list(_programs)}, f)
            os.replace(path + ".tmp", path)
        except (OSError, RuntimeError):   # RuntimeError: a dict changed size while dumped; next time
            pass

    def _every_few_seconds():
        """xdist's workers end without running atexit hooks: their files are kept current."""
        while True:
            time.sleep(5)
            _dump()

    import threading
    threading.Thread(target=_every_few_seconds, daemon=True, name="compile-stats").start()
    atexit.register(_dump)
