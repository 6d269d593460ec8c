"""environment.json: what a run ran on, beside its config.json.

The jaxsel version (and its git commit when jaxsel is imported from a checkout), the
versions of Python and the libraries that decide the numbers (JAX, jaxlib, Flax, Optax,
Orbax, ...), the devices and the replicas' layout on them, how batches were built, and
the exact command line (with its working directory: relative paths are relative to it).
With config.json this is what `jaxsel train --config RUN_DIR/config.json` needs to
reproduce a run, and what to compare when it does not.
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

import jax

PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy", "tensorflow-datasets", "grain")


def version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_commit() -> dict | None:
    """{commit, dirty} of the checkout jaxsel is imported from, or None (an installed wheel,
    no git)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        def git(*a):
            return subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True, timeout=10,
                                  check=True).stdout.strip()

        return {"commit": git("rev-parse", "HEAD"),
                "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.SubprocessError):
        return None


def devices() -> list[dict]:
    return [{"id": d.id, "platform": d.platform, "kind": d.device_kind, "process": d.process_index}
            for d in jax.devices()]


def environment(layout: str, input_pipeline: str, packing_choice: dict | None = None) -> dict:
    """The record written as environment.json (`layout`: the run's layout line;
    `packing_choice`: the packing its replicas ran with, `packing.Choice.record`, None for
    one per device)."""
    return {
        "jaxsel": version("jaxsel"),
        "git": git_commit(),
        "python": platform.python_version(),
        "packages": {p: version(p) for p in PACKAGES},
        "platform": platform.platform(),
        "devices": devices(),
        "processes": jax.process_count(),
        "layout": layout,
        "packing_choice": packing_choice,
        "input_pipeline": input_pipeline,
        "command": shlex.join(sys.argv),
        "argv": list(sys.argv),
        "executable": sys.executable,
        "cwd": os.getcwd(),
    }
