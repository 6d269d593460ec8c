"""What a directory holds of jaxsel's: a `jaxsel train` run or a `jaxsel compare` comparison.

The two commands write different layouts into their `--out`: a run writes metrics.jsonl,
evals.json, final.json and config.json at the top; a comparison writes results.json at the
top and one run per row and seed below it (ROW/seedS/metrics.jsonl). Each command refuses
a directory that holds the other kind: a run written into a comparison hid the comparison
from `jaxsel report` (which reads the top-level run first), and a comparison written into
a run's directory mixed the two. Whether a directory holding the same kind may be
continued is each command's own rule (`run.check_paths`, `compare.check_fresh`).
"""
from __future__ import annotations

import os
from pathlib import Path

from .config import ConfigError

#: what a `jaxsel train` run writes at the top of its directory (config.json alone: a run
#: stopped before its first step)
RUN_FILES = ("metrics.jsonl", "evals.json", "final.json", "config.json")


def run_files(folder: str | os.PathLike) -> list[str]:
    """The files of a `jaxsel train` run in `folder`."""
    return [name for name in RUN_FILES if (Path(folder) / name).is_file()]


def comparison_files(folder: str | os.PathLike) -> list[str]:
    """The files of a `jaxsel compare` comparison in `folder` (relative paths): its
    results.json and its runs, ROW/seedS/ (and ROW/, as comparisons wrote them before seeds)."""
    out = Path(folder)
    found = [out / "results.json", *sorted(out.glob("*/seed*/metrics.jsonl")), *sorted(out.glob("*/metrics.jsonl"))]
    return [str(p.relative_to(out)) for p in found if p.is_file()]


def _listed(found: list[str]) -> str:
    return found[0] + (f" and {len(found) - 1} more" if len(found) > 1 else "")


def refuse_comparison(folder: str | os.PathLike, option: str = "--out") -> None:
    """ConfigError if `folder`, a `jaxsel train` run directory, holds a comparison."""
    found = comparison_files(folder)
    if found:
        raise ConfigError(f"run directory {str(folder)!r} holds a comparison ({_listed(found)}); `jaxsel train` "
                          f"never writes into one: choose another {option}")


def refuse_run(folder: str | os.PathLike, option: str = "--out") -> None:
    """ConfigError if `folder`, a `jaxsel compare` directory, holds a `jaxsel train` run."""
    found = run_files(folder)
    if found:
        raise ConfigError(f"compare directory {str(folder)!r} holds a `jaxsel train` run ({_listed(found)}); "
                          f"`jaxsel compare` never writes into one: choose another {option}")
