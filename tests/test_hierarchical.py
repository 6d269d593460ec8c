"""Hierarchical (two-level) synchronization against independent NumPy references.

PyTorch's anchor, `HierarchicalModelAverager(period_group_size_dict={p1: s, p2: N})`, is
transcribed below. It counts its steps from 0 and averages after the optimizer step when
step % period == 0 (largest such period first), so also right after the very first step;
jaxsel's `Hierarchical(LocalSGD(p1), LocalSGD(p2))` averages after step t when
(t + 1) % period == 0, i.e. after every p-th update — PyTorch's averager with its counter
started at 1. The same difference as between `LocalSGD` and `PeriodicModelAverager`
(README, `triggers.Periodic`).

Model: linear least squares, plain SGD, so NumPy (float64) reproduces every step.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxsel
from jaxsel.costmodel import strategy_timing
from helpers import R, run
from jaxsel.cli import main as cli_main
from jaxsel.core.options import OptionError
from jaxsel.strategies import build_strategy
from jaxsel.strategies.build import options_for

B, D = 3, 4
LR = 0.1
STEPS = 12
PARAM_BYTES = (D + 1) * 4


def loss_fn(params, batch):
    return jnp.mean((batch["x"] @ params["w"] + params["b"] - batch["y"]) ** 2)


def make_batches(steps=STEPS, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(size=(R * B, D)).astype(np.float32),
             "y": rng.normal(size=(R * B,)).astype(np.float32)} for _ in range(steps)]


BATCHES = make_batches()
SELSYNC = jaxsel.SelSync(window=2, delta=0.7, statistic="smoothed")   # its 2W-1 warm-up, then sometimes
STRATEGIES = {   # name -> strategy (module level, so runs can be cached by name)
    "local-2-3": jaxsel.Hierarchical(jaxsel.LocalSGD(2), jaxsel.LocalSGD(3), groups=2),
    "bsp-selsync": jaxsel.Hierarchical(jaxsel.BSP(), SELSYNC, groups=2),
    "bsp-selsync-4": jaxsel.Hierarchical(jaxsel.BSP(), SELSYNC, groups=4),
    "median-4": jaxsel.Hierarchical(jaxsel.LocalSGD(2, aggregator="median"), jaxsel.LocalSGD(3), groups=4),
    "int8-bf16-4": jaxsel.Hierarchical(jaxsel.LocalSGD(2, compress="int8"), jaxsel.LocalSGD(3, compress="bf16"),
                                       groups=4),
}


@functools.cache
def train(name: str, devices: int):
    """(params as one (R, D+1) array after each step, metrics of each step) on `devices`."""
    strategy = STRATEGIES[name]
    mesh = jaxsel.data_mesh(replicas=R, devices=devices)
    opt = optax.sgd(LR)
    _, history = run(strategy, mesh, BATCHES, loss=loss_fn, params={"w": jnp.zeros(D), "b": jnp.zeros(())}, opt=opt)
    thetas = [np.concatenate([s.params["w"], s.params["b"][:, None]], axis=1) for s, _ in history]
    metrics = [m for _, m in history]
    return thetas, metrics


# ------------------------------------------------------------------ NumPy references

def sgd_step(theta, batch):
    """Each replica's gradient of its own slice and the plain SGD step (float64)."""
    x = batch["x"].astype(np.float64).reshape(R, B, D)
    y = batch["y"].astype(np.float64).reshape(R, B)
    err = np.einsum("rbd,rd->rb", x, theta[:, :D]) + theta[:, D:] - y
    grad = np.concatenate([2.0 / B * np.einsum("rbd,rb->rd", x, err), 2.0 * err.mean(1, keepdims=True)], axis=1)
    return grad


def group_mean(a, size):
    """Each row replaced by the mean of its contiguous block of `size` rows."""
    return np.repeat(a.reshape(-1, size, a.shape[1]).mean(1), size, axis=0)


