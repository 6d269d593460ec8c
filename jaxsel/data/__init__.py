"""Data: TFDS sources (no TensorFlow), embedded offline sets, partitioners, loader."""
from .loader import Loader
from .partition import PARTITIONERS, Partition, disjoint, make_partition, seldp
from .sources import DEFAULT_DATA_DIR, KNOWN, DatasetNotPrepared, DatasetSpec, load_arrays, open_source
