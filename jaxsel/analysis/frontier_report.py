"""The frontier's files from its cells: frontier.json, frontier.md and frontier.png.

Each point (a method's configuration over the seeds) is its seed means: MB each replica
sent (votes included), test accuracy ± its standard deviation over seeds, sync fraction.
A method's Pareto front is its non-dominated points (`pareto.front`: no other point of the
method is at least as accurate for no more MB, and better in one). The verdict table
takes a few budget levels, shares of plain BSP's MB: at each, every method's most
accurate point within the budget, the best of those, and the runner-up (another method),
and whether the lead is beyond the seed spread as `jaxsel compare` defines it
(`matched_budget.BEYOND_SPREAD`: the difference of the two means exceeds the sum of their
standard deviations). A point with a failed seed (a non-finite loss) has no accuracy: it
is named, never ranked.

An adaptive point (`traits.is_adaptive`: SelSync, a two-level method with such a
level) is also judged at its own budget against local SGD (`own_budget`): against the
local SGD point that syncs exactly as often (`localsgd:syncs=K`, `jaxsel compare`'s
budget-matched baseline) where the frontier has one, else against local SGD's most
accurate point within the adaptive point's MB. The verdict table answers "which method is
best at this budget"; this table answers "did the adaptive choice of steps beat periodic
averaging at its own budget", SelSync's paper's claim. Its same-order baseline (the
frontier runs after each method's adaptive, trigger-based points: `frontier.same_order_points`)
asks the question without the averaging order in it: per budget (each point's sync share),
did the selection beat the same method on a fixed schedule of as many syncs beyond the
seed spread (`selection_sentence`, which says so plainly where it did nowhere)?
"""
from __future__ import annotations

import shlex
from pathlib import Path

from ..strategies.traits import traits_of
from ..strategies.triggered import ORDERS, TriggeredStrategy
from ..training.numbers import significant
from ..training.rundir import FRONTIER_PICTURE, FRONTIER_TABLE, TASK_FILE
from ..training.rundir.job_files import FRONTIER, write_job_file
from ..training.rundir.write import write_text
from .cells import effective_options
from .frontier_points import recorded_points
from .matched_budget import BEYOND_SPREAD, is_adaptive, matched_syncs
from .pareto import front
from .plots import new_figure, row_color, save, wrapped
from .seed_grid import mean_std, seed_range, synced_steps
from .task_setting import TaskSetting
from .variants import entry_of

#: the method whose bytes the budget levels are shares of (its plain configuration always runs)
REFERENCE = "bsp"
#: the frontier's task as `jaxsel compare --config` reads it, beside frontier.json
#: the periodic method an adaptive point is judged against at its own budget
BASELINE = "localsgd"
#: the knob of the frontier's same-order baselines, as the picture's legend names it
SAME_ORDER_KNOB = "same-order baselines: spread schedules matched to the adaptive points"


def point_figures(point, effective: dict) -> dict:
    """A point's seed means and each seed's figures (no figures where a seed failed);
    `effective`: the options its runs took (the job's global ones under the entry's own)."""
    v = point.variant
    out = {"method": point.method, "entry": v.entry, "options": dict(v.options), "dir": point.slug,
           "command_entry": entry_of(v.name, effective),
           **({"matches": point.matches} if point.matches else {})}
    if point.failed:
        f = point.failed[0]
        return {**out, "label": point.label or v.label(v.name), "failed": f"seed {f.seed}: {f.error}"}
    runs = point.runs
    acc, acc_std = mean_std([r.final["final_test_accuracy"] for r in runs])
    mb, mb_std = mean_std([r.final["bytes_allreduced"] / 1e6 for r in runs])
    return {**out, "label": point.label or v.label(runs[0].final["strategy"]), "failed": None,
            "mb": mb, "mb_std": mb_std, "accuracy": acc, "accuracy_std": acc_std,
            "sync_fraction": mean_std([r.final["sync_fraction"] for r in runs])[0],
            "per_seed": [{"seed": r.seed, "accuracy": r.final["final_test_accuracy"],
                          "mb": r.final["bytes_allreduced"] / 1e6, "syncs": synced_steps(r),
                          "sync_fraction": r.final["sync_fraction"], "wall_time_s": r.final["wall_time_s"]}
                         for r in runs]}


