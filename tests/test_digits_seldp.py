"""The embedded `digits` dataset and the two core partitionings."""
import numpy as np

from jaxsel.data import Loader, disjoint, load_arrays, seldp
from jaxsel.data.sources import DEFAULT_DATA_DIR, open_source


def test_digits_builds_offline_and_reads_back():
    train = load_arrays("digits", "train")
    test = load_arrays("digits", "test")
    assert train["image"].shape == (1437, 8, 8, 1) and train["image"].dtype == np.uint8
    assert test["image"].shape == (360, 8, 8, 1)
    assert train["label"].shape == (1437,) and set(np.unique(train["label"])) == set(range(10))
    assert train["image"].max() == 16
    assert (DEFAULT_DATA_DIR / "digits" / "1.0.0").is_dir()
    assert len(open_source("digits", "test")) == 360  # through tfds.data_source


def test_seldp_every_replica_walks_a_full_permutation():
    n, replicas, b = 100, 4, 10
    part = seldp(n, replicas, seed=1)
    steps = n // b
    orders = [np.concatenate([part.indices(r, t, b) for t in range(steps)]) for r in range(replicas)]
    for order in orders:
        assert sorted(order) == list(range(n))          # a full permutation each epoch
    assert len({tuple(o) for o in orders}) == replicas  # in its own order
    second = np.concatenate([part.indices(0, t, b) for t in range(steps, 2 * steps)])
    assert sorted(second) == list(range(n)) and not np.array_equal(second, orders[0])


def test_disjoint_shards_cover_the_set_once():
    part = disjoint(103, 4, seed=0)
    allidx = np.concatenate(part.pools)
    assert sorted(allidx) == list(range(103))
    assert {len(p) for p in part.pools} <= {25, 26}


def test_loader_global_batch_is_replica_major():
    arrays = {"x": np.arange(40)[:, None], "label": np.arange(40)}
    part = disjoint(40, 4, seed=0)
    batch = Loader(arrays, part, 3).batch(2)
    assert batch["x"].shape == (12, 1)
    for r in range(4):
        assert set(batch["label"][3 * r:3 * r + 3]) <= set(part.pools[r])
