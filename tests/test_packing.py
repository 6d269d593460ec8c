"""Packed replicas: N replicas on M devices (k = N/M each) behave as one replica per device.

That every strategy reaches the same parameters with 8 replicas on 1, 2, 4 and 8 CPU
devices is checked by tests/test_golden.py, on the runs it records (one compilation per
layout serves both checks). Here: the three local loops give the same step; BSP on 8 packed
replicas is one device on the concatenated batch; SelSync packed keeps a real conditional;
the layout logic (fake device lists) never falls back to CPU and the layout line says what
runs where.
"""
import types
import weakref

import jax
import numpy as np
import optax
import pytest

import jaxsel
from helpers import R, identical, run, softmax_batches, softmax_loss, softmax_params
from jaxsel.core import parallel
from jaxsel.core.parallel import Layout, LayoutError, choose_layout, describe_layout, plan_layout
from jaxsel.strategies import build_strategy

B = 3
STEPS = 6
CONTEXT = dict(replicas=R, total_steps=STEPS, steps_per_epoch=2, base_lr=0.1)


def make_batches(steps=STEPS):
    return softmax_batches(steps, b=B)


def make(name):
    options = {"selsync": {"window": 2, "delta": 0.05}, "localsgd-trimmed": {"period": 2, "aggregator": "trimmed:2"}}
    return build_strategy(name.split("-")[0], options.get(name, {}), **CONTEXT)


def train(strategy, devices, batches, packing="auto"):
    mesh = jaxsel.data_mesh(replicas=R, devices=devices)
    state, history = run(strategy, mesh, batches, packing=packing)
    return jax.device_get(state), [bool(m["synced"]) for _, m in history]


@pytest.mark.parametrize("name", ["bsp", "selsync", "localsgd-trimmed"])
def test_every_packing_loop_gives_the_same_step(name):
    """vmap (batched), unroll (k plain copies) and map (a loop) over a device's replicas."""
    strategy, batches = make(name), make_batches()
    ref, ref_synced = train(strategy, 2, batches, packing="vmap")
    for loop in ("unroll", "map"):
        got, synced = train(strategy, 2, batches, packing=loop)
        assert synced == ref_synced
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6), got.params, ref.params)


def test_auto_unrolls_packed_replicas_where_nothing_is_measured():
    """The static default (issue 34's H100 figures; the CPU's): unroll k > 1 packed replicas
    everywhere; one replica per device is the plain program on CPU, vmap's (no copies of
    the state's [1, ...] blocks) on accelerators; a forced loop is the user's."""
    from jaxsel.core.step import resolve_packing

    gpu, cpu = types.SimpleNamespace(devices=np.array([fake("gpu", H100)])), jaxsel.data_mesh(8, devices=1)
    assert resolve_packing("auto", cpu, 8) == "unroll" and resolve_packing("auto", gpu, 8) == "unroll"
    assert resolve_packing("auto", cpu, 1) == "unroll" and resolve_packing("auto", gpu, 1) == "vmap"
    assert resolve_packing("map", gpu, 8) == "map" and resolve_packing("vmap", cpu, 1) == "vmap"


def test_bsp_on_eight_packed_replicas_is_one_device_on_the_whole_batch():
    batches = make_batches()
    state, _ = train(jaxsel.BSP(), 1, batches)
    opt, params = optax.sgd(0.1, momentum=0.9), softmax_params()
    opt_state = opt.init(params)
    for batch in batches:
        updates, opt_state = opt.update(jax.grad(softmax_loss)(params, batch), opt_state, params)
        params = optax.apply_updates(params, updates)
    for name in params:
        for r in range(R):
            np.testing.assert_allclose(state.params[name][r], params[name], rtol=1e-5, atol=1e-6)


def test_selsync_on_one_device_keeps_a_real_conditional():
    mesh = jaxsel.data_mesh(replicas=R, devices=1)
    strat, opt = jaxsel.SelSync(), optax.sgd(0.1)
    state = jaxsel.init_state(softmax_params(), opt, strat, mesh, replicas=R)
    hlo = jaxsel.make_train_step(softmax_loss, opt, strat, mesh).lower(state, make_batches(1)[0]).compile().as_text()
    assert "conditional" in hlo