def method_curves(figures: list[dict], knobs: dict) -> list[dict]:
    """Each method's points (in MB order, failed ones last) and its Pareto front (entries,
    in MB order)."""
    out = []
    for method in dict.fromkeys(f["method"] for f in figures):
        points = sorted((f for f in figures if f["method"] == method), key=lambda f: (bool(f["failed"]), f.get("mb")))
        ok = [f for f in points if not f["failed"]]
        best = front([(f["mb"], f["accuracy"]) for f in ok])
        out.append({"method": method, "knob": knobs.get(method, "given with --grid"), "points": points,
                    "front": [ok[i]["entry"] for i in best]})
    return out


def best_within(curve: dict, budget_mb: float) -> dict | None:
    """The method's most accurate point within `budget_mb` (the fewer MB on a tie)."""
    fit = [f for f in curve["points"] if not f["failed"] and f["mb"] <= budget_mb * (1 + 1e-9)]
    return max(fit, key=lambda f: (f["accuracy"], -f["mb"])) if fit else None


def verdict_row(curves: list[dict], level: float, reference_mb: float) -> dict:
    """The best method at `level` of BSP's MB, the runner-up, and the lead's standing."""
    budget = level * reference_mb
    ranked = sorted((p for p in (best_within(c, budget) for c in curves) if p is not None),
                    key=lambda f: (-f["accuracy"], f["mb"]))
    best, second = (ranked + [None, None])[:2]
    row = {"level": level, "budget_mb": budget, "best": best, "runner_up": second, "lead": None,
           "beyond_spread": None}
    if best is not None and second is not None:
        row["lead"] = best["accuracy"] - second["accuracy"]
        if best["accuracy_std"] is not None and second["accuracy_std"] is not None:
            row["beyond_spread"] = bool(row["lead"] > best["accuracy_std"] + second["accuracy_std"])
    row["sentence"] = sentence(row)
    return row


def own_budget(figures: list[dict], adaptive: set[str]) -> list[dict]:
    """Each adaptive point (its entry in `adaptive`) against local SGD at its own budget:
    the local SGD point with exactly its mean sync count, rounded, where there is one
    ("matched"), else the most accurate local SGD point within its MB ("within its MB");
    the lead and whether it is beyond the seed spread."""
    ok = [f for f in figures if not f["failed"]]
    baseline = [f for f in ok if f["method"] == BASELINE]
    rows = []
    for f in (f for f in ok if f["entry"] in adaptive):
        syncs = matched_syncs(sum(s["syncs"] for s in f["per_seed"]) / len(f["per_seed"]))
        matched = [b for b in baseline if b["options"].get("syncs") == syncs]
        within = [b for b in baseline if b["mb"] <= f["mb"] * (1 + 1e-9)]
        against = matched[0] if matched else max(within, key=lambda b: (b["accuracy"], -b["mb"]), default=None)
        row = {"point": f, "syncs": syncs, "baseline": against, "how": "matched" if matched else "within its MB",
               **lead(f, against)}
        same = next((s for s in ok if s.get("matches") == f["entry"]), None) or \
            next((s for s in ok if is_same_order(s, f, syncs)), None)
        row["same_order"] = None if same is None else {"baseline": same, **lead(f, same)}
        rows.append(row)
    return rows


def lead(f: dict, against: dict | None) -> dict:
    """f's accuracy less `against`'s, and whether that is beyond the seed spread."""
    out = {"lead": None, "beyond_spread": None}
    if against is not None:
        out["lead"] = f["accuracy"] - against["accuracy"]
        if f["accuracy_std"] is not None and against["accuracy_std"] is not None:
            out["beyond_spread"] = bool(abs(out["lead"]) > f["accuracy_std"] + against["accuracy_std"])
    return out


def is_same_order(s: dict, f: dict, syncs: int) -> bool:
    """Whether point `s` is adaptive point `f`'s same-order baseline: `triggered` on a
    spread of exactly its `syncs`, averaging in its order (`matched_budget.same_order_variant`,
    given with --grid)."""
    o, mine = s.get("options") or {}, f.get("options") or {}
    return (s["method"] == TriggeredStrategy.name and o.get("trigger") == "spread" and o.get("trigger.syncs") == syncs
            and o.get("sync", TriggeredStrategy.sync) == mine.get("sync", TriggeredStrategy.sync)
            and bool(o.get("sync_opt_state")) == bool(mine.get("sync_opt_state")))


