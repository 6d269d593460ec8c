"""The task a job trains, as its headers, titles and records name it.

Calibration, the comparison's figures and the frontier each state the task in one line
(dataset, model, replicas, batch, partition, steps, learning rate). They read it from one
value built from the three sections that hold it (data, optimizer, replicas), not from a
run's whole settings: a line can then only say what those sections hold, and each job's
line is worded by the job alone.
"""
from __future__ import annotations

import dataclasses

from ..training.lr_schedule import describe_lr_schedule


@dataclasses.dataclass(frozen=True)
class TaskSetting:
    """The task's facts that the jobs' one-line descriptions show."""

    dataset: str
    model: str
    replicas: int
    batch_size: int
    partition: str          # as configured (`--partition`)
    injected: bool          # SelSync's data injection is on (partition_options' injection)
    steps: int
    optimizer: str
    lr: float
    lr_schedule: str        # as configured (`--lr-schedule`)

    @classmethod
    def of(cls, data, optim, placement) -> "TaskSetting":
        """The task of a run's DataSettings, OptimSettings and ReplicaSettings."""
        return cls(data.dataset, optim.model, placement.replicas, optim.batch_size, data.partition,
                   bool(data.partition_options.get("injection")), optim.steps, optim.optimizer, optim.lr,
                   optim.lr_schedule)

    @property
    def head(self) -> str:
        """What trains, on how many replicas: "digits / mlp, 4 replicas x batch 32"."""
        return f"{self.dataset} / {self.model}, {self.replicas} replicas x batch {self.batch_size}"

    @property
    def shards(self) -> str:
        """The partition, marked where SelSync's data injection is on ("seldp + injection")."""
        return self.partition + (" + injection" if self.injected else "")

    @property
    def schedule(self) -> str:
        """The learning-rate schedule in words ("constant", "x0.1 at steps 300, 450")."""
        return describe_lr_schedule(self.lr_schedule, self.steps)
