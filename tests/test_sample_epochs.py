"""`--lr-schedule sample-epochs:...` (issue 42, item 3): the learning rate decays at epochs
counted from samples as SelSync's authors count them (a local step b, a synchronized step
b*N), with the count on the device. Checked against tests/reference/sample_epochs.py (a
transcription of the authors' loop) on SelSync's and local SGD's own sync patterns, on 8
devices and packed, through `as_optax`, and across a resume (bit for bit)."""
import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxsel
from helpers import run, softmax_batches, softmax_loss, softmax_params
from reference.sample_epochs import authors_learning_rates
from run_hooks import poison_at, trees_equal

from jaxsel import TrainConfig, train
from jaxsel.training.config import ConfigError, check_config
from jaxsel.training.lr_schedule import (RunSamples, build_lr_schedule, describe_lr_schedule, never_fires_warning,
                                         read_lr_schedule, scheduled_lr)
from jaxsel.training.optim import build_optimizer
from jaxsel.training.sample_epochs import last_learning_rate
from jaxsel.training.train import plan_run

B, N = 4, 8   # the softmax batches: 4 rows per replica, 8 replicas


@pytest.mark.parametrize("spec, parsed", [
    ("sample-epochs:110,150,190,250", ("sample-epochs", (110.0, 150.0, 190.0, 250.0), 0.1, None)),
    ("sample-epochs:50,75,100@0.1/50000", ("sample-epochs", (50.0, 75.0, 100.0), 0.1, 50000)),
    ("sample-epochs:3@0.5", ("sample-epochs", (3.0,), 0.5, None)),
    ("every:4000@0.8", ("every", (4000.0,), 0.8, None)),
    ("milestones", ("milestones", (0.5, 0.75), 0.1, None)),
])
def test_specs_parse(spec, parsed):
    assert tuple(read_lr_schedule(spec)) == parsed


@pytest.mark.parametrize("spec", ["sample-epochs", "sample-epochs:", "sample-epochs:0.5", "sample-epochs:0",
                                  "sample-epochs:2,2", "sample-epochs:2/", "sample-epochs:2/0", "sample-epochs:2@0",
                                  "sample-epochs:2/1.5", "every", "every:0", "every:10,20", "every:2.5",
                                  "milestones:5/10"])
def test_bad_specs_are_one_config_error(spec):
    with pytest.raises(ConfigError, match=r"lr_schedule must be .*sample-epochs:E1,E2,\.\.\.\[@GAMMA\]\[/SAMPLES\]"):
        check_config(TrainConfig(lr_schedule=spec))


def test_a_count_past_an_int32_is_one_config_error():
    with pytest.raises(ConfigError, match=r"lr_schedule \(--lr-schedule\) sample-epochs:1/2147483600: an epoch's "
                                          r"samples plus a synced step's \(16 x 8\) exceed"):
        check_config(TrainConfig(lr_schedule="sample-epochs:1/2147483600"))


def test_descriptions_and_warnings():
    assert describe_lr_schedule("every:4000@0.8") == "lr x0.8 every 4000 steps"
    assert describe_lr_schedule("sample-epochs:150,110@0.1") == \
        "lr x0.1 at training-set epochs 110, 150 counted from samples (b per local step, b*N per synced step)"
    samples = RunSamples(batch_size=32, replicas=10, examples=50_000)   # 400 steps: at most 2.56 epochs
    said = never_fires_warning("sample-epochs:2,3@0.1", None, 400, samples)
    assert said == ("jaxsel: warning: --lr-schedule sample-epochs:2,3@0.1: epoch(s) 3 lie past the 2 epochs of "
                    "samples this 400-step run processes even if every step synchronizes, and never change the "
                    "learning rate")
    assert never_fires_warning("sample-epochs:2@0.1", None, 400, samples) is None
    lr = scheduled_lr("every:3@0.5", 1.0, None)
    assert [lr(t) for t in range(7)] == [1, 1, 1, 0.5, 0.5, 0.5, 0.25]
    on_device = build_lr_schedule("every:3@0.5", 1.0)
    assert [float(on_device(t)) for t in range(7)] == [lr(t) for t in range(7)]


def test_the_reference_by_hand():
    """b = 1, N = 4, 10 samples an epoch, milestones 1 and 2: local steps add 1, synced 4."""
    synced = [True, True, False, True, False, False, True]   # samples after each: 4 8 9 13 14 15 19
    rates, epochs = authors_learning_rates(synced, 1.0, 0.5, (1, 2), 1, 4, 10)
    assert epochs.tolist() == [0, 0, 0, 1, 1, 1, 1]
    assert rates.tolist() == [1, 1, 1, 1, 0.5, 0.5, 0.5]       # the step after epoch 1 is reached


def _optimizer(spec: str):
    return build_optimizer("sgd", 0.1, 0.9, lr_schedule=spec, samples=RunSamples(B, N, 10_000))


SPEC = "sample-epochs:1,2,4@0.5/40"   # 40 samples an epoch: 10 local steps, or 1.25 synced ones


@pytest.mark.parametrize("devices", [8, 2])
# SelSync's smoothed statistic (2W-1 = 3 warm-up steps) mixes both kinds of step here; the raw
# default syncs every one of these steps at this delta
@pytest.mark.parametrize("strategy", [jaxsel.LocalSGD(period=3),
                                      jaxsel.SelSync(window=2, delta=0.25, statistic="smoothed")],
                         ids=["localsgd", "selsync"])
