"""A comparison's rows over seeds: each row (a strategy variant) trains once per seed, and
its figures are reported as the mean and the spread over those seeds.

The seed sets the model's initialization, the data order and partition and any sampling,
and nothing else: run s of a grid is the run a one-seed comparison started at `--seed s`
would make (tests/test_fair_compare.py checks it bit for bit). A row's seeds mostly run
the same programs (the seed is data to them), so with a compilation cache the later seeds
load the first seed's compiled step (`jaxsel compare` and `jaxsel frontier` keep one in
their directory while they run, `job.kept_compilations`).
Where the seed is baked into a program (on-device augmentation's key, a strategy's own
sampling seed) the cache simply misses: it is keyed by the program.
"""
from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
from pathlib import Path

import numpy as np

from ..training.train import RunResult
from .variants import Variant


@dataclasses.dataclass
class RowRuns:
    """One row of a comparison: a variant and its runs, one per seed (seed order)."""

    variant: Variant
    slug: str                          # directory of its runs, under the comparison's
    runs: list[RunResult]
    label: str = ""                    # set once the first run says how it built the strategy
    matched_to: "RowRuns | None" = None   # a budget-matched row: the adaptive row it matches


def check_seeds(optim, seeds: int) -> None:
    """`seeds` runs from the base's seed on (`optim`: its OptimSettings): an integer >= 1
    that stays within the seeds JAX's keys hold."""
    from ..training.config import MAX_SEED, ConfigError

    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ConfigError(f"seeds must be an integer >= 1, got {seeds!r}")
    if optim.seed + seeds - 1 > MAX_SEED:   # the variants' configs are checked with the base's seed
        raise ConfigError(f"seeds {seeds} from seed {optim.seed} pass the largest seed {MAX_SEED}")


def seed_range(optim, seeds: int) -> list[int]:
    """The seeds of a job's `seeds` runs per configuration: from the base's seed on (`optim`:
    its OptimSettings), as `row_config` gives them to the cells."""
    return list(range(optim.seed, optim.seed + seeds))


def mean_std(values) -> tuple[float | None, float | None]:
    """(mean, sample standard deviation) over seeds; the std is None for one seed (no
    spread to speak of), the mean None when any value is missing."""
    if any(v is None for v in values):
        return None, None
    x = np.asarray(values, dtype=float)
    return float(x.mean()), (float(x.std(ddof=1)) if len(x) > 1 else None)


def synced_steps(run: RunResult) -> int:
    return sum(bool(r["synced"]) for r in run.records)


def mean_syncs(row: RowRuns) -> float:
    return float(np.mean([synced_steps(r) for r in row.runs]))


def mean_evals(runs: list[RunResult]) -> list[dict]:
    """The seeds' evaluations averaged step by step (every seed evaluates at the same
    steps): accuracy, loss, bytes and times, for curves and time-to-target."""
    steps = [[e["step"] for e in r.evals] for r in runs]
    if any(s != steps[0] for s in steps):
        raise ValueError(f"the seeds of one row evaluated at different steps: {steps}")
    keys = ("test_accuracy", "test_loss", "bytes_allreduced", "projected_time_s", "train_time_s")
    return [{"step": step, **{k: float(np.mean([r.evals[i][k] for r in runs])) for k in keys}}
            for i, step in enumerate(steps[0])]


def replica_spread(runs: list[RunResult]) -> dict | None:
    """Each replica's own accuracy ({mean, min, max}), averaged over seeds (None: not evaluated)."""
    found = [r.final.get("replica_accuracy") for r in runs]
    if any(f is None for f in found):
        return None
    return {k: float(np.mean([f[k] for f in found])) for k in ("mean", "min", "max")}


def per_seed(run: RunResult, goal) -> dict:
    """One seed's figures (results.json's `per_seed`)."""
    from .time_to_accuracy import time_to_target

    f = run.final
    return {"seed": run.seed, "final_test_accuracy": f["final_test_accuracy"],
            "final_test_loss": f["final_test_loss"], "sync_fraction": f["sync_fraction"],
            "syncs": synced_steps(run), "bytes_allreduced": f["bytes_allreduced"],
            "replica_accuracy": f.get("replica_accuracy"), "mean_correlation": f.get("mean_correlation"),
            "wall_time_s": f["wall_time_s"],
            "projected_time_s": f["projected_time_s"], "run_dir": run.run_dir,
            **time_to_target(run.evals, goal.accuracy)}


def row_result(row: RowRuns, goal, network: str) -> dict:
    """A row of results.json: means over seeds (the accuracy's std beside it), the
    time-to-target of the seed-mean accuracy curve, and every seed's own figures."""
    from .time_to_accuracy import time_to_target

    seeds = [per_seed(r, goal) for r in row.runs]
    first = row.runs[0]
    mean = lambda key: mean_std([s[key] for s in seeds])[0]
    acc, acc_std = mean_std([s["final_test_accuracy"] for s in seeds])
    out = {"strategy": row.label, "name": row.variant.name, "entry": row.variant.entry,
           "options": dict(first.method.strategy_options), "seeds": [s["seed"] for s in seeds],
           "final_test_accuracy": acc, "final_test_accuracy_std": acc_std,
           "final_test_loss": mean("final_test_loss"), "replica_accuracy": replica_spread(row.runs),
           **{k: mean(k) for k in ("sync_fraction", "syncs", "bytes_allreduced", "wall_time_s", "projected_time_s",
                                   "mean_correlation")},
           "steps": first.final["steps"], "replicas": first.final["replicas"], "layout": first.final["layout"],
           "project_network": network, "target_accuracy": goal.accuracy, "target": goal.description,
           **time_to_target(mean_evals(row.runs), goal.accuracy)}
    if row.matched_to is not None:
        out.update(matched_to=row.matched_to.label, matched_syncs=mean_syncs(row.matched_to))
    return {**out, "per_seed": seeds}


@contextlib.contextmanager
def reuse_compilations(folder: str | Path | None = None):
    """JAX's persistent compilation cache in `folder` for the block (None: a temporary
    folder, removed after), unless one is set already: the runs of a job compile the same
    programs again and again (a row's seeds differ in data only; every cell evaluates the
    same model), and a cached program loads in a fraction of its compile time. A job's own
    folder outlives an interruption, so a resumed job loads what the stopped one compiled.
    The cache is keyed by the program itself, so a hit is the very program a fresh compile
    gives. Call it before anything compiles (JAX reads the setting once)."""
    import jax

    if jax.config.jax_compilation_cache_dir:
        yield
        return
    temporary = folder is None
    folder = tempfile.mkdtemp(prefix="jaxsel-compare-xla-") if temporary else str(folder)
    saved = {k: getattr(jax.config, k) for k in ("jax_persistent_cache_min_compile_time_secs",
                                                 "jax_persistent_cache_min_entry_size_bytes")}
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    try:
        yield
    finally:
        jax.config.update("jax_compilation_cache_dir", None)
        for k, v in saved.items():
            jax.config.update(k, v)
        if temporary:
            shutil.rmtree(folder, ignore_errors=True)
