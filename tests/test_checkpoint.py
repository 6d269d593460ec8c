"""Checkpoints hold every replica's state; an interrupted run resumes bit for bit.

Tiny runs (digits, MLP, 8 replicas, a dozen steps): an uninterrupted run is the
reference; the interrupted one receives SIGTERM while the loader builds an early batch,
saves, and `resume=True` finishes it. Parameters, optimizer and trigger state and the
metrics log must match exactly (CPU).
"""
import dataclasses
import json

import jax
import numpy as np
import pytest

from run_hooks import signal_at, trees_equal

from jaxsel.training.checkpoint import Checkpointer, CheckpointMismatch, existing_steps
from jaxsel.training.faults import TrainingInterrupted
from jaxsel.training.run import check_paths
from jaxsel.training.train import TrainConfig, build_run, plan_run, train

STEPS = 16


def config(tmp_path, strategy, **kw):
    base = dict(strategy=strategy, steps=STEPS, batch_size=8, log_every=4, eval_every=8,
                checkpoint_every=4, keep=3, progress=False, seed=3,
                checkpoint_dir=str(tmp_path / "ckpt"), out_dir=str(tmp_path / "out"))
    if strategy == "selsync":   # a short window so the trigger's windows fill and matter
        base["strategy_options"] = {"window": 3, "delta": 0.05}
    base.update(kw)
    return TrainConfig(**base)


def log_without_times(path):
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in ("train_time_s", "projected_time_s")} for r in recs]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """`uninterrupted(strategy)`: the uninterrupted STEPS-step run of `strategy`, trained
    once per module (the references of the resumed runs below) and its folder."""
    runs = {}

    def get(strategy):
        if strategy not in runs:
            root = tmp_path_factory.mktemp(f"ref-{strategy}")
            runs[strategy] = train(config(root, strategy)), root
        return runs[strategy]
    return get


@pytest.fixture(scope="module")
def four_steps(tmp_path_factory):
    """A finished 4-step BSP run with its checkpoint of step 4, which the refusals below
    leave as it was (checked): they share it."""
    root = tmp_path_factory.mktemp("four-steps")
    cfg = config(root, "bsp", steps=4)
    train(cfg)
    return cfg, root


def files(folder) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["bsp", "selsync"])
def test_interrupted_run_resumes_bit_for_bit(tmp_path, strategy, uninterrupted):
    ref, ref_root = uninterrupted(strategy)

    cfg = config(tmp_path / "cut", strategy)
    with pytest.raises(TrainingInterrupted) as info:
        train(signal_at(plan_run(cfg), 6))
    stopped = info.value.step
    assert 0 < stopped < STEPS and info.value.exit_code == 143   # 128 + SIGTERM
    assert stopped in existing_steps(cfg.checkpoint_dir)
    assert f"step {stopped}" in str(info.value)

    done = train(dataclasses.replace(cfg, resume=True))
    assert done.final["resumed_from_step"] == stopped
    assert int(done.state.step) == STEPS
    for field in ("params", "opt_state", "model_state", "strategy_state"):
        assert trees_equal(getattr(done.state, field), getattr(ref.state, field)), field
    assert log_without_times(tmp_path / "cut" / "out" / "metrics.jsonl") == \
        log_without_times(ref_root / "out" / "metrics.jsonl")
    assert [e["step"] for e in done.evals] == [e["step"] for e in ref.evals]
    assert done.final["final_test_accuracy"] == ref.final["final_test_accuracy"]
    assert done.final["bytes_allreduced"] == ref.final["bytes_allreduced"]


