"""The run log: what a training run has done so far, kept on the host.

Metrics stay on the device between reads: the loop hands each step's metrics to `RunLog`,
which fetches a whole window in one transfer (`flush`), checks it for non-finite values,
advances the running counters and the projected wall-clock, and appends the rows to
`metrics.jsonl` (flushed per window, so a killed run loses no written row). The counters
and evaluations travel in checkpoints (`checkpoint_meta`), so a resumed run continues
every figure where it stopped. The rows also go to the dashboards the run asks for
(writers.py), at the same reads.
"""
from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..costmodel import Cluster, Projector
from .faults import MAX_CONSECUTIVE_SKIPS, describe_nonfinite
from .lr_schedule import scheduled_lr
from .rundir import METRICS_FILE
from .rundir.metrics_file import MetricsFile
from .rundir.write import jsonable
from .sections import EvalSettings, OptimSettings, ProjectSettings
from .writers import MetricWriter, dashboard_writers


def projected_cluster(project: ProjectSettings) -> Cluster:
    """The cluster a run is projected onto (`project`: its ProjectSettings; one network
    unless project_gpus_per_host > 1)."""
    return Cluster(project.project_network, project.project_intra_network, project.project_gpus_per_host)


@dataclasses.dataclass(frozen=True)
class LogSettings:
    """What the run log reads of a run's settings, handed over by the loop: the log depends
    on these sections and values alone, so a change elsewhere in the settings cannot reach
    it. `settings`: every setting as plain values (a W&B run's config); `name`: the run's
    name on the dashboards (writers.run_name)."""

    optim: OptimSettings          # steps, seed, the learning-rate schedule
    projection: ProjectSettings   # the cluster the run is projected onto
    evaluation: EvalSettings      # the metric reads and the dashboards
    replicas: int
    nonfinite: str      # the non-finite policy ("skip" counts skipped steps)
    name: str
    settings: dict


def make_projector(logged: LogSettings, timing: dict, saved: dict | None = None) -> Projector:
    """The live projection of this run (`timing`: the strategy's cost-model keywords)."""
    return Projector(projected_cluster(logged.projection), logged.replicas, logged.optim.steps,
                     logged.projection.project_stragglers, logged.optim.seed, **timing, state=saved)


@dataclasses.dataclass
class Counters:
    """Running totals over the whole run (carried across resumes in checkpoints)."""

    train_time_s: float = 0.0
    bytes_allreduced: int = 0
    projected_time_s: float = 0.0
    synced_steps: int = 0
    skipped_steps: int = 0
    skipped_synced_steps: int = 0   # skipped steps that had synchronized (a sample-epochs clock never saw them)

    @classmethod
    def from_meta(cls, meta: dict) -> "Counters":
        return cls(**{f.name: (int if f.type == "int" else float)(meta.get(f.name, 0))
                      for f in dataclasses.fields(cls)})


def records_from(window: list[tuple[int, dict]], fetch: Callable = jax.device_get,
                 alongside: Any = None) -> tuple[list[dict], Any]:
    """Fetch a window of on-device metrics, and `alongside` (a pytree: the window's
    divergences), in one transfer: (one record per step, `alongside` on the host)."""
    fetched, alongside = fetch((stack_steps([m for _, m in window]), alongside))
    return split_steps([t for t, _ in window], fetched), alongside


def stack_steps(metrics: list[dict]) -> dict[str, Any] | list[dict]:
    """The window's metrics as one array per name (leading axis: the step), stacked by one
    jitted program: the host then reads a handful of arrays per window instead of one per
    name and step (measured: reading leaf by leaf was most of a window's read). A copy, so
    every value is unchanged. Names whose steps differ in shape or type, or that are not
    device arrays, are kept as one value per step; steps that report different names are
    returned as they are."""
    if not metrics:
        return {}
    names = list(metrics[0])
    if any(list(m) != names for m in metrics):
        return metrics
    same = {k: all(_same_array(metrics[0][k], m[k]) for m in metrics) for k in names}
    columns = {k: [m[k] for m in metrics] for k in names if same[k]}
    stacked = _stack(columns) if columns else {}
    return {k: stacked[k] if same[k] else [m[k] for m in metrics] for k in names}


