"""Measurement only: how far the golden cases' portable records (tests/portable_record.py)
move between two environments (JAX releases, CPUs, flag sets), to set its RTOL and ATOL.

In each environment, as a pytest plugin, every (case, layout) run of tests/test_golden.py
writes its portable record to $GOLDEN_SPREAD_DIR/CASE__LAYOUT.json:

    GOLDEN_SPREAD_DIR=/tmp/spread-A PYTHONPATH=tests/measure \\
        python -m pytest -p golden_spread -n 0 -m layouts tests/test_golden.py

then `python tests/measure/golden_spread.py /tmp/spread-A /tmp/spread-B` prints, per kind
of quantity, the largest difference relative to its scale (at ATOL 0), the runs it came
from, and the largest absolute difference of any quantity beyond RTOL (rounding residue).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
import portable_record  # noqa: E402  (tests/)


def pytest_collection_finish(session):
    """Wraps test_golden.case_run so that each fresh run writes its portable record."""
    golden = next(m for name, m in sys.modules.items() if name.endswith("test_golden"))
    original, out = golden.case_run, Path(os.environ["GOLDEN_SPREAD_DIR"])

    def case_run(case: str, layout: str):
        fresh = (case, layout) not in golden.RUNS
        result = original(case, layout)
        if fresh:
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{case}__{layout}.json").write_text(json.dumps(portable_record.portable_record(*result)))
        return result

    golden.case_run = case_run


def kind(where: str) -> str:
    """'params/w float32[8, 6, 3] l2' -> 'params l2'; 'steps/loss[3]' -> 'steps loss'."""
    if where.startswith("steps/"):
        return "steps " + where.split("/", 1)[1].split("[")[0]
    quantity = where.rsplit(" ", 1)[1]
    return f"{where.split('/', 1)[0]} {'at' if quantity.startswith('at') else quantity}"


def absolute_difference(got: dict, want: dict, where: str) -> float:
    """|got - want| of the quantity a relative_differences key names (a state leaf's)."""
    field, rest = where.split("/", 1)
    leaf, quantity = rest.rsplit(" ", 1)
    names = [*portable_record.FLOAT_SUMMARY, *(f"at{i}" for i in range(len(want[field][leaf])))]
    i = names.index(quantity)
    return abs(got[field][leaf][i] - want[field][leaf][i])


def main(a: Path, b: Path) -> None:
    portable_record.ATOL = 0.0
    runs = sorted(p.name for p in a.glob("*.json") if (b / p.name).exists())
    worst, residue = {}, (0.0, "")
    for name in runs:
        want, got = (json.loads((folder / name).read_text()) for folder in (a, b))
        for where, r in portable_record.relative_differences(got, want).items():
            if r >= worst.get(kind(where), (-1.0,))[0]:
                worst[kind(where)] = (r, f"{name[:-5]}: {where}")
            if r > portable_record.RTOL and not where.startswith("steps/") and r != float("inf"):
                d = absolute_difference(got, want, where)
                residue = max(residue, (d, f"{name[:-5]}: {where}"))
    print(f"{len(runs)} runs in both {a} and {b}; the largest difference relative to its scale:")
    for k, (r, where) in sorted(worst.items(), key=lambda kv: -kv[1][0]):
        print(f"  {r:10.3g}  {k:24s} {where}")
    print(f"beyond RTOL {portable_record.RTOL}, the largest absolute difference: {residue[0]:.3g} {residue[1]}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