def test_state_keeps_all_replicas_split_over_the_devices():
    mesh = jaxsel.data_mesh(replicas=R, devices=2)
    state = jaxsel.init_state(softmax_params(), optax.sgd(0.1), jaxsel.SelSync(), mesh, replicas=R)
    for leaf in jax.tree.leaves(state.replace(step=None)):
        assert leaf.shape[0] == R and leaf.sharding.spec[0] == "data"
        assert {s.data.shape[0] for s in leaf.addressable_shards} == {R // 2}


# ------------------------------------------------------------------ layout logic

def fake(platform, kind, process=0):
    return types.SimpleNamespace(platform=platform, device_kind=kind, process_index=process)


H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("replicas, devices, used, per_device", [
    (8, 1, 1, 8), (8, 2, 2, 4), (8, 8, 8, 1), (16, 8, 8, 2), (4, 8, 4, 1), (None, 4, 4, 1), (1, 1, 1, 1)])
def test_plan_layout(replicas, devices, used, per_device):
    layout = plan_layout(replicas, [fake("gpu", H100)] * devices)
    assert (len(layout.devices), layout.per_device) == (used, per_device)


@pytest.mark.parametrize("replicas, devices, message", [
    (12, 8, r"replicas=12 do not fit 8 GPU device\(s\): choose 1..8 or a multiple of 8 \(16, 24, 32"),
    (5, 3, r"choose 1..3 or a multiple of 3"), (0, 2, "replicas must be an integer >= 1, got 0")])
def test_replicas_that_do_not_fit_name_the_valid_counts(replicas, devices, message):
    with pytest.raises(LayoutError, match=message):
        plan_layout(replicas, [fake("gpu", H100)] * devices)


@pytest.fixture
def gpu_host(monkeypatch):
    """One GPU as the default backend, 8 CPU devices beside it."""
    gpu, cpus = [fake("gpu", H100)], [fake("cpu", "cpu") for _ in range(8)]
    monkeypatch.setattr(parallel.jax, "devices", lambda backend=None: cpus if backend == "cpu" else gpu)
    return gpu, cpus


def test_no_cpu_fall_back_on_an_accelerator_host(gpu_host):
    gpu, cpus = gpu_host
    layout = choose_layout(8)
    assert layout.devices == tuple(gpu) and layout.per_device == 8   # packed on the GPU, not 8 CPUs
    assert choose_layout(8, platform="cpu").devices == tuple(cpus)   # only when asked


def test_layout_line_names_what_runs_where():
    assert Layout((fake("gpu", H100),), 8).describe() == f"8 replicas on 1 x GPU ({H100}), 8 per device"
    hosts = tuple(fake("cpu", "cpu", p) for p in (0, 0, 1, 1))
    assert Layout(hosts, 2).describe() == "8 replicas on 2 processes x 2 x CPU (cpu), 2 per device"


def test_layout_line_of_a_real_mesh_is_true():
    mesh = jaxsel.data_mesh(replicas=R, devices=2)
    assert type(mesh) is jax.sharding.Mesh   # JAX's own type: nothing of its internals copied
    assert describe_layout(mesh, replicas=R) == "8 replicas on 2 x CPU (cpu), 4 per device"
    assert describe_layout(jaxsel.data_mesh()) == "8 replicas on 8 x CPU (cpu), 1 per device"
    state = jaxsel.init_state(softmax_params(), optax.sgd(0.1), jaxsel.BSP(), mesh, replicas=R)
    assert len(mesh.devices.flat) == 2 and jaxsel.num_replicas(state) == 8   # the state's leading axis says N


def test_a_replica_count_the_devices_do_not_divide_is_one_line():
    mesh = jaxsel.data_mesh(replicas=R, devices=2)
    with pytest.raises(LayoutError, match=r"replicas=7 do not split over the mesh's 2 device\(s\)"):
        jaxsel.init_state(softmax_params(), optax.sgd(0.1), jaxsel.BSP(), mesh, replicas=7)
    state = jaxsel.init_state(softmax_params(), optax.sgd(0.1), jaxsel.BSP(), jaxsel.data_mesh(3, devices=3),
                              replicas=3)
    step = jaxsel.make_train_step(softmax_loss, optax.sgd(0.1), jaxsel.BSP(), mesh)
    with pytest.raises(LayoutError, match="the state holds 3 replicas, which do not split over the mesh's 2 "
                                          "devices"):
        step(state, {"x": np.zeros((3 * B, 5), np.float32), "y": np.zeros(3 * B, np.int32)})


# ------------------------------------------------------------------ the replica count said once

@pytest.fixture
def fresh_asks(monkeypatch):
    """data_mesh's record of the counts it was asked for, empty: other tests' asks stay out."""
    monkeypatch.setattr(parallel, "_ASKED", weakref.WeakKeyDictionary())


def test_data_mesh_says_n_once_and_init_state_trains_that_many(fresh_asks):
    """`data_mesh(replicas=8)` on one device, then `init_state` without `replicas=`: 8
    replicas (not the mesh's 1 device's 1), each trained on its own slice, the same state
    as when N is said twice; a Layout carries N the same way."""
    mesh = jaxsel.data_mesh(replicas=R, devices=1)
    opt, strategy = optax.sgd(0.1), jaxsel.LocalSGD(period=4)
    said_once = jaxsel.init_state(softmax_params(), opt, strategy, mesh)
    said_twice = jaxsel.init_state(softmax_params(), opt, strategy, mesh, replicas=R)
    from_layout = jaxsel.init_state(softmax_params(), opt, strategy, choose_layout(R, devices=1))
    assert jaxsel.num_replicas(said_once) == jaxsel.num_replicas(from_layout) == R
    step = jaxsel.make_train_step(softmax_loss, opt, strategy, mesh, donate=False)
    batch = jaxsel.global_batch(make_batches(1)[0], mesh)
    once, twice = step(said_once, batch)[0], step(said_twice, batch)[0]
    for a, b in zip(jax.tree.leaves(once.params), jax.tree.leaves(twice.params)):
        np.testing.assert_array_equal(a, b)
    assert not identical(once.params)   # 8 replicas, each on its own rows, no sync yet (period 4)
    # what the layout is said to be, and which replicas this process holds, follow the same N
    assert jaxsel.describe_layout(mesh) == jaxsel.describe_layout(mesh, R) == choose_layout(R, devices=1).describe()
    assert parallel.local_replica_ids(mesh) == list(range(R))


def test_one_mesh_asked_for_two_counts_is_refused_in_one_line(fresh_asks):
    """JAX interns meshes: the same device asked for 8 and for 4 replicas is one object, so
    which count `init_state` should build is unknown: one line asking for `replicas=`."""
    eight, four = jaxsel.data_mesh(replicas=8, devices=1), jaxsel.data_mesh(replicas=4, devices=1)
    assert eight is four
    opt, strategy = optax.sgd(0.1), jaxsel.BSP()
    with pytest.raises(LayoutError, match=r"^init_state: this mesh was built by data_mesh for 4 and 8 replicas "
                                          r"\(one jax Mesh serves both\): pass replicas=N"):
        jaxsel.init_state(softmax_params(), opt, strategy, eight)
    assert jaxsel.num_replicas(jaxsel.init_state(softmax_params(), opt, strategy, four, replicas=4)) == 4
    with pytest.raises(LayoutError, match="init_state: replicas=4 disagrees with the layout's 8 replicas"):
        jaxsel.init_state(softmax_params(), opt, strategy, choose_layout(8, devices=1), replicas=4)


def test_make_train_step_replicas_of_last_release_warns_and_is_checked(fresh_asks):
    """`make_train_step(..., replicas=N)` (last release) works for one release: a
    DeprecationWarning naming the replacement, and a state of another N is refused in one
    line before anything traces (a Layout in the mesh's place does the same, silently)."""
    mesh = jaxsel.data_mesh(replicas=R, devices=1)
    opt, strategy = optax.sgd(0.1), jaxsel.BSP()
    with pytest.warns(DeprecationWarning, match=r"make_train_step\(replicas=N\) is deprecated .* say it once, to "
                                                r"init_state\(\.\.\., replicas=N\) or data_mesh\(replicas=N\)"):
        told = jaxsel.make_train_step(softmax_loss, opt, strategy, mesh, replicas=R)
    laid_out = jaxsel.make_train_step(softmax_loss, opt, strategy, choose_layout(R, devices=1))
    batch = make_batches(1)[0]
    eight = jaxsel.init_state(softmax_params(), opt, strategy, mesh)
    assert told.lower(eight, batch).as_text() == laid_out.lower(eight, batch).as_text()
    two = jaxsel.init_state(softmax_params(), opt, strategy, mesh, replicas=2)
    for step in (told, laid_out):
        with pytest.raises(LayoutError, match=r"^the train step was built for 8 replicas, the state holds 2"):
            step.lower(two, batch)
    with pytest.warns(DeprecationWarning), pytest.raises(LayoutError, match="replicas=3 do not split"):
        jaxsel.make_train_step(softmax_loss, opt, strategy, jaxsel.data_mesh(replicas=2, devices=2), replicas=3)
