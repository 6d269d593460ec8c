"""Named tasks: the settings a comparison of methods runs on, each under one name that
`--task NAME` selects in `jaxsel compare`, `frontier`, `calibrate` and `train`.

Why named tasks: where a method wins depends on the regime more than on anything else. On
label-skewed shards replicas that train alone drift apart, and every method is judged on
how well it holds them together; on IID shards infrequent syncs cost little. SelSync's
paper claims its results in the second regime (every one of its authors' scripts: IID
SelDP shards, 10 workers x batch 32, data injection off); jaxsel's default job ran the
first. Both are tasks here, defined once, so a figure quoted for one names it and the other
is one flag away. A task is settings only (TrainConfig fields): flags the user types, and a
--config file, override them, and `describe` says so.

The two share the model and its recipe (MNIST-1D, embedded; an MLP; SGD lr 0.05, momentum
0.9, x0.1 at 50 % and 75 % of 600 steps: the milestone decay of SelSync's reference
recipes, counted in steps, so every method decays at the same steps); they differ in the
partition and in the workers and their batch.
"""
from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any, Mapping

#: what both tasks share: the model and its training recipe
_RECIPE = {"dataset": "mnist1d", "model": "mlp", "steps": 600, "optimizer": "sgd", "lr": 0.05, "momentum": 0.9,
           "lr_schedule": "milestones"}


@dataclasses.dataclass(frozen=True)
class Task:
    """`name` (the flag's value), `summary` (one line for headers and descriptions),
    `short` (a few words for the flag's help) and `settings` (TrainConfig field -> value)."""

    name: str
    summary: str
    short: str
    settings: Mapping[str, Any]

    def __post_init__(self):
        object.__setattr__(self, "settings", MappingProxyType(dict(self.settings)))


LABEL_SKEW = Task("label-skew",
                  "MNIST-1D (embedded), MLP, 8 replicas x batch 16, label-skewed shards (each replica owns 2 of the "
                  "10 classes), SGD lr 0.05 momentum 0.9 decayed x0.1 at 50% and 75% of 600 steps",
                  "8 replicas x batch 16, each owning 2 classes",
                  {**_RECIPE, "replicas": 8, "batch_size": 16, "partition": "label_skew"})
PAPER = Task("paper",
             "SelSync's paper's regime on MNIST-1D (embedded), MLP: IID SelDP shards (every replica walks the whole "
             "training set in its own order), 10 replicas x batch 32, no data injection, SGD lr 0.05 momentum 0.9 "
             "decayed x0.1 at 50% and 75% of 600 steps",
             "SelSync's paper's regime: IID SelDP shards, 10 replicas x batch 32",
             {**_RECIPE, "replicas": 10, "batch_size": 32, "partition": "seldp"})

TASKS: Mapping[str, Task] = MappingProxyType({t.name: t for t in (LABEL_SKEW, PAPER)})
#: the task of `jaxsel compare` (the README's main job), `frontier`, `calibrate` and `train` without
#: --task (a library TrainConfig() keeps its own defaults: cli/train.py says why)
DEFAULT_TASK_NAME = LABEL_SKEW.name


def task_named(name: str) -> Task:
    """The task called `name`; another name is a one-line ValueError listing the tasks."""
    try:
        return TASKS[name]
    except (KeyError, TypeError):
        raise ValueError(f"--task {name!r} is not a task; the tasks are {', '.join(TASKS)}") from None


def _changed(task: Task, cfg) -> dict[str, Any]:
    """The task's settings that `cfg` holds other values of (field -> cfg's value); an
    option table the task leaves empty (partition options: injection, a class split)
    counts when it is set. A task names settings by field, so they are compared as one
    table of values by name, whichever section holds each."""
    values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    out = {k: values[k] for k, v in task.settings.items() if values[k] != v}
    if values.get("partition_options"):
        out["partition_options"] = values["partition_options"]
    return out


def task_of(cfg) -> str | None:
    """The name of the task whose settings `cfg` holds exactly, else None."""
    return next((t.name for t in TASKS.values() if not _changed(t, cfg)), None)


def describe(cfg, name: str | None = None) -> str:
    """The task `cfg` runs, in one line: "paper: <summary>", or, where settings differ from
    the task `name` (default: the default task), "label-skew with partition=seldp: ...".
    True of `cfg` whatever flags or files set it."""
    task = task_named(name or DEFAULT_TASK_NAME)
    changed = _changed(task, cfg)
    if not changed:
        return f"{task.name}: {task.summary}"
    shown = ", ".join(f"{k}={v}" for k, v in changed.items())
    return f"{task.name} with {shown} (the task: {task.summary})"
