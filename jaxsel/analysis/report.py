"""`jaxsel report RUN_DIR`: accuracy against measured time and against projected time.

A run measured on this host says little about a cluster; the cost model replays the run's
logged sync pattern (which steps synced, bytes moved, votes) onto chosen networks and
straggler models, from the run's own measured step time. One figure shows both, so a
method that wins on a laptop but loses on 10 GbE (or the reverse) is visible at a glance.
"""
from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np

from ..costmodel import Cluster, get_network, project_run
from ..data.paths import writable_dir
from ..training.numbers import significant
from ..training.rundir import METRICS_FILE, REPORT_PICTURE, RESULTS_FILE
from ..training.rundir.job_files import REPORT, write_job_file
from ..training.rundir.records import Found, MetricLines, Record, read_record, read_run
from .significance_reach import CALIBRATION_CAVEAT, CALIBRATION_HEAD, calibration_line


def find_runs(run_dir: str | Path) -> list[Path]:
    """The run itself, or the runs of a `jaxsel compare` dir (ROW/seedS/, or ROW/ as
    comparisons wrote them before seeds)."""
    root = Path(run_dir)
    if not root.is_dir():
        raise ValueError(f"run dir {str(root)!r} does not exist; pass a `jaxsel train --out` or `compare --out` dir")
    if (root / METRICS_FILE).is_file():
        return [root]
    runs = sorted(p.parent for p in [*root.glob(f"*/{METRICS_FILE}"), *root.glob(f"*/seed*/{METRICS_FILE}")])
    if not runs:
        raise ValueError(f"{str(root)!r} holds no metrics.jsonl (nor do its subdirs); pass a run dir "
                         f"written by `jaxsel train` or `jaxsel compare`")
    return runs


def load_run(path: Path, root: Path | None = None) -> dict:
    """config, per-step records, evaluations of one run dir (named by its path under
    `root`, a comparison's dir, else by its strategy), read by the run directory's one reader
    (`rundir.records.read_run`). Tolerant, as a report may be: an absent config.json,
    evals.json or strategy.json reads as empty, and a metrics line cut off by an
    interruption is skipped; a damaged file is one line naming it."""
    run = read_run(path)
    lines = run.metrics
    if lines.found is not Found.VALUE:
        raise ValueError(_unreadable(lines))
    records = [checked_entry(row, STEP_FIELDS, f"{lines.path} line {n} is not a step record") for n, row in lines.rows]
    config = tolerant(run.config)
    evals = [checked_entry(e, EVAL_FIELDS, f"{run.evals.path} entry {i} is not an evaluation")
             for i, e in enumerate(tolerant(run.evals), 1)]
    name = path.relative_to(root).as_posix() if root is not None and path != root else config.get("strategy", path.name)
    return {"name": name, "path": path, "config": config,
            "records": records, "evals": evals, "timing": recorded_timing(run.strategy)}


#: what the report reads of each metrics.jsonl line and each evals.json entry (the runs
#: write more); a damaged file is one line naming it and the entry, never a traceback
STEP_FIELDS = {"step": "an integer", "train_time_s": "a number"}
EVAL_FIELDS = {"step": "an integer", "test_accuracy": "a number", "train_time_s": "a number"}


def checked_entry(entry, fields: dict[str, str], what: str) -> dict:
    """`entry` if it is a JSON object whose `fields` hold values of their kinds, else a
    ValueError: `what` (the file and entry), the first wrong field, what was found."""
    if not isinstance(entry, dict):
        problem = f"a JSON {type(entry).__name__}, not an object"
    else:
        wrong = next((k for k, kind in fields.items() if not _is_kind(entry.get(k), kind)), None)
        if wrong is None:
            return entry
        problem = f"its {wrong} must be {fields[wrong]}, got {entry.get(wrong)!r}"
    raise ValueError(f"{what} ({problem}); restore the file from the run, or remove the run from the dir")


def _is_kind(value, kind: str) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) if kind == "an integer" else bool(np.isfinite(value))


def measured_step_times(records: list[dict]) -> np.ndarray:
    """Per-step seconds from the log: steps fetched in one window share its elapsed time."""
    out = np.zeros(len(records))
    prev, start = 0.0, 0
    for i in range(len(records) + 1):
        boundary = i == len(records) or (i > start and records[i]["train_time_s"] != records[start]["train_time_s"])
        if boundary and i > start:
            now = float(records[start]["train_time_s"])
            out[start:i] = max(now - prev, 0.0) / (i - start)
            prev, start = now, i
    return out


def recorded_timing(strategy: Record) -> dict:
    """The cost-model keywords the run's strategy stated (strategy.json, written by the run);
    runs written before it was recorded are projected with the cost model's defaults."""
    timing = tolerant(strategy).get("timing", {})
    allowed = [name for name, p in inspect.signature(project_run).parameters.items() if p.kind is p.KEYWORD_ONLY]
    if not isinstance(timing, dict) or not set(timing) <= set(allowed):
        raise ValueError(f"{strategy.path}: its timing must be a table of {', '.join(allowed)}, got "
                         f"{timing!r}; restore the file from the run, or remove it from the run dir")
    return dict(timing)


