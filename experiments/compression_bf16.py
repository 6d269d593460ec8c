"""bf16 payloads: an all-reduce in bf16 (jaxsel's choice) against gathering the bf16 values
and summing in float32, on 8 simulated CPU devices; plus what the cost model charges each.

    python experiments/compression_bf16.py

Prints the error of each (max and rms, as a share of mean |x|) on 8 replicas x 1M values,
for independent N(0, 1) values and for replicas sharing a signal (like gradients), and the
projected time of each collective for 1M float32 parameters on 10 GbE.
"""
import os

os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import jaxsel  # noqa: E402
from jaxsel import costmodel  # noqa: E402
from jaxsel.core.collectives import replica_gather, replica_sum  # noqa: E402

R = 8


def both(x):
    """(mean all-reduced in bf16, mean gathered as bf16 and summed in float32)."""
    y = (x[0] / R).astype(jnp.bfloat16)
    reduced = replica_sum(y, "data").astype(jnp.float32)
    every = replica_gather(y, "data").astype(jnp.float32)
    gathered = every[0]
    for j in range(1, R):
        gathered = gathered + every[j]
    return reduced[None], gathered[None]


def main():
    mesh = jaxsel.data_mesh(replicas=R, devices=R)
    fn = jax.jit(jax.shard_map(both, mesh=mesh, in_specs=P("data"), out_specs=(P("data"), P("data"))))
    rng = np.random.default_rng(0)
    cases = [("independent N(0,1)", rng.normal(size=(R, 1 << 20))),
             ("shared signal + 10% noise", rng.normal(size=(1, 1 << 20)) + 0.1 * rng.normal(size=(R, 1 << 20)))]
    for name, x in cases:
        x = x.astype(np.float32)
        reduced, gathered = jax.device_get(fn(jax.device_put(x, NamedSharding(mesh, P("data")))))
        exact, scale = x.astype(np.float64).mean(0), np.abs(x).mean()
        for label, got in [("all-reduce in bf16", reduced[0]), ("gather, f32 sum", gathered[0])]:
            e = np.abs(got - exact) / scale
            print(f"{name:27s} {label:19s} max {e.max() * 100:.3f}%  rms {np.sqrt((e ** 2).mean()) * 100:.3f}% of mean|x|")
    b = 4 * 1_000_000
    for label, nbytes, coll in [("float32 all-reduce", b, "allreduce"), ("bf16 all-reduce", b / 2, "allreduce"),
                                ("bf16 all-gather", b / 2, "allgather"), ("int8 all-gather", b / 4, "allgather")]:
        ms = costmodel.collective_time(nbytes, R, "10gbe", coll) * 1e3
        print(f"{label:19s} 1M parameters, {R} replicas, 10 GbE: {ms:.2f} ms")


if __name__ == "__main__":
    main()
