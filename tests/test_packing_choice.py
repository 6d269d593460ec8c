"""packing="auto" measures: it times every way of computing a device's packed
replicas on the real step, keeps the fastest, caches the choice on disk by its key and says
how it chose; and every candidate computes the same step. Last release's "matmul" loop runs
as "auto", warned.

Timing tables are fake (an injected `time_step`): what is tested is the choice, the cache and
the bookkeeping, never a wall-clock time.
"""
import json

import jax
import numpy as np
import optax
import pytest

import jaxsel
from helpers import R, run, softmax_batches, softmax_loss, softmax_params
from jaxsel.core import packing
from jaxsel.models import FunctionalModel, build_model


@pytest.fixture(autouse=True)
def fresh_process_cache():
    packing.forget_in_memory()
    yield
    packing.forget_in_memory()


def softmax_setup(replicas=R, b=4):
    mesh = jaxsel.data_mesh(replicas, devices=1)
    opt, strategy = optax.sgd(0.1), jaxsel.BSP()
    state = jaxsel.init_state(softmax_params(), opt, strategy, mesh, replicas=replicas)
    batch = jaxsel.global_batch(softmax_batches(1, b=b * replicas // R)[0], mesh)
    return jaxsel.make_train_step(softmax_loss, opt, strategy, mesh), state, batch


class FakeClock:
    """A timing table: each candidate's step "takes" its entry; records what was timed."""

    def __init__(self, table):
        self.table, self.timed = table, []

    def __call__(self, name, run_step):
        run_step()
        self.timed.append(name)
        return self.table[name]


def never_timed(name, run_step):
    raise AssertionError(f"{name} was measured again: the cached choice should have been used")


@pytest.mark.parametrize("fastest", packing.LOOPS)
def test_auto_keeps_the_fastest_candidate_of_a_timing_table(tmp_path, fastest):
    step, state, batch = softmax_setup()
    clock = FakeClock({loop: (1.0 if loop == fastest else 2.0 + i) for i, loop in enumerate(packing.LOOPS)})
    before = jax.device_get(state)
    choice = step.decide(state, batch, measure=True, time_step=clock, directory=tmp_path, rounds=3)
    assert (choice.loop, choice.how) == (fastest, "measured") and step.choice is choice
    assert sorted(clock.timed) == sorted(packing.LOOPS * 3)                 # every candidate, every round
    assert clock.timed[:len(packing.LOOPS)] == list(packing.LOOPS)         # round robin
    assert choice.ms == {loop: 1e3 * t for loop, t in clock.table.items()}
    assert choice.describe().startswith(f"packed by {fastest} (measured per step: {fastest} 1000 ms, ")
    assert jax.tree.all(jax.tree.map(np.array_equal, jax.device_get(state), before))   # the run's state untouched
    new, metrics = step(state, batch)                                      # the step runs the chosen loop
    assert int(new.step) == 1 and np.isfinite(float(metrics["loss"]))


def test_ties_go_to_the_static_default_and_a_candidate_that_fails_is_not_chosen():
    assert packing.fastest({"vmap": 1.0, "unroll": 1.0, "map": 1.0}, packing.LOOPS) == "unroll"

    def broken():
        raise RuntimeError("RESOURCE_EXHAUSTED: out of memory\nmore")

    ms, failed = packing.measure({"unroll": lambda: None, "vmap": broken}, rounds=2,
                                 time_step=lambda name, run_step: (run_step(), 0.5)[1])
    assert ms == {"unroll": 500.0} and failed == {"vmap": "RuntimeError: RESOURCE_EXHAUSTED: out of memory"}
    with pytest.raises(RuntimeError, match="no packing candidate ran"):
        packing.fastest({}, packing.LOOPS)


def steps_not_run(auto, state, batch, time_step, rounds):
    """`packing.measure_candidates` with every candidate's step a no-op: the measurement's
    bookkeeping (round robin, the clock) without compiling the four loops (the real steps
    run in test_auto_keeps_the_fastest_candidate_of_a_timing_table)."""
    return packing.measure({loop: (lambda: None) for loop in auto.candidates}, rounds=rounds, time_step=time_step)


def test_the_choice_is_cached_on_disk_and_keyed(tmp_path, monkeypatch):
    """The choice is keyed by the per-replica program and the replicas per device (what the
    candidates' steps would time is the fake clock's either way)."""
    monkeypatch.setattr(packing, "measure_candidates", steps_not_run)
    step, state, batch = softmax_setup()
    first = step.decide(state, batch, measure=True, time_step=FakeClock(dict(vmap=1, unroll=2, map=3)),
                        directory=tmp_path, rounds=1)
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1 and files[0].name == f"{first.key.digest()}.json"
    entry = json.loads(files[0].read_text())
    assert entry["loop"] == "vmap" and entry["key"]["per_device"] == R and entry["key"]["device_kind"] == "cpu"
    assert entry["key"]["jax"] == jax.__version__
    packing.forget_in_memory()                                   # a new process: only the disk remembers
    again, state2, batch2 = softmax_setup()
    cached = again.decide(state2, batch2, measure=True, time_step=never_timed, directory=tmp_path)
    assert (cached.loop, cached.how, cached.key) == ("vmap", "cached", first.key)
    assert cached.describe().startswith("packed by vmap (measured earlier per step: vmap 1000 ms")
    # another per-replica batch is another program, another number of replicas per device another key
    for other in (softmax_setup(b=8), softmax_setup(replicas=4)):
        clock = FakeClock(dict(vmap=3, unroll=2, map=1))
        choice = other[0].decide(*other[1:], measure=True, time_step=clock, directory=tmp_path, rounds=1)
        assert choice.how == "measured" and choice.loop == "map" and choice.key != first.key
    assert len(list(tmp_path.glob("*.json"))) == 3


def test_a_corrupt_entry_is_measured_again_and_an_unwritable_cache_only_warns(tmp_path, capsys):
    step, state, batch = softmax_setup()
    key = packing.make_key(jax.devices()[0], R, "0" * 16)
    (tmp_path / f"{key.digest()}.json").write_text("{not json")
    assert packing.load(key, tmp_path) is None
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    choice = step.decide(state, batch, measure=True, time_step=FakeClock(dict(vmap=2, unroll=1, map=3)),
                         directory=blocked / "packing", rounds=1)
    assert choice.loop == "unroll" and "is not writable" in capsys.readouterr().err
    assert packing.load(choice.key, blocked / "packing")["loop"] == "unroll"   # kept for this process


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("JAXSEL_CACHE_DIR", str(tmp_path / "c"))
    assert packing.cache_dir() == tmp_path / "c" / "packing"
    monkeypatch.delenv("JAXSEL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert packing.cache_dir() == tmp_path / "x" / "jaxsel" / "packing"


def test_cpu_does_not_measure_unless_asked(monkeypatch):
    step, state, batch = softmax_setup()
    monkeypatch.delenv(packing.MEASURE_ENV, raising=False)
    choice = step.decide(state, batch, time_step=never_timed)
    assert (choice.loop, choice.how) == ("unroll", "static")
    assert choice.describe() == "packed by unroll (static default on CPU, not measured)"
    monkeypatch.setenv(packing.MEASURE_ENV, "yes")
    with pytest.raises(ValueError, match="JAXSEL_PACKING_MEASURE must be 1 .* or 0 .*, got 'yes'"):
        packing.measures_on("cpu")
    monkeypatch.setenv(packing.MEASURE_ENV, "0")
    assert not packing.measures_on("gpu")


def test_inside_another_jit_auto_takes_the_cached_choice_or_the_static_default(tmp_path, monkeypatch):
    monkeypatch.setenv(packing.MEASURE_ENV, "1")
    monkeypatch.setenv("JAXSEL_CACHE_DIR", str(tmp_path))
    step, state, batch = softmax_setup()
    assert np.isfinite(float(jax.jit(lambda s, b: step(s, b)[1]["loss"])(state, batch)))   # tracers: nothing to time
    assert (step.choice.loop, step.choice.how) == ("unroll", "static") and "inside another jit" in step.choice.note
    measured, state, batch = softmax_setup()
    measured.decide(state, batch, time_step=FakeClock(dict(vmap=1, unroll=2, map=3)), rounds=1)
    traced, state, batch = softmax_setup()   # decided ahead of the trace by the cache
    jax.jit(lambda s, b: traced(s, b)[1]["loss"])(state, batch)
    assert (traced.choice.loop, traced.choice.how) == ("vmap", "cached")


def test_one_replica_per_device_has_nothing_to_choose():
    step, state, batch = softmax_setup(replicas=1)
    choice = step.decide(state, batch, measure=True, time_step=never_timed)
    assert (choice.how, choice.describe()) == ("single", "")


# --------------------------------------------------------- every candidate, the same step

def cnn_run(loop, devices=1, strategy=None, steps=3, replicas=4):
    fm = FunctionalModel.from_module(build_model("cnn", (8, 8, 3), 10, seed=0))
    rng = np.random.default_rng(0)
    batches = [{"image": rng.standard_normal((replicas * 2, 8, 8, 3)).astype(np.float32),
                "label": rng.integers(0, 10, replicas * 2).astype(np.int32)} for _ in range(steps)]
    mesh = jaxsel.data_mesh(replicas, devices=devices)
    state, history = run(strategy or jaxsel.BSP(), mesh, batches, loss=fm.classification_loss(), params=fm.params,
                         model_state=fm.model_state, stateful=True, replicas=replicas, packing=loop)
    return jax.device_get(state), [jax.device_get(m["loss"]) for _, m in history]


@pytest.mark.slow
@pytest.mark.layouts
@pytest.mark.parametrize("strategy", [jaxsel.BSP(), jaxsel.SelSync(window=1, delta=0.05)], ids=["bsp", "selsync"])
def test_every_candidate_trains_a_convolutional_model_alike(strategy):
    """4 packed replicas of a CNN with BatchNorm: every loop reaches the parameters, BatchNorm
    statistics and losses of one replica on each of 4 devices to float32 rounding (XLA:CPU
    compiles a convolution differently inside a larger program or a loop body, so on a CNN
    not even unroll and map are bit for bit; the golden records hold that for their model)."""
    ref, ref_losses = cnn_run("auto", devices=4, strategy=strategy)
    for loop in packing.LOOPS:
        got, losses = cnn_run(loop, strategy=strategy)
        for field in ("params", "model_state", "opt_state"):
            jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), getattr(got, field),
                         getattr(ref, field))
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)