def _same_array(first, x) -> bool:
    return isinstance(x, jax.Array) and x.shape == first.shape and x.dtype == first.dtype


@jax.jit
def _stack(columns: dict[str, list]) -> dict[str, jax.Array]:
    return {k: jnp.stack(v) for k, v in columns.items()}


def split_steps(steps: list[int], fetched: dict[str, Any] | list[dict]) -> list[dict]:
    """One record per step from what `stack_steps` gave, fetched: {"step", name: a Python
    number or list}."""
    if isinstance(fetched, list):
        return [{"step": t, **{k: _plain(v) for k, v in m.items()}} for t, m in zip(steps, fetched)]
    return [{"step": t, **{k: _plain(v[i]) for k, v in fetched.items()}} for i, t in enumerate(steps)]


def _plain(v):
    """A metric as JSON-ready Python: a number for a scalar, nested lists otherwise."""
    v = np.asarray(v)
    return v.item() if v.ndim == 0 else v.tolist()


def _mean_of(records: list[dict], key: str) -> float | None:
    """The mean of `key` over the records that logged it (None where none did)."""
    values = [r[key] for r in records if r.get(key) is not None]
    return float(np.mean(values)) if values else None


class RunLog:
    """Metrics window, counters, evaluations, projection and the JSONL log of one run.

    `out_dir` None: nothing is written (other processes of a multi-host run, library
    runs without a run directory). `history` is a checkpoint's meta (resuming)."""

    def __init__(self, logged: LogSettings, timing: dict, out_dir: Path | None, start: int, history: dict,
                 fetch: Callable = jax.device_get, bar=None, lead: bool = True, samples=None):
        self.logged, self.fetch, self.bar, self.lead = logged, fetch, bar, lead
        saved = history.get("counters", {})
        self.counters = Counters.from_meta(saved)
        self.projector = make_projector(logged, timing, saved.get("projector"))
        self.evals: list[dict] = list(history.get("evals", []))
        self.window: list[tuple[int, dict]] = []
        self.divergences: dict[int, Any] = {}
        self.skip_run = 0
        optim = logged.optim
        self.lr_at = scheduled_lr(optim.lr_schedule, optim.lr, optim.lr_schedule_length, samples)
        file = MetricsFile(out_dir / METRICS_FILE, start) if out_dir else None
        self.records: list[dict] = list(file.earlier) if file else []
        self.writers: list[MetricWriter] = [file] if file else []
        if lead:
            try:
                self.writers += dashboard_writers(logged.evaluation, logged.name, logged.settings, out_dir, start,
                                                  self.counters.synced_steps, self.counters.bytes_allreduced)
            except BaseException:
                self.close()
                raise
        self.tick()

    def tick(self) -> None:
        """Start timing training again (evaluating and saving are not training time)."""
        self.started = time.perf_counter()

    def add_step(self, t: int, metrics: dict) -> None:
        self.window.append((t, metrics))

    def add_replica_metrics(self, t: int, values: dict) -> None:
        """Step t's reads of the replicas (`core.correlation.replica_metrics`: divergence,
        correlation), unfetched: they travel with the window's metrics."""
        self.divergences[t] = values

    def flush(self, t: int) -> dict | None:
        """Fetch, check, count, project and write the window; the record that must stop
        the run (non-finite), if any, is returned after everything before it was logged."""
        divs = {step: self.divergences.pop(step) for step, _ in self.window if step in self.divergences}
        new, divs = records_from(self.window, self.fetch, divs)
        self.window = []
        bad = self._first_bad(new, divs)
        if bad is not None:
            new = new[:bad + 1]
        self._count_and_project(new)
        self.records.extend(new)
        for writer in self.writers:
            writer.write(new)
        self._report(new, t)
        return new[-1] if bad is not None else None

    def _first_bad(self, new: list[dict], divs: dict) -> int | None:
        c, bad = self.counters, None
        for i, rec in enumerate(new):
            if rec["step"] in divs:
                rec.update({name: float(v) for name, v in divs[rec["step"]].items()})
            # a skipped step leaves the optimizer be (its sample clock too)
            rec["lr"] = self.lr_at(rec["step"] - c.skipped_steps, c.synced_steps - c.skipped_synced_steps)
            c.bytes_allreduced += int(rec["bytes_allreduced"])
            c.synced_steps += bool(rec["synced"])
            if self.logged.nonfinite == "skip":
                self.skip_run = self.skip_run + 1 if rec["nonfinite"] else 0
                c.skipped_steps += bool(rec["nonfinite"])
                c.skipped_synced_steps += bool(rec["nonfinite"]) and bool(rec["synced"])
                if self.skip_run >= MAX_CONSECUTIVE_SKIPS and bad is None:
                    bad = i
            elif bad is None and describe_nonfinite(rec):
                bad = i
        return bad

    def _count_and_project(self, new: list[dict]) -> None:
        c = self.counters
        elapsed = time.perf_counter() - self.started
        c.train_time_s += elapsed
        measured = self.logged.projection.project_compute_s
        step_s = measured if measured is not None else elapsed / max(len(new), 1)
        for rec in new:
            rec["train_time_s"] = c.train_time_s
            vote, group = int(rec.get("vote_bytes", 0)), int(rec.get("group_bytes", 0))
            c.projected_time_s = self.projector.advance(
                rec["step"], bool(rec["synced"]), int(rec["bytes_allreduced"]) - vote - group, vote, step_s,
                group_payload=group, group_synced=bool(rec.get("group_synced", group > 0)))
            rec["projected_time_s"] = c.projected_time_s

    def _report(self, new: list[dict], t: int) -> None:
        if self.bar is not None:
            self.bar.update(len(new))
            self.bar.set_postfix(loss=f"{new[-1]['loss']:.3f}", sync=f"{self.counters.synced_steps / (t + 1):.2f}")
        skipped = [r["step"] for r in new if r.get("nonfinite")]
        if skipped and self.lead:
            print(f"jaxsel: warning: skipped non-finite step(s) {skipped} (state left unchanged)",
                  file=sys.stderr, flush=True)

    def add_eval(self, step: int, result: dict) -> None:
        c = self.counters
        self.evals.append({"step": step, **result, "train_time_s": c.train_time_s,
                           "projected_time_s": c.projected_time_s, "bytes_allreduced": c.bytes_allreduced})
        for writer in self.writers:
            writer.write_eval(self.evals[-1])

    def checkpoint_meta(self) -> dict:
        """What a resumed run needs to continue every figure."""
        return {"evals": jsonable(self.evals),
                "counters": {**dataclasses.asdict(self.counters), "projector": self.projector.state()}}

    def final(self, description: str, compile_time: float, start: int) -> dict:
        """The run's closing figures (final.json)."""
        logged, c, summary = self.logged, self.counters, self.projector.summary()
        tail = self.records[-logged.evaluation.log_every:]
        final = {
            "strategy": description,
            "final_test_accuracy": self.evals[-1]["test_accuracy"],
            "final_test_loss": self.evals[-1]["test_loss"],
            "final_train_loss": float(np.mean([r["loss"] for r in tail])) if tail else float("nan"),
            "mean_correlation": _mean_of(self.records, "correlation"),
            "sync_fraction": c.synced_steps / logged.optim.steps,
            "bytes_allreduced": c.bytes_allreduced,
            "wall_time_s": c.train_time_s,
            "compile_time_s": compile_time,
            "projected_time_s": summary["total"],
            "projection": summary,
            "steps": logged.optim.steps,
            "replicas": logged.replicas,
        }
        if logged.nonfinite == "skip":
            final["skipped_steps"] = c.skipped_steps
        if start:
            final["resumed_from_step"] = start
        return final

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        for writer in self.writers:
            writer.close()
