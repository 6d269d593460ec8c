"""The names some of a run's settings choose between, apart from the code behind them.

`TrainConfig`'s declarations, the command line's parsers and `--help` read these lists;
the modules that implement the choices (core/step.py's packed-replica loops,
data/pipeline.py's loaders, training/faults.py's non-finite policies) read them from here
too, so each list is written once and `jaxsel --help` lists them without importing JAX or
TensorFlow Datasets. Imports nothing.
"""

#: how a device computes its packed replicas (`core/step.py`, `core/packing.py`)
LOCAL_LOOPS = ("auto", "vmap", "map", "unroll", "matmul")
#: how batches are built on the host (`data/pipeline.py`)
LOADERS = ("auto", "grain", "threads")
#: what a NaN/inf loss or gradient does to a run (`training/faults.py`)
NONFINITE_POLICIES = ("stop", "skip")
