"""Sums up the per-process JSON files tests/measure/sitecustomize.py wrote:
`python tests/measure/compile_report.py COMPILE_STATS_DIR [--top N]`.

Prints the whole run's compile counts (programs compiled = persistent-cache misses, repeats
= hits: a program another test, worker or process compiled before), the seconds spent
tracing, lowering and compiling (a cache hit saves only the last), the programs looked up
most often and from how many tests, and the tests that spent the most seconds compiling."""
from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

TRACE, LOWER, COMPILE = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                         "/jax/core/compile/backend_compile_duration")
HITS, MISSES = "/jax/compilation_cache/cache_hits", "/jax/compilation_cache/cache_misses"


def load(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def totals(procs: list[dict]) -> dict:
    counts, secs = collections.Counter(), collections.Counter()
    for p in procs:
        counts.update(p["counts"])
        secs.update(p["secs"])
    return {"processes": len(procs), "cpu": sum(p.get("cpu", 0) for p in procs), "misses": counts[MISSES], "hits": counts[HITS], "compiles": counts[COMPILE],
            "trace_s": secs[TRACE], "lower_s": secs[LOWER], "compile_s": secs[COMPILE]}


def per_test(procs: list[dict]) -> dict[str, collections.Counter]:
    out = collections.defaultdict(collections.Counter)
    for p in procs:
        for test, c in p.get("tests", {}).items():
            out[test].update(c)
    return out


def per_program(procs: list[dict]) -> dict[str, list]:
    """cache key -> [(test, hit|miss)] over every process."""
    out = collections.defaultdict(list)
    for p in procs:
        for test, kind, _, key in p.get("programs", []):
            out[key].append((test, kind))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    procs = load(args.folder)
    versions = collections.defaultdict(list)
    for p in procs:
        versions[(p.get("python"), p.get("jax"))].append(p)
    if len(versions) > 1:   # e.g. both CI legs into one folder: each on its own, then together
        for (python, jax), group in sorted(versions.items(), key=str):
            t = totals(group)
            print(f"Python {python}, JAX {jax}: {t['processes']} processes, {t['cpu']:.0f} CPU s; "
                  f"{t['misses']} compiled, {t['hits']} repeats; tracing {t['trace_s']:.0f} s, lowering "
                  f"{t['lower_s']:.0f} s, compiling {t['compile_s']:.0f} s")
        print()
    t = totals(procs)
    print(f"{t['processes']} processes ({t['cpu']:.0f} CPU s where recorded); {t['misses']} programs compiled (cache misses), {t['hits']} repeats "
          f"(cache hits), {t['compiles']} compile requests")
    print(f"seconds: tracing {t['trace_s']:.0f}, lowering {t['lower_s']:.0f}, XLA compiling (hits: loading) "
          f"{t['compile_s']:.0f}")
    programs = per_program(procs)
    if programs:
        print(f"\nprograms looked up most often (of {len(programs)} distinct):")
        print(" looks  tests  program")
        for key, uses in sorted(programs.items(), key=lambda kv: -len(kv[1]))[:args.top]:
            tests = {t for t, _ in uses}
            print(f"{len(uses):6d} {len(tests):6d}  {key[:60]}  e.g. {sorted(tests)[0][:70]}")
    tests = per_test(procs)
    if tests:
        print(f"\ntests by seconds tracing + lowering + compiling (of {len(tests)}):")
        print(" trace  lower  compile  misses  hits  test")
        key = lambda c: c[TRACE + ":secs"] + c[LOWER + ":secs"] + c[COMPILE + ":secs"]
        for test, c in sorted(tests.items(), key=lambda kv: -key(kv[1]))[:args.top]:
            print(f"{c[TRACE + ':secs']:6.1f} {c[LOWER + ':secs']:6.1f} {c[COMPILE + ':secs']:8.1f} "
                  f"{c[MISSES]:7d} {c[HITS]:5d}  {test}")


if __name__ == "__main__":
    main()
