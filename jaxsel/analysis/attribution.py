"""What an adaptive method's gap to local SGD is made of: its selection, or its averaging order.

The budget-matched verdict holds a method against local SGD on as many syncs, which
differs from it in two things at once: which steps sync, and when a sync averages
(SelSync's authors average the parameters before the update, each replica then stepping
with its own momentum; local SGD averages after it). A comparison that holds both of an
adaptive row's matched baselines (`matched_budget.py`) splits the gap, in test accuracy
(means over seeds, each difference with its spread, the sum of the two rows' standard
deviations over seeds):

- selection: the method against its same-order baseline (only the trigger replaced by a
  schedule of as many syncs);
- averaging order: that same-order schedule against local SGD's (same syncs, after the
  update); the two add up to the method's gap to local SGD.

`jaxsel compare --attribution` also trains, for each such row, its always-sync twin (the
same method syncing every step, `triggered:trigger=always` with its sync kept) and BSP, so
the order's cost shows without any selection (twin against BSP), and where the
optimizer's state stays local (sync params or model), the twin averaging it too (what
local optimizer state costs). The verdict names the part beyond the seed spread that
explains most of the gap.
"""
from __future__ import annotations

from .matched_budget import with_trigger
from .variants import Variant, parse_strategies

ALWAYS = {"trigger": "always"}
DECIMALS = 3   # as the table's accuracies


def twins(base, adaptive: Variant) -> list[Variant]:
    """`adaptive`'s always-sync twin, and where its optimizer state stays local (a sync
    of parameters) the twin averaging that state too; none for a composition."""
    twin = with_trigger(base, adaptive, lambda s: ALWAYS)
    if twin is None:
        return []
    if twin.options.get("sync") == "grads" or twin.options.get("sync_opt_state"):
        return [twin]
    return [twin, with_trigger(base, adaptive, lambda s: ALWAYS, sync_opt_state=True)]


def attribution_entries(base, strategies, adaptive) -> list[str]:
    """`strategies`' entries, then what the attribution needs that they lack: BSP, and
    each adaptive entry's twins (`adaptive(variant)`: whether the entry is adaptive)."""
    variants = parse_strategies(strategies)
    entries = [v.entry for v in variants]
    extra = [] if "bsp" in entries else ["bsp"]
    for v in variants:
        extra += [t.entry for t in (twins(base, v) if adaptive(v) else []) if t.entry not in entries + extra]
    return entries + extra


def attribute(base, row_runs, rows: list[dict]) -> None:
    """Add to each adaptive row with both matched baselines its `attribution` (results.json):
    each part's difference and spread, and the part that explains the gap."""
    by_entry = {r["entry"]: r for r in rows}
    for run, row in zip(row_runs, rows):
        matched = {r["baseline"]: r for r in rows if r.get("matched_to") == row["strategy"] and "baseline" in r}
        if {"same order", "local SGD"} - set(matched):
            continue
        parts = {"selection": part(row, matched["same order"]),
                 "averaging order": part(matched["same order"], matched["local SGD"])}
        found = [by_entry.get(t.entry) for t in twins(base, run.variant)]
        if found and found[0] is not None and "bsp" in by_entry:
            parts["order, always syncing"] = part(found[0], by_entry["bsp"])
        if len(found) == 2 and None not in found:
            parts["local optimizer state"] = part(found[0], found[1])
        row["attribution"] = {"gap_to_local_sgd": part(row, matched["local SGD"]), "parts": parts,
                              "explains": explaining(parts)}


def part(a: dict, b: dict) -> dict:
    """a's accuracy less b's, with the spread it is judged by (the two stds' sum; None
    with one seed)."""
    sa, sb = a.get("final_test_accuracy_std"), b.get("final_test_accuracy_std")
    return {"difference": a["final_test_accuracy"] - b["final_test_accuracy"],
            "spread": None if sa is None or sb is None else sa + sb, "rows": [a["strategy"], b["strategy"]]}


def beyond(p: dict) -> bool:
    return p["spread"] is not None and abs(p["difference"]) > p["spread"]


def explaining(parts: dict) -> str | None:
    """Of the two parts that add up to the gap, the larger beyond the seed spread (None:
    neither is)."""
    split = {k: parts[k] for k in ("selection", "averaging order") if beyond(parts[k])}
    return max(split, key=lambda k: abs(split[k]["difference"])) if split else None


def attribution_lines(rows: list[dict]) -> list[str]:
    """One paragraph per attributed row: its parts and the verdict (wrapped by the caller)."""
    out = []
    for row in rows:
        a = row.get("attribution")
        if a:
            out.append(f"attribution of {row['strategy']}'s gap to local SGD on as many syncs, "
                       f"{_signed(a['gap_to_local_sgd'])}: " + "; ".join(
                           f"{WHAT[k]} {_signed(p)}" for k, p in a["parts"].items()) + ". " + verdict(a))
    return out


WHAT = {"selection": "selection (against its own order on a fixed schedule of as many syncs)",
        "averaging order": "averaging order (that schedule against local SGD's, after the update)",
        "order, always syncing": "its order syncing every step, against BSP",
        "local optimizer state": "local optimizer state (syncing every step, against averaging it too)"}


def verdict(a: dict) -> str:
    if a["explains"] is None:
        return f"Neither the selection nor the averaging order explains the gap {BEYOND_SPREAD_SHORT}."
    other = "averaging order" if a["explains"] == "selection" else "selection"
    return (f"The {a['explains']} explains the gap; the {other} "
            f"{'does not move it beyond the seed spread' if not beyond(a['parts'][other]) else 'adds to it'}.")


BEYOND_SPREAD_SHORT = "beyond the seed spread (the sum of the two rows' standard deviations)"


def _signed(p: dict) -> str:
    """A difference of accuracies to the table's 3 decimals (a tie reads +0.000, never
    -0.000: rounded first, and -0.0 + 0.0 is 0.0), its spread."""
    text = f"{round(p['difference'], DECIMALS) + 0.0:+.{DECIMALS}f}"
    return text if p["spread"] is None else f"{text} (spread {p['spread']:.{DECIMALS}f})"
