"""The job flags every training command shares, declared once: `--out`, `--resume`,
`--config`, (for the commands that run several seeds) `--seeds` and (for the jobs whose cells
may be split or batched) `--shard`, `--no-batch-cells`.

`--out` names the directory the command owns (a run's, a comparison's, a frontier's),
created with its parents; `--resume` continues what that directory holds; `--config`
reads settings from a file under the flags typed (training/config_file.py). Each command
says what its directory is and what resuming it means (`Job`), so the flags are spelt,
read and checked alike everywhere: `args.out`, `args.resume`, `args.config`, `args.seeds`.
"""
from __future__ import annotations

from typing import NamedTuple

from .common import UsageError


class Job(NamedTuple):
    """What a command's job flags mean for it."""

    directory: str      # "run directory", "comparison directory", ...
    default: str        # runs/<...>-<time>, as --help says it
    resume: str         # what --resume continues
    config: str         # what a --config file may set
    seeds: bool = False  # the command trains every point with several seeds
    seeds_default: int = 3
    seeds_help: str = "train every point with seeds --seed .. --seed+K-1; tables show mean ± std"
    shards: bool = False  # the job's cells may be split over processes (--shard, SLURM job arrays)


def add_job_args(group, job: Job) -> None:
    """--out, --resume, --config (and --seeds) in `group`, the command's first section."""
    group.add_argument("--out", default=None, metavar="DIR",
                       help=f"{job.directory}, created with its parents (default {job.default})")
    group.add_argument("--resume", action="store_true", help=f"continue {job.resume} in --out")
    group.add_argument("--config", default=None, metavar="FILE",
                       help=f"settings from a TOML/JSON/YAML file ({job.config}); flags typed override it")
    if job.seeds:
        group.add_argument("--seeds", type=int, default=job.seeds_default, metavar="K", help=job.seeds_help)
    if job.shards:
        group.add_argument("--shard", default=None, metavar="I/N",
                           help="run shard I of N of the job's cells (every Nth, from cell I) into the --out all "
                                "shards share; the last shard to finish writes the tables (default: a SLURM job "
                                "array task's SLURM_ARRAY_TASK_ID of SLURM_ARRAY_TASK_COUNT, else every cell; "
                                "--shard 0/1: every cell)")
        group.add_argument("--no-batch-cells", dest="batch_cells", action="store_false",
                           help="train the job's cells one by one (default: cells that differ only in their seed "
                                "train as one batch, one jitted step over a cell axis, each with the records it "
                                "writes alone)")


def check_resume(args, job: Job) -> None:
    """--resume needs the directory it continues."""
    if args.resume and not args.out:
        raise UsageError(f"--resume needs --out DIR: the {job.directory} to continue")


def shard_of(args, job: Job):
    """The process's shard of the job's cells (analysis/shard.py), None for every cell; a
    shard needs --out, the directory every shard writes into."""
    from ..analysis.shard import resolve_shard

    shard = resolve_shard(args.shard)
    if shard is not None and not args.out:
        raise UsageError(f"shard {shard.name} (from {shard.source}) needs --out DIR: the {job.directory} every "
                         f"shard writes into")
    return shard