def test_the_learning_rates_follow_the_syncs_as_the_reference(strategy, devices):
    """The rate each step ran at (the injected hyperparameter) and the clock's epochs equal
    the authors' loop given the step's own `synced`, on 8 devices and 8 packed on 2."""
    mesh = jaxsel.data_mesh(replicas=N, devices=devices)
    _, history = run(strategy, mesh, softmax_batches(14, seed=3), opt=_optimizer(SPEC), replicas=N)
    synced = [bool(m["synced"]) for _, m in history]
    assert 0 < sum(synced) < len(synced), synced   # both kinds of step, or the test proves little
    rates, epochs = authors_learning_rates(synced, 0.1, 0.5, (1, 2, 4), B, N, 40)
    ran = np.array([last_learning_rate(s.opt_state) for s, _ in history])   # (steps, replicas)
    assert (ran == ran[:, :1]).all()
    np.testing.assert_array_equal(ran[:, 0], rates.astype(np.float32))
    clocks = np.array([s.opt_state.clock.epochs for s, _ in history])
    assert (clocks == epochs[:, None]).all()
    assert len(set(rates.tolist())) >= 3   # at least two decays happened within the run


def test_every_step_synchronized_is_the_step_milestones_bit_for_bit(mesh):
    """BSP counts b*N = 32 samples a step: 64-sample epochs end after steps 1 and 3, so
    sample-epochs:1,2 decays before steps 2 and 4, as milestones:2,4 does, and the
    trajectories are the same bits (the injected rate is the one the update uses)."""
    batches = softmax_batches(6, seed=1)
    by_samples, _ = run(jaxsel.BSP(), mesh, batches, opt=_optimizer("sample-epochs:1,2@0.5/64"))
    by_steps, _ = run(jaxsel.BSP(), mesh, batches, opt=build_optimizer("sgd", 0.1, 0.9,
                                                                       lr_schedule="milestones:2,4@0.5"))
    assert trees_equal(by_samples.params, by_steps.params)


def test_as_optax_advances_the_clock():
    """In a user's own loop (8 replicas vmapped over "data") the clock counts the method's syncs."""
    tx = jaxsel.as_optax(jaxsel.LocalSGD(period=2), _optimizer(SPEC), axis_name="data")
    params = softmax_params()

    def replica(params, opt_state, batch):
        grads = jax.grad(softmax_loss)(params, batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    step = jax.jit(jax.vmap(replica, axis_name="data"))
    stack = lambda tree: jax.tree.map(lambda x: jnp.broadcast_to(x, (N,) + jnp.shape(x)), tree)
    p, o = stack(params), stack(tx.init(params))
    for batch in softmax_batches(4, seed=2):
        p, o = step(p, o, jax.tree.map(lambda x: x.reshape((N, B) + x.shape[1:]), batch))
    clock = o.inner.clock   # local, synced, local, synced: 4 + 32 + 4 + 32 = 72 samples
    assert np.asarray(clock.epochs).tolist() == [1] * N and np.asarray(clock.samples).tolist() == [32] * N


def _cfg(root: Path, **kw) -> TrainConfig:
    base = dict(strategy="selsync", strategy_options={"window": 2, "delta": 0.14, "statistic": "smoothed"},
                steps=8, batch_size=8,
                log_every=2, eval_every=8, progress=False, seed=2, lr_schedule="sample-epochs:1,2,3@0.5/100",
                out_dir=str(root / "out"))
    return TrainConfig(**{**base, **kw})


@pytest.mark.slow
def test_a_resumed_run_goes_on_bit_for_bit(tmp_path):
    """A run stopped at step 4 and resumed to 8 equals the uninterrupted one (parameters,
    optimizer state with its clock), and both logs carry the reference's rates."""
    whole = train(_cfg(tmp_path / "whole"))
    first = _cfg(tmp_path / "parts", steps=4, checkpoint_dir=str(tmp_path / "ck"), checkpoint_every=4)
    train(first)
    resumed = train(dataclasses.replace(first, steps=8, resume=True))
    assert trees_equal(resumed.state.params, whole.state.params)
    assert trees_equal(resumed.state.opt_state, whole.state.opt_state)
    for root in ("whole", "parts"):
        rows = [json.loads(line) for line in (tmp_path / root / "out" / "metrics.jsonl").read_text().splitlines()]
        synced = [r["synced"] for r in rows]
        rates, epochs = authors_learning_rates(synced, 0.05, 0.5, (1, 2, 3), 8, 8, 100)
        assert [r["step"] for r in rows] == list(range(8)) and 0 < sum(synced) < 8
        assert [r["lr"] for r in rows] == pytest.approx(rates.tolist(), rel=1e-12)
    assert np.asarray(whole.state.opt_state.clock.epochs).tolist() == [epochs[-1]] * 8 and epochs[-1] >= 2


def test_a_skipped_step_counts_no_samples(tmp_path):
    """--nonfinite skip leaves the optimizer state as it was, the clock in it too: the
    logged rates are the reference's over the steps that were applied (step 1, a
    synchronized warm-up step, is poisoned)."""
    cfg = _cfg(tmp_path, steps=6, nonfinite="skip", out_dir=None)
    done = train(poison_at(plan_run(cfg), 1))
    applied = [r for r in done.records if not r["nonfinite"]]
    assert [r["step"] for r in done.records if r["nonfinite"]] == [1] and done.records[1]["synced"]
    rates, epochs = authors_learning_rates([r["synced"] for r in applied], 0.05, 0.5, (1, 2, 3), 8, 8, 100)
    assert [r["lr"] for r in applied] == pytest.approx(rates.tolist(), rel=1e-12)
    assert np.asarray(done.state.opt_state.clock.epochs).tolist() == [epochs[-1]] * 8
