"""TrainConfig: a run's settings, its typed sections composed (training/sections/).

Each field is declared once, in its section, with its flag and what it does to a run
(`declare.option`): the command line's parsers, config files, the choice checks, resumes
and checkpoints read the declarations. `TrainConfig` is every section's fields in one
frozen record (`cfg.lr`, `TrainConfig(lr=...)`: the flat form the library has always
had), and each section as a value of its own (`cfg.data`, `cfg.optim`, ...), which new
code reads. `check_config` runs once per run, in its plan (plan.py), before any data is
read or anything compiles, whoever starts the run, and once per entry of a comparison
before any cell trains: each section's `check()` in turn. Each bad value becomes one
`ConfigError` naming the value and what is allowed; the CLI prints it as one line and exits
2. Strategy options are checked where the strategy is built (once per run, in its plan):
the strategy, its trigger and aggregator own those rules.
"""
from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from ..compat.packing_names import reads_old_name
from ..core.checks import MAX_SEED   # noqa: F401 - read from here by the analysis layer
from .declare import per_process
from .rundir import CHECKPOINTS_DIR
from .sections import (CHECK_ORDER, CheckpointSettings, ConfigError, DataSettings, EvalSettings, OptimSettings,
                       ProjectSettings, ReplicaSettings, StrategySettings)
from .sections.optim import MAX_STEPS   # noqa: F401 - the step counter's bound, read from here


class SectionView:
    """`cfg.data` and the like: the section of a TrainConfig as a value of its own (the
    section's class, read on the class), built on first use and kept with the settings
    (they are frozen: it never goes stale)."""

    def __init__(self, cls):
        self.cls = cls

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, settings, owner=None):
        if settings is None:
            return self.cls
        section = self.cls(**{f.name: getattr(settings, f.name) for f in dataclasses.fields(self.cls)})
        settings.__dict__[self.name] = section   # read from the instance from now on
        return section


@reads_old_name   # last release's `TrainConfig(local_replicas=...)`, noted (compat/packing_names.py)
@dataclasses.dataclass(frozen=True)
class TrainConfig(CheckpointSettings, ProjectSettings, EvalSettings, ReplicaSettings, OptimSettings, DataSettings,
                  StrategySettings):
    """Every setting of a run: the sections' fields, in their order (the bases are listed
    last section first, as dataclasses collect fields from the base class up)."""

    TABLE = None
    method = SectionView(StrategySettings)
    data = SectionView(DataSettings)
    optim = SectionView(OptimSettings)
    placement = SectionView(ReplicaSettings)
    evaluation = SectionView(EvalSettings)
    projection = SectionView(ProjectSettings)
    checkpoints = SectionView(CheckpointSettings)

    @classmethod
    def of(cls, *sections) -> "TrainConfig":
        """The settings made of `sections` (each kind at most once; one left out: its
        defaults), as new code builds them: `TrainConfig.of(DataSettings(dataset="mnist1d"),
        OptimSettings(lr=0.1))`."""
        given: dict = {}
        for section in sections:
            kind = type(section)
            if kind not in CHECK_ORDER:
                kinds = ", ".join(c.__name__ for c in CHECK_ORDER)
                raise TypeError(f"{section!r} is not a section of the settings ({kinds})")
            if kind in given:
                raise TypeError(f"{kind.__name__} given twice; give each section once")
            given[kind] = section
        return cls(**{f.name: getattr(s, f.name) for s in given.values() for f in dataclasses.fields(s)})

    def sections(self) -> tuple:
        """Each section's value, in the order their checks run."""
        views = {view.cls: view.name for view in vars(TrainConfig).values() if isinstance(view, SectionView)}
        return tuple(getattr(self, views[cls]) for cls in CHECK_ORDER)

    def check(self, run=None) -> None:
        """Raise ConfigError naming the first bad value (see `check_config`; `run`: unused,
        the sections' signature)."""
        check_config(self)

    def checkpoint_root(self) -> Path | None:
        """Where checkpoints go, or None when checkpointing is off."""
        if not self.checkpointing:
            return None
        if self.checkpoint_dir:
            return Path(self.checkpoint_dir)
        return Path(CHECKPOINTS_DIR) / default_checkpoint_name(self)

    validate = check


def check_config(cfg: TrainConfig) -> None:
    """Raise ConfigError naming the first bad value and what is allowed: each section's own
    check, the replica count's first (other sections' rules read it)."""
    for section in cfg.sections():
        section.check(cfg)


def default_checkpoint_name(cfg: TrainConfig) -> str:
    """checkpoints/<this> of a run without --checkpoint-dir: the run directory's name and 8
    hex digits of its resolved path (`--out a/x` and `--out b/x` never share a folder; the
    same directory spelt differently, `x` or `./x`, keeps its own); without a run
    directory, the run's strategy, dataset, model and seed."""
    if not cfg.evaluation.out_dir:
        return f"{cfg.method.strategy}-{cfg.data.dataset}-{cfg.optim.model}-seed{cfg.optim.seed}"
    out = Path(cfg.evaluation.out_dir).expanduser().resolve()
    return f"{out.name}-{hashlib.sha256(str(out).encode()).hexdigest()[:8]}"


#: settings each process of a multi-host run may set its own way (paths, host threads)
PROCESS_LOCAL = per_process(TrainConfig)


def agreed_settings(cfg: TrainConfig) -> dict:
    """The settings every process of a multi-host run must share."""
    return {k: v for k, v in dataclasses.asdict(cfg).items() if k not in PROCESS_LOCAL}
