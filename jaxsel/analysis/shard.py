"""A long job's cells split over processes (machines, SLURM array tasks): shard I of N runs
the cells whose index in the job's fixed order is I mod N, into the one job directory
that all shards share.

Why this split: the job's cell order is fixed by its settings (and, for cells planned
from earlier cells' results, by those results, which every shard reads from the same
records), so every shard computes the same list and no two shards ever run one cell,
with no coordinator. A shard holds its own lock (OUT/.shards/I-of-N/) while it runs, so
the others can tell a shard still running from one that stopped; it takes the job
directory's lock only for moments (to record or join the job, and to write the tables),
and a job run without --shard holds it throughout, so the two never train one directory
at once. A cell of another shard that this one needs to plan its next cells (a
comparison's budget-matched rows, the frontier's derived points) is waited for while its
shard runs or has not started; one whose shard stopped is named, with how to finish.
The job's tables and pictures are written by the shard that finds every cell in when it
ends (the last one), or by `jaxsel report OUT` once all are.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time
from pathlib import Path
from typing import Callable, Mapping

from ..training.config import ConfigError
from ..training.rundir.lock import DirectoryLock, RunLocked

#: the folder of the shards' own locks, inside the job directory
SHARDS_DIR = ".shards"
#: how often a shard looks again for a cell it waits for, and for the job directory's lock
POLL_S = 2.0
#: how long a shard waits for the job directory's lock (held for moments by another shard)
JOB_LOCK_WAIT_S = 120.0
#: SLURM's job array variables: this task's id, the array's size and its first id
SLURM_ID, SLURM_COUNT, SLURM_MIN = "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN"


@dataclasses.dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (0 <= index < count), and where that came from."""

    index: int
    count: int
    source: str = "--shard"

    def owns(self, ordinal: int) -> bool:
        """Whether the job's cell number `ordinal` (0-based, in the job's order) is this shard's."""
        return ordinal % self.count == self.index

    def owner(self, ordinal: int) -> int:
        return ordinal % self.count

    @property
    def name(self) -> str:
        return f"{self.index}/{self.count}"

    def describe(self) -> str:
        """The header's line: which shard, from where, which cells."""
        return (f"shard {self.name} (from {self.source}): cells {self.index}, {self.index + self.count}, "
                f"{self.index + 2 * self.count}, ... of the job's fixed order; the other shards' cells are loaded "
                f"when in")


def parse_shard(text: str, source: str = "--shard") -> Shard:
    """"I/N" as a Shard; anything else a one-line ConfigError naming it."""
    index, sep, count = str(text).partition("/")
    if not (sep and index.strip().isdigit() and count.strip().isdigit()):
        raise ConfigError(f"{source} {text!r} must be I/N: shard I (0 .. N-1) of N, e.g. 0/4")
    return checked(int(index), int(count), source, text)


def checked(index: int, count: int, source: str, text: str) -> Shard:
    if count < 1:
        raise ConfigError(f"{source} {text!r}: the number of shards must be at least 1")
    if not 0 <= index < count:
        raise ConfigError(f"{source} {text!r}: the shard must be one of 0 .. {count - 1} (0-based) of {count}")
    return Shard(index, count, source)


def slurm_shard(environ: Mapping[str, str]) -> Shard | None:
    """The shard of a SLURM job array's task (`sbatch --array=0-<N-1>`): id less the array's
    first id, of its task count; None outside an array (both variables are needed)."""
    if SLURM_ID not in environ or SLURM_COUNT not in environ:
        return None
    values = {k: environ[k] for k in (SLURM_ID, SLURM_COUNT, SLURM_MIN) if k in environ}
    text = ", ".join(f"{k}={v}" for k, v in values.items())
    if not all(v.strip().isdigit() for v in values.values()):
        raise ConfigError(f"SLURM job array variables {text} must be whole numbers")
    first = int(values.get(SLURM_MIN, "0"))
    index, count = int(values[SLURM_ID]) - first, int(values[SLURM_COUNT])
    if count < 1 or not 0 <= index < count:
        raise ConfigError(f"SLURM job array task {text} is not one of {count} consecutive tasks; submit the job "
                          f"with sbatch --array=0-{max(count, 1) - 1} (no step, no gaps), or give --shard I/N")
    return Shard(index, count, f"{SLURM_ID}={values[SLURM_ID]} of {SLURM_COUNT}={count}")


