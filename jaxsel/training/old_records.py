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
"""
from __future__ import annotations

#: a setting every record written since issue 42 holds (TrainConfig.clip_at, same release)
SINCE_ISSUE_42 = "clip_at"
#: SelSync's window when a record does not set it (its default then and now)
SELSYNC_WINDOW = 25


def today(settings: dict) -> dict:
    """`settings` (a record's TrainConfig fields) as today's jaxsel reads them."""
    if SINCE_ISSUE_42 in settings or settings.get("strategy") != "selsync":
        return settings
    options = dict(settings.get("strategy_options") or {})
    if "statistic" not in options:
        window = int(options.get("window", SELSYNC_WINDOW))
        options = {**options, "statistic": "smoothed", "warmup": options.get("warmup", 2 * window - 1)}
    return {**settings, "strategy_options": options}
