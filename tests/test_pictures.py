"""The pictures of a comparison, a report and a frontier, checked on the drawn figures (no
training: the rows are made of synthetic records of the shape runs write). Every picture:
its legends outside the axes' data area, nothing outside the figure (what is there is
saved, not cut off), one colour per row, the row's place in the job, in every picture."""
from __future__ import annotations

import json

import numpy as np
import pytest

from jaxsel.analysis import frontier_report, pareto, plots, report
from jaxsel.analysis.seed_grid import RowRuns
from jaxsel.analysis.time_to_accuracy import Target
from jaxsel.analysis.variants import Variant
from jaxsel.training.config import TrainConfig
from jaxsel.training.train import RunResult

STEPS, SEEDS = 600, 3
#: rows as a comparison makes them: (strategy, options, label, sync every k steps, final accuracy)
ROWS = [("bsp", {}, "bsp", 1, 0.6),
        ("localsgd", {}, "localsgd (period 50)", 50, 0.35),
        ("selsync", {}, "selsync (delta=0.3, W=25)", None, 0.26),
        ("localsgd", {"syncs": 49}, "localsgd (49 of 600 steps, matches selsync)", 12, 0.45)]


def synthetic_run(strategy: str, options: dict, every, final: float, seed: int) -> RunResult:
    """One seed's records and evaluations: syncs every `every` steps (None: SelSync, its
    49-step warm-up only, with a Delta_bar trace), accuracy rising to about `final`."""
    rng = np.random.default_rng(seed)
    cfg = TrainConfig(strategy=strategy, strategy_options=options, dataset="mnist1d", partition="label_skew",
                      lr_schedule="milestones", steps=STEPS, replicas=8, batch_size=16, seed=seed, eval_every=100)
    records, sent = [], 0.0
    for t in range(STEPS):
        synced = t < 49 if every is None else (t + 1) % every == 0
        sent += 92_000.0 * synced
        rec = {"step": t, "synced": synced, "train_time_s": 0.01 * (t + 1), "bytes_allreduced": sent}
        if (t + 1) % 10 == 0:
            rec["divergence"] = 0.0 if every == 1 else float(rng.uniform(0, 5))
            rec["correlation"] = 1.0 if every == 1 else float(rng.uniform(0.9, 1.0))
        if every is None:
            rec["delta"] = [None] * 8 if t < 49 else list(rng.uniform(0.02, 0.12, 8))
        records.append(rec)
    evals = [{"step": s, "test_accuracy": 0.1 + (final - 0.1) * (s / STEPS) ** 0.5 + rng.normal(0, 0.005),
              "bytes_allreduced": records[s - 1]["bytes_allreduced"] if s else 0.0,
              "projected_time_s": 0.012 * s, "train_time_s": 0.01 * s} for s in range(0, STEPS + 1, 100)]
    return RunResult(cfg, records, evals, {"final_test_accuracy": evals[-1]["test_accuracy"]}, None, strategy)


@pytest.fixture(scope="module")
def rows() -> list[RowRuns]:
    out = []
    for name, options, label, every, final in ROWS:
        runs = [synthetic_run(name, options, every, final, seed) for seed in range(SEEDS)]
        out.append(RowRuns(Variant(name, options, name), name, runs, label=label))
    return out


def rendered(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def assert_laid_out(fig) -> None:
    """Nothing drawn outside the figure, and no legend over an axes' data area."""
    renderer = rendered(fig)
    inside = fig.get_tightbbox(renderer)   # inches, everything that is drawn
    width, height = fig.get_size_inches()
    tol = 1 / fig.dpi
    assert inside.x0 >= -tol and inside.y0 >= -tol and inside.x1 <= width + tol and inside.y1 <= height + tol, \
        f"drawn outside the {width} x {height} in figure: {inside}"
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    assert legends, "every picture has a legend"
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent(renderer)), f"a legend covers the data of {ax.get_title()!r}"