def tolerant(record: Record):
    """A record's value, or an empty one of its kind when the file is absent (a run that
    did not write it); a damaged file is a ValueError naming it and what is wrong."""
    if record.found is Found.MISSING:
        return record.kind()
    if record.found is not Found.VALUE:
        raise ValueError(_unreadable(record))
    return record.value


def _unreadable(record: Record | MetricLines) -> str:
    """One line: the file, what is wrong with it, what to do."""
    err = record.error
    if record.found is Found.NOT_TEXT:
        problem = f"is not UTF-8 text ({err.reason} at byte {err.start})"
    elif record.found is Found.NOT_JSON:
        problem = f"is not valid JSON ({err})"
    elif record.found is Found.WRONG_KIND:
        problem = f"holds a JSON {record.found_kind}, not the {record.kind.__name__} a run writes there"
    elif record.found is Found.UNREADABLE:
        problem = f"cannot be read ({err.strerror or type(err).__name__})"
    else:
        problem = "is missing"
    return f"{record.path} {problem}; restore it or remove it from the run dir"


def project(run: dict, network, stragglers=None, compute_s: float | None = None) -> np.ndarray:
    """Projected seconds after each logged step of `run` on `network` (a preset or a Cluster)."""
    recs = run["records"]
    compute = measured_step_times(recs) if compute_s is None else compute_s
    cfg = run["config"]
    times, _ = project_run(recs, network, cfg.get("replicas", 1), compute, stragglers, cfg.get("seed", 0),
                           **run.get("timing", {}))
    return times


def _at_steps(times: np.ndarray, steps: list[int]) -> list[float]:
    """Time after `step` steps (0 before the first)."""
    return [0.0 if s <= 0 else float(times[min(s, len(times)) - 1]) for s in steps]


def report(run_dir, networks=("10gbe",), stragglers=None, compute_s: float | None = None, out=None, *,
           gpus_per_host: int = 1, intra_network: str = "nvlink", target: float | None = None) -> str:
    """Write report.png and report.json beside the runs; return a text table. With
    `gpus_per_host` > 1 each network joins hosts of that many replicas (`intra_network`
    inside); with `target`, the table adds each run's projected time to that test accuracy."""
    if compute_s is not None and not compute_s >= 0:
        raise ValueError(f"compute_s must be a number >= 0 (seconds per step), got {compute_s!r}")
    if target is not None and not 0 < target <= 1:
        raise ValueError(f"target must be a test accuracy in (0, 1], got {target!r}")
    if out:   # only the file's folder is created, and only its last component (paths.writable_dir)
        writable_dir(Path(out).parent, "--out")
    networks = [get_network(n.strip()).name for n in networks if n.strip()]
    clusters = {n: Cluster(n, intra_network, gpus_per_host) for n in networks}
    runs = [load_run(p, Path(run_dir)) for p in find_runs(run_dir)]
    runs = [r for r in runs if r["records"]]
    if not runs:
        raise ValueError(f"the runs in {str(run_dir)!r} logged no steps yet")
    rows = [_project_row(r, clusters, stragglers, compute_s, target) for r in runs]
    base = Path(run_dir)
    png = picture_path(out, base)
    _plot(runs, networks, stragglers, png, base)
    written = write_job_file(base, REPORT, {"networks": networks, "stragglers": stragglers, "compute_s": compute_s,
                                            "gpus_per_host": gpus_per_host, "intra_network": intra_network,
                                            "target": target, "runs": rows})
    where = "" if gpus_per_host == 1 else \
        f"\nprojected on hosts of {gpus_per_host} replicas ({clusters[networks[0]].intra.name} inside, the network between)"
    lines = [n for n in (calibration_line(r["name"], r["records"]) for r in runs) if n]
    calibration = "\n".join(["", CALIBRATION_HEAD, *lines, CALIBRATION_CAVEAT]) if lines else ""
    return _table(rows, networks, target) + where + calibration + f"\n\nwrote {png} and {written}"


def picture_path(out, run_dir: Path) -> Path:
    """Where the figure goes, exactly as written and as said: RUN_DIR/report.png by default,
    DIR/report.png for an existing directory, OUT.png for a name without a suffix (the
    format matplotlib would pick, and the name it would write, unasked)."""
    if not out:
        return run_dir / REPORT_PICTURE
    path = Path(out)
    if path.is_dir():
        return path / REPORT_PICTURE
    return path if path.suffix else path.with_name(path.name + ".png")