def selection_sentence(rows: list[dict]) -> str | None:
    """Per budget (each adaptive point with a same-order baseline), whether the selection
    beat its fixed schedule beyond the seed spread, in plain words; where it did nowhere,
    that first. None where no point has such a baseline."""
    judged = [r for r in rows if r.get("same_order")]
    if not judged:
        return None
    standings = [standing(r["same_order"]) for r in judged]
    better = [r for r, s in zip(judged, standings) if s == "better beyond the seed spread"]
    worse = [r for r, s in zip(judged, standings) if s == "worse beyond the seed spread"]
    one_seed = sum(s.startswith("one seed") for s in standings)
    n = len(judged)
    if one_seed == n:
        return (f"Selection against its fixed schedule of as many syncs: one seed at all {n} budgets, no spread to "
                f"judge by.")
    head = (f"Selection beat its fixed schedule of as many syncs (same method, same order) beyond the seed spread at "
            f"{len(better)} of {n} budgets: {_budgets(better)}." if better else
            f"Nowhere did selection beat its fixed schedule of as many syncs (same method, same order) beyond the seed "
            f"spread: at none of {n} budgets.")
    rest = f" It lost to it beyond the spread at {len(worse)}: {_budgets(worse)}." if worse else ""
    within = n - len(better) - len(worse) - one_seed
    return head + rest + (f" Within the spread at {within}." if within else "") + \
        (f" One seed at {one_seed}." if one_seed else "")


def standing(row: dict) -> str:
    """An own-budget row's verdict in a few words."""
    if row["baseline"] is None:
        return "no local SGD point within its MB"
    if row["beyond_spread"] is None:
        return "one seed: no spread to judge by"
    if not row["beyond_spread"]:
        return "within the seed spread"
    return "better beyond the seed spread" if row["lead"] > 0 else "worse beyond the seed spread"


def _pm(f: dict) -> str:
    std = f["accuracy_std"]
    return significant(f["accuracy"]) + ("" if std is None else f" ± {significant(std, 2)}")


def _signed(x: float) -> str:
    """A lead with its sign, to 2 significant digits ("+0.012", "-0.3")."""
    return ("+" if x > 0 else "") + significant(x, 2)


def _share(level: float) -> str:
    return f"{significant(100 * level, 3)} %"


def sentence(row: dict) -> str:
    """The verdict at one level, in one plain sentence."""
    where = f"At {_share(row['level'])} of BSP's bytes ({significant(row['budget_mb'])} MB per replica)"
    best, second = row["best"], row["runner_up"]
    if best is None:
        return f"{where} no method fits."
    lead = f"{where} {best['label']} is best: {_pm(best)} on {significant(best['mb'])} MB"
    if second is None:
        return f"{lead}; no other method fits."
    against = f"{second['label']}, {_pm(second)} on {significant(second['mb'])} MB"
    if row["beyond_spread"] is None:
        return f"{lead}, against {against}, with one seed: no spread to judge the lead by."
    standing = "beyond the seed spread" if row["beyond_spread"] else "within the seed spread (no clear winner)"
    return f"{lead}, ahead of {against}, {standing}."


def task_line(task: TaskSetting) -> str:
    """The task in one line, for titles."""
    return (f"{task.head}, {task.steps} steps, partition {task.shards}, {task.optimizer} lr {task.lr:g} "
            f"({task.schedule})")