def legend_colors(fig) -> list:
    legend = fig.legends[0]
    return [handle.get_color() if hasattr(handle, "get_color") else handle[0].get_color()
            for handle in legend.legend_handles]


def same(a, b) -> bool:
    from matplotlib.colors import to_rgba

    return to_rgba(a) == to_rgba(b)


def test_one_colour_per_row_and_no_two_rows_alike():
    assert len({plots.row_color(i) for i in range(20)}) == 20
    assert len({(plots.row_color(i), plots.row_style(i)["ls"]) for i in range(40)}) == 40


@pytest.mark.parametrize("figure", ["comparison", "divergence", "accuracy_vs_time"])
def test_compare_pictures_keep_legends_outside_and_rows_in_their_colours(rows, figure):
    make = {"comparison": lambda: plots.figure_comparison(rows),
            "divergence": lambda: plots.figure_divergence(rows),
            "accuracy_vs_time": lambda: plots.figure_accuracy_vs_time(rows, Target(0.59, "99% of bsp"), "10gbe")}
    fig = make[figure]()
    try:
        assert_laid_out(fig)
        colors = legend_colors(fig)[:len(rows)]
        assert all(same(c, plots.row_color(i)) for i, c in enumerate(colors))
        texts = [t.get_text() for t in fig.legends[0].get_texts()]
        assert texts[:len(rows)] == [r.label for r in rows]
    finally:
        plots.pyplot().close(fig)


def test_the_divergence_picture_has_the_correlation_beside_it_in_the_rows_colours(rows):
    fig = plots.figure_divergence(rows)
    try:
        right = fig.axes[1]
        assert "correlation" in right.get_ylabel()
        lines = [line for line in right.get_lines() if line.get_linestyle() != ":"]   # not the LR milestones
        assert len(lines) == len(rows) and all(same(line.get_color(), plots.row_color(i))
                                               for i, line in enumerate(lines))
    finally:
        plots.pyplot().close(fig)


