"""The comparison as text: one line per row (means over seeds, the accuracy's std), the
legend, notes, and one sentence per budget-matched pair.

A terminal is read at a glance: the table is at most `MAX_WIDTH` columns (a long row label
wraps within its column), every figure has 3 significant digits, a range that says
nothing (every replica alike) is not printed, and the legend, notes and sentences are
wrapped to `TEXT_WIDTH`. Notes are a list of lines (`notes`), each a sentence of its own.
"""
from __future__ import annotations

import dataclasses
import textwrap
from typing import Callable

from ..training.numbers import figures, plus_minus
from .attribution import attribution_lines
from .matched_budget import BEYOND_SPREAD, sync_note, verdict
from .plots import LEGEND_NOTE
from .time_spread import measured_note

MAX_WIDTH = 120
TEXT_WIDTH = 100
DIGITS = 3


def _acc(row: dict) -> str:
    return plus_minus(row["final_test_accuracy"], row.get("final_test_accuracy_std"), DIGITS)


def _own(row: dict) -> str:
    """Each replica's own accuracy: mean (min-max), averaged over seeds; the mean alone
    when every replica scores alike (BSP's replicas are one model)."""
    r = row.get("replica_accuracy")
    if not r:
        return "-"
    mean, low, high = (figures(r[k], DIGITS) for k in ("mean", "min", "max"))
    return mean if low == high else f"{mean} ({low}-{high})"


def _mb(nbytes):
    return None if nbytes is None else nbytes / 1e6


def _speedup(row: dict) -> str:
    if row.get("speedup_vs_bsp") is not None:
        return figures(row["speedup_vs_bsp"], DIGITS) + "x"
    return "never" if row.get("reached_target") is False else "-"


def _number(key: str, scale=lambda v: v, missing: str = "-") -> Callable[[dict], str]:
    return lambda r: figures(None if r.get(key) is None else scale(r[key]), DIGITS, missing=missing)


def _steps(row: dict) -> str:
    steps = row.get("steps_to_target")
    return "never" if steps is None else str(int(steps))


@dataclasses.dataclass(frozen=True)
class Column:
    head: tuple[str, str]          # two header lines
    value: Callable[[dict], str]


COLUMNS = (
    Column(("test acc", "± std"), _acc),
    Column(("replicas' own", "acc (min-max)"), _own),
    Column(("sync", "%"), _number("sync_fraction", lambda f: 100 * f)),
    Column(("MB", "sent"), _number("bytes_allreduced", _mb)),
    Column(("wall", "s"), _number("wall_time_s")),
    Column(("steps", "to tgt"), _steps),
    Column(("MB", "to tgt"), _number("bytes_to_target", _mb, missing="never")),
    Column(("proj s", "to tgt"), _number("model_time_to_target_s", missing="never")),
)
VS_BSP = Column(("vs", "BSP"), _speedup)


def has_bsp(rows: list[dict]) -> bool:
    """Whether the comparison has the plain BSP row the speedups are taken against."""
    return any(r.get("entry", r["strategy"]) == "bsp" for r in rows)


def format_table(rows: list[dict], legend_and_notes: bool = True) -> str:
    """The comparison as text: the table, its legend, the notes, the verdicts (without the
    legend, the notes and the verdicts' footnote: the samples README and docs/COMPARE.md
    quote, docs/quoted_figures.py)."""
    lines = table(rows)
    if legend_and_notes:
        lines += _wrap(legend(rows))
        lines += [line for note in notes(rows) for line in _wrap(f"note: {note}", indent="      ")]
    pairs = matched_pairs(rows)
    if pairs:
        lines += ["", *[line for a, m in pairs for line in _wrap(verdict(a, m))],
                  *(_wrap(f"({BEYOND_SPREAD})") if legend_and_notes else [])]
    lines += [line for text in attribution_lines(rows) for line in ["", *_wrap(text)]]
    return "\n".join(lines)