def write_frontier(out: Path, base, plan, points: list, seeds: int, levels) -> dict:
    """frontier.json, frontier.md and frontier.png in `out`; returns frontier.json's value."""
    from ..strategies import STRATEGIES

    figures = [point_figures(p, effective_options(base, p.variant)) for p in points]
    knobs = {m: ("given with --grid" if m in plan.given or traits_of(STRATEGIES[m]).budget is None
                 else traits_of(STRATEGIES[m]).budget.knob)
             for m in plan.methods}
    knobs.update({p.method: SAME_ORDER_KNOB for p in points if p.matches and p.method not in plan.methods})
    curves = method_curves(figures, knobs)
    adaptive = {f["entry"] for p, f in zip(points, figures) if _adaptive(base, p.variant)}
    reference = next(f for f in figures if f["method"] == REFERENCE and not f["options"])
    if reference["failed"]:
        raise ValueError(f"plain BSP, the reference of the budget levels, failed ({reference['failed']}); "
                         f"lower --lr or set --clip-norm")
    result = {"setting": task_line(TaskSetting.of(base.data, base.optim, base.placement)),
              "seeds": seed_range(base.optim, seeds), "levels": list(levels),
              "reference": {"entry": reference["entry"], "mb": reference["mb"]},
              "verdict": [verdict_row(curves, lv, reference["mb"]) for lv in levels], "methods": curves,
              "own_budget": own_budget(figures, adaptive),
              "left_out": plan.left_out, "unfit": plan.unfit, "failed": [f for f in figures if f["failed"]],
              "derived": recorded_points(out, plan.variants) or {},
              "beyond_spread": BEYOND_SPREAD, "task_file": TASK_FILE}
    result["selection"] = selection_sentence(result["own_budget"])
    write_job_file(out, FRONTIER, result)
    plot_frontier(result, out / FRONTIER_PICTURE)
    write_text(out / FRONTIER_TABLE, markdown(result, out))
    return result


def _adaptive(base, variant) -> bool:
    """Whether the point's strategy decides during the run which steps sync."""
    from ..training.plan import strategy_of
    from .cells import row_config

    return is_adaptive(strategy_of(row_config(base, variant)))


MARKERS = "osD^vPX*<>"


def point_tag(f: dict) -> str:
    """A point's configuration in a few characters, beside it in the picture: the options
    its grid sets ("period=8"), or "default"."""
    return ", ".join(f"{k}={v}" for k, v in f["options"].items()) or "default"


def same_place(points: list[dict]) -> list[tuple[tuple[float, float], list[str]]]:
    """(where, the tags of the points drawn there): points alike to 3 significant digits in
    MB and accuracy (SelSync's deltas that never fire after the warm-up end alike) get one
    label, not labels printed over each other."""
    out: dict[tuple[str, str], tuple[tuple[float, float], list[str]]] = {}
    for f in points:
        key = (significant(f["mb"], 3), significant(f["accuracy"], 3))
        out.setdefault(key, ((f["mb"], f["accuracy"]), []))[1].append(point_tag(f))
    return list(out.values())