class HierarchicalModelAverager:
    """torch.distributed.algorithms.model_averaging.hierarchical_model_averager, in NumPy.

    `period_group_size_dict` maps periods (increasing) to group sizes (increasing, the last
    the world); `average_parameters` (called after each optimizer step) averages within
    groups (contiguous ranks, as `dist.new_subgroups`) of the largest period dividing the
    step counter, once it reached `warmup_steps`, then increments the counter."""

    def __init__(self, period_group_size_dict, warmup_steps=0, step=0):
        self.periods = list(period_group_size_dict)
        assert self.periods == sorted(self.periods)
        self.sizes = period_group_size_dict
        self.warmup_steps, self.step = warmup_steps, step

    def _find_group_size(self):
        for period in reversed(self.periods):
            if self.step % period == 0:
                return self.sizes[period]
        return None

    def average_parameters(self, params):
        size = self._find_group_size() if self.step >= self.warmup_steps else None
        self.step += 1
        return (params, None) if size is None else (group_mean(params, size), size)


def local_sgd_reference(averager):
    """Every replica's parameters after each step and the group size each step averaged over."""
    theta, thetas, sizes = np.zeros((R, D + 1)), [], []
    for batch in BATCHES:
        theta = theta - LR * sgd_step(theta, batch)
        theta, size = averager.average_parameters(theta)
        thetas.append(theta)
        sizes.append(size)
    return thetas, sizes


def identical_within(theta, size):
    return all(np.array_equal(block, np.broadcast_to(block[0], block.shape))
               for block in theta.reshape(-1, size, theta.shape[1]))


# --------------------------------------------------------------------------- tests

def test_local_sgd_levels_reproduce_pytorchs_hierarchical_model_averager():
    """Hierarchical(LocalSGD(2), LocalSGD(3)), groups of 4: within groups after updates 2, 4,
    8, 10; over all after 3, 6, 9, 12 (6 and 12: both periods divide, the larger wins)."""
    thetas, metrics = train("local-2-3", 8)
    ref, sizes = local_sgd_reference(HierarchicalModelAverager({2: 4, 3: R}, step=1))
    assert [bool(m["synced"]) for m in metrics] == [s == R for s in sizes]
    assert [bool(m["group_synced"]) for m in metrics] == [s == 4 for s in sizes]
    assert sizes == [None, 4, R, 4, None, R, None, 4, R, 4, None, R]
    for t, (got, want) in enumerate(zip(thetas, ref)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"step {t}")
        if sizes[t] is not None:   # every member of the averaging group ends bit-identical
            assert identical_within(got, sizes[t]), t
        if sizes[t] == 4:
            assert not np.allclose(got[0], got[4])   # the two groups differ between outer syncs
    # PyTorch's own count (from 0) averages over everyone right after the first update
    assert local_sgd_reference(HierarchicalModelAverager({2: 4, 3: R}))[1][:3] == [R, None, 4]


def test_local_sgd_levels_count_each_levels_bytes():
    _, metrics = train("local-2-3", 8)
    for m in metrics:
        group, outer = bool(m["group_synced"]), bool(m["synced"])
        assert int(m["group_bytes"]) == PARAM_BYTES * group
        assert int(m["bytes_allreduced"]) == PARAM_BYTES * (group + outer)
        assert int(m["vote_bytes"]) == 0


def bsp_selsync_reference(synced):
    """BSP within groups of 4 (group-mean gradients every step) and, on the steps the
    outer SelSync decided to sync, all replicas' pre-update parameters averaged."""
    theta, thetas = np.zeros((R, D + 1)), []
    for batch, outer in zip(BATCHES, synced):
        grad = sgd_step(theta, batch)          # at each replica's pre-average parameters
        if outer:
            theta = group_mean(theta, R)
        theta = theta - LR * group_mean(grad, 4)
        thetas.append(theta)
    return thetas


