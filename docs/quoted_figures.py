"""The figures the docs quote from runs, regenerated from the runs' recorded results.

A figure typed into a doc drifts from what the command prints (docs/COMPARE.md quoted
calibrate's deltas as 0.46 / 0.44 / 0.39 / 0.34 where a run gave 0.493 / 0.436 / 0.387 /
0.339). Each quote here is a doc, the pattern of its sentence, and the recorded result it
is written from (docs/recorded/, each a file the command wrote, copied as it was):

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

DOCS = Path(__file__).resolve().parent
RECORDED = DOCS / "recorded"


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


def same_order_schedule(rows: list) -> str:
    return f"{next(r for r in rows if r.get('baseline') == 'same order')['final_test_accuracy']:.3f}"


#: README's main job, `jaxsel compare` with its defaults (Python 3.11, JAX 0.10.2)
DEFAULT_JOB = "jaxsel compare (its defaults: task label-skew, seeds 0-2; Python 3.11, JAX 0.10.2)"

QUOTES = (
    Quote("COMPARE.md", r"its steps \(here (?P<figures>[0-9./\s]+raw,[0-9./\s]+smoothed);", "calibration.json",
          "jaxsel calibrate (its defaults: task label-skew, one seed; Python 3.11, JAX 0.10.2)", calibrate_deltas),
    Quote("../README.md", r"W = 25\) synchronizes on (?P<figures>[0-9.]+) %", "compare-default.json", DEFAULT_JOB,
          selsync_sync_share),
    Quote("../README.md", r"on as many syncs\*\*, (?P<figures>[0-9.]+ against [0-9.]+),", "compare-default.json",
          DEFAULT_JOB, selsync_against_local_sgd),
    Quote("../README.md", r"averaging as it does, it\s+reaches the same (?P<figures>[0-9.]+),", "compare-default.json",
          DEFAULT_JOB, same_order_schedule),
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


def rewrite(quote: Quote) -> bool:
    """Write the record's figures into the doc; whether anything changed."""
    text, quoted, recorded = drift(quote)
    if " ".join(quoted.split()) == recorded:
        return False
    found = re.search(quote.pattern, text)
    (DOCS / quote.doc).write_text(text[:found.start("figures")] + recorded + text[found.end("figures"):],
                                  encoding="utf-8")
    return True


def stale() -> list[str]:
    """One line per quote whose figures differ from its record."""
    out = []
    for quote in QUOTES:
        _, quoted, recorded = drift(quote)
        if " ".join(quoted.split()) != recorded:
            out.append(f"{quote.doc} quotes {' '.join(quoted.split())!r}; {quote.record} ({quote.command}) "
                       f"gives {recorded!r}")
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