def resolve_shard(text: str | None, environ: Mapping[str, str] | None = None) -> Shard | None:
    """The process's shard: --shard when given, else the SLURM job array's task, else None
    (the whole job in this process)."""
    if text is not None:
        return parse_shard(text)
    return slurm_shard(os.environ if environ is None else environ)


def shard_dir(out: Path, index: int, count: int) -> Path:
    return Path(out) / SHARDS_DIR / f"{index}-of-{count}"


def lock_shard(out: Path, shard: Shard) -> DirectoryLock:
    """This shard's own lock (RunLocked when the same shard runs already)."""
    return DirectoryLock(shard_dir(out, shard.index, shard.count), f"shard {shard.name} of job directory").acquire()


def shard_state(out: Path, index: int, count: int) -> str:
    """"running", "stopped" (it ran and ended) or "not started" (no trace of it here)."""
    folder = shard_dir(out, index, count)
    if not folder.is_dir():
        return "not started"
    try:
        DirectoryLock(folder, "shard").check_free()
    except RunLocked:
        return "running"
    return "stopped"


def running_shards(out: Path) -> list[str]:
    """The shards (of any count) that a live process runs in `out` now, as "I/N"."""
    found = []
    for folder in sorted((Path(out) / SHARDS_DIR).glob("*-of-*")):
        index, _, count = folder.name.partition("-of-")
        if index.isdigit() and count.isdigit() and shard_state(out, int(index), int(count)) == "running":
            found.append(f"{index}/{count}")
    return found


def refuse_running_shards(out: Path) -> None:
    """A job run without --shard trains every missing cell: not while shards train theirs."""
    running = running_shards(out)
    if running:
        raise RunLocked(f"job directory {str(out)!r} is being run by shard(s) {', '.join(running)}; wait for them, "
                        f"or run the missing cells with the same --shard I/N")


def lock_job_briefly(out: Path, what: str, wait_s: float = JOB_LOCK_WAIT_S) -> DirectoryLock:
    """The job directory's lock, waited for while another shard holds it for a moment; a
    job run without --shard that holds it for long is RunLocked after `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return DirectoryLock(out, what).acquire()
        except RunLocked:
            if time.monotonic() >= deadline:
                raise
            time.sleep(POLL_S)


def joins(out: Path, shard: Shard | None) -> bool:
    """Whether this process joins a job another shard recorded in `out` already (a shard
    does that without --resume: the shards of one job start in any order)."""
    from .job import read_job

    return shard is not None and read_job(Path(out)) is not None


@contextlib.contextmanager
def job_held(out: Path, what: str, shard: Shard | None, begin: Callable[[bool], None]):
    """The job directory held for the block: a whole job holds the directory's lock
    throughout (never while shards run in it); a shard holds its own lock, taking the
    directory's only to record or join the job. `begin(joining)` records or checks job.json."""
    if shard is None:
        lock = DirectoryLock(out, what).acquire()
        try:
            refuse_running_shards(out)
            begin(False)
            yield
        finally:
            lock.release()
        return
    lock = lock_job_briefly(out, what)
    try:
        other = [name for name in running_shards(out) if not name.endswith(f"/{shard.count}")]
        if other:
            raise RunLocked(f"job directory {str(out)!r} is being run in shards {', '.join(other)}, not of "
                            f"{shard.count}: give every shard of one job the same N")
        begin(joins(out, shard))
        own = lock_shard(out, shard)
    finally:
        lock.release()
    try:
        yield
    finally:
        own.release()


def finish(out: Path, what: str, shard: Shard | None, missing: list, write: Callable[[], object]):
    """`write()`'s answer (the job's tables) once every cell is in, else None after saying
    in one line which shards still owe cells and how to finish. The shards' locks' folder
    goes once the tables are written."""
    if missing:
        owners = sorted({shard.owner(p.ordinal) for p in missing})
        states = ", ".join(f"{i}/{shard.count} ({shard_state(out, i, shard.count)})" for i in owners)
        print(f"shard {shard.name}: its cells are in; {len(missing)} cell(s) of shard(s) {states} are still missing: "
              f"the last shard to finish writes the job's tables, or run `jaxsel report {out}` once every shard "
              f"has (a stopped shard continues with the same command)", flush=True)
        return None
    if shard is None:
        return write()
    lock = lock_job_briefly(out, what)
    try:
        done = write()
        shutil.rmtree(Path(out) / SHARDS_DIR, ignore_errors=True)
    finally:
        lock.release()
    return done
