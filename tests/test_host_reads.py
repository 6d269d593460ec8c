"""The training loop's cheaper host reads give the same numbers as the reads they replace:
a metrics window stacked on the device (runlog.stack_steps), the evaluation on one device
of the mesh and its program shared by the runs of a process (evaluation.py)."""
import gc
import weakref
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsel.core import parallel
from jaxsel.models import FunctionalModel, build_model
from jaxsel.training import evaluation
from jaxsel.training.evaluation import batch_figures, make_eval_fn, on_one_device
from jaxsel.training.runlog import records_from


def _per_leaf(window):
    """The records as the loop read them before: every metric of every step on its own."""
    out = []
    for t, m in window:
        rec = {"step": t}
        for k, v in jax.device_get(m).items():
            v = np.asarray(v)
            rec[k] = v.item() if v.ndim == 0 else v.tolist()
        out.append(rec)
    return out


def test_a_stacked_window_reads_as_the_per_step_metrics(mesh):
    rng = np.random.default_rng(0)
    shard = parallel.replica_sharding(mesh)
    window = [(t, {"loss": jnp.float32(rng.normal()), "synced": jnp.bool_(t % 2),
                   "bytes_allreduced": jnp.int32(1000 * t),
                   "replica_loss": jax.device_put(rng.normal(size=8).astype(np.float32), shard)})
              for t in range(5)]
    got, nothing = records_from(window)
    assert nothing is None
    assert got == _per_leaf(window) and [list(r) for r in got] == [list(r) for r in _per_leaf(window)]
    assert type(got[1]["synced"]) is bool and type(got[2]["bytes_allreduced"]) is int
    mixed = window[:2] + [(2, {"loss": jnp.float32(1.5)})]   # steps that report different names
    assert records_from(mixed)[0] == _per_leaf(mixed)
    divergences = {1: jnp.float32(0.25)}   # fetched in the same transfer
    assert records_from(window, alongside=divergences)[1] == {1: np.float32(0.25)}


def test_the_evaluation_runs_on_one_device_and_matches_host_copies_and_numpy(mesh):
    """Replicated weights are evaluated on one device (their first copy), with the same
    figures, bit for bit, as host copies of them (the multi-process and per-replica path);
    both agree with a float64 NumPy reference, on a split whose last batch is short."""
    model = build_model("mlp", (12,), 10, seed=0)
    fm = FunctionalModel.from_module(model)
    evaluate = make_eval_fn(fm, SimpleNamespace(input_key="x", label_key="label"), batch_size=512)
    replicated = parallel.replicated_sharding(mesh)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        arrays = {"x": (rng.normal(size=(1000, 12)) * rng.uniform(0.5, 4)).astype(np.float32),
                  "label": rng.integers(0, 10, 1000)}
        params = jax.tree.map(lambda x: np.asarray(x) * rng.uniform(0.5, 3), fm.params)
        on_mesh = jax.device_put(params, replicated)
        assert all(len(x.sharding.device_set) == 1 for x in jax.tree.leaves(on_one_device(on_mesh)))
        got = evaluate(on_mesh, {}, arrays)
        assert got == evaluate(params, {}, arrays), seed   # bit for bit
        logits = np.asarray(fm.apply(params, {}, arrays["x"].astype(np.float64), train=False), np.float64)
        shifted = logits - logits.max(1, keepdims=True)
        xent = np.log(np.exp(shifted).sum(1)) - shifted[np.arange(1000), arrays["label"]]
        assert got["test_accuracy"] == np.mean(logits.argmax(1) == arrays["label"])
        assert got["test_loss"] == pytest.approx(xent.mean(), rel=1e-5)


def test_runs_of_one_model_structure_share_one_evaluation_program_with_their_own_figures():
    """Two runs of a model (other weights, other BatchNorm statistics) evaluate through one
    program, with the figures a program of their own gives, bit for bit; another structure
    (other classes, another model) has its own; the program kept holds no weights."""
    def model(name, shape, classes, seed):
        return FunctionalModel.from_module(build_model(name, shape, classes, seed=seed))

    spec = SimpleNamespace(input_key="x", label_key="label")
    rng = np.random.default_rng(0)
    for name, shape in (("mlp", (12,)), ("cnn", (8, 8, 1))):   # the CNN: BatchNorm statistics
        arrays = {"x": rng.normal(size=(40, *shape)).astype(np.float32), "label": rng.integers(0, 10, 40)}
        first, second = model(name, shape, 10, 0), model(name, shape, 10, 1)
        program = evaluation.figures_program(first, "x", "label")
        assert evaluation.figures_program(second, "x", "label") is program
        assert evaluation.figures_program(model(name, shape, 7, 0), "x", "label") is not program
        for fm in (first, second):
            state = jax.tree.map(lambda x: x + 0.5, fm.model_state)   # statistics of its own
            own = jax.jit(batch_figures(fm.logits_fn("x"), "label"))
            want = [np.asarray(v) for v in own(fm.params, state, arrays)]
            assert [np.asarray(v) for v in program(fm.params, state, arrays)] == want, name
            assert make_eval_fn(fm, spec, batch_size=40)(fm.params, state, arrays)["test_accuracy"] == \
                want[0] / 40
    assert evaluation.figures_program(model("mlp", (12,), 10, 0), "x", "y") is not \
        evaluation.figures_program(model("mlp", (12,), 10, 0), "x", "label")
    dropped = model("mlp", (12,), 5, 0)   # a structure of its own, then dropped
    weights = [weakref.ref(leaf) for leaf in jax.tree.leaves(dropped.params_template)]
    evaluation.figures_program(dropped, "x", "label")
    del dropped
    gc.collect()
    assert weights and all(ref() is None for ref in weights)   # the program kept no weight alive
