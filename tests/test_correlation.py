"""The replica-correlation metric (issue 47): the mean pairwise Pearson correlation of the
replicas' flattened parameters, on the device (`core/correlation.py`), against NumPy's
`corrcoef`; logged beside the divergence at the steps the run reads its replicas."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import jaxsel
from jaxsel.core.correlation import replica_correlation, replica_metrics


def numpy_correlation(params) -> float:
    """Mean over pairs i != j of np.corrcoef of the replicas' flattened float parameters."""
    leaves = [np.asarray(x, np.float64).reshape(np.shape(x)[0], -1) for x in jax.tree.leaves(params)
              if jnp.issubdtype(x.dtype, jnp.floating)]   # bfloat16 too (NumPy does not call it floating)
    v = np.concatenate(leaves, axis=1)
    r = np.corrcoef(v)
    n = len(v)
    return float((r.sum() - np.trace(r)) / (n * (n - 1)))


def replicas(n=8, seed=0, spread=0.5):
    """A shared model plus each replica's own drift (and an integer leaf, not a parameter)."""
    rng = np.random.default_rng(seed)
    base = {"w": rng.normal(size=(6, 5)), "b": rng.normal(size=5) + 3.0}
    return {"w": jnp.asarray(base["w"] + spread * rng.normal(size=(n, 6, 5)), jnp.float32),
            "b": jnp.asarray(base["b"] + spread * rng.normal(size=(n, 5)), jnp.bfloat16),
            "count": jnp.arange(n, dtype=jnp.int32)}


@pytest.mark.parametrize("spread", [0.05, 0.5, 5.0])
def test_correlation_equals_numpy_corrcoef(spread):
    params = replicas(spread=spread)
    np.testing.assert_allclose(float(replica_correlation(params)), numpy_correlation(params), rtol=1e-5, atol=1e-6)


def test_correlation_on_eight_devices_is_one_scalar_from_sharded_replicas(mesh):
    """The replicas sharded over 8 devices (as a run's state is): the same value, and the
    host receives one float."""
    params = jax.device_put(replicas(), NamedSharding(mesh, P("data")))
    out = replica_correlation(params)
    assert out.shape == () and len(params["w"].sharding.device_set) == 8
    np.testing.assert_allclose(float(out), numpy_correlation(jax.device_get(params)), rtol=1e-5, atol=1e-6)


def test_identical_constant_and_single_replicas():
    same = {"w": jnp.broadcast_to(jnp.arange(12.0).reshape(3, 4), (8, 3, 4))}
    assert 1.0 - 1e-6 < float(replica_correlation(same)) <= 1.0   # clipped where float32 rounds it above 1
    flipped = {"w": same["w"] * jnp.asarray([1.0, -1.0] * 4)[:, None, None]}
    np.testing.assert_allclose(float(replica_correlation(flipped)), numpy_correlation(flipped), atol=1e-6)
    constant = {"w": same["w"].at[0].set(7.0)}   # r with a constant replica is undefined: counted as 0
    np.testing.assert_allclose(float(replica_correlation(constant)), (7 * 6) / (8 * 7), rtol=1e-6)
    assert sorted(replica_metrics({"w": jnp.ones((1, 3))})) == ["divergence"]   # one replica: no pairs
    assert sorted(replica_metrics(same)) == ["correlation", "divergence"]
    with pytest.raises(ValueError, match="needs at least 2 replicas"):
        replica_correlation({"w": jnp.ones((1, 3))})


def test_a_run_logs_correlation_beside_divergence_only_where_it_reads_its_replicas(tmp_path):
    """metrics.jsonl has `correlation` (and `divergence`) at the divergence reads only, each
    the NumPy value of that step's replicas at the final step; final.json their mean."""
    import json

    cfg = jaxsel.TrainConfig(strategy="localsgd", strategy_options={"period": 4}, steps=6, log_every=3,
                             divergence_every=2, eval_every=6, batch_size=8, progress=False,
                             out_dir=str(tmp_path / "run"))
    result = jaxsel.train(cfg)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "correlation" in r] == [1, 3, 5]
    assert [r["step"] for r in rows if "divergence" in r] == [1, 3, 5]
    np.testing.assert_allclose(rows[-1]["correlation"], numpy_correlation(jax.device_get(result.state.params)),
                               rtol=1e-5, atol=1e-6)
    final = json.loads((tmp_path / "run" / "final.json").read_text())
    np.testing.assert_allclose(final["mean_correlation"], np.mean([r["correlation"] for r in rows
                                                                   if "correlation" in r]), rtol=1e-12)


def test_the_compare_table_notes_each_rows_correlation():
    from jaxsel.analysis.compare_table import notes

    rows = [{"strategy": "bsp", "mean_correlation": 1.0}, {"strategy": "sparta (fraction=0.05)",
                                                           "mean_correlation": 0.97925},
            {"strategy": "one replica", "mean_correlation": None}]
    assert notes(rows)[0] == ("replica correlation (the replicas' mean pairwise Pearson r of their parameters, "
                              "averaged over the logged steps): bsp 1.00; sparta (fraction=0.05) 0.979.")
    assert notes([{"strategy": "bsp"}]) == []   # records from before the metric: no note
