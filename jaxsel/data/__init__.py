"""Data: TFDS sources (no TensorFlow), the dataset catalogue, embedded offline sets,
partitioners, data injection, the loader and on-device augmentation."""
from .catalog import CATALOG, DatasetSpec
from .injection import Injection
from .loader import Loader
from .partition import PARTITIONERS, Partition, dirichlet, disjoint, label_skew, make_partition, seldp
from .sources import DEFAULT_DATA_DIR, KNOWN, DatasetNotPrepared, load_arrays, open_source