def test_bsp_inside_groups_selsync_across_matches_numpy():
    thetas, metrics = train("bsp-selsync", 8)
    synced = [bool(m["synced"]) for m in metrics]
    assert synced[:3] == [True] * 3 and not all(synced)   # SelSync's warm-up (2W-1 steps), then its test
    for t, (got, want) in enumerate(zip(thetas, bsp_selsync_reference(synced))):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"step {t}")
        assert identical_within(got, 4), t              # BSP: each group bit-identical
        assert not np.allclose(got[0], got[4]), t       # groups apart (their gradients differ)
    for m, outer in zip(metrics, synced):              # grads within groups, params + vote across
        assert bool(m["group_synced"]) and int(m["group_bytes"]) == PARAM_BYTES
        assert int(m["bytes_allreduced"]) == PARAM_BYTES + 4 + PARAM_BYTES * outer
        assert int(m["vote_bytes"]) == 4


@pytest.mark.parametrize("name, devices", [("bsp-selsync", 2), ("bsp-selsync", 1), ("bsp-selsync-4", 2),
                                           ("median-4", 2)])
def test_packed_layouts_agree_with_one_replica_per_device(name, devices):
    """2 groups x 4 on 2 devices x 4 and 1 device x 8; 4 groups on 2 devices x 4 (a group
    inside a device), against 8 devices x 1."""
    ref, ref_metrics = train(name, 8)
    got, metrics = train(name, devices)
    size = R // STRATEGIES[name].groups
    for key in ("synced", "group_synced", "group_bytes", "bytes_allreduced"):
        assert [int(m[key]) for m in metrics] == [int(m[key]) for m in ref_metrics], key
    for t, (a, b) in enumerate(zip(got, ref)):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6, err_msg=f"step {t}")
        if bool(metrics[t]["group_synced"]) or bool(metrics[t]["synced"]):
            assert identical_within(a, size), t


def test_groups_inside_a_device_and_packed_groups_average_their_own_block():
    """4 groups of 2 on 2 devices x 4: BSP's gradient mean is per pair of replicas."""
    thetas, _ = train("bsp-selsync-4", 2)
    first = np.zeros((R, D + 1))
    synced0 = first - LR * group_mean(sgd_step(first, BATCHES[0]), 2)   # step 0 syncs params (equal)
    np.testing.assert_allclose(thetas[0], synced0, rtol=1e-5, atol=1e-6)
    assert identical_within(thetas[0], 2) and not np.allclose(thetas[0][0], thetas[0][2])


def test_compressed_levels_count_their_bytes_and_stay_identical_within_groups():
    """int8 within 4 groups of 2 (inside a device on 2 devices x 4), bf16 across."""
    ref, ref_metrics = train("int8-bf16-4", 8)
    got, metrics = train("int8-bf16-4", 2)
    assert np.array_equal(got[1], ref[1])   # int8 sums in replica order: the same bits on every layout
    pre = ref[0] - LR * sgd_step(ref[0].astype(np.float64), BATCHES[1])   # step 1, before the group sync
    for cols in (slice(0, D), slice(D, D + 1)):   # the tensors w and b: their scale max|x|/127 each
        scale = np.abs(pre[:, cols]).max(axis=1, keepdims=True) / 127
        bound = group_mean(scale, 2) / 2 + 1e-6
        assert np.all(np.abs(ref[1][:, cols] - group_mean(pre[:, cols], 2)) <= bound)
    assert identical_within(ref[1], 2) and not np.allclose(ref[1][0], ref[1][2])
    for m in metrics:   # int8: 1 byte per element + a 4-byte scale per tensor; bf16: 2 bytes per element
        assert int(m["group_bytes"]) == (D + 4 + 1 + 4) * bool(m["group_synced"])
        assert int(m["bytes_allreduced"]) == int(m["group_bytes"]) + 2 * (D + 1) * bool(m["synced"])
    assert [int(m["bytes_allreduced"]) for m in metrics] == [int(m["bytes_allreduced"]) for m in ref_metrics]
    assert "localsgd [int8] (period 2) | localsgd [bf16] (period 3)" in STRATEGIES["int8-bf16-4"].describe()


# ------------------------------------------------------------------ options and errors

