"""`jaxsel report DIR` on a long job's directory: its tables and pictures made again from
its records alone (a comparison's results.json and five pictures, a frontier's three
files, a calibration's picture), for a job stopped while plotting, or pictures deleted or changed by hand.
The job's directory is locked while they are made (as the job holds it while it writes
them): a report of a job still running is refused in one line, not raced with its writes."""
from __future__ import annotations

from pathlib import Path

from ..training.job_builds import one_job
from ..training.rundir import CALIBRATION_PICTURE
from ..training.rundir.job_files import CALIBRATION, read_job_file
from ..training.rundir.lock import DirectoryLock
from . import job


@one_job()   # each cell's strategy and layout built once (training/job_builds.py)
def report_job(out: Path) -> tuple[str, str] | None:
    """(the job's kind, the text to print) after remaking its files; None when `out`
    holds no job."""
    recorded = job.read_job(out) if out.is_dir() else None
    if recorded is None:
        return None
    lock = DirectoryLock(out, f"{job.NOUNS.get(recorded['kind'], 'job')} directory").acquire()   # not while it runs
    try:
        return _remake(out, recorded)
    finally:
        lock.release()


def _remake(out: Path, recorded: dict) -> tuple[str, str]:
    """The job's files made again (its directory locked), and the text to print."""
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
    from .calibrate import format_calibration, plot_calibration

    resume = f"finish it with jaxsel calibrate --out {out} --resume"
    result = read_job_file(out, CALIBRATION, resume)
    if result is None:
        raise ValueError(f"{out} holds a calibration that has not finished ({CALIBRATION.name} is missing); {resume}")
    plot_calibration(result, out / CALIBRATION_PICTURE)
    return f"{format_calibration(result)}\n\nwrote {out}/{CALIBRATION_PICTURE} from the records"
