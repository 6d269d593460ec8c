"""The comparison as text: one line per row (means over seeds, the accuracy's std), the
legend, notes, and one sentence per budget-matched pair."""
from __future__ import annotations

from ..training.numbers import significant
from .matched_budget import BEYOND_SPREAD, sync_note, verdict
from .plots import LEGEND_NOTE


def _acc(row: dict) -> str:
    std = row.get("final_test_accuracy_std")
    return significant(row["final_test_accuracy"]) + ("" if std is None else f" ± {significant(std, 2)}")


def _own(row: dict) -> str:
    """Each replica's own accuracy: mean (min-max), averaged over seeds."""
    r = row.get("replica_accuracy")
    if not r:
        return "-"
    return f"{significant(r['mean'], 3)} ({significant(r['min'], 3)}-{significant(r['max'], 3)})"


def _mb(nbytes):
    return None if nbytes is None else nbytes / 1e6


def _speedup(row: dict) -> str:
    if row.get("speedup_vs_bsp") is not None:
        return significant(row["speedup_vs_bsp"]) + "x"
    return "never" if row.get("reached_target") is False else "-"


COLUMNS = (  # header, width, value of a row
    ("test acc", 15, _acc),
    ("replicas' own acc", 19, _own),
    ("sync frac", 9, lambda r: significant(r["sync_fraction"])),
    ("MB sent", 8, lambda r: significant(_mb(r["bytes_allreduced"]))),
    ("wall s", 7, lambda r: significant(r["wall_time_s"])),
    ("steps>tgt", 9, lambda r: significant(r.get("steps_to_target"), missing="never")),
    ("MB>tgt", 7, lambda r: significant(_mb(r.get("bytes_to_target")), missing="never")),
    ("proj s>tgt", 10, lambda r: significant(r.get("time_to_target_s"), missing="never")),
    ("vs BSP", 7, _speedup),
)


def format_table(rows: list[dict]) -> str:
    """The comparison as text: 4 significant digits; '>tgt' columns are to the target."""
    w = max([8] + [len(r["strategy"]) for r in rows])
    head = f"{'strategy':<{w}}" + "".join(f" {h:>{n}}" for h, n, _ in COLUMNS)
    lines = [head, "-" * len(head)]
    lines += [f"{r['strategy']:<{w}}" + "".join(f" {fn(r):>{n}}" for _, n, fn in COLUMNS) for r in rows]
    lines += legend(rows)
    lines += [f"note: {r['warmup_note']}" for r in rows if r.get("warmup_note")]
    lines += [f"note: {r['quiet_note']}" for r in rows if r.get("quiet_note")]
    pairs = matched_pairs(rows)
    lines += [f"note: {sync_note(m, a)}" for a, m in pairs]
    if pairs:
        lines += ["", *[verdict(a, m) for a, m in pairs], f"({BEYOND_SPREAD})"]
    return "\n".join(lines)


def legend(rows: list[dict]) -> list[str]:
    if not rows or "target" not in rows[0]:
        return []
    seeds = rows[0].get("seeds", [None])
    over = (f"means over {len(seeds)} seeds ({', '.join(map(str, seeds))}), test acc ± its standard "
            f"deviation; each seed's figures in results.json" if len(seeds) > 1 else f"seed {seeds[0]}")
    net = rows[0].get("project_network", "?")
    return [f"{over}; test acc: the evaluated model (the replica average); replicas' own acc: each replica's own "
            f"model, mean (min-max); target: {rows[0]['target']}; '>tgt': to the first evaluation of the seed-mean "
            f"curve at the target; proj s: projected wall-clock on {net} (compute measured here); vs BSP: BSP's "
            f"projected time to target over the row's; MB sent: per replica; {LEGEND_NOTE}"]


def matched_pairs(rows: list[dict]) -> list[tuple[dict, dict]]:
    """(adaptive row, its budget-matched row) for every matched row."""
    by_label = {r["strategy"]: r for r in rows if "matched_to" not in r}
    return [(by_label[r["matched_to"]], r) for r in rows if r.get("matched_to") in by_label]
