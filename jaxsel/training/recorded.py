"""A run's recorded settings, read back for a resume: what the run in a directory ran with,
and what a resume may change of it.

`jaxsel train --out RUN_DIR --resume` continues the run with the settings its config.json
records (as today's jaxsel reads them: old_records.py), not with the command line's
defaults: flags typed override them, and those that would change its results (anything
that shapes its trajectory: each field declares its `effect`, training/sections/) are refused
before anything is built, naming each, rather than after the run is built by its
checkpoint's identity check.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from .config import TrainConfig
from .config_file import load_settings, read_file
from .declare import FREE, KEPT, LOCATION, named, with_effect
from .old_records import as_it_ran
from .rundir import CONFIG_FILE
from .rundir.records import Found, read_record

#: how a resume names the record it reads in its errors
RESUME_FLAG = "--resume of"
#: where a run lives, which a resume sets itself, and what it takes from its checkpoints
#: (they are no change of its settings)
SET_BY_RESUME = with_effect(TrainConfig, LOCATION, KEPT)
#: what a resume may change; every other setting changes its results or what it reports
#: (evaluations before and after the resume on other test examples are not one curve,
#: packed replicas computed by another loop differ in the last bits from the uninterrupted
#: run a resume equals: `effect=REPORTED`)
FREE_ON_RESUME = with_effect(TrainConfig, FREE)


def recorded_settings(out_dir: str | Path) -> dict | None:
    """The settings RUN_DIR/config.json records, checked as a config file's are (read as
    today's jaxsel reads them: a setting of train's old defaults that the record lacks at
    its old value, old_records.py), without its location; None where the run has no record."""
    record = read_record(Path(out_dir) / CONFIG_FILE, dict)
    if record.found is Found.MISSING:
        return None
    # a damaged record: the config-file reader says what is wrong with it, in one line
    data = record.value if record.ok else read_file(record.path, RESUME_FLAG)
    return as_it_ran(load_settings(record.path, flag=RESUME_FLAG, data=data))


def resume_changes(recorded: dict, cfg: TrainConfig) -> tuple[list[str], list[str]]:
    """What `cfg` changes of the `recorded` run's settings, each as "name old -> new": those
    a resume may change (how long, how often it evaluates or logs, where and how it runs),
    and those that would change its results."""
    before = _plain({**dataclasses.asdict(TrainConfig()), **recorded})
    after = _plain(dataclasses.asdict(cfg))
    allowed, refused = [], []
    for name in after:
        if name in SET_BY_RESUME or _same(name, before[name], after[name], before):
            continue
        line = f"{named(TrainConfig, name)} {before[name]!r} -> {after[name]!r}"
        (allowed if name in FREE_ON_RESUME else refused).append(line)
    return allowed, refused


def _plain(settings: dict) -> dict:
    """As JSON holds them (a tuple and the list it was recorded as compare equal)."""
    return json.loads(json.dumps(settings, default=str))


def _same(name: str, old, new, recorded: dict) -> bool:
    """Equal, a strategy option at its default and the same value given counting as one, and
    an option by its last release's name as the option."""
    if old == new:
        return True
    if name != "strategy_options":
        return False
    from ..core.options import option_defaults
    from ..strategies import STRATEGIES

    cls = STRATEGIES.get(recorded.get("strategy"))
    defaults = option_defaults(cls) if cls is not None else {}
    named = getattr(cls, "aliases", {})   # an option by its old name is the same option (old_records.py)
    spelt = lambda options: {named.get(k, k): v for k, v in (options or {}).items()}
    return {**defaults, **spelt(old)} == {**defaults, **spelt(new)}