def test_last_releases_matmul_loop_runs_as_auto_and_says_so(tmp_path):
    """Issue 44: the matmul loop is removed; for one release its name still works, as "auto"
    (unroll on a CPU that does not measure), with a warning naming the replacement, in a
    library call, a TrainConfig, a config file or an old run's config.json, and on the
    command line (one note line)."""
    from jaxsel import TrainConfig
    from jaxsel.cli.command import build_parser
    from jaxsel.cli.deprecated import removed_values
    from jaxsel.training.config_file import load_settings

    mesh = jaxsel.data_mesh(R, devices=1)
    with pytest.warns(DeprecationWarning, match="packing='matmul' was removed .* runs as 'auto'"):
        step = jaxsel.make_train_step(softmax_loss, optax.sgd(0.1), jaxsel.BSP(), mesh, packing="matmul")
    state = jaxsel.init_state(softmax_params(), optax.sgd(0.1), jaxsel.BSP(), mesh)
    batch = jaxsel.global_batch(softmax_batches(1, b=4)[0], mesh)
    assert (step.decide(state, batch, time_step=never_timed).loop, step.choice.how) == ("unroll", "static")
    with pytest.warns(DeprecationWarning, match="write packing='auto', or 'unroll'"):
        assert TrainConfig(packing="matmul").packing == "auto"
    # an old run's config.json names the setting as last release did (old_records.py)
    (tmp_path / "config.json").write_text(json.dumps({"strategy": "bsp", "local_replicas": "matmul"}))
    with pytest.warns(DeprecationWarning):
        assert load_settings(tmp_path / "config.json")["packing"] == "auto"
    with pytest.warns(DeprecationWarning):
        assert build_parser().parse_args(["train", "--packing", "matmul"]).packing == "auto"
    assert removed_values(["train", "--packing=matmul", "--packing", "unroll"]) == [
        "jaxsel: note: --packing matmul was removed (it was never faster than unroll) and runs as "
        "--packing auto for one more release; write --packing auto, or unroll"]
    with pytest.raises(ValueError, match="packing must be one of auto, vmap, map, unroll, got 'conv'"):
        jaxsel.make_train_step(softmax_loss, optax.sgd(0.1), jaxsel.BSP(), mesh, packing="conv")