def test_a_run_continued_in_process_is_the_uninterrupted_run_bit_for_bit(tmp_path, uninterrupted):
    """The fast tier's bit-for-bit resume (the interrupted runs above are slow): SelSync
    trained for half the steps, then continued with `resume=True` to STEPS, ends with the
    uninterrupted run's state, metrics log, evaluations and bytes, exactly. A resumed step
    counter or data position off by one fails it in every record."""
    ref, ref_root = uninterrupted("selsync")
    cfg = config(tmp_path, "selsync", steps=STEPS // 2)
    train(cfg)
    done = train(dataclasses.replace(cfg, steps=STEPS, resume=True))
    assert done.final["resumed_from_step"] == STEPS // 2 and int(done.state.step) == STEPS
    for field in ("params", "opt_state", "model_state", "strategy_state"):
        assert trees_equal(getattr(done.state, field), getattr(ref.state, field)), field
    assert log_without_times(tmp_path / "out" / "metrics.jsonl") == log_without_times(ref_root / "out" / "metrics.jsonl")
    assert [e["step"] for e in done.evals] == [e["step"] for e in ref.evals]
    assert done.final["final_test_accuracy"] == ref.final["final_test_accuracy"]
    assert done.final["bytes_allreduced"] == ref.final["bytes_allreduced"]


def test_checkpoint_keeps_the_replica_axis(tmp_path):
    cfg = config(tmp_path, "selsync", steps=4)
    result = train(cfg)
    run = build_run(dataclasses.replace(cfg, resume=True))
    ckpt = Checkpointer(cfg.checkpoint_dir, run.mesh)
    restored = ckpt.restore_latest(run.state)
    ckpt.close()
    assert restored.step == 4 and restored.meta["data_position"] == 4
    assert restored.meta["identity"]["replicas"] == 8 and restored.meta["seed"] == 3
    for leaf in jax.tree.leaves(restored.state.replace(step=None)):
        assert leaf.shape[0] == 8 and leaf.sharding.spec[0] == "data"
    w = np.asarray(jax.tree.leaves(restored.state.params)[0])
    assert not np.array_equal(w[0], w[1])  # replicas really differ (SelSync between syncs)
    assert trees_equal(restored.state, result.state)


# Orbax's failed read of the truncated files leaves an asyncio callback behind ("Event loop
# is closed"), reported by pytest as an unraisable exception; it is noise, not a failure.
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_truncated_latest_checkpoint_falls_back(tmp_path, capsys, uninterrupted):
    cfg = config(tmp_path, "bsp", steps=8)
    train(cfg)
    assert existing_steps(cfg.checkpoint_dir) == [4, 8]
    for path in (tmp_path / "ckpt" / "8" / "state").rglob("*"):
        if path.is_file() and path.parent.name == "d":
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    ref, _ = uninterrupted("bsp")
    capsys.readouterr()
    done = train(dataclasses.replace(cfg, steps=STEPS, resume=True))
    err = capsys.readouterr().err
    assert "checkpoint" in err and "/8 is unreadable" in err and "falling back to step 4" in err
    assert done.final["resumed_from_step"] == 4
    assert trees_equal(done.state.params, ref.state.params)
    assert sorted(existing_steps(cfg.checkpoint_dir)) == [8, 12, 16]   # 8 rewritten by the resumed run (keep=3)
    assert any(p.name.startswith("corrupt-8-") for p in (tmp_path / "ckpt").iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("change", [{"replicas": 4}, {"model": "cnn"}, {"strategy": "localsgd"},
                                    {"lr": 0.1}])
def test_checkpoint_of_another_run_is_a_clear_error(four_steps, change):
    cfg, root = four_steps
    before = files(root)
    other = dataclasses.replace(cfg, resume=True, **change)
    key, value = next(iter(change.items()))
    with pytest.raises(CheckpointMismatch, match=rf"{key}.*{value}"):
        train(other)
    assert files(root) == before


def test_fresh_run_refuses_a_used_checkpoint_dir(four_steps, tmp_path):
    cfg, _ = four_steps
    with pytest.raises(ValueError, match="already holds checkpoints.*continue that run with --resume"):
        check_paths(dataclasses.replace(cfg, out_dir=None))   # no run directory: nobody else's folder
    with pytest.raises(ValueError, match=r"already holds checkpoints \(newest: step 4, of run directory '.*out'\); "
                                         r"give this run a --checkpoint-dir of its own"):   # (issue 48 item 10)
        check_paths(dataclasses.replace(cfg, out_dir=str(tmp_path / "another-run")))


@pytest.mark.parametrize("devices", [2])   # 1 device: test_resume_on_one_device_is_bit_for_bit
@pytest.mark.slow
def test_checkpoint_of_eight_devices_resumes_on_fewer(tmp_path, devices):
    """8 replicas on 8 devices -> on 1 or 2 (4 or 8 packed per device). The restored state is
    the saved one bit for bit; the resumed run matches the uninterrupted 8-device run to
    float32 rounding (the replica mean sums in another order when replicas are packed)."""
    ref = train(config(tmp_path / "ref", "selsync", devices=8))
    cfg = config(tmp_path / "cut", "selsync", steps=STEPS // 2, devices=8)
    cut = train(cfg)
    moved = dataclasses.replace(cfg, steps=STEPS, resume=True, devices=devices)
    run = build_run(moved)
    assert run.layout == (f"8 replicas on {devices} x CPU (cpu), {8 // devices} per device, packed by unroll "
                          f"(static default on CPU, not measured)")
    ckpt = Checkpointer(cfg.checkpoint_dir, run.mesh)
    restored = ckpt.restore(STEPS // 2, run.state)
    ckpt.close()
    assert trees_equal(restored, cut.state)
    assert {s.data.shape[0] for s in jax.tree.leaves(restored.params)[0].addressable_shards} == {8 // devices}
    done = train(moved)
    assert done.final["resumed_from_step"] == STEPS // 2 and done.final["layout"] == run.layout
    for a, b in zip(jax.tree.leaves(jax.device_get(done.state)), jax.tree.leaves(jax.device_get(ref.state))):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("loop", ["auto"])   # the loops agree bit for bit: tests/test_packing.py
@pytest.mark.slow
def test_resume_on_one_device_is_bit_for_bit(tmp_path, loop):
    """With the packed replicas' gradients computed as the plain per-replica program (on CPU
    "auto" unrolls it k times; "map" loops over it) the only difference left is the order of
    the replica sums, and on one device the local fold sums in replica order as XLA:CPU's
    8-device all-reduce does: the resumed run is the uninterrupted 8-device run exactly.
    ("vmap": CPU's batched matmul differs from the plain one in the last bit; on 2 devices
    the sum is (r0+..+r3)+(r4+..+r7), another rounding: float32 tolerance, tested above.)"""
    options = dict(packing=loop)
    ref = train(config(tmp_path / "ref", "selsync", devices=8, **options))
    cfg = config(tmp_path / "cut", "selsync", steps=STEPS // 2, devices=8, **options)
    train(cfg)
    done = train(dataclasses.replace(cfg, steps=STEPS, resume=True, devices=1))
    assert done.final["layout"] == ("8 replicas on 1 x CPU (cpu), 8 per device, packed by unroll (static default "
                                    "on CPU, not measured)")
    for field in ("params", "opt_state", "strategy_state"):
        assert trees_equal(getattr(done.state, field), getattr(ref.state, field)), field
