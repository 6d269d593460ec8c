"""The names some of a run's settings choose between, apart from the code behind them.

`TrainConfig`'s declarations, the command line's parsers and `--help` read these lists;
the modules that implement the choices (core/step.py's packed-replica loops,
data/pipeline.py's loaders, training/faults.py's non-finite policies) read them from here
too, so each list is written once and `jaxsel --help` lists them without importing JAX or
TensorFlow Datasets. Imports nothing of jaxsel's.
"""
import warnings

#: how a device computes its packed replicas (`core/step.py`, `core/packing.py`)
LOCAL_LOOPS = ("auto", "vmap", "map", "unroll")
#: loops of an earlier release, still read for one more: each runs as its replacement. The
#: "matmul" loop (every convolution as a batched matrix product, a jaxpr interpreter) was
#: slower than unroll on every device measured (BENCHMARKS.md, "the matmul loop"), so
#: "auto", which never chose it there, replaces it.
REMOVED_LOOPS = {"matmul": "auto"}
#: how batches are built on the host (`data/pipeline.py`)
LOADERS = ("auto", "grain", "threads")
#: what a NaN/inf loss or gradient does to a run (`training/faults.py`)
NONFINITE_POLICIES = ("stop", "skip")


def current_loop(local_replicas, stacklevel: int = 2):
    """`local_replicas` as this release runs it: a removed loop (`REMOVED_LOOPS`) becomes its
    replacement, with a DeprecationWarning naming it; any other value is returned as it is
    (checked by its reader against `LOCAL_LOOPS`). `stacklevel`: the frame the warning
    names, counted from the caller (2: the caller's caller)."""
    if isinstance(local_replicas, str) and local_replicas in REMOVED_LOOPS:
        new = REMOVED_LOOPS[local_replicas]
        warnings.warn(f"local_replicas={local_replicas!r} was removed (it was never faster than unroll); it runs "
                      f"as {new!r}, the loop auto chooses: write local_replicas={new!r}, or 'unroll'",
                      DeprecationWarning, stacklevel=stacklevel + 1)
        return new
    return local_replicas
