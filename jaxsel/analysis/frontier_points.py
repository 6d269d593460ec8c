"""The frontier's derived points: a grid value "fires:F" (`core.budget.fires`) becomes the
delta that fires on a share F of the steps after the warm-up on plain BSP's trajectory of
the frontier's own task.

SelSync's delta has no scale of its own (`jaxsel calibrate`): 0.1 and 0.05 are the same
point where the statistic never reaches either, and 0.3 fires on most steps of another
task. So its declared grid names shares, and the frontier, once its plain BSP cells have
run, pools their recorded gradient norms over the seeds, computes each point's Delta_bar
with its own statistic, window, alpha and warm-up (`significance_stats`, the host
implementation tested equal to the device trigger), and takes the delta of that share
(rounded to 4 significant digits, the label's). The points are written to
derived_points.json before any of them runs: a resumed frontier, and `jaxsel report`,
use those very points, and a resumed frontier derives them again from plain BSP's finished
cells first: a record that differs (edited) is refused. A derived point that trains the configuration of another point of
its method (two shares at one delta on a coarse trace) is recorded as the same and not run
twice.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from ..core.budget import FIRES, fires_share
from ..core.options import OptionError
from ..core.triggers import Capped, Significance
from ..training.config import ConfigError
from ..training.rundir import DERIVED_FILE
from ..training.rundir.job_files import DERIVED, read_job_file, write_job_file
from .significance_stats import decisions, fraction_deltas, recorded_grad_norms, sync_fraction
from .cells import row_config
from .variants import Variant, entry_of, parse_entry

#: a derived option's stand-in while the plan is checked: far from any delta a user sets
PLACEHOLDER = 1e6


def fired(variant: Variant) -> dict[str, float]:
    """The variant's options given as "fires:F", by name: their shares."""
    out = {}
    for key, value in variant.options.items():
        try:
            share = fires_share(value)
        except ValueError as err:
            raise OptionError(f"--strategies entry {variant.entry!r}: {err}") from None
        if share is not None:
            out[key] = share
    return out


def stand_in(variant: Variant) -> Variant:
    """The variant with each "fires:F" option replaced by a number no user sets (PLACEHOLDER
    + F): its other options can be checked before anything trains."""
    shares = fired(variant)
    if not shares:
        return variant
    return dataclasses.replace(variant, options={k: PLACEHOLDER + shares[k] if k in shares else v
                                                 for k, v in variant.options.items()})


def significance_of(base, variant: Variant) -> Significance:
    """The significance test a derived point's strategy runs (its delta a stand-in); a
    "fires:F" value anywhere but the delta of such a test is a one-line error."""
    from ..training.plan import strategy_of

    keys = set(fired(variant))
    refusal = OptionError(f"--strategies entry {variant.entry!r}: {FIRES}F gives the delta of SelSync's significance "
                          f"test (e.g. selsync:delta={FIRES}0.1), not {', '.join(sorted(keys))} of {variant.name}")
    if keys != {"delta"}:
        raise refusal
    try:
        strategy = strategy_of(row_config(base, stand_in(variant)))
    except ValueError as err:   # another option's: as check_variants says it
        raise OptionError(f"--strategies entry {variant.entry!r}: {err}") from None
    trigger = strategy.trigger.inner if isinstance(strategy.trigger, Capped) else strategy.trigger
    if not isinstance(trigger, Significance):
        raise refusal
    return trigger


def derive(base, variant: Variant, reference_runs: list, steps: int) -> dict:
    """One derived point from plain BSP's runs (of `steps` steps each): its share, delta,
    entry and the share of BSP's post-warm-up steps that delta fires on."""
    sig = significance_of(base, variant)
    share = fired(variant)["delta"]
    values = np.concatenate([decisions(recorded_grad_norms(r.records), sig.window, sig.alpha, sig.statistic,
                                       sig.warmup).decided for r in reference_runs])
    if not len(values):
        raise ConfigError(f"{variant.entry}: plain BSP's runs of {steps} steps end within the warm-up of "
                          f"{sig.warmup_steps} steps: no step to derive delta from; give the points with --grid")
    delta = float(f"{fraction_deltas(values, [share])[share]:.4g}")
    options = {k: delta if k == "delta" else v for k, v in variant.options.items()}
    return {"entry": entry_of(variant.name, options), "share": share, "delta": delta, "statistic": sig.statistic,
            "fires_on": sync_fraction(values, delta), "steps": int(len(values)), "same_as": None}


def derive_points(base, variants: list[Variant], reference_runs: list, steps: int) -> dict[str, dict]:
    """Every derived variant's point, by its "fires:F" entry (`steps`: the reference runs'
    length); one that trains what an earlier point of the list trains is marked `same_as`
    that point's entry."""
    from ..training.plan import strategy_of

    out: dict[str, dict] = {}
    built = [(v.entry, strategy_of(row_config(base, v))) for v in variants if not fired(v)]
    for v in variants:
        if not fired(v):
            continue
        point = derive(base, v, reference_runs, steps)
        strategy = strategy_of(row_config(base, parse_entry(point["entry"])))
        point["same_as"] = next((entry for entry, other in built if other == strategy), None)
        built.append((v.entry, strategy))
        out[v.entry] = point
    return out


def recorded_points(out: Path, variants: list[Variant]) -> dict[str, dict] | None:
    """derived_points.json's points (None when it is not there yet); a file that does not
    hold exactly the plan's derived entries is refused."""
    record = read_job_file(out, DERIVED, "remove it to derive them again")
    if record is None:
        return None
    points = record["points"]
    wanted = sorted(v.entry for v in variants if fired(v))
    if sorted(points) != wanted:
        raise ConfigError(f"{DERIVED.path(out)} records the points {sorted(points)}, the frontier derives {wanted}; "
                          f"remove it to derive them again")
    return points


def points_for(out: Path, base, variants: list[Variant], reference_runs: list | None, steps: int) -> dict[str, dict]:
    """The derived points, derived from `reference_runs` (plain BSP's runs, seed order, of
    `steps` steps): as
    recorded in `out`, where the record holds exactly these (a record is what frontier.md and
    `jaxsel report` quote, so one that another hand or other runs made is refused, not run),
    else recorded now."""
    recorded = recorded_points(out, variants)
    if not any(fired(v) for v in variants):
        return recorded or {}
    if reference_runs is None:
        raise ConfigError(f"the {FIRES}F points cannot be derived: plain BSP's runs, which they come from, failed "
                          f"or are missing, so {out / DERIVED_FILE} " + (
                              "cannot be checked against them" if recorded is not None else "does not record them"))
    points = json.loads(json.dumps(derive_points(base, variants, reference_runs, steps)))   # as JSON reads them back
    if recorded is not None:
        differs = next((e for e in sorted(points) if recorded[e] != points[e]), None)
        if differs is not None:
            raise ConfigError(f"{out / DERIVED_FILE} records {differs} as {json.dumps(recorded[differs])[:160]}, "
                              f"but plain BSP's runs derive delta {points[differs]['delta']}; it was edited or made by "
                              f"other runs: remove it to derive the points again")
        return recorded
    write_job_file(out, DERIVED, {"about": "each fires:F point's delta: the one that fires on a share F of the "
                                           "post-warm-up steps of plain BSP's runs (their seeds pooled), with "
                                           "the point's own statistic, window, alpha and warm-up",
                                  "points": points})
    return points
