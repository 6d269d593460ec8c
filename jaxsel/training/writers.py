"""Metric writers: where a run's figures go at each metric read.

Every writer implements `MetricWriter`: `write(rows)` gets the per-step records of one
metric read (`RunLog.flush`, every `log_every` steps: the values are already on the host),
`write_eval(row)` one evaluation, `close()` the end of the run. No writer reads anything
from the device or is called per step, so none can slow the step.

- `rundir.metrics_file.MetricsFile`: metrics.jsonl, always (the run directory's record).
- `TensorBoardWriter` (`--tensorboard`): event files in the run directory, through
  tensorboardX (no TensorFlow); `tensorboard --logdir` on a compare directory overlays its
  strategies, one run each.
- `WandbWriter` (`--wandb PROJECT`): a W&B run per training run, grouped by
  `TrainConfig.run_group` (a compare directory's name), honouring WANDB_MODE=offline.

Both dashboards get the same scalars (`step_scalars`, `eval_scalars`).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Protocol

import numpy as np

from .rundir import WANDB_ID_FILE
from .rundir.records import read_text
from .rundir.write import write_text
from .sections import EvalSettings


class MetricWriter(Protocol):
    def write(self, rows: list[dict]) -> None:
        """The per-step records of one metric read."""

    def write_eval(self, row: dict) -> None:
        """One evaluation: {step, test_accuracy, test_loss, ...}."""

    def close(self) -> None:
        """The run ended (or stopped): flush and release."""


class Totals:
    """Running sync count and bytes per step, from the counters at the first step written
    (so a resumed run continues the curves where they stopped)."""

    def __init__(self, synced: int, nbytes: int):
        self.synced, self.nbytes = synced, nbytes

    def step_scalars(self, rec: dict) -> dict[str, float]:
        """A step's scalars: loss, running sync fraction, bytes so far (per replica),
        Delta_bar (max over replicas, when the strategy records it), divergence and
        correlation (at the steps they are measured) and the projected wall-clock so far."""
        self.synced += bool(rec["synced"])
        self.nbytes += int(rec["bytes_allreduced"])
        out = {"train/loss": rec["loss"], "train/sync_fraction": self.synced / (rec["step"] + 1),
               "train/bytes_allreduced": self.nbytes, "time/projected_s": rec.get("projected_time_s")}
        if "delta" in rec:
            out["train/delta_bar"] = _peak(rec["delta"])
        for name in ("divergence", "correlation"):
            if name in rec:
                out[f"train/{name}"] = rec[name]
        return {k: float(v) for k, v in out.items() if v is not None and math.isfinite(float(v))}


def _peak(value) -> float | None:
    """Delta_bar of a step: the largest over replicas (any replica's vote syncs)."""
    x = np.asarray(value, float)
    return float(np.nanmax(x)) if np.any(np.isfinite(x)) else None


def eval_scalars(row: dict) -> dict[str, float]:
    return {f"eval/{k}": float(row[k]) for k in ("test_accuracy", "test_loss")
            if row.get(k) is not None and math.isfinite(row[k])}


class TensorBoardWriter:
    """Scalars as TensorBoard event files in the run directory. A resumed run purges the
    events at and after its first step, so the curves hold no step twice."""

    def __init__(self, out_dir: Path, start: int, totals: Totals):
        from tensorboardX import SummaryWriter

        self.totals = totals
        self.writer = SummaryWriter(logdir=str(out_dir), purge_step=start if start else None)

    def write(self, rows: list[dict]) -> None:
        for rec in rows:
            for tag, value in self.totals.step_scalars(rec).items():
                self.writer.add_scalar(tag, value, rec["step"])
        self.writer.flush()

    def write_eval(self, row: dict) -> None:
        for tag, value in eval_scalars(row).items():
            self.writer.add_scalar(tag, value, row["step"])
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def run_name(evaluation: EvalSettings, strategy: str) -> str:
    """A run's name on the dashboards: its directory (`evaluation`: the run's EvalSettings),
    below the comparison's directory when the run belongs to one (`bsp/seed0`), else the
    directory's own name; without a run directory, its `strategy`'s name."""
    if not evaluation.out_dir:
        return strategy
    parts = Path(evaluation.out_dir).parts
    if evaluation.run_group in parts[:-1]:
        below = len(parts) - 1 - parts[::-1].index(evaluation.run_group)
        return "/".join(parts[below + 1:])
    return parts[-1]


def _recorded_id(id_file: Path) -> str | None:
    """The W&B run a resumed run continues (None: it recorded none); a file there that cannot
    be read is its error, not a new W&B run."""
    recorded = read_text(id_file)
    if recorded.error is not None:
        raise recorded.error
    return recorded.value.strip() if recorded.ok else None


class WandbWriter:
    """A W&B run per training run (WANDB_MODE=offline: written under the run directory
    for `wandb sync`). A resumed run continues the W&B run whose id the run directory kept.
    `evaluation`: the run's EvalSettings (project, group); `name`: its `run_name`;
    `settings`: every setting as plain values, the W&B run's config."""

    def __init__(self, evaluation: EvalSettings, name: str, settings: dict, out_dir: Path | None, start: int,
                 totals: Totals):
        import wandb

        self.totals, self.wandb = totals, wandb
        id_file = out_dir / WANDB_ID_FILE if out_dir else None
        run_id = _recorded_id(id_file) if start and id_file else None
        try:
            self.run = wandb.init(project=evaluation.wandb_project, group=evaluation.run_group, name=name,
                                  dir=str(out_dir) if out_dir else None, config=settings,
                                  id=run_id, resume="allow" if run_id else None,
                                  settings=wandb.Settings(console="off"))
        except Exception as err:   # no login, no network: say so in one line
            from .config import ConfigError

            raise ConfigError(f"--wandb {evaluation.wandb_project}: W&B could not start a run ({err}); log in with "
                              f"`wandb login`, or set WANDB_MODE=offline to write it locally") from None
        if id_file is not None:
            write_text(id_file, self.run.id)

    def write(self, rows: list[dict]) -> None:
        for rec in rows:
            self.run.log(self.totals.step_scalars(rec), step=rec["step"])

    def write_eval(self, row: dict) -> None:
        self.run.log(eval_scalars(row), step=row["step"])

    def close(self) -> None:
        self.run.finish()


def dashboard_writers(evaluation: EvalSettings, name: str, settings: dict, out_dir: Path | None, start: int,
                      synced: int, nbytes: int) -> list[MetricWriter]:
    """The dashboards the run's EvalSettings (`evaluation`) ask for, each with its own
    running totals (`name`, `settings`: see `WandbWriter`); if one cannot start, those
    already started are closed again."""
    writers: list[MetricWriter] = []
    try:
        if evaluation.tensorboard and out_dir is not None:
            writers.append(TensorBoardWriter(out_dir, start, Totals(synced, nbytes)))
        if evaluation.wandb_project:
            writers.append(WandbWriter(evaluation, name, settings, out_dir, start, Totals(synced, nbytes)))
    except BaseException:
        for w in writers:
            w.close()
        raise
    return writers
