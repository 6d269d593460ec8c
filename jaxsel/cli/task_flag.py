"""`--task NAME`: one of the named tasks (training/tasks.py) on `jaxsel compare`, `frontier`,
`calibrate` and `train`.

A task is the defaults of the flags it sets: what the user types wins, then a --config
file, then the task, then the command's own defaults. The header each command prints
names the task the run's settings are, and what differs from it (`tasks.describe`), so a
figure is never quoted for the wrong regime. `settings_args.apply_task` applies it.
"""
from __future__ import annotations

import argparse


def add_task_flag(p: argparse.ArgumentParser) -> None:
    from ..training.tasks import DEFAULT_TASK_NAME, TASKS

    listed = ", ".join(f"{t.name} ({t.short})" for t in TASKS.values())
    p.add_argument("--task", choices=tuple(TASKS), default=None, metavar="NAME",
                   help=f"the settings of a named task: {listed}; flags you type override them (default: "
                        f"{DEFAULT_TASK_NAME})")


def task_line(cfg, args: argparse.Namespace) -> str:
    """The header's line: the task `cfg` runs, and what of it was changed (wrapped to the
    terminal: a task's summary runs to 250 characters)."""
    from ..training.tasks import describe
    from .common import wrapped

    return wrapped(f"task: {describe(cfg, getattr(args, 'task', None))}")
