"""The suite's XLA:CPU compile-speed flags, as far as the installed jaxlib takes them.

The suite is compile-bound (most of its time is XLA:CPU compiling tiny programs), so it
compiles for speed of compiling. Which flags do that, and which flags exist at all, changes
between jaxlib releases: jaxlib 0.11 removed `--xla_cpu_use_fusion_emitters`, and XLA
aborts a process whose XLA_FLAGS names a flag it does not know, on the first compile. In an
xdist worker that abort is silent (TF_CPP_MIN_LOG_LEVEL=3 hides XLA's last words) and
pytest ends in an INTERNALERROR, so every flag is first tried in a subprocess that compiles
a tiny function (`probe`): a flag that fails there is dropped, and the suite says so once.
The verdict is cached per jaxlib version in the temp dir (a probe costs a JAX start-up,
about 2 s).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

#: (first jaxlib version, flags), oldest first: a jaxlib takes the newest entry not newer
#: than itself. Measured: the CPU seconds XLA takes to compile three packed golden steps
#: (`python tests/compile_time.py`: bsp, selsync, hierarchical-groups4 of test_golden.py,
#: 8 replicas on 2 devices; the mean of 3 runs each on the 2-core AVX2 box):
#: - jaxlib 0.10: the classic loop emitters instead of the MLIR fusion emitters, and no LLVM
#:   optimisation: 4.0 s -> 1.1 s (the whole suite 16:40 -> 9:35).
#: - jaxlib 0.11+: the loop emitters are gone, and nothing gives that back: 4.4 s with XLA's
#:   defaults, 3.8 s with these (LLVM at level 1 without its expensive passes). Level 0
#:   would give 2.6 s, but there XLA:CPU rounds an update 1 ulp differently with 8 replicas
#:   on 8 devices than with 4 packed on each of 2 (jaxlib 0.12; tests/test_hierarchical.py
#:   compares those bit for bit); from level 1 on the layouts agree to the bit, as they do
#:   with XLA's defaults. The `FAST_COMPILE` opt preset saves nothing here (4.2 s).
FAST_COMPILE: tuple[tuple[tuple[int, ...], tuple[str, ...]], ...] = (
    ((0,), ("--xla_cpu_use_fusion_emitters=false", "--xla_backend_optimization_level=0")),
    ((0, 11), ("--xla_backend_optimization_level=1", "--xla_llvm_disable_expensive_passes=true")),
)
#: set by the first process that decides (the pytest controller) for every process it starts
DECIDED = "JAXSEL_SUITE_XLA_FLAGS"
PROBE = "import jax, jax.numpy as jnp; jax.block_until_ready(jax.jit(lambda x: jnp.tanh(x) @ x + 1)(jnp.eye(4)))"
PROBE_TIMEOUT_S = 300
#: a probe's answer on a box too busy to compile in time: no verdict on the flags
TOO_SLOW = f"a tiny compile took over {PROBE_TIMEOUT_S} s"
#: "F1126 15:22:48.834511    2359 parse_flags_from_env.cc:234] " before XLA's own words
GLOG_PREFIX = re.compile(r"^[IWEF]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] ")


def jaxlib_version() -> str:
    return version("jaxlib")


def release(text: str) -> tuple[int, ...]:
    """'0.12.0.1' -> (0, 12, 0, 1); a suffix such as 'rc1' or '.dev20260101' is not read."""
    return tuple(int(part) for part in re.match(r"\d+(?:\.\d+)*", text)[0].split("."))


def wanted(jaxlib: str) -> tuple[str, ...]:
    """The flags FAST_COMPILE lists for this jaxlib version."""
    return [flags for first, flags in FAST_COMPILE if release(jaxlib) >= first][-1]


def probe(flags) -> str | None:
    """None when a fresh process compiles a tiny function under XLA_FLAGS=`flags`, else
    why not (XLA's last line)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "JAX_COMPILATION_CACHE_DIR", "JAX_NUM_CPU_DEVICES")}
    env.update(XLA_FLAGS=" ".join(flags), JAX_PLATFORMS="cpu")
    try:
        done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return TOO_SLOW
    if done.returncode == 0:
        return None
    lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    last = GLOG_PREFIX.sub("", lines[-1]) if lines else "no output"
    return f"{last} (exit {done.returncode})"


def verdict(jaxlib: str, flags) -> dict:
    """{"flags": those the jaxlib takes, "dropped": {flag: why}}: all together when one
    probe passes, else each flag alone. Cached per jaxlib version and flag list."""
    key = hashlib.sha256(json.dumps([jaxlib, *flags]).encode()).hexdigest()[:16]
    cache = Path(tempfile.gettempdir()) / f"jaxsel-suite-xla-flags-{jaxlib}-{key}.json"
    try:
        return json.loads(cache.read_text())
    except (OSError, ValueError):
        pass
    if probe(flags) is None:
        result = {"flags": list(flags), "dropped": {}}
    else:
        why = {flag: probe([flag]) for flag in flags}
        result = {"flags": [f for f in flags if why[f] is None],
                  "dropped": {f: reason for f, reason in why.items() if reason is not None}}
    if TOO_SLOW not in result["dropped"].values():
        try:
            tmp = cache.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(result))
            tmp.replace(cache)
        except OSError:   # a read-only temp dir: probe again next time
            pass
    return result


def decide() -> dict:
    """This process's verdict: the one its parent decided (xdist workers), else a new one.
    Adds {"jaxlib": version}."""
    if DECIDED in os.environ:
        return json.loads(os.environ[DECIDED])
    jaxlib = jaxlib_version()
    result = {"jaxlib": jaxlib, **verdict(jaxlib, wanted(jaxlib))}
    os.environ[DECIDED] = json.dumps(result)
    return result


def with_flags(xla_flags: str, flags) -> str:
    """`xla_flags` (a developer's own come first) followed by `flags`, each once."""
    return " ".join(dict.fromkeys([*xla_flags.split(), *flags]))