def figure_frontier(result: dict):
    """Every method's points (mean ± std over seeds) against MB sent on a log axis, each
    named by its configuration, its Pareto front joined; the budget levels as dotted lines.
    One colour and marker per method (`plots.row_color`: the methods' order)."""
    fig, axes = new_figure(13, 6.5)
    ax = axes[0][0]
    zero, handles, labels = [], [], []
    for i, curve in enumerate(result["methods"]):
        color, marker = row_color(i), MARKERS[i % len(MARKERS)]
        shown = [f for f in curve["points"] if not f["failed"] and f["mb"] > 0]
        zero += [f["label"] for f in curve["points"] if not f["failed"] and f["mb"] <= 0]
        for f in shown:
            ax.errorbar([f["mb"]], [f["accuracy"]], yerr=[f["accuracy_std"] or 0.0], fmt=marker, ms=4, capsize=2,
                        color=color, alpha=0.45)
        for where, tags in same_place(shown):   # points that coincide share one label
            ax.annotate("; ".join(tags), where, textcoords="offset points", xytext=(4, 3), fontsize=6, color=color)
        on_front = [f for f in shown if f["entry"] in curve["front"]]
        (line,) = ax.plot([f["mb"] for f in on_front], [f["accuracy"] for f in on_front], "-" + marker, ms=5, lw=1.5,
                          color=color)
        handles.append(line)
        labels.append(f"{curve['method']} ({curve['knob']})")
    reference = result["reference"]["mb"]
    for level in result["levels"]:   # each label up along its line, inside the axes
        ax.axvline(level * reference, ls=":", color="gray", lw=1)
        ax.text(level * reference, 0.98, f"{_share(level)} of BSP", transform=ax.get_xaxis_transform(), fontsize=7,
                rotation=90, rotation_mode="anchor", ha="right", va="bottom", color="dimgray")
    ax.set_xscale("log")
    xlabel = "MB sent per replica (seed mean; log)"
    if zero:
        xlabel += "\n" + wrapped(f"sent nothing (not on the log axis): {'; '.join(zero)}", fig, 8, 0.7)
    ax.set(xlabel=xlabel, ylabel="final test accuracy (mean ± std over seeds)")
    seeds = result["seeds"]
    over = f"seeds {', '.join(map(str, seeds))}" if len(seeds) > 1 else f"seed {seeds[0]}"
    ax.set_title(wrapped(f"each method's Pareto front (line) and every point, named by its configuration, {over}; "
                         f"{result['setting']}", fig, 8, 0.75), fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.legend(handles, labels, loc="outside right upper", fontsize=7, title="method (budget knob)", title_fontsize=7)
    return fig


def plot_frontier(result: dict, path: Path) -> None:
    save(figure_frontier(result), path)


def markdown(result: dict, out: Path) -> str:
    """frontier.md: the verdict table, the picture, every point, and each cell's command."""
    seeds = result["seeds"]
    lines = ["# Frontier: the best model at each budget", "",
             f"Task: {result['setting']}. Budget: MB each replica sent (seed mean, votes included); plain BSP sends "
             f"{significant(result['reference']['mb'])} MB. Test accuracy: mean ± standard deviation over seeds "
             f"{', '.join(map(str, seeds))}.", "", "## Verdict", "",
             "| budget (share of BSP's MB) | best | test acc | MB | runner-up | test acc | MB | lead beyond the seed "
             "spread? |", "|---|---|---|---|---|---|---|---|"]
    for row in result["verdict"]:
        cells = [f"{_share(row['level'])} ({significant(row['budget_mb'])} MB)"]
        for f in (row["best"], row["runner_up"]):
            cells += ["-", "-", "-"] if f is None else [f["label"], _pm(f), significant(f["mb"])]
        cells.append({True: "yes", False: "no", None: "-"}[row["beyond_spread"]])
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", *[row["sentence"] for row in result["verdict"]], "", f"({result['beyond_spread']}.)", "",
              "![frontier](frontier.png)", "", "## Every point", "",
              "| method | configuration | MB sent | sync fraction | test acc | on its front |", "|---|---|---|---|---|---|"]
    for curve in result["methods"]:
        for f in curve["points"]:
            if f["failed"]:
                lines.append(f"| {curve['method']} | {f['label']} | - | - | failed: {f['failed']} | - |")
                continue
            lines.append(f"| {curve['method']} | {f['label']} | {significant(f['mb'])} | "
                         f"{significant(f['sync_fraction'])} | {_pm(f)} | {'yes' if f['entry'] in curve['front'] else ''} |")
    lines += own_budget_lines(result.get("own_budget") or [])
    if result["left_out"]:
        lines += ["", f"Left out (no budget grid declared; give points with --grid): {', '.join(result['left_out'])}."]
    if result.get("unfit"):
        lines += ["", "Declared points left out (they do not fit this task; give others with --grid): "
                  + "; ".join(result["unfit"]) + "."]
    lines += derived_lines(result.get("derived") or {})
    lines += ["", "## Regenerate a cell", "",
              f"Each cell is the run `jaxsel compare` makes of that configuration and seed, bit for bit, with the "
              f"task in {result['task_file']}:", "", "```"]
    task = shlex.quote(str(out / result["task_file"]))
    for curve in result["methods"]:
        for f in curve["points"]:
            for s in seeds:
                where = shlex.quote(f"runs/regenerate/{f['dir']}-seed{s}")
                lines.append(f"jaxsel compare --config {task} --strategies {shlex.quote(f['command_entry'])} "
                             f"--seed {s} --seeds 1 --no-match-budget --out {where}")
    lines += ["```", ""]
    return "\n".join(lines)


