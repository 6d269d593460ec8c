"""Dashboards: `jaxsel compare --tensorboard --wandb` leaves, for each strategy, TensorBoard
event files and an offline W&B run (grouped by the comparison) whose scalars are the run's
own figures, recomputed here from metrics.jsonl and evals.json; writers are called only
at the metric reads; a missing extra is one line naming the pip command."""
import glob
import importlib.util
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from jaxsel import TrainConfig, train
from jaxsel.cli import main as cli_main

pytest.importorskip("tensorboardX")
if importlib.util.find_spec("wandb") is None:   # found, not imported: importing it costs every worker ~0.9 s
    pytest.skip("wandb is not installed (pip install jaxsel[wandb])", allow_module_level=True)


def tfrecords(path: Path):
    """The payloads of a TFRecord file (TensorBoard event files): length, crc, data, crc."""
    data, pos = path.read_bytes(), 0
    while pos < len(data):
        (length,) = struct.unpack("<Q", data[pos:pos + 8])
        yield data[pos + 12:pos + 12 + length]
        pos += 16 + length


def tensorboard_scalars(run_dir: Path) -> dict[str, dict[int, float]]:
    from tensorboardX.proto.event_pb2 import Event

    out: dict[str, dict[int, float]] = {}
    for path in sorted(run_dir.glob("events.out.tfevents.*")):
        for payload in tfrecords(path):
            event = Event.FromString(payload)
            for v in event.summary.value:
                out.setdefault(v.tag, {})[event.step] = v.simple_value
    return out


def wandb_records(path: Path):
    """W&B's run file (a LevelDB-style log of `Record` protos, 32 KiB blocks after a 7-byte
    header): every record, in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, parts = 7, b""
    while pos + 7 <= len(data):
        room = 32768 - pos % 32768
        if room < 7:
            pos += room
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 0:
            continue
        parts = chunk if kind in (1, 2) else parts + chunk
        if kind in (1, 4):
            yield pb.Record.FromString(parts)


def expected_scalars(run_dir: Path) -> dict[str, dict[int, float]]:
    """What the dashboards must show, from the run's own logs."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = np.array([r["step"] for r in rows])
    want = {"train/loss": dict(zip(steps, [r["loss"] for r in rows])),
            "train/sync_fraction": dict(zip(steps, np.cumsum([r["synced"] for r in rows]) / (steps + 1))),
            "train/bytes_allreduced": dict(zip(steps, np.cumsum([r["bytes_allreduced"] for r in rows]))),
            "time/projected_s": {r["step"]: r["projected_time_s"] for r in rows},
            "train/divergence": {r["step"]: r["divergence"] for r in rows if "divergence" in r},
            "train/correlation": {r["step"]: r["correlation"] for r in rows if "correlation" in r}}
    if any("delta" in r for r in rows):
        want["train/delta_bar"] = {r["step"]: np.nanmax(np.asarray(r["delta"], float)) for r in rows
                                   if "delta" in r and np.any(np.isfinite(np.asarray(r["delta"], float)))}
    evals = json.loads((run_dir / "evals.json").read_text())
    want["eval/test_accuracy"] = {e["step"]: e["test_accuracy"] for e in evals}
    want["eval/test_loss"] = {e["step"]: e["test_loss"] for e in evals}
    return want


def assert_same(got: dict, want: dict, rel: float) -> None:
    assert set(got) == set(want)
    for tag, by_step in want.items():
        assert sorted(got[tag]) == sorted(int(s) for s in by_step), tag
        for step, value in by_step.items():
            assert got[tag][int(step)] == pytest.approx(float(value), rel=rel, abs=1e-9), (tag, step)


@pytest.mark.slow
def test_compare_writes_tensorboard_and_wandb_runs_per_strategy(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "cmp"
    assert cli_main(["compare", "--strategies", "bsp,selsync", "--dataset", "digits", "--steps", "20",
                     "--log-every", "5", "--eval-every", "10", "--opt", "window=3", "--no-progress",
                     "--tensorboard", "--wandb", "jaxsel-test", "--seeds", "1", "--no-match-budget",
                     "--out", str(out)]) == 0
    for strategy in ("bsp", "selsync"):
        run_dir = out / strategy / "seed0"
        want = expected_scalars(run_dir)
        assert want["train/divergence"] and want["train/correlation"] and (strategy == "bsp" or want["train/delta_bar"])
        assert_same(tensorboard_scalars(run_dir), want, rel=1e-6)   # event files hold float32
        (run_file,) = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
        records = list(wandb_records(Path(run_file)))
        (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
        assert (run.project, run.run_group, run.display_name) == ("jaxsel-test", "cmp", f"{strategy}/seed0")
        logged: dict[str, dict[int, float]] = {}
        for r in records:
            if r.WhichOneof("record_type") == "history":
                items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
                for k, v in items.items():
                    if not k.startswith("_"):
                        logged.setdefault(k, {})[items["_step"]] = v
        assert_same(logged, want, rel=1e-12)


class Recorder:
    def __init__(self):
        self.writes, self.evals, self.closed = [], [], False

    def write(self, rows):
        self.writes.append([r["step"] for r in rows])

    def write_eval(self, row):
        self.evals.append(row["step"])

    def close(self):
        self.closed = True


def test_writers_are_called_only_at_the_metric_reads(tmp_path, monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr("jaxsel.training.runlog.dashboard_writers", lambda *a, **k: [recorder])
    train(TrainConfig(strategy="bsp", steps=12, log_every=4, eval_every=6, progress=False,
                      out_dir=str(tmp_path / "run")))
    # the reads: every log_every steps, and before each evaluation (step 6)
    assert recorder.writes == [[0, 1, 2, 3], [4, 5], [6, 7], [8, 9, 10, 11]]
    assert recorder.evals == [0, 6, 12] and recorder.closed


@pytest.mark.parametrize("flag, module, extra", [(["--tensorboard"], "tensorboardX", "tensorboard"),
                                                 (["--wandb", "p"], "wandb", "wandb")])
def test_a_missing_extra_is_one_line_naming_the_pip_command(flag, module, extra, tmp_path, monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))
    out = tmp_path / "run"
    assert cli_main(["train", "--steps", "2", "--no-progress", "--out", str(out), *flag]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == [f'jaxsel train: error: {flag[0]} needs {module}, which is not installed; '
                   f'pip install "jaxsel[{extra}]"']
    assert not out.exists()
