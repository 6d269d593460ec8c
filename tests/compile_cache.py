"""Where the suite keeps the programs XLA compiled: one folder per machine and jaxlib, kept
across runs, so that a developer's second run loads what the first compiled.

The suite is compile-bound; within a run every process already shares one persistent
compilation cache (tests/conftest.py). Kept across runs, it saves a developer's next run
the XLA compiling of every program the code change did not touch (tracing and lowering
remain: a hit is found by the lowered program).

Why a kept folder cannot change a result (a golden record, say): JAX's cache key hashes the
lowered program, the jaxlib version, the platform, every XLA_FLAGS flag, the compile options
and the devices, everything XLA:CPU's code depends on except the host CPU's vector
extensions, for XLA compiles for the CPU it runs on. So the folder's name hashes what the
key leaves out (the CPU's model and flags, the machine, and the jaxlib for tidiness): a home
directory shared by an AVX-512 and an AVX2 machine holds two folders, never one. A hit then
loads the executable a fresh compile of the same program on this machine would produce.

`JAXSEL_TEST_XLA_CACHE=fresh` (or a JAX_COMPILATION_CACHE_DIR of your own) opts out: a fresh
temporary folder for the run, removed at its end. CI runs in an empty HOME, so its cache
starts empty either way. A whole suite's programs take about 50 MB; past MAX_BYTES the
session's start removes the oldest half (JAX's own size cap would scan the folder at every
program it writes).
"""
from __future__ import annotations

import hashlib
import os
import platform
import tempfile
from importlib.metadata import version
from pathlib import Path

#: opts out of the kept folder: "fresh" gives the run a temporary one
CHOICE = "JAXSEL_TEST_XLA_CACHE"
#: a kept folder past this loses its oldest programs at a session's start (a whole suite's
#: programs: about 50 MB)
MAX_BYTES = 1024**3


def cpu_identity() -> str:
    """The host CPU's model and feature flags (Linux's /proc/cpuinfo), or the processor's
    name elsewhere: what XLA:CPU's generated code depends on beyond JAX's cache key."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    wanted = ("model name", "flags", "Features", "CPU implementer", "CPU part")
    return "\n".join(sorted({line.strip() for line in lines if line.startswith(wanted)}))


def kept_folder(home: Path | None = None) -> Path:
    """~/.cache/jaxsel-tests/xla-<jaxlib>-<hash of the machine and its CPU>."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or (home or Path.home()) / ".cache")
    machine = hashlib.sha256(f"{platform.machine()}\n{cpu_identity()}".encode()).hexdigest()[:12]
    return base / "jaxsel-tests" / f"xla-jaxlib{version('jaxlib')}-{machine}"


def folder() -> tuple[Path, bool]:
    """(the run's cache folder, whether it is a fresh one the run removes at its end)."""
    if os.environ.get(CHOICE, "kept") == "fresh":
        return Path(tempfile.mkdtemp(prefix="jaxsel-test-xla-cache-")), True
    if os.environ.get(CHOICE, "kept") != "kept":
        raise SystemExit(f"{CHOICE}={os.environ[CHOICE]!r}: expected 'kept' (the default) or 'fresh'")
    path = kept_folder()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:   # an unwritable HOME: a fresh folder, as before
        return Path(tempfile.mkdtemp(prefix="jaxsel-test-xla-cache-")), True
    return path, False


def prune(path: Path, max_bytes: int = MAX_BYTES) -> int:
    """Removes the oldest programs (by modification time) until the folder holds at most
    half of `max_bytes`, once it holds more than `max_bytes`; returns how many it removed.
    A program removed while another run reads it is compiled again there, nothing worse."""
    entries = []
    for entry in os.scandir(path):
        try:
            info = entry.stat()
        except OSError:
            continue
        entries.append((info.st_mtime, info.st_size, entry.path))
    total = sum(size for _, size, _ in entries)
    if total <= max_bytes:
        return 0
    removed = 0
    for _, size, name in sorted(entries):
        if total <= max_bytes // 2:
            break
        Path(name).unlink(missing_ok=True)
        total -= size
        removed += 1
    return removed
