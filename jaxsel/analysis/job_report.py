"""`jaxsel report DIR` on a long job's directory: its tables and pictures made again from
its records alone (a comparison's results.json and five pictures, a frontier's three
files, a calibration's picture), for a job stopped while plotting, or pictures deleted or changed by hand."""
from __future__ import annotations

from pathlib import Path

from . import job


def report_job(out: Path) -> tuple[str, str] | None:
    """(the job's kind, the text to print) after remaking its files; None when `out`
    holds no job."""
    recorded = job.read_job(out) if out.is_dir() else None
    if recorded is None:
        return None
    if recorded["kind"] == "compare":
        from .compare import PICTURES, format_table, report_comparison

        rows = report_comparison(out).rows
        return "compare", f"{format_table(rows)}\n\nwrote {out}/results.json and {', '.join(PICTURES)} from the records"
    if recorded["kind"] == "frontier":
        from .frontier import report_frontier
        from .frontier_report import format_verdict

        result = report_frontier(out)
        return "frontier", f"{result['setting']}\n{format_verdict(result)}\n\nwrote {out}/frontier.json, " \
                           f"frontier.md and frontier.png from the records"
    if recorded["kind"] == "calibrate":
        return "calibrate", _report_calibration(out)
    raise ValueError(f"{out / job.JOB_FILE} holds a job of unknown kind {recorded['kind']!r} (jaxsel reports "
                     f"compare, frontier and calibrate jobs)")


def _report_calibration(out: Path) -> str:
    """A calibration's table, its picture drawn again from calibration.json."""
    from .calibrate import FILES, format_calibration, plot_calibration

    read = job.read_json(out / FILES[0], "run the calibration again with --resume")
    if not read.ok or not isinstance(read.value, dict):
        raise ValueError(f"{out} holds a calibration that has not finished ({FILES[0]} is missing or not an "
                         f"object); finish it with jaxsel calibrate --out {out} --resume")
    plot_calibration(read.value, out / FILES[1])
    return f"{format_calibration(read.value)}\n\nwrote {out}/{FILES[1]} from the records"