def test_describe_timing_and_nested_options():
    strat = build_strategy("hierarchical", {"inner": "bsp", "outer": "selsync", "groups": 2,
                                            "outer.delta": 0.2}, replicas=R)
    assert strat.describe() == \
        "hierarchical(bsp | selsync (delta=0.2, W=25, raw, averages before the update), 2 groups)"
    assert strategy_timing(strat).groups == 2 and strategy_timing(strat).collective == "allreduce"
    strat = build_strategy("hierarchical", {"inner": "localsgd", "inner.period": 4, "outer": "superstep",
                                            "outer.epochs": 2}, replicas=R, steps_per_epoch=8)
    assert (strat.inner.period, strat.outer.period, strat.group_count()) == (4, 16, 1)   # one process
    opts = {"inner": "bsp", "outer.period": 32, "delta": 0.1, "trigger.period": 2}
    assert options_for("hierarchical", opts) == {"inner": "bsp", "outer.period": 32}
    assert options_for("triggered", opts) == {"trigger.period": 2}


@pytest.mark.parametrize("options, message", [
    ({"groups": 3}, "groups=3 must divide the 8 replicas"),
    ({"inner": "bogus"}, "inner='bogus' is not a trigger-based strategy; choose one of accordion, bsp, fedavg, localsgd"),
    ({"outer": "diloco"}, "outer must be a trigger-based strategy"),
    ({"outer": "selsync", "outer.period": 3}, "outer: strategy 'selsync' has no option 'period'"),
    ({"middle.period": 3}, "no option 'middle.period'; nested options go to hierarchical .*triggered"),
])
def test_bad_options_are_one_line_errors(options, message):
    with pytest.raises(OptionError, match=message):
        build_strategy("hierarchical", options, replicas=R)


@pytest.mark.parametrize("opt, message", [("inner=bogus", "inner='bogus' is not a trigger-based strategy"),
                                          ("groups=3", "groups=3 must divide the 8 replicas")])
def test_cli_refuses_bad_levels_and_groups_in_one_line(tmp_path, capsys, opt, message):
    code = cli_main(["train", "--strategy", "hierarchical", "--opt", opt, "--steps", "2", "--replicas", "8",
                     "--no-progress", "--no-checkpoint", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err


def test_groups_not_dividing_the_replicas_is_an_error_from_python():
    mesh = jaxsel.data_mesh(replicas=R, devices=8)
    with pytest.raises(ValueError, match="groups=3 must divide the 8 replicas"):
        jaxsel.init_state({"w": jnp.zeros(D)}, optax.sgd(LR), jaxsel.Hierarchical(groups=3), mesh, replicas=R)


def test_a_group_that_straddles_devices_is_refused_when_traced():
    """12 replicas on 4 devices x 3 in 3 groups of 4: neither whole devices nor inside one."""
    mesh = jaxsel.data_mesh(replicas=12, devices=4)
    strat = jaxsel.Hierarchical(jaxsel.LocalSGD(2), jaxsel.LocalSGD(4), groups=3)
    state = jaxsel.init_state({"w": jnp.zeros(D), "b": jnp.zeros(())}, optax.sgd(LR), strat, mesh, replicas=12)
    step = jaxsel.make_train_step(loss_fn, optax.sgd(LR), strat, mesh)
    batch = {"x": np.zeros((12 * B, D), np.float32), "y": np.zeros((12 * B,), np.float32)}
    with pytest.raises(ValueError, match="a group of 4 replicas neither spans whole devices nor lies inside one "
                                         r"\(3 replicas per device on 4 devices\)"):
        jax.eval_shape(step, state, batch)


def test_non_level_strategies_are_refused():
    with pytest.raises(ValueError, match="inner must be a trigger-based strategy"):
        jaxsel.Hierarchical(inner=jaxsel.DiLoCo())
    with pytest.raises(ValueError, match="inner_options"):
        jaxsel.Hierarchical(inner=jaxsel.BSP(), inner_options={"aggregator": "median"})


def test_the_guard_fires_when_a_level_decides_per_replica(mesh):
    """Both levels' decisions must be replicated over all replicas, the inner one's too."""
    from test_sync_core import apply_with_varying_step

    strat = jaxsel.Hierarchical(jaxsel.LocalSGD(2), jaxsel.BSP(), groups=2)
    with pytest.raises(jaxsel.NonReplicatedDecisionError, match="varies across the 'data' axis"):
        apply_with_varying_step(strat, mesh)
