"""`jaxsel compare`'s table as a terminal shows it: at most 120 columns, 3 significant
figures in every cell, no range that says nothing, the legend, notes and sentences wrapped
to 100 columns; without a BSP row, no "vs BSP" column and a target that says what it
refers to."""
from __future__ import annotations

import re

import pytest

from jaxsel.analysis.compare_table import MAX_WIDTH, TEXT_WIDTH, format_table, notes, table
from jaxsel.analysis.time_to_accuracy import resolve_target
from jaxsel.training.numbers import byte_size, figures, plus_minus

MATCHED = "localsgd (49 of 600 steps, matches selsync)"


def row(entry: str, label: str, acc: float, std: float, own: tuple, sync: float, mb: float, reached: bool,
        **extra) -> dict:
    return {"strategy": label, "entry": entry, "final_test_accuracy": acc, "final_test_accuracy_std": std,
            "replica_accuracy": dict(zip(("mean", "min", "max"), own)), "sync_fraction": sync,
            "bytes_allreduced": mb * 1e6, "wall_time_s": 2.3641, "steps_to_target": 350 if reached else None,
            "bytes_to_target": 32.27e6 if reached else None, "time_to_target_s": 1.9512 if reached else None,
            "model_time_to_target_s": 1.9512 if reached else None,
            "reached_target": reached, "speedup_vs_bsp": (1.0 if entry == "bsp" else None) if reached else None,
            "seeds": [0, 1, 2], "per_seed": [{"syncs": 49}] * 3, "project_network": "10gbe",
            "target": "99% of bsp's final accuracy 0.596 = 0.590", **extra}


def default_rows() -> list[dict]:
    """The default job's rows, with the figures of its README sample."""
    return [row("bsp", "bsp", 0.5960, 0.00704, (0.596, 0.596, 0.596), 1.0, 55.32, True),
            row("localsgd", "localsgd (period 50)", 0.34833, 0.005, (0.348, 0.348, 0.348), 0.02, 1.106, False),
            row("selsync", "selsync (delta=0.3, W=25)", 0.2603, 0.021, (0.175, 0.144, 0.201), 0.08167, 4.52, False,
                quiet_note="selsync (delta=0.3, W=25) synchronized only in its warm-up (steps 0-48): after it, "
                           "Delta_bar peaked at 0.164 < delta = 0.3. " + "A long explanation. " * 12),
            row("localsgd:syncs=49", MATCHED, 0.4513, 0.0095, (0.451, 0.451, 0.451), 0.08167, 4.518, False,
                matched_to="selsync (delta=0.3, W=25)", matched_syncs=49.0)]


def body(text: str) -> list[str]:
    lines = text.splitlines()
    return lines[3:lines.index(next(line for line in lines if line.startswith("means over")))]


def test_the_default_job_s_table_fits_120_columns_and_its_text_100():
    text = format_table(default_rows())
    lines = text.splitlines()
    assert max(map(len, lines)) <= MAX_WIDTH
    rows = body(text)
    assert len(rows) == 4 and rows[3].startswith(MATCHED + " ")   # the longest label, whole on its line
    after = lines[3 + len(rows):]
    assert after and max(map(len, after)) <= TEXT_WIDTH
    assert sum(line.startswith("note: ") for line in after) == 2   # each note wrapped, not cut


def test_every_figure_has_three_significant_digits_and_no_empty_range():
    rows = body(format_table(default_rows()))
    bsp, local, sel, matched = (re.split(r"\s{1,}", line[len(label):].strip()) for line, label in
                                zip(rows, ["bsp", "localsgd (period 50)", "selsync (delta=0.3, W=25)", MATCHED]))
    assert bsp == ["0.596", "±", "0.007", "0.596", "100", "55.3", "2.36", "350", "32.3", "1.95", "1.00x"]
    assert local[:6] == ["0.348", "±", "0.005", "0.348", "2.00", "1.11"] and local[-1] == "never"
    assert sel[:5] == ["0.260", "±", "0.021", "0.175", "(0.144-0.201)"] and sel[5] == "8.17"
    assert matched[:4] == ["0.451", "±", "0.009", "0.451"]   # 0.0095 (a float just below) to the mean's decimals
    assert "(0.596-0.596)" not in "\n".join(rows)


def test_a_label_longer_than_the_room_wraps_within_its_column():
    rows = default_rows() + [row("selsync:delta=0.05:max_local=8:window=50", "selsync (delta=0.05, W=50, max_local=8, "
                                 "aggregator=trimmed:2, compress=topk:0.1)", 0.5, 0.01, (0.5, 0.4, 0.6), 0.5, 30.0,
                                 False)]
    lines = table(rows)
    assert max(map(len, lines)) <= MAX_WIDTH
    assert lines[-1].startswith("  ") and "compress=topk:0.1)" in lines[-1]   # its continuation line


def test_without_a_bsp_row_there_is_no_vs_bsp_column_and_the_target_says_what_it_refers_to():
    target = resolve_target("99%", {"localsgd": 0.45, "localsgd:syncs=322": 0.555})
    assert target.description == ("99% of the most accurate row's final accuracy (localsgd:syncs=322: 0.555; no bsp "
                                  "row to refer to) = 0.549")
    rows = [dict(r, target=target.description, speedup_vs_bsp=None) for r in default_rows()[1:]]
    text = format_table(rows)
    assert "BSP" not in text.splitlines()[0] + text.splitlines()[1] and "vs BSP" not in text
    assert "no bsp row to refer to" in " ".join(text.split())
    with_bsp = format_table(default_rows()).splitlines()
    assert with_bsp[0].split()[-1] == "vs" and with_bsp[1].split()[-1] == "BSP"


def test_notes_are_a_list_of_sentences():
    out = notes(default_rows())
    assert len(out) == 2 and out[0].startswith("selsync (delta=0.3, W=25) synchronized only in its warm-up")
    assert out[1].startswith(f"{MATCHED}: exactly 49 syncs in every seed")


@pytest.mark.parametrize("value, text", [(0.2, "0.200"), (1.0, "1.00"), (0.02, "0.0200"), (18.44, "18.4"),
                                         (125.0, "125"), (12345.6, "12300"), (-0.0, "0"), (None, "-"),
                                         (0.9996, "1.00")])
def test_figures_keep_trailing_zeros(value, text):
    assert figures(value) == text


def test_plus_minus_gives_the_spread_the_mean_s_decimals():
    assert plus_minus(0.599, 0.0085) == "0.599 ± 0.009" and plus_minus(0.2577, 0.022) == "0.258 ± 0.022"
    assert plus_minus(0.451, 0.0004) == "0.451 ± 0.0004" and plus_minus(0.5, None) == "0.500"
    assert plus_minus(55.32, 1.26) == "55.3 ± 1.3"


@pytest.mark.parametrize("n, text", [(0, "0 bytes"), (1, "1 byte"), (999, "999 bytes"), (1000, "1.00 kB"),
                                     (522444, "522 kB"), (79390200, "79.4 MB"), (999999, "1.00 MB"),
                                     (2.5e9, "2.50 GB"), (3e13, "30.0 TB")])
def test_byte_counts_print_in_the_tables_decimal_units(n, text):
    """One helper for every printed byte count (issue 46 item 3): 3 significant figures in
    the largest decimal unit it fills (the tables' MB are 10**6 bytes), rounding never
    giving "1000 kB"; `exact` adds the count a record holds."""
    assert byte_size(n) == text
    assert byte_size(79390200, exact=True) == "79.4 MB (79390200 bytes)" and byte_size(12, exact=True) == "12 bytes"
