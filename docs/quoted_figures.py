"""The figures the docs quote from runs, regenerated from the runs' recorded results.

A figure typed into a doc drifts from what the command prints (docs/COMPARE.md quoted
calibrate's deltas as 0.46 / 0.44 / 0.39 / 0.34 where a run gave 0.493 / 0.436 / 0.387 /
0.339), and README's sample table lost a line and a column's meaning while the command's
changed. Each quote here is a doc, the pattern of its sentence or printed table, and the
recorded result it is written from (docs/recorded/, each a file the command wrote, copied as
it was); a table is printed again from its record by this checkout's jaxsel (`jaxsel
report`'s own code) and compared line for line:

    python docs/quoted_figures.py          # rewrite the quotes from the records
    python docs/quoted_figures.py --check  # list the quotes that differ (exit 1), change nothing

tests/test_quoted_figures.py runs the check, so a quote edited by hand, or a record
replaced without rewriting its quotes, fails the suite. To refresh a record, run its
command (named in QUOTES) and copy the file it wrote over the one in docs/recorded/.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Callable, NamedTuple

from jaxsel.training.numbers import plus_minus   # as compare's and the frontier's tables print a mean ± std

DOCS = Path(__file__).resolve().parent
RECORDED = DOCS / "recorded"
if str(DOCS.parent) not in sys.path:   # the tables are printed by this checkout's jaxsel, not an installed one
    sys.path.insert(0, str(DOCS.parent))


class Quote(NamedTuple):
    """A doc's sentence that quotes a recorded run."""

    doc: str                        # relative to docs/
    pattern: str                    # the sentence, its figures a (?P<figures>...) group
    record: str                     # relative to docs/recorded/
    command: str                    # what wrote the record
    figures: Callable[[dict], str]  # the group's text from the record


def _fires(statistic: dict) -> str:
    """A statistic's deltas at 5/10/25/50 % of the steps, as `jaxsel calibrate` prints them."""
    return " / ".join(f"{float(v):.3g}" for v in statistic["fires"].values())


def calibrate_deltas(record: dict) -> str:
    stats = record["statistics"]
    return f"{_fires(stats['raw'])} raw, {_fires(stats['smoothed'])} smoothed"


def _row(rows: list, entry: str) -> dict:
    """The default comparison's row of `entry` (results.json's rows, by the entry that ran)."""
    return next(r for r in rows if r["entry"] == entry)


def selsync_sync_share(rows: list) -> str:
    return f"{100 * _row(rows, 'selsync')['sync_fraction']:.1f}"


def selsync_against_local_sgd(rows: list) -> str:
    return (f"{_row(rows, 'selsync')['final_test_accuracy']:.3f} against "
            f"{_row(rows, 'localsgd:syncs=567')['final_test_accuracy']:.3f}")


def _same_order(rows: list) -> dict:
    """The row of the adaptive method's same-order matched baseline."""
    return next(r for r in rows if r.get("baseline") == "same order")


def same_order_schedule(rows: list) -> str:
    return f"{_same_order(rows)['final_test_accuracy']:.3f}"


def _point_name(point: dict, derived: dict) -> str:
    """A SelSync frontier point in words: its delta (the paper's 0.3, or the one that fires on a
    share of BSP's steps) and its cap."""
    o = point["options"]
    share = next((d["share"] for d in derived.values() if d["entry"] == point["entry"]), None)
    delta = f"δ = {o.get('delta', 0.3):g}" + ("" if share is None else f" (fires on {100 * share:g} % of BSP's steps)")
    return delta + (f", max_local = {o['max_local']}" if "max_local" in o else "")


ORDER_WORDS = {"params": "before the update", "model": "after the update"}


def _standing(same: dict) -> str:
    if same["beyond_spread"] is None:
        return "one seed"
    return "tie" if not same["beyond_spread"] else ("**better**" if same["lead"] > 0 else "worse")