def _project_row(r: dict, clusters: dict, stragglers, compute_s, target) -> dict:
    """One run's table row; also stores its projections on `r` for the plot."""
    steps = [e["step"] for e in r["evals"]]
    r["projected"] = {n: project(r, c, stragglers, compute_s) for n, c in clusters.items()}
    r["eval_projected"] = {n: _at_steps(t, steps) for n, t in r["projected"].items()}
    hit = next((e for e in r["evals"] if target is not None and e["test_accuracy"] >= target), None)
    reach = {f"to_target_s_{n}": None if hit is None else _at_steps(r["projected"][n], [hit["step"]])[0]
             for n in clusters} if target is not None else {}
    return {"strategy": r["name"], "steps": len(r["records"]),
            "test_accuracy": r["evals"][-1]["test_accuracy"] if r["evals"] else None,
            "sync_fraction": float(np.mean([bool(x["synced"]) for x in r["records"]])),
            "measured_s": float(r["records"][-1]["train_time_s"]),
            **{f"projected_s_{n}": float(r["projected"][n][-1]) for n in clusters}, **reach}


def _table(rows: list[dict], networks: list[str], target: float | None = None) -> str:
    w = max(10, *(len(r["strategy"]) for r in rows))
    cols = [(f"projected_s_{n}", f"proj. s {n}") for n in networks]
    cols += [(f"to_target_s_{n}", f"s to {significant(target)} {n}") for n in networks] if target is not None else []
    head = f"{'strategy':<{w}} {'test acc':>8} {'sync':>7} {'measured s':>11}" + "".join(f" {h:>19}" for _, h in cols)
    lines = [head, "-" * len(head)]
    bsp = next((r for r in rows if r["strategy"] == "bsp"), None)
    for r in rows:
        line = (f"{r['strategy']:<{w}} {significant(r['test_accuracy']):>8} {significant(r['sync_fraction']):>7} "
                f"{significant(r['measured_s']):>11}")
        for key, _ in cols:
            v, b = r[key], (bsp or {}).get(key)
            ratio = f" ({significant(b / v)}x)" if b and v and bsp is not r else ""
            line += f" {'never' if v is None else significant(v) + ratio:>19}"
        lines.append(line)
    if bsp:
        lines.append("(x: BSP's projected time over this run's; 'never': the target was not reached)")
    return "\n".join(lines)


def report_rows(runs: list[dict], root: Path) -> list[tuple[str, list[dict]]]:
    """The runs as the rows of the picture: (label, that row's runs, one per seed). A
    comparison's rows in its own order and with its labels (its results.json), so each
    row has the colour it has in the comparison's pictures; runs it does not list (a
    comparison still running) grouped by their row directory after them; a lone run is
    a row of its own."""
    listed = tolerant(read_record(root / RESULTS_FILE, list))
    where = {}
    for i, row in enumerate(r for r in listed if isinstance(r, dict)):
        for seed in row.get("per_seed", []):
            if isinstance(seed, dict) and seed.get("run_dir"):
                where["/".join(Path(seed["run_dir"]).parts[-2:])] = (i, row.get("strategy", "?"))
    rows: dict[tuple, list[dict]] = {}
    for r in runs:
        key = where.get(r["name"]) or (len(listed), r["name"].rsplit("/seed", 1)[0])
        rows.setdefault(key, []).append(r)
    return [(name, members) for (_, name), members in sorted(rows.items(), key=lambda kv: kv[0][0])]


def _curves(members: list[dict], x_of) -> tuple[np.ndarray, np.ndarray]:
    """(seed mean of x at each evaluation, accuracies: seeds x evaluations), over the
    evaluations every seed has."""
    n = min(len(r["evals"]) for r in members)
    x = np.mean([x_of(r)[:n] for r in members], axis=0)
    return x, np.array([[e["test_accuracy"] for e in r["evals"][:n]] for r in members])


def _plot(runs: list[dict], networks: list[str], stragglers, path: Path, root: Path) -> None:
    """Accuracy against measured time, then against projected time on each network: one
    line per row (seed mean, min-max band), in the row's colour (plots.row_color)."""
    from .plots import band, legend_below, new_figure, row_style, save

    panels = 1 + len(networks)
    fig, axes = new_figure(5.2 * panels, 5.2, 1, panels, sharey=True)
    axes = axes[0]
    rows = report_rows(runs, root)
    lines = []
    for i, (_, members) in enumerate(rows):
        x, acc = _curves(members, lambda r: [e["train_time_s"] for e in r["evals"]])
        lines.append(band(axes[0], x, acc, marker=".", **row_style(i)))
        for ax, n in zip(axes[1:], networks):
            x, acc = _curves(members, lambda r: r["eval_projected"][n])
            band(ax, x, acc, marker=".", **row_style(i))
    axes[0].set(xlabel="measured training time (s)", ylabel="test accuracy", title="measured (this host)")
    for ax, n in zip(axes[1:], networks):
        extra = f"\nstragglers {stragglers}" if stragglers else ""
        ax.set(xlabel="projected time (s)", title=f"projected: {n}, {runs[0]['config'].get('replicas', '?')} "
                                                  f"workers{extra}")
    for ax in axes:
        ax.grid(alpha=0.3)
    seeds = max(len(m) for _, m in rows)
    legend_below(fig, lines, [name for name, _ in rows],
                 title="seed mean, band: min-max over seeds" if seeds > 1 else None)
    save(fig, path)