# ------------------------------------------------------------------------ a run's records

def test_a_run_measures_once_records_the_choice_and_the_next_run_reads_it(tmp_path, monkeypatch, capsys):
    from jaxsel import TrainConfig, train
    from jaxsel.training.config_file import load_settings

    monkeypatch.setenv(packing.MEASURE_ENV, "1")          # as on an accelerator
    monkeypatch.setenv("JAXSEL_CACHE_DIR", str(tmp_path / "cache"))
    base = dict(strategy="bsp", replicas=8, devices=1, steps=2, batch_size=4, log_every=1, eval_every=2,
                progress=False, checkpoint_dir=None, checkpoint_every=None)
    first = train(TrainConfig(**base, out_dir=str(tmp_path / "a")))
    assert "jaxsel: packed by" in capsys.readouterr().err   # said once, where it took the time
    env = json.loads((tmp_path / "a" / "environment.json").read_text())
    choice = env["packing_choice"]
    assert choice["how"] == "measured" and set(choice["ms_per_step"]) == set(packing.LOOPS)
    assert choice["loop"] == packing.fastest(choice["ms_per_step"], packing.LOOPS)
    told = packing.Choice(choice["loop"], "measured", choice["ms_per_step"]).describe()
    assert first.final["layout"] == env["layout"] == f"8 replicas on 1 x CPU (cpu), 8 per device, {told}"
    recorded = json.loads((tmp_path / "a" / "config.json").read_text())
    assert recorded["packing_choice"] == choice and recorded["packing"] == "auto"   # the choice, the setting
    assert "packing_choice" not in load_settings(tmp_path / "a" / "config.json")   # a record, not a setting
    packing.forget_in_memory()
    train(TrainConfig(**base, out_dir=str(tmp_path / "b")))
    again = json.loads((tmp_path / "b" / "environment.json").read_text())["packing_choice"]
    assert (again["how"], again["loop"], again["key"]) == ("cached", choice["loop"], choice["key"])
    assert len(list((tmp_path / "cache" / "packing").glob("*.json"))) == 1


