"""Partitioners and data injection: pool sizes, label sets, SelDP's per-epoch permutations,
and injection that only ever adds foreign classes, in the stated amount, deterministically."""
import math

import numpy as np
import pytest

from jaxsel.data import Injection, Loader, dirichlet, disjoint, label_skew, make_partition, seldp
from jaxsel.data.partition import PARTITIONERS, check_partition_options

# digits-like labels: 10 classes of uneven size, shuffled
LABELS = np.random.default_rng(0).permutation(np.repeat(np.arange(10), [140, 145, 150, 138, 142, 147, 139, 141, 150, 145]))


def test_registry_has_all_partitioners():
    assert {"disjoint", "seldp", "label_skew", "dirichlet"} <= set(PARTITIONERS)
    assert label_skew.needs_labels and dirichlet.needs_labels
    assert not getattr(disjoint, "needs_labels", False) and not getattr(seldp, "needs_labels", False)


def test_disjoint_sizes_and_cover():
    part = make_partition("disjoint", LABELS, 8, seed=3)
    sizes = [len(p) for p in part.pools]
    assert sum(sizes) == len(LABELS) and max(sizes) - min(sizes) <= 1
    assert len(np.unique(np.concatenate(part.pools))) == len(LABELS)
    assert part.classes is None


def test_seldp_gives_every_replica_a_full_permutation_per_epoch():
    n, b, replicas = len(LABELS), 7, 4          # 1437 = 7 * 205 + 2: epochs straddle steps
    part = make_partition("seldp", LABELS, replicas, seed=1)
    positions = [np.concatenate([part.indices(r, t, b) for t in range(3 * n // b + 1)]) for r in range(replicas)]
    for order in positions:
        for e in range(3):
            assert np.array_equal(np.sort(order[e * n:(e + 1) * n]), np.arange(n))
        assert not np.array_equal(order[:n], order[n:2 * n])        # reshuffled each epoch
    assert len({tuple(o[:n]) for o in positions}) == replicas         # own order per replica


def test_label_skew_default_owns_c_over_n_classes():
    part = make_partition("label_skew", LABELS, 5, seed=0)
    assert part.classes == ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9))
    for pool, owned in zip(part.pools, part.classes):
        assert set(np.unique(LABELS[pool])) == set(owned)
        assert len(pool) == sum((LABELS == c).sum() for c in owned)  # the whole of each class
    assert len(np.unique(np.concatenate(part.pools))) == len(LABELS)


def test_label_skew_shared_classes_are_split_disjointly():
    part = make_partition("label_skew", LABELS, 8, seed=0)   # k = ceil(10/8) = 2, wraps
    assert all(len(c) == 2 for c in part.classes)
    everything = np.concatenate(part.pools)
    assert len(everything) == len(np.unique(everything)) == len(LABELS)
    for pool, owned in zip(part.pools, part.classes):
        assert set(np.unique(LABELS[pool])) == set(owned)


def test_label_skew_options():
    part = label_skew(LABELS, 10, classes_per_replica=1)
    assert part.classes == tuple((c,) for c in range(10))
    part = label_skew(LABELS, 2, classes=[[0, 1, 2], [7]])
    assert part.classes == ((0, 1, 2), (7,))
    assert set(LABELS[part.pools[1]]) == {7}
    with pytest.raises(ValueError, match="classes_per_replica must be in 1..10"):
        label_skew(LABELS, 2, classes_per_replica=11)


@pytest.mark.parametrize("replicas, owned, dropped", [
    (4, ((0, 1), (2, 3), (4, 5), (6, 7)), {8, 9}),          # floor(10/4) = 2
    (3, ((0, 1, 2), (3, 4, 5), (6, 7, 8)), {9}),             # floor(10/3) = 3
    (10, tuple((c,) for c in range(10)), set()),             # floor(10/10) = 1
    (6, tuple((c,) for c in range(6)), {6, 7, 8, 9}),        # floor(10/6) = 1
])
def test_label_skew_floor_is_the_authors_split_and_drops_the_rest(replicas, owned, dropped):
    """classes_per_replica="floor": the SelSync authors' get_labels_per_rank, written out
    by hand: replica r owns r*k ... r*k + k - 1, k = floor(C/N); no replica reads the rest."""
    part = make_partition("label_skew", LABELS, replicas, seed=2, classes_per_replica="floor")
    assert part.classes == owned
    for pool, classes in zip(part.pools, owned):
        assert sorted(pool.tolist()) == sorted(np.flatnonzero(np.isin(LABELS, classes)).tolist())  # all of each
    assert set(LABELS[np.concatenate(part.pools)].tolist()) == set(range(10)) - dropped


def test_label_skew_floor_for_the_authors_cifar100_run_and_its_errors():
    """CIFAR-100 over 10 workers (their fedavgNonIID_vgg11.sh): 10 classes each, none left."""
    labels = np.repeat(np.arange(100), 3)
    part = label_skew(labels, 10, classes_per_replica="floor")
    assert part.classes == tuple(tuple(range(10 * r, 10 * r + 10)) for r in range(10))
    with pytest.raises(ValueError, match=r"classes_per_replica=floor gives floor\(10/11\) = 0 classes per replica: "
                                         r"it needs at most 10 replicas"):
        label_skew(LABELS, 11, classes_per_replica="floor")
    with pytest.raises(ValueError, match=r"classes_per_replica must be in 1..10 or 'floor', got 'ceil'"):
        label_skew(LABELS, 2, classes_per_replica="ceil")


def test_label_skew_floor_is_checked_before_any_data_is_read():
    from jaxsel import TrainConfig
    from jaxsel.training.config import ConfigError, check_config

    check_config(TrainConfig(dataset="mnist1d", partition="label_skew", replicas=4,
                             partition_options={"classes_per_replica": "floor"}))
    with pytest.raises(ConfigError, match=r"floor\(10/16\) = 0 classes per replica"):
        check_config(TrainConfig(dataset="mnist1d", partition="label_skew", replicas=16,
                                 partition_options={"classes_per_replica": "floor"}))
    with pytest.raises(ConfigError, match=r"classes_per_replica must be in 1..10 \(the dataset's classes\) or 'floor'"):
        check_config(TrainConfig(dataset="mnist1d", partition="label_skew",
                                 partition_options={"classes_per_replica": "half"}))


def test_dirichlet_skew_follows_alpha_and_covers_the_set():
    skewed = make_partition("dirichlet", LABELS, 8, seed=0, alpha=0.1)
    mild = make_partition("dirichlet", LABELS, 8, seed=0, alpha=100.0)
    for part in (skewed, mild):
        everything = np.concatenate(part.pools)
        assert len(everything) == len(np.unique(everything)) == len(LABELS)
        assert min(len(p) for p in part.pools) >= 1
        for pool, owned in zip(part.pools, part.classes):
            assert set(np.unique(LABELS[pool])) == set(owned)

    def dominant_share(part):  # mean share of each replica's most common class
        return np.mean([np.bincount(LABELS[p], minlength=10).max() / len(p) for p in part.pools])

    assert dominant_share(skewed) > 0.4 > 0.2 > dominant_share(mild)
    again = make_partition("dirichlet", LABELS, 8, seed=0, alpha=0.1)
    assert all(np.array_equal(a, b) for a, b in zip(skewed.pools, again.pools))


def test_make_partition_errors():
    with pytest.raises(ValueError, match="unknown partition 'iid'"):
        make_partition("iid", LABELS, 2)
    with pytest.raises(ValueError, match="no option .alpha.; it takes no options"):
        check_partition_options("seldp", {"alpha": 0.5}, 2)   # a run's data section checks them, once
    with pytest.raises(ValueError, match="needs labels"):
        make_partition("label_skew", None, 2, num_examples=10)
    assert len(make_partition("seldp", None, 2, num_examples=10).pools[0]) == 10


@pytest.mark.parametrize("alpha, beta, replicas", [(0.1, 0.5, 5), (0.25, 1.0, 8), (0.5, 0.2, 10)])
def test_injection_adds_foreign_classes_in_the_stated_amount(alpha, beta, replicas):
    b, c = 16, 10
    part = make_partition("label_skew", LABELS, replicas, seed=0)
    inj = Injection.build(part, LABELS, b, alpha, beta, seed=0)
    k, m = math.ceil(alpha * c), max(1, round(beta * b * replicas / c))
    assert (inj.classes_per_step, inj.per_class, inj.extra) == (k, m, k * m)
    for r in range(replicas):
        for step in range(20):
            chosen = inj.classes(r, step)
            idx = inj.indices(r, step)
            assert len(chosen) == k and len(idx) == k * m
            assert not set(chosen.tolist()) & set(part.classes[r]), "injected an owned class"
            assert not set(np.unique(LABELS[idx])) & set(part.classes[r])
            # m samples of each chosen class, in order
            assert np.array_equal(LABELS[idx], np.repeat(chosen, m))
            assert np.array_equal(idx, inj.indices(r, step))           # pure function of (r, step)


def test_loader_batch_grows_by_the_injected_samples_equally_per_replica():
    b, replicas = 8, 5
    part = make_partition("label_skew", LABELS, replicas, seed=0)
    inj = Injection.build(part, LABELS, b, 0.2, 0.5, seed=4)
    arrays = {"x": np.arange(len(LABELS)), "label": LABELS}
    loader = Loader(arrays, part, b, injection=inj)
    rows = b + inj.extra
    assert loader.rows_per_replica == rows == b + 2 * 2   # ceil(0.2*10) classes x round(0.5*8*5/10)
    batch = loader.batch(3)
    assert batch["label"].shape == (replicas * rows,)
    for r in range(replicas):
        own, extra = batch["label"][r * rows:r * rows + b], batch["label"][r * rows + b:(r + 1) * rows]
        assert set(own) <= set(part.classes[r])
        assert not set(extra) & set(part.classes[r])
    assert np.array_equal(batch["x"], Loader(arrays, part, b, injection=inj).batch(3)["x"])
    other = Loader(arrays, part, b, injection=Injection.build(part, LABELS, b, 0.2, 0.5, seed=5)).batch(3)
    assert not np.array_equal(batch["x"], other["x"])


def test_injection_rejects_iid_partitions_and_bad_settings():
    with pytest.raises(ValueError, match="needs a label-aware partition"):
        Injection.build(seldp(len(LABELS), 4), LABELS, 8, 0.1, 0.5)
    part = label_skew(LABELS, 2, classes=[list(range(10)), [3]])
    with pytest.raises(ValueError, match="replica 0 owns every class"):
        Injection.build(part, LABELS, 8, 0.1, 0.5)
    with pytest.raises(ValueError, match="alpha must be in"):
        Injection.build(label_skew(LABELS, 5), LABELS, 8, 0.0, 0.5)


def test_injection_repeats_classes_when_a_replica_lacks_enough_foreign_ones():
    part = label_skew(LABELS, 2, classes=[list(range(9)), [0]])   # replica 0 lacks only class 9
    inj = Injection.build(part, LABELS, 8, 0.3, 0.5)
    assert inj.classes_per_step == 3
    assert inj.classes(0, 7).tolist() == [9, 9, 9]
    assert len(inj.indices(0, 7)) == inj.extra == len(inj.indices(1, 7))