def table(rows: list[dict]) -> list[str]:
    """The rows under a two-line header, at most MAX_WIDTH columns: the label column takes
    what the figures leave, and a longer label continues on the next line."""
    columns = [*COLUMNS, VS_BSP] if has_bsp(rows) else list(COLUMNS)
    cells = [[c.value(r) for c in columns] for r in rows]
    widths = [max(len(c.head[0]), len(c.head[1]), *(len(line[i]) for line in cells)) for i, c in enumerate(columns)]
    room = MAX_WIDTH - sum(w + 1 for w in widths)
    w = max(16, min(room, max([8] + [len(r["strategy"]) for r in rows])))
    head = [f"{'' if k else 'strategy':<{w}}" + "".join(f" {c.head[k]:>{n}}" for c, n in zip(columns, widths))
            for k in (0, 1)]
    out = [head[0].rstrip(), head[1], "-" * len(head[1])]
    for r, values in zip(rows, cells):
        label = textwrap.wrap(r["strategy"], w, subsequent_indent="  ", break_on_hyphens=False) or [""]
        out.append(f"{label[0]:<{w}}" + "".join(f" {v:>{n}}" for v, n in zip(values, widths)))
        out += label[1:]
    return out


def _wrap(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, TEXT_WIDTH, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)


def legend(rows: list[dict]) -> str:
    """What the table's figures are, in one paragraph (wrapped when printed)."""
    if not rows or "target" not in rows[0]:
        return ""
    seeds = rows[0].get("seeds", [None])
    over = (f"means over {len(seeds)} seeds ({', '.join(map(str, seeds))}), test acc ± its standard "
            f"deviation; each seed's figures in results.json." if len(seeds) > 1 else f"seed {seeds[0]}.")
    net = rows[0].get("project_network", "?")
    vs = "; vs BSP: BSP's projected time to the target over the row's" if has_bsp(rows) else ""
    step = rows[0].get("model_step_s")
    model = f", every row's step computing {figures(step * 1e3, DIGITS)} ms (the runs' median measured step, or --project compute_s)" if step else ""
    return (f"{over} test acc: the evaluated model (the replica average); replicas' own acc: each replica's own "
            f"model, mean (min-max; one figure when they agree); sync %: the share of steps that synchronized. "
            f"Target: {rows[0]['target']}. 'to tgt': to the "
            f"first evaluation of the seed-mean curve at the target; proj s: projected wall-clock on {net}{model}{vs}. MB: per replica; {LEGEND_NOTE}.")


def notes(rows: list[dict]) -> list[str]:
    """The notes under the table, one sentence each (printed after "note: ", wrapped)."""
    out = [r[key] for key in ("warmup_note", "quiet_note", "late_note") for r in rows if r.get(key)]
    measured = measured_note(rows)
    return [*correlation_note(rows), *out, *(sync_note(m, a) for a, m in matched_pairs(rows)),
            *([measured] if measured else [])]


def correlation_note(rows: list[dict]) -> list[str]:
    """How alike each row's replicas stayed: their mean pairwise correlation of parameters,
    averaged over the logged steps (`mean_correlation`), as a note rather than a column: the
    table's 120 columns have no room left for one beside the default job's labels."""
    known = [r for r in rows if r.get("mean_correlation") is not None]
    if not known:
        return []
    each = "; ".join(f"{r['strategy']} {figures(r['mean_correlation'], DIGITS)}" for r in known)
    return [f"replica correlation (the replicas' mean pairwise Pearson r of their parameters, averaged over the "
            f"logged steps): {each}."]


def matched_pairs(rows: list[dict]) -> list[tuple[dict, dict]]:
    """(adaptive row, its budget-matched row) for every matched row."""
    by_label = {r["strategy"]: r for r in rows if "matched_to" not in r}
    return [(by_label[r["matched_to"]], r) for r in rows if r.get("matched_to") in by_label]