def own_budget_lines(rows: list[dict]) -> list[str]:
    """frontier.md's table of the adaptive points at their own budget (`own_budget`)."""
    if not rows:
        return []
    lines = ["", "## Adaptive points at their own budget", "",
             f"Each point whose syncs are decided during the run, against {BASELINE}: the point that syncs exactly as "
             f"often ({BASELINE}:syncs=K, K its mean sync count rounded: matched) where there is one, else the most "
             f"accurate one within its MB.", "",
             f"| point | MB | sync fraction | test acc | {BASELINE} at its budget | how | MB | test acc | "
             f"the point is |", "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        f, b = row["point"], row["baseline"]
        theirs = ["-", "-", "-", "-"] if b is None else [b["label"], row["how"], significant(b["mb"]), _pm(b)]
        lines.append("| " + " | ".join([f["label"], significant(f["mb"]), significant(f["sync_fraction"]), _pm(f),
                                        *theirs, standing(row)]) + " |")
    same = sorted((row for row in rows if row.get("same_order")), key=same_order_key)
    if same:
        lines += ["", "## Does selection beat a fixed schedule?", "",
                  "Each adaptive point against the same method on a fixed schedule of as many syncs (evenly spread, "
                  "its forced warm-up first), averaging in its own order: what the selection itself does, per budget "
                  "(the point's sync fraction), grouped by order.", "",
                  "| point | sync fraction | test acc | same-order schedule | test acc | lead | the selection is |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['point']['label']} | {significant(r['point']['sync_fraction'])} | {_pm(r['point'])} | "
                  f"{r['same_order']['baseline']['label']} | {_pm(r['same_order']['baseline'])} | "
                  f"{_signed(r['same_order']['lead'])} | {standing(r['same_order'])} |" for r in same]
        lines += ["", selection_sentence(rows)]
    return lines


def _budgets(rows: list[dict]) -> str:
    """The rows' points, each with its budget (sync share) and its lead over its schedule."""
    return "; ".join(f"{r['point']['label']} ({significant(100 * r['point']['sync_fraction'], 3)} % of steps, "
                     f"{_signed(r['same_order']['lead'])})" for r in rows)


def same_order_key(row: dict) -> tuple:
    """Same-order rows by the baseline's order (its sync mode, optimizer state), then budget."""
    o = row["same_order"]["baseline"].get("options") or {}
    return (list(ORDERS).index(o.get("sync", TriggeredStrategy.sync)), bool(o.get("sync_opt_state")),
            row["point"]["sync_fraction"])


def derived_lines(derived: dict) -> list[str]:
    """frontier.md's account of the points derived from plain BSP's runs (derived_points.json)."""
    if not derived:
        return []
    lines = ["", "## Derived points", "",
             "Each `fires:F` point's delta fires on a share F of the post-warm-up steps of plain BSP's runs (their "
             "seeds pooled, the point's own statistic), worked out before the point ran:", "",
             "| point | delta | statistic | fires on (BSP's steps) | runs as |", "|---|---|---|---|---|"]
    for entry, p in derived.items():
        runs = f"the same as {p['same_as']}" if p["same_as"] else p["entry"]
        lines.append(f"| {entry} | {significant(p['delta'])} | {p['statistic']} | "
                     f"{significant(100 * p['fires_on'], 3)} % of {p['steps']} | {runs} |")
    return lines


def format_verdict(result: dict) -> str:
    """The verdict as text for the terminal: one line per budget level, then the sentences."""
    head = f"{'budget':<22} {'best':<36} {'test acc':>15} {'MB':>8}   {'runner-up':<36} {'test acc':>15} {'MB':>8}  beyond?"
    lines = [head, "-" * len(head)]
    for row in result["verdict"]:
        line = f"{_share(row['level']) + ' (' + significant(row['budget_mb']) + ' MB)':<22}"
        for f in (row["best"], row["runner_up"]):
            line += (f" {'-':<36} {'-':>15} {'-':>8}  " if f is None else
                     f" {f['label'][:36]:<36} {_pm(f):>15} {significant(f['mb']):>8}  ")
        lines.append(line + {True: "yes", False: "no", None: "-"}[row["beyond_spread"]])
    own = [f"  {r['point']['label']}: {_pm(r['point'])} on {significant(r['point']['mb'])} MB; "
           + (standing(r) if r["baseline"] is None else
              f"{r['baseline']['label']} ({r['how']}) {_pm(r['baseline'])} on {significant(r['baseline']['mb'])} MB: "
              f"{standing(r)}") for r in result.get("own_budget") or []]
    own = ["", f"Adaptive points against {BASELINE} at their own budget:", *own] if own else []
    selection = ["", result["selection"]] if result.get("selection") else []
    return "\n".join([*lines, "", *[row["sentence"] for row in result["verdict"]], f"({result['beyond_spread']}.)",
                      *own, *selection])
