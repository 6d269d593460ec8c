"""The training loop's cheaper host reads give the same numbers as the reads they replace:
a metrics window stacked on the device (runlog.stack_steps) and the evaluation's loss on
one device of the mesh (run.one_device, run.batch_figures)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxsel.core import parallel
from jaxsel.training.run import batch_figures, one_device
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


def test_the_evaluation_loss_on_one_device_is_the_mesh_wide_loss(mesh):
    replicated = parallel.replicated_sharding(mesh)
    xent = optax.softmax_cross_entropy_with_integer_labels
    for seed in range(20):
        rng = np.random.default_rng(seed)
        n = (512, 488)[seed % 2]
        logits = jax.device_put((rng.normal(size=(n, 10)) * rng.uniform(0.5, 4)).astype(np.float32), replicated)
        labels = rng.integers(0, 10, n)
        assert len(one_device(logits).sharding.device_set) == 1
        right, loss = jax.device_get(batch_figures(one_device(logits), labels))
        assert int(right) == int(jnp.sum(jnp.argmax(logits, -1) == labels))
        assert float(loss) == float(xent(logits, labels).sum()), seed   # bit for bit