def selection_table(frontier: dict) -> str:
    """The frontier's SelSync points against their same-order schedules (frontier.json's
    own_budget rows), the authors' order first, each order by sync share: a markdown table."""
    rows = sorted((r for r in frontier["own_budget"] if r.get("same_order")),
                  key=lambda r: (r["point"]["options"].get("sync", "params") != "params",
                                 r["point"]["sync_fraction"]))
    lines = ["| SelSync point | averages | sync % | SelSync | same-order schedule | lead | selection |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        f, b = r["point"], r["same_order"]["baseline"]
        lines.append(f"| {_point_name(f, frontier['derived'])} | {ORDER_WORDS[f['options'].get('sync', 'params')]} | "
                     f"{100 * f['sync_fraction']:.1f} | {plus_minus(f['accuracy'], f['accuracy_std'])} | "
                     f"{plus_minus(b['accuracy'], b['accuracy_std'])} | {_lead(r['same_order']['lead'])} | "
                     f"{_standing(r['same_order'])} |")
    return "\n".join(lines) + "\n"


def _lead(x: float) -> str:
    """A lead to 3 decimals with its sign; "0.000" where it rounds to nothing either way."""
    return "0.000" if round(x, 3) == 0 else f"{x:+.3f}"


def selection_counts(frontier: dict) -> str:
    """How many SelSync points beat, tie and lose to their same-order schedule."""
    standings = [_standing(r["same_order"]) for r in frontier["own_budget"] if r.get("same_order")]
    return (f"{standings.count('**better**')} of {len(standings)} better, {standings.count('tie')} tied, "
            f"{standings.count('worse')} worse")


def bsp_accuracy(frontier: dict) -> str:
    point = next(p for m in frontier["methods"] for p in m["points"] if p["entry"] == frontier["reference"]["entry"])
    return plus_minus(point["accuracy"], point["accuracy_std"])


#: issue 58's frontiers: SelSync's 14 declared points (both orders) and their same-order schedules, and BSP
FRONTIER = ("jaxsel frontier --methods selsync --task {} --seeds 3 (Python 3.11, JAX 0.10.2, commit 4e0850a; "
            "runs in /work/runs58/{})")


def _table_quote(doc: str, task: str) -> Quote:
    """A doc's table of the frontier of `task` (the line after its marker comment)."""
    record = f"frontier-{task}.json"
    return Quote(doc, rf"<!-- selection table: {record} -->\n(?P<figures>(?:\|[^\n]*\n)+)", record,
                 FRONTIER.format(task, task), selection_table)


def _counts_quote(doc: str, task: str, words: str) -> Quote:
    """A doc's counts of the frontier of `task`, after `words` (a pattern)."""
    counts = r"(?P<figures>[0-9]+\s+of\s+[0-9]+\s+better,\s+[0-9]+\s+tied,\s+[0-9]+\s+worse)"
    return Quote(doc, words + r"\s+" + counts, f"frontier-{task}.json", FRONTIER.format(task, task),
                 selection_counts)


def _table(legend_and_notes: bool) -> Callable[[list], str]:
    """A comparison's printed table (with its legend and notes, or without them as README
    shows it), as `jaxsel compare` and `jaxsel report` print it from results.json."""
    def render(rows: list) -> str:
        from jaxsel.analysis.compare_table import format_table
        return format_table(rows, legend_and_notes=legend_and_notes)
    return render


def bsp_and_period_50(rows: list) -> str:
    return (f"BSP reaches {_row(rows, 'bsp')['final_test_accuracy']:.3f}, local SGD averaging every 50 steps "
            f"{_row(rows, 'localsgd')['final_test_accuracy']:.3f}")


def same_order_with_spread(rows: list) -> str:
    row = _same_order(rows)
    return f"{row['final_test_accuracy']:.3f} ± {row['final_test_accuracy_std']:.3f}"


def attribution_split(rows: list) -> str:
    """The attribution line's two terms, as compare prints them."""
    from jaxsel.analysis.attribution import attribution_lines
    text = " ".join(" ".join(attribution_lines(rows)).split())
    found = re.search(r"syncs\) (?P<sel>\S+ \(spread \S+\)); averaging order .*?\) (?P<order>\S+ \(spread \S+\))",
                      text)
    return f"selection {found['sel']}, averaging order {found['order']}"


def always_sync_twins(rows: list) -> str:
    """`compare --attribution`'s always-sync terms: the order against BSP, and how much of it
    local momentum costs (the twins' accuracies)."""
    parts = _row(rows, "selsync")["attribution"]["parts"]
    always, averaged = _row(rows, "triggered:trigger=always"), _row(rows, "triggered:trigger=always:sync_opt_state=True")
    return (f"{-parts['order, always syncing']['difference']:.3f} against BSP, and local momentum "
            f"{-parts['local optimizer state']['difference']:.3f} of that ({always['final_test_accuracy']:.3f} against "
            f"{averaged['final_test_accuracy']:.3f}")


def own_models(rows: list) -> str:
    return f"{_row(rows, 'selsync')['replica_accuracy']['mean']:.3f}"


def paper_selsync(rows: list) -> str:
    selsync = _row(rows, "selsync")
    return f"{selsync['final_test_accuracy']:.3f}, on {100 * selsync['sync_fraction']:.1f} %"


def paper_local_sgd(rows: list) -> str:
    matched = next(r for r in rows if r.get("matched_to") and r["entry"].startswith("localsgd:syncs="))
    return (f"{matched['final_test_accuracy']:.3f}, and at period 50 ({_row(rows, 'localsgd')['syncs']:.0f} syncs) "
            f"{_row(rows, 'localsgd')['final_test_accuracy']:.3f}")


#: README's main job, `jaxsel compare` with its defaults (Python 3.11, JAX 0.10.2)
DEFAULT_JOB = ("jaxsel compare (its defaults: task label-skew, seeds 0-2, the replicas packed on one CPU device; "
               "Python 3.11, JAX 0.10.2, commit f6be5c3)")
#: docs/COMPARE.md's run of the paper's regime
PAPER_JOB = "jaxsel compare --task paper (seeds 0-2; Python 3.11, JAX 0.10.2)"

QUOTES = (
    Quote("COMPARE.md", r"its steps \(here (?P<figures>[0-9./\s]+raw,[0-9./\s]+smoothed);", "calibration.json",
          "jaxsel calibrate (its defaults: task label-skew, one seed; Python 3.11, JAX 0.10.2)", calibrate_deltas),
    Quote("../README.md", r"W = 25\) synchronizes on (?P<figures>[0-9.]+) %", "compare-default.json", DEFAULT_JOB,
          selsync_sync_share),
    Quote("../README.md", r"on as many syncs\*\*, (?P<figures>[0-9.]+ against [0-9.]+),", "compare-default.json",
          DEFAULT_JOB, selsync_against_local_sgd),
    Quote("../README.md", r"averaging as it does, it\s+reaches the same (?P<figures>[0-9.]+),", "compare-default.json",
          DEFAULT_JOB, same_order_schedule),
    _counts_quote("../README.md", "label-skew", r"3\s+seeds\),\s+label\s+skew:"),
    _counts_quote("../README.md", "paper", r"worse;\s+the\s+paper's\s+regime:"),
    _counts_quote("COMPARE.md", "label-skew", r"order\.\s+On\s+label\s+skew:"),
    _counts_quote("COMPARE.md", "paper", r"in\s+the\s+paper's\s+regime:"),
    _table_quote("../BENCHMARKS.md", "label-skew"),
    _table_quote("../BENCHMARKS.md", "paper"),
    _counts_quote("../BENCHMARKS.md", "label-skew", r"beyond the seed spread\*\*\s+\(label skew:"),
    _counts_quote("../BENCHMARKS.md", "paper", r"better, [0-9]+ tied, [0-9]+ worse;\s+the paper's regime:"),
    Quote("../README.md", r"(?s)on Python 3\.11, JAX 0\.10\.2\):\n\n```\n(?P<figures>.*?)\n```", "compare-default.json",
          DEFAULT_JOB, _table(legend_and_notes=False)),
    Quote("COMPARE.md", r"(?s)report` prints it again from the run's records\):\n\n```\n(?P<figures>.*?)\n```",
          "compare-default.json", DEFAULT_JOB, _table(legend_and_notes=True)),
    Quote("COMPARE.md", r"their\s+average is a poor model: (?P<figures>BSP reaches [0-9.]+, local SGD averaging every 50"
          r"\s+steps [0-9.]+)\.", "compare-default.json", DEFAULT_JOB, bsp_and_period_50),
    Quote("COMPARE.md", r"on as many syncs\*\*, (?P<figures>[0-9.]+ against [0-9.]+),", "compare-default.json",
          DEFAULT_JOB, selsync_against_local_sgd),
    Quote("COMPARE.md", r"own order \(the first matched row\), reaches (?P<figures>[0-9.]+ ± [0-9.]+) too",
          "compare-default.json", DEFAULT_JOB, same_order_with_spread),
    Quote("COMPARE.md", r"splits the gap: (?P<figures>selection \S+ \(spread [0-9.]+\),\s+averaging order \S+ "
          r"\(spread [0-9.]+\))\.", "compare-default.json", DEFAULT_JOB, attribution_split),
    Quote("COMPARE.md", r"syncing on every step in its order costs (?P<figures>[0-9.]+\s+against BSP, and local momentum "
          r"[0-9.]+ of that \([0-9.]+ against [0-9.]+) with", "compare-attribution.json",
          "jaxsel compare --attribution (task label-skew, seeds 0-2; Python 3.11, JAX 0.10.2)", always_sync_twins),
    Quote("COMPARE.md", r"the\s+authors' evaluation, reaches (?P<figures>[0-9.]+)\.", "compare-default.json",
          DEFAULT_JOB, own_models),
    Quote("COMPARE.md", r"(?s)the same job ends with \(legend and notes left out\):\n\n```\n(?P<figures>.*?)\n```",
          "compare-paper.json", PAPER_JOB, _table(legend_and_notes=False)),
    Quote("COMPARE.md", r"Its own order on a fixed schedule of as many syncs\s+reaches (?P<figures>[0-9.]+ ± [0-9.]+),",
          "compare-paper.json", PAPER_JOB, same_order_with_spread),
    Quote("COMPARE.md", r"against BSP: the same accuracy, (?P<figures>[0-9.]+, on\s+[0-9.]+ %)", "compare-paper.json",
          PAPER_JOB, paper_selsync),
    Quote("COMPARE.md", r"local SGD on as many syncs, evenly spread,\s+reaches (?P<figures>[0-9.]+, and at period 50 "
          r"\([0-9]+ syncs\)\s+[0-9.]+):", "compare-paper.json", PAPER_JOB, paper_local_sgd),
)


def drift(quote: Quote) -> tuple[str, str, str]:
    """(the doc's text, the quoted figures, the figures the record gives)."""
    text = (DOCS / quote.doc).read_text(encoding="utf-8")
    found = re.search(quote.pattern, text)
    if found is None:
        raise SystemExit(f"{quote.doc}: the sentence quoting {quote.record} is gone ({quote.pattern!r}); "
                         f"restore it or remove its entry from QUOTES")
    recorded = quote.figures(json.loads((RECORDED / quote.record).read_text(encoding="utf-8")))
    return text, found.group("figures"), recorded


def same(quoted: str, recorded: str) -> bool:
    """A sentence's figures compare as words (a doc may wrap them); a printed table, line
    for line."""
    if "\n" in recorded:
        return quoted == recorded
    return " ".join(quoted.split()) == recorded


def rewrite(quote: Quote) -> bool:
    """Write the record's figures into the doc; whether anything changed."""
    text, quoted, recorded = drift(quote)
    if same(quoted, recorded):
        return False
    found = re.search(quote.pattern, text)
    (DOCS / quote.doc).write_text(text[:found.start("figures")] + recorded + text[found.end("figures"):],
                                  encoding="utf-8")
    return True


def _difference(quote: Quote, quoted: str, recorded: str) -> str:
    """One line: what the doc quotes against what the record gives (a table's first
    differing line)."""
    if "\n" not in recorded:
        return (f"{quote.doc} quotes {' '.join(quoted.split())!r}; {quote.record} ({quote.command}) "
                f"gives {recorded!r}")
    pairs = zip(quoted.splitlines() + [""] * len(recorded.splitlines()), recorded.splitlines() + [""])
    doc_line, record_line = next((a, b) for a, b in pairs if a != b)
    return (f"{quote.doc}'s table from {quote.record} ({quote.command}) differs: {doc_line.strip()!r} where the "
            f"record prints {record_line.strip()!r}")


def stale() -> list[str]:
    """One line per quote whose figures differ from its record."""
    out = []
    for quote in QUOTES:
        _, quoted, recorded = drift(quote)
        if not same(quoted, recorded):
            out.append(_difference(quote, quoted, recorded))
    return out


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        lines = stale()
        print("\n".join(lines) or "every quoted figure is its record's")
        return 1 if lines else 0
    if argv:
        print(f"usage: python docs/quoted_figures.py [--check]; got {' '.join(argv)!r}", file=sys.stderr)
        return 2
    changed = [q.doc for q in QUOTES if rewrite(q)]
    print(f"rewrote {', '.join(changed)}" if changed else "every quoted figure is its record's")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