@pytest.mark.parametrize("spoil", [{"ms_per_step": "abc"}, {"ms_per_step": {"unroll": "fast"}}, {"failed": [1, 2]},
                                   {"ms_per_step": {"unroll": True}}, {"failed": {"vmap": 3}}, {"loop": ["vmap"]},
                                   {"ms_per_step": {"warp": 1.0}}, {"loop": "matmul"}],
                         ids=["ms-text", "ms-value-text", "failed-list", "ms-bool", "failed-number", "loop-list",
                              "ms-unknown-loop", "removed-loop"])
def test_a_cache_entry_with_fields_of_the_wrong_type_is_a_miss_and_measured_again(tmp_path, monkeypatch, spoil):
    """Issue 48 item 6: such an entry crashed every run on its key until the file was
    deleted. (The candidates' timings are a fake table: nothing runs but the program's
    lowering, which keys the cache.)"""
    tables = iter([{"vmap": 1.0, "unroll": 2.0}, {"vmap": 2.0, "unroll": 1.0}])
    monkeypatch.setattr(packing, "measure_candidates", lambda *a, **k: (next(tables), {}))
    step, state, batch = softmax_setup()
    first = step.decide(state, batch, measure=True, directory=tmp_path)
    path = tmp_path / f"{first.key.digest()}.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **spoil}))
    packing.forget_in_memory()
    assert packing.load(first.key, tmp_path) is None
    again, state, batch = softmax_setup()
    choice = again.decide(state, batch, measure=True, directory=tmp_path)
    assert (choice.how, choice.loop) == ("measured", "unroll") and choice.describe().startswith("packed by unroll")
    assert packing.load(first.key, tmp_path)["loop"] == "unroll"   # overwritten by the new measurement


def test_a_bad_measure_setting_is_one_line_and_an_unwritable_cache_is_not_said_to_keep_the_choice(tmp_path, monkeypatch,
                                                                                                 capsys):
    """Issue 48 items 6 and 10: JAXSEL_PACKING_MEASURE=yes was a traceback; a choice the
    cache could not keep was reported both as kept for this process only and kept in it."""
    from jaxsel.cli import main

    argv = ["train", "--strategy", "bsp", "--replicas", "2", "--devices", "1", "--steps", "2", "--no-progress",
            "--no-checkpoint", "--out", str(tmp_path / "run")]
    monkeypatch.setenv(packing.MEASURE_ENV, "yes")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "JAXSEL_PACKING_MEASURE must be 1 (measure everywhere) or 0 (never), got 'yes'" in err[0]
    assert not (tmp_path / "run").exists()

    monkeypatch.setenv(packing.MEASURE_ENV, "1")
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("JAXSEL_CACHE_DIR", str(tmp_path / "a-file"))   # its packing/ cannot be made
    monkeypatch.setattr(packing, "measure_candidates", lambda *a, **k: ({"vmap": 1.0, "unroll": 2.0}, {}))
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "kept for this process only" in err and "kept in" not in err, err
    assert "jaxsel: packed by vmap (measured per step: vmap 1 ms, unroll 2 ms)" in err, err
