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
  (read from JAX's own debug log line of each look-up, which nothing else prints).
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
    import logging
    import re
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

    _LOOKUP = re.compile(r"^(Persistent compilation cache hit|PERSISTENT COMPILATION CACHE MISS) for '(.*)' with key '(.*)'$")

    class _Lookups(logging.Handler):
        def emit(self, record):
            try:
                m = _LOOKUP.match(record.getMessage())
            except Exception:
                return
            if m:
                _programs.append([_test(), "hit" if m[1].startswith("Persistent") else "miss", m[2], m[3]])

    def _register(monitoring):
        monitoring.register_event_listener(_event)
        monitoring.register_event_duration_secs_listener(_duration)
        log = logging.getLogger("jax._src.compiler")
        log.addHandler(_Lookups(logging.DEBUG))
        log.setLevel(logging.DEBUG)

    class _Hook(importlib.abc.MetaPathFinder):
        """Registers the listeners as jax._src.monitoring is first imported."""
        def find_spec(self, name, path=None, target=None):
            if name != "jax._src.monitoring":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                _register(module)
            spec.loader.exec_module = exec_module
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
