"""What the records of an earlier jaxsel meant, in today's settings.

A run's records (its config.json, its checkpoints' settings) hold the settings it ran
with, but a setting added since is absent from them and a default changed since would be
read as today's: the old run would resume, or be compared, as a run it never was. Each
change of meaning is translated here, once, for every reader (a resume reading
config.json, a checkpoint's identity check).

- SelSync's significance statistic: until issue 42 every SelSync run computed Delta_bar
  from the gradient norm's windowed EWMA (`statistic="smoothed"`) after a warm-up of
  2W-1 steps; the default is now the raw statistic with a W-1 warm-up. A record written
  before then has no `clip_at` setting (added in the same release), and its SelSync
  options no `statistic`: it ran smoothed, with `warmup=2*window-1`.
- `jaxsel train`'s defaults: until issue 46 they were TrainConfig's (digits, SelDP shards,
  a constant lr); they are now the default task's (MNIST-1D, label skew, milestones), and
  TrainConfig's stay as they were. A record that lacks one of those settings (written
  before the setting existed: `lr_schedule`, say) ran at its old default, and is read so
  (`as_it_ran`), never as the command line's default of today: the run resumes, or is
  reproduced by `--config`, as it ran. The old values are written out here, not read from
  TrainConfig: they are what those runs ran, whatever TrainConfig's defaults become.
- Options renamed since (issue 44, one name per concept): a strategy's `aliases` names its
  options' old names (DiLoCo's and Streaming DiLoCo's `inner_steps`, SSD-SGD's `k`: all
  `period` now). A record that holds an old name is read with the new one, silently (the
  record is not the user's to change): it resumes, and its checkpoints' settings compare
  equal, as the run it was. The release that drops an alias from its strategy moves the
  alias here (records are read for ever; a name given by a user, one release).
- Packing's names (issue 59, one name per concept): the setting `packing` was
  `local_replicas`, and config.json's `packing_choice` (what "auto" measured, a table) was
  `packing`. A record of before holds both old keys; read by its value's type, a `packing`
  table (or a None beside `local_replicas`) is the choice and `local_replicas` the setting
  (`renamed_keys`), silently.
"""
from __future__ import annotations

#: a setting every record written since issue 42 holds (TrainConfig.clip_at, same release)
SINCE_ISSUE_42 = "clip_at"
#: SelSync's window when a record does not set it (its default then and now)
SELSYNC_WINDOW = 25
#: `jaxsel train`'s defaults until issue 46 (TrainConfig's, then and now) where today's differ
TRAIN_DEFAULTS_BEFORE_46 = {"dataset": "digits", "partition": "seldp", "lr_schedule": "constant"}


def today(settings: dict) -> dict:
    """`settings` (a record's TrainConfig fields) as today's jaxsel reads them."""
    settings = renamed(renamed_keys(settings))
    if SINCE_ISSUE_42 in settings or settings.get("strategy") != "selsync":
        return settings
    options = dict(settings.get("strategy_options") or {})
    if "statistic" not in options:
        window = int(options.get("window", SELSYNC_WINDOW))
        options = {**options, "statistic": "smoothed", "warmup": options.get("warmup", 2 * window - 1)}
    return {**settings, "strategy_options": options}


def renamed_keys(record: dict) -> dict:
    """`record` (a config.json, a checkpoint's settings) with packing's keys of before issue
    59 under today's: a `packing` table is `packing_choice`, `local_replicas` is `packing`."""
    out = dict(record)
    if "local_replicas" in out:   # a record of before: its "packing" (a table, or None) was the choice
        if "packing" in out:
            out["packing_choice"] = out.pop("packing")
        out["packing"] = out.pop("local_replicas")
    elif isinstance(out.get("packing"), dict):   # the choice alone (an environment.json of before)
        out["packing_choice"] = out.pop("packing")
    return out


def renamed(settings: dict) -> dict:
    """`settings` with each strategy option the record names by its last release's name
    (the strategy's `aliases`, old -> new) under its new name; unchanged otherwise (an
    unknown strategy included: its build says so)."""
    options = settings.get("strategy_options")
    if not isinstance(options, dict) or not options:
        return settings
    from ..strategies import STRATEGIES   # here, not at the top: reading a record needs no JAX until now

    cls = STRATEGIES.get(settings.get("strategy")) if isinstance(settings.get("strategy"), str) else None
    old = getattr(cls, "aliases", {})
    if not set(options) & set(old):
        return settings
    return {**settings, "strategy_options": {old.get(k, k): v for k, v in options.items()}}


def as_it_ran(settings: dict) -> dict:
    """A run's record (its config.json's TrainConfig fields) as the run ran: `today`'s
    reading, and each of train's defaults of before issue 46 that the record lacks at that
    value, so today's default (the default task's) never fills it."""
    settings = today(settings)
    return {**{k: v for k, v in TRAIN_DEFAULTS_BEFORE_46.items() if k not in settings}, **settings}