def test_sync_timeline_title_fits_and_counts_read_plainly(rows):
    fig = plots.figure_sync_timeline(rows)
    try:
        assert_laid_out(fig)
        title = fig._suptitle.get_text()
        assert title.replace("\n", " ").endswith("seeds 0-2 (mean, band: min-max)")   # whole, wrapped
        ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
        assert ticks[0] == "bsp\n600 of 600 steps in every seed"
        for i, collection in enumerate(fig.axes[0].collections):
            assert same(np.atleast_2d(collection.get_color())[0], plots.row_color(i // SEEDS))
    finally:
        plots.pyplot().close(fig)
    uneven = RowRuns(rows[1].variant, "x", [rows[1].runs[0], rows[0].runs[0]], label="mixed")
    assert plots.sync_counts(uneven) == "306 of 600 steps on average (seeds: 12 to 600)"


def results_rows(rows) -> list[dict]:
    """results.json's rows for the pictures: bsp alone reaches the target."""
    out = []
    for r in rows:
        accs = [run.evals[-1]["test_accuracy"] for run in r.runs]
        out.append({"strategy": r.label, "final_test_accuracy": float(np.mean(accs)),
                    "final_test_accuracy_std": float(np.std(accs, ddof=1)),
                    "bytes_allreduced": r.runs[0].records[-1]["bytes_allreduced"], "project_network": "10gbe",
                    "target": "99% of bsp's final accuracy", "time_to_target_s": 5.5 if r.label == "bsp" else None})
    return out


def test_pareto_shares_the_accuracy_axis_so_one_point_is_not_stretched(rows):
    fig = pareto.figure_pareto(results_rows(rows), "a task")
    try:
        assert_laid_out(fig)
        left, right = fig.axes[:2]
        assert right.get_ylim() == left.get_ylim() and right.get_xlim()[0] < 0 < right.get_xlim()[1]   # 0 in view
        labels = [t.get_text() for t in fig.legends[0].get_texts()]
        assert labels[0] == "bsp" and all("never reached the target" in t for t in labels[1:len(rows)])
        assert all(same(c, plots.row_color(i)) for i, c in enumerate(legend_colors(fig)[:len(rows)]))
    finally:
        plots.pyplot().close(fig)


def whole_markers(ax) -> list[tuple]:
    """The markers of `ax` drawn past its plot area, (x, y) in pixels: none when nothing is cut."""
    box, cut = ax.get_window_extent(), []
    for line in ax.lines:
        if line.get_marker() in (None, "None", "", " "):
            continue
        r = line.get_markersize() * ax.figure.dpi / 72 / 2
        for x, y in ax.transData.transform(np.column_stack(line.get_data()).astype(float)):
            if x - r < box.x0 or x + r > box.x1 or y - r < box.y0 or y + r > box.y1:
                cut.append((x, y))
    return cut


@pytest.mark.parametrize("spread", [0.0, 0.02])
def test_pareto_draws_every_marker_whole_at_the_axis_extremes(spread):
    """Issue 61: the points at the extremes (0 MB, the most MB, the shortest time at 0 s,
    the best and worst accuracy) were half cut by the axes' edges."""
    rows = [{"strategy": f"row {i}", "final_test_accuracy": acc, "final_test_accuracy_std": spread,
             "bytes_allreduced": mb, "model_time_to_target_s": t, "time_to_target_s": t, "project_network": "10gbe",
             "target": "0.5"}
            for i, (acc, mb, t) in enumerate([(0.6, 55.3e6, 8.5), (0.35, 0.0, 0.0), (0.43, 52.3e6, None),
                                               (0.59, 1.1e6, 5.9)])]
    fig = pareto.figure_pareto(rows, "a task")
    try:
        rendered(fig)
        for ax in fig.axes[:2]:
            assert not whole_markers(ax), whole_markers(ax)
        assert_laid_out(fig)
    finally:
        plots.pyplot().close(fig)


def test_sync_timeline_s_plot_area_does_not_shrink_with_long_labels(rows):
    """Issue 61: a long row label (a matched baseline's) took half the plot's width; now it
    wraps in a column of its own, and the plot areas are where they are with short labels."""
    longer = [RowRuns(r.variant, r.slug, r.runs, label=r.label + " with options that go on and on and on " * 2)
              for r in rows]
    areas = []
    for labelled in (rows, longer):
        fig = plots.figure_sync_timeline(labelled)
        try:
            assert_laid_out(fig)
            areas.append([ax.get_position().bounds for ax in fig.axes])
        finally:
            plots.pyplot().close(fig)
    assert areas[0] == areas[1] and areas[0][0][2] > 0.7, areas


def test_the_divergence_spike_of_a_mostly_synced_row_is_explained_under_the_panel(rows):
    """Issue 61: the matched baseline's spike near step 110 in divergence.png. Divergence is
    sampled every 10 steps after the step's sync; the baseline (567 syncs in 600 steps,
    `Spread`) is local at steps 109, 309 and 509 alone among the samples, where the spikes
    are. The panel says so, naming those steps; rows that sync on most samples or on few
    get no word."""
    from jaxsel.core.triggers import spread_steps

    fire = {int(t) for t in spread_steps(567, STEPS)}
    runs = []
    for run in rows[3].runs:
        records = [{**x, "synced": x["step"] in fire} for x in run.records]
        runs.append(RunResult(run.config, records, run.evals, run.final, None, "localsgd"))
    matched = RowRuns(rows[3].variant, rows[3].slug, runs, label="localsgd (567 of 600 steps, matches selsync)")
    assert [plots.lone_local_samples(r) for r in rows] == [None] * len(rows)
    fig = plots.figure_divergence([*rows[:3], matched])
    try:
        said = " ".join(fig.axes[0].get_xlabel().split())
        assert said.endswith("localsgd (567 of 600 steps, matches selsync): sampled after each step's sync, its "
                             "divergence is 0 but at samples that fell on its local steps (109, 309, 509)"), said
        assert_laid_out(fig)
    finally:
        plots.pyplot().close(fig)


def test_report_of_a_comparison_draws_its_rows_as_seed_means_in_their_colours(rows, tmp_path):
    """report.png of a compare dir: one line per row (not per seed), in results.json's order
    and labels, so each row has the colour it has in the comparison's pictures."""
    results = [{"strategy": r.label, "per_seed": [{"run_dir": f"/elsewhere/{r.slug}-{i}/seed{s}"}
                                                  for s in range(SEEDS)]} for i, r in enumerate(rows)]
    (tmp_path / "results.json").write_text(json.dumps(results))
    runs = [{"name": f"{r.slug}-{i}/seed{s}", "config": {"replicas": 8}, "evals": run.evals,
             "eval_projected": {"10gbe": [e["projected_time_s"] for e in run.evals]}}
            for i, r in reversed(list(enumerate(rows))) for s, run in enumerate(r.runs)]
    grouped = report.report_rows(runs, tmp_path)
    assert [name for name, _ in grouped] == [r.label for r in rows] and all(len(m) == SEEDS for _, m in grouped)
    report._plot(runs, ["10gbe"], None, tmp_path / "report.png", tmp_path)
    assert (tmp_path / "report.png").is_file()
    lone = report.report_rows(runs[:1], tmp_path / "none")
    assert [name for name, _ in lone] == [runs[0]["name"].rsplit("/seed", 1)[0]]


def frontier_result() -> dict:
    def point(method, options, mb, acc):
        return {"method": method, "options": options, "entry": f"{method}{options}", "failed": None, "mb": mb,
                "accuracy": acc, "accuracy_std": 0.01, "label": method}

    methods = [{"method": "bsp", "knob": "compress", "points": [point("bsp", {}, 55.0, 0.6)], "front": ["bsp{}"]},
               {"method": "selsync", "knob": "delta", "points": [
                   point("selsync", {}, 4.5, 0.26), point("selsync", {"delta": 0.1}, 4.5, 0.26),
                   point("selsync", {"max_local": 8}, 9.0, 0.5)], "front": ["selsync{}", "selsync{'max_local': 8}"]},
               {"method": "localsgd", "knob": "period", "points": [
                   point("localsgd", {"period": 2}, 27.0, 0.55), point("localsgd", {"period": 8}, 7.0, 0.4),
                   point("localsgd", {"period": 4}, 14.0, 0.39)],
                "front": ["localsgd{'period': 8}", "localsgd{'period': 2}"]}]
    return {"methods": methods, "reference": {"mb": 55.0}, "levels": [0.02, 0.1, 0.3, 1.0], "seeds": [0, 1, 2],
            "setting": "mnist1d / mlp, 8 replicas x batch 16, 600 steps"}


def test_frontier_names_every_point_and_keeps_its_level_labels_inside():
    fig = frontier_report.figure_frontier(frontier_result())
    try:
        assert_laid_out(fig)
        ax = fig.axes[0]
        renderer = rendered(fig)
        tags = sorted(t.get_text() for t in ax.texts if "of BSP" not in t.get_text())
        # every point named, off its method's front too; the two that coincide share a label
        assert tags == sorted(["default", "default; delta=0.1", "max_local=8", "period=2", "period=8", "period=4"])
        levels = [t for t in ax.texts if "of BSP" in t.get_text()]
        assert [t.get_text() for t in levels] == ["2 % of BSP", "10 % of BSP", "30 % of BSP", "100 % of BSP"]
        frame = ax.get_window_extent(renderer)
        for t in levels:
            box = t.get_window_extent(renderer)
            assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1 + 1
    finally:
        plots.pyplot().close(fig)
