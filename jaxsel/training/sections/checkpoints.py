"""The `[checkpoints]` section: checkpoints and faults (checkpoint.py, faults.py).
Checkpointing is on when any of checkpoint_dir / checkpoint_every / resume is set; the
folder defaults to checkpoints/<run> (`config.default_checkpoint_name`: unique per run
directory)."""
from __future__ import annotations

import dataclasses

from ...core.choices import NONFINITE_POLICIES
from ..declare import FREE, LOCATION, option, section
from .checks import bounded_int, declared_choices, non_empty_text


@section("checkpoints")
@dataclasses.dataclass(frozen=True)
class CheckpointSettings:
    """Where and how often the run saves itself, and what a non-finite step does."""

    checkpoint_dir: str | None = option(None, commands=("train",), effect=LOCATION, per_process=True,
                                        help="checkpoint directory (default checkpoints/<name of the run "
                                             "directory>)")
    checkpoint_every: int | None = option(None, commands=("train",), effect=FREE,
                                          help="steps between asynchronous checkpoints (also saved at the end "
                                               "and on SIGTERM/SIGINT)")
    keep: int = option(3, commands=("train",), effect=FREE, help="newest checkpoints to keep")
    resume: bool = option(False, no_flag="continue the run from its newest readable checkpoint; set by the job "
                          "flag --resume (cli/job_args.py)", set_by="--resume", effect=LOCATION)
    nonfinite: str = option("stop", choices=NONFINITE_POLICIES, commands=("train",), effect=FREE,
                            help="NaN/inf loss or gradient: stop (keep the last good checkpoint) or skip the step")

    @property
    def checkpointing(self) -> bool:
        return bool(self.checkpoint_dir or self.checkpoint_every or self.resume)

    def check(self, run) -> None:
        """At least one checkpoint kept, a positive interval, a usable folder."""
        bounded_int("keep", self.keep, 1)
        bounded_int("checkpoint_every", self.checkpoint_every, 1, optional=True)
        non_empty_text(self, "checkpoint_dir")
        declared_choices(self)
