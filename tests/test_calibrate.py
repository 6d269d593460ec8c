"""`jaxsel calibrate` (issue 42, item 5): each statistic's Delta_bar on a BSP probe, the
deltas that fire on 5/10/25/50 % of the post-warm-up steps, the distribution, the picture;
one-line errors; the command end to end, resumed."""
import json

import numpy as np
import pytest

from jaxsel.analysis import significance_stats as stats
from jaxsel.analysis.calibrate import Significance, calibration, format_calibration, plot_calibration
from jaxsel.cli import main

TASK = ["--dataset", "digits", "--steps", "24", "--batch-size", "4", "--eval-every", "24", "--no-progress"]


def traces(seeds=2, steps=60, n=4):
    rng = np.random.default_rng(5)
    return [np.exp(rng.normal(0, 0.4, size=(steps, n))) for _ in range(seeds)]


def test_calibration_figures_are_the_host_statistics_pooled_over_seeds():
    sig = Significance(window=4, alpha=0.1, delta=0.3)
    s = traces()
    result = calibration(s, [3, 4], sig)
    assert list(result["statistics"]) == ["smoothed", "raw"] and result["seeds"] == [3, 4]
    for name, st in result["statistics"].items():
        per = [stats.decisions(x, 4, 0.1, name) for x in s]
        pooled = np.concatenate([d.decided for d in per])
        assert st["warmup"] == (3 if name == "raw" else 7) and st["steps"] == 2 * (60 - st["warmup"])
        assert {k: st[k] for k in ("median", "p90", "max")} == stats.summary(pooled)
        assert st["fires"] == {f"{f:g}": d for f, d in stats.fraction_deltas(pooled).items()}
        assert st["fraction_at_delta"] == np.mean(pooled >= 0.3)
        assert [p["seed"] for p in st["per_seed"]] == [3, 4]
        np.testing.assert_array_equal(st["values"][1], per[1].value)
    forced = calibration(s, [3, 4], Significance(window=4, alpha=0.1, warmup=10))
    assert {st["warmup"] for st in forced["statistics"].values()} == {10}


def test_the_table_and_the_picture(tmp_path):
    result = {"setting": "a task", **calibration(traces(), [0, 1], Significance(window=4, alpha=0.1))}
    text = format_calibration(result)
    lines = text.splitlines()
    head = next(line for line in lines if "fires 5%" in line)
    assert "fires 50%" in head and "at delta=0.3" in head
    table = ("statistic", "-", "smoothed ", "raw ")
    assert all(len(line) <= 100 for line in lines if not line.startswith(table)), text   # the sentences wrapped
    raw = next(line for line in lines if line.startswith("raw "))
    st = result["statistics"]["raw"]
    assert raw.split()[1:5] == ["3", f"{st['median']:.3g}", f"{st['p90']:.3g}", f"{st['max']:.3g}"]
    assert raw.split()[-1] == f"{st['fraction_at_delta']:.1%}"
    plot_calibration(result, tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, message", [
    (["--window", "0"], "window must be an integer >= 1, got 0"),
    (["--alpha", "1.5"], "alpha must be in [0, 1), got 1.5"),
    (["--warmup", "-1"], "warmup must be an integer >= 0 (or unset), got -1"),
    (["--delta", "-0.1"], "delta must be a finite number >= 0, got -0.1"),
    (["--seeds", "0"], "seeds must be an integer >= 1, got 0"),
    (["--steps", "0"], "steps"),
])
def test_bad_input_is_one_line_exit_2_before_anything_is_made(tmp_path, capsys, argv, message):
    out = tmp_path / "cal"
    assert main(["calibrate", *argv, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jaxsel calibrate: error: ") and message in err[0], err
    assert captured.out == "" and not out.exists()


def test_resume_needs_out(capsys):
    assert main(["calibrate", "--resume"]) == 2
    assert "--resume needs --out DIR" in capsys.readouterr().err


@pytest.mark.slow
def test_calibrate_end_to_end_and_resumed(tmp_path, capsys):
    """The probe's cells are compare's BSP cells; the figures are the host statistics of
    their recorded gradient norms; a finished calibration is refused without --resume and
    loaded with it."""
    out = tmp_path / "cal"
    argv = ["calibrate", *TASK, "--window", "3", "--seeds", "2", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "statistic" in printed and "fires 25%" in printed and f"wrote {out}/calibration.json" in printed
    result = json.loads((out / "calibration.json").read_text())
    for seed in (0, 1):
        records = [json.loads(x) for x in (out / "bsp" / f"seed{seed}" / "metrics.jsonl").read_text().splitlines()]
        s = np.array([r["grad_norm"] for r in records])
        assert s.shape == (24, 8)
        for name, st in result["statistics"].items():
            d = stats.decisions(s, 3, 0.01, name)
            np.testing.assert_allclose(np.array(st["values"][seed], float)[d.warmup:], d.decided)
            assert st["per_seed"][seed]["median"] == pytest.approx(np.median(d.decided))
    assert (out / "calibration.png").is_file() and (out / "bsp" / "seed1" / "cell.json").is_file()
    assert main(argv) == 2 and "already holds a calibration" in capsys.readouterr().err
    assert main([*argv, "--resume"]) == 0
    assert "finished earlier, loaded from bsp/seed1/" in capsys.readouterr().out
    assert json.loads((out / "calibration.json").read_text()) == result


def test_report_on_a_calibration_directory_prints_its_table_and_draws_its_picture_again(tmp_path, capsys):
    """(issue 60 item 12: "job of unknown kind 'calibrate'")"""
    from jaxsel.analysis import job
    from jaxsel.training.rundir.write import write_record

    out = tmp_path / "cal"
    out.mkdir()
    job.begin(out, "calibrate", {"seeds": 2}, resume=False, held=[])
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "has not finished" in err and "--resume" in err, err
    result = {"setting": "a task", **calibration(traces(), [0, 1], Significance(window=4, alpha=0.1))}
    write_record(out / "calibration.json", result)
    assert main(["report", str(out)]) == 0
    printed = capsys.readouterr().out
    assert format_calibration(json.loads((out / "calibration.json").read_text())) in printed
    assert (out / "calibration.png").stat().st_size > 0 and "unknown kind" not in printed
