"""The names some of a run's settings choose between, apart from the code behind them.

`TrainConfig`'s declarations, the command line's parsers and `--help` read these lists;
the modules that implement the choices (core/step.py's packed-replica loops,
data/pipeline.py's loaders, training/faults.py's non-finite policies) read them from here
too, so each list is written once and `jaxsel --help` lists them without importing JAX or
TensorFlow Datasets. Imports nothing of jaxsel's.
"""
import warnings

#: packing: how a device loops over the replicas packed on it (`core/step.py`, `core/packing.py`)
PACKING_LOOPS = ("auto", "vmap", "map", "unroll")
#: loops of an earlier release, still read for one more: each runs as its replacement. The
#: "matmul" loop (every convolution as a batched matrix product, a jaxpr interpreter) was
#: slower than unroll on every device measured (BENCHMARKS.md, "the matmul loop"), so
#: "auto", which never chose it there, replaces it.
REMOVED_LOOPS = {"matmul": "auto"}
#: how batches are built on the host (`data/pipeline.py`)
LOADERS = ("auto", "grain", "threads")
#: what a NaN/inf loss or gradient does to a run (`training/faults.py`)
NONFINITE_POLICIES = ("stop", "skip")


#: packing's name in the last release (issue 59: one name per concept), read for one more
#: (jaxsel/compat/packing_names.py; the device core's `make_train_step` notes it itself)
OLD_PACKING_NAME = "local_replicas"


def current_packing(packing, stacklevel: int = 2):
    """`packing` as this release runs it: a removed loop (`REMOVED_LOOPS`) becomes its
    replacement, with a DeprecationWarning naming it; any other value is returned as it is
    (checked by its reader against `PACKING_LOOPS`). `stacklevel`: the frame the warning
    names, counted from the caller (2: the caller's caller)."""
    if isinstance(packing, str) and packing in REMOVED_LOOPS:
        new = REMOVED_LOOPS[packing]
        warnings.warn(f"packing={packing!r} was removed (it was never faster than unroll); it runs "
                      f"as {new!r}, the loop auto chooses: write packing={new!r}, or 'unroll'",
                      DeprecationWarning, stacklevel=stacklevel + 1)
        return new
    return packing


def renamed_packing_note(value, until: str = "the next release") -> str:
    """The one note for packing given by its last release's name (`OLD_PACKING_NAME`),
    read `until` (compat/packing_names.py names the release)."""
    return (f"{OLD_PACKING_NAME} is now called packing (how a device loops over its packed replicas); the old "
            f"name is read until {until}: write packing={value!r}")
