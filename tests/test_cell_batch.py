"""Cells that share a program trained as one batch (training/cell_batch.py, issue 62 items
1-3): each cell of a batch equals the same cell trained alone, and writes the records a lone
run writes.

How equal: to float32 rounding, not bit for bit. Under the cell vmap XLA:CPU computes the
batched matmuls and reductions in another order than the lone program (measured: a
gradient norm's last bit, then the weights' last bits), so the states agree to 1e-4
relative, and every count (synced steps, bytes, votes) and evaluation agrees exactly over
these runs. The lone path itself is untouched: tests/test_golden.py holds it bit for bit.
"""
import dataclasses
import json

import jax
import numpy as np
import pytest

from jaxsel.analysis.cells import Cells, state_digest
from jaxsel.analysis.progress import Progress
from jaxsel.core import cell_axis
from jaxsel.training.cell_batch import NotOneProgram, share_program, train_cells
from jaxsel.training.config import TrainConfig
from jaxsel.training.plan import plan_run
from jaxsel.training.rundir import CELL_FILE, RUN_FILES
from jaxsel.training.train import train

STEPS = 30
#: the counts a step records: equal exactly between a batched cell and its lone run
COUNTS = ("step", "synced", "bytes_allreduced", "vote_bytes")
#: the records that hold wall-clock times (never equal between two runs)
TIMES = ("train_time_s", "projected_time_s", "wall_time_s", "compile_time_s", "projection")


def cells_of(tmp_path, where: str, strategy: str, options: dict, devices, seeds=(0, 1, 2),
             steps: int = STEPS, packing: str = "auto") -> list[TrainConfig]:
    base = TrainConfig(strategy=strategy, strategy_options=options, steps=steps, progress=False, devices=devices,
                       packing=packing, eval_every=min(20, steps))
    return [dataclasses.replace(base, seed=s, out_dir=str(tmp_path / where / f"seed{s}")) for s in seeds]


def close(a, b) -> bool:
    return np.allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=1e-4, atol=1e-5, equal_nan=True)


def same_records(lone: list[dict], batched: list[dict]) -> None:
    assert len(lone) == len(batched)
    for a, b in zip(lone, batched):
        assert sorted(a) == sorted(b)
        for key in a:
            if key not in TIMES:
                same_value(key, a[key], b[key])


def same_value(key: str, a, b) -> None:
    """Counts, flags and text exactly, figures to float32 rounding, dicts entry by entry."""
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), key
        for k in a:
            same_value(f"{key}.{k}", a[k], b[k])
    elif key in COUNTS or isinstance(a, (bool, str)) or a is None:
        assert a == b, (key, a, b)
    else:
        assert close(a, b), (key, a, b)


def same_cell(lone, batched) -> None:
    """A batched cell's result (records, evaluations, final figures, state, files) is its lone run's."""
    same_records(lone.records, batched.records)
    same_records(lone.evals, batched.evals)
    same_records([lone.final], [batched.final])
    for x, y in zip(jax.tree.leaves(lone.state), jax.tree.leaves(batched.state)):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        assert x.shape == y.shape and x.sharding.is_equivalent_to(y.sharding, x.ndim) and close(x, y)
    files = lambda cfg: sorted(p.name for p in __import__("pathlib").Path(cfg.out_dir).iterdir())
    assert files(lone.config) == files(batched.config)


def lone_and_batched(tmp_path, strategy: str, options: dict, devices=None, steps: int = STEPS,
                     packing: str = "auto"):
    cfgs = cells_of(tmp_path, "batched", strategy, options, devices, steps=steps, packing=packing)
    lone = [train(plan_run(dataclasses.replace(c, out_dir=c.out_dir.replace("batched", "lone")), job_cell=True))
            for c in cfgs]
    plans = [plan_run(c, job_cell=True) for c in cfgs]
    assert share_program(plans) == [[0, 1, 2]]
    return lone, train_cells(plans)


FAMILIES = [("bsp", {}), ("localsgd", {"period": 4}), ("selsync", {"delta": 0.3, "window": 5}),
            ("triggered", {"trigger": "significance", "trigger_options": {"delta": 0.3, "window": 5}}), ("diloco", {"period": 5})]


@pytest.mark.parametrize("strategy, options", FAMILIES, ids=[f for f, _ in FAMILIES])
def test_a_batched_cell_is_its_lone_run_on_8_devices(tmp_path, strategy, options):
    lone, batched = lone_and_batched(tmp_path, strategy, options)
    for a, b in zip(lone, batched):
        same_cell(a, b)
    if strategy in ("selsync", "triggered"):   # the cells decide apart: the step's cond is a select over cells
        assert len({tuple(r["synced"] for r in b.records) for b in batched}) > 1
    assert not np.allclose(np.asarray(jax.tree.leaves(batched[0].state.params)[0]),
                           np.asarray(jax.tree.leaves(batched[1].state.params)[0]))   # cells are not one run


@pytest.mark.slow
@pytest.mark.layouts
@pytest.mark.parametrize("strategy, options", FAMILIES, ids=[f for f, _ in FAMILIES])
def test_a_batched_cell_is_its_lone_run_packed_8_on_1(tmp_path, strategy, options):
    lone, batched = lone_and_batched(tmp_path, strategy, options, devices=1)
    for a, b in zip(lone, batched):
        same_cell(a, b)
        assert b.final["layout"] == a.final["layout"] and "on 1 x CPU" in a.final["layout"]


def test_a_cell_ends_with_the_same_bits_in_any_batch_it_is_trained_in(tmp_path):
    """A resumed job or a shard trains what is left of a row's seeds: seed 2 alone, or with
    seed 1, ends bit for bit as in the batch of all three (a batch of one is computed
    beside a copy of its cell: a cell axis of 1 compiles to other bits)."""
    digests = []
    for where, seeds in (("all", (0, 1, 2)), ("two", (1, 2)), ("one", (2,))):
        plans = [plan_run(c, job_cell=True) for c in cells_of(tmp_path, where, "selsync", FAMILIES[2][1], None, seeds)]
        digests.append(state_digest(train_cells(plans)[-1].state))
    assert digests[0] == digests[1] == digests[2]


def test_cells_share_a_program_only_where_settings_and_strategy_agree_but_for_the_seed(tmp_path):
    bsp = cells_of(tmp_path, "bsp", "bsp", {}, None, seeds=(0, 1))
    local = cells_of(tmp_path, "local", "localsgd", {"period": 4}, None, seeds=(0, 1))
    other_lr = dataclasses.replace(bsp[0], lr=0.5, out_dir=str(tmp_path / "lr"))
    checkpointed = dataclasses.replace(bsp[1], checkpoint_every=10, out_dir=str(tmp_path / "ck"))
    plans = [plan_run(c, job_cell=True) for c in (*bsp, *local, other_lr, checkpointed)]
    assert share_program(plans) == [[0, 1], [2, 3], [4], [5]]


def test_a_strategy_that_draws_from_the_run_s_seed_on_the_host_trains_alone(tmp_path):
    """syncswitch's stragglers are a table drawn on the host from the run's seed, a constant
    of its program: its seeds' steps are not one program, refused before any file is written."""
    cfgs = cells_of(tmp_path, "syncswitch", "syncswitch", {"policy": "online"}, None, seeds=(0, 1))
    plans = [plan_run(c, job_cell=True) for c in cfgs]
    assert share_program(plans) == [[0, 1]]   # equal but for the seed: the programs tell
    with pytest.raises(NotOneProgram):
        train_cells(plans)
    assert not any((tmp_path / "syncswitch").rglob("*.json"))


#: strategies whose draws take the run's seed as a PRNG key's seed: a cell option, so their seeds batch
SEEDED = [("islands", {"period": 4}), ("sparta", {"fraction": 0.05}), ("fedavg", {"period": 4, "fraction": 0.5}),
          ("diloco", {"period": 5, "sparta": 0.05}), ("localsgd", {"period": 4, "aggregator": "random"})]


@pytest.mark.parametrize("strategy, options", SEEDED, ids=[s for s, _ in SEEDED])
def test_draws_from_the_run_s_seed_batch_as_each_cell_s_value(tmp_path, strategy, options):
    """Islands, SPARTA's entries, FedAvg's clients, a random replica: each cell draws from
    its own seed inside the batch (its value on the cell axis), exactly as its lone run.
    Over 8 steps (two syncs at period 4, so two draws per cell): on JAX 0.12.1 an islands
    cell's first last-bit difference, at step 10, had moved one replica's gradient norm by
    1.3e-4 by step 11 and its loss by 3e-4 by step 25 (measured): a trajectory's growth of a
    rounding difference, not another draw (the permutations are equal)."""
    lone, batched = lone_and_batched(tmp_path, strategy, options, steps=8)
    for a, b in zip(lone, batched):
        same_cell(a, b)


def test_the_collectives_rules_see_the_cell_vmap_only_inside_a_batch():
    assert not cell_axis.under_cell_vmap("replicas")
    with cell_axis.cells_batched():
        assert cell_axis.under_cell_vmap("replicas")
        assert jax.vmap(lambda x: cell_axis.under_cell_vmap("replicas") and x, axis_name="replicas")(
            np.ones(2)).shape == (2,)
    assert not cell_axis.under_cell_vmap("replicas")


def test_a_job_trains_a_row_s_seeds_as_one_batch_and_records_each_cell(tmp_path):
    said = []
    cfgs = cells_of(tmp_path, "job", "bsp", {}, None)
    cells = Cells(tmp_path / "job", Progress(3, said.append), keep_states=True)
    runs = cells.get_all([(c, f"bsp, seed {c.seed}") for c in cfgs], row="bsp")
    assert said[0].startswith("[cells 1-3 of 3") and "bsp, seeds 0, 1, 2: 3 cells as one batch" \
        in said[0]
    for cfg, run in zip(cfgs, runs):
        record = json.loads((tmp_path / "job" / f"seed{cfg.seed}" / CELL_FILE).read_text())
        assert record["batched"] == 3 and set(RUN_FILES) <= set(record["files"])
        assert run.config.seed == cfg.seed and run.records[-1]["step"] == STEPS - 1
    again = Cells(tmp_path / "job", Progress(3, said.append)).get_all([(c, f"bsp, seed {c.seed}") for c in cfgs])
    assert [r.final for r in again] == [r.final for r in runs]   # loaded, not trained again
    assert all("finished earlier, loaded" in line for line in said[1:])


def test_no_batch_cells_trains_one_by_one(tmp_path):
    said = []
    cfgs = cells_of(tmp_path, "job", "bsp", {}, None, seeds=(0, 1))
    Cells(tmp_path / "job", Progress(2, said.append), batch_cells=False).get_all(
        [(c, f"bsp, seed {c.seed}") for c in cfgs])
    assert [line.split("] ")[0].split(" ·")[0] for line in said] == ["[cell 1 of 2", "[cell 2 of 2"]
    assert json.loads((tmp_path / "job" / "seed1" / CELL_FILE).read_text())["batched"] == 1


def test_a_job_stopped_mid_batch_says_so_and_its_batch_trains_again_to_the_same_bits(tmp_path, monkeypatch):
    """SIGTERM during a batch: the job stops naming the batch's cells, keeps none of them,
    and the next run trains the batch again from its first step, ending as an unstopped one."""
    import os
    import signal

    from jaxsel.analysis.cells import JobInterrupted
    from jaxsel.training.runlog import RunLog

    cfgs = cells_of(tmp_path, "job", "selsync", FAMILIES[2][1], None, seeds=(0, 1))
    wanted = [(c, f"selsync, seed {c.seed}") for c in cfgs]
    flush = RunLog.flush

    def stop_at_first_read(self, t):
        os.kill(os.getpid(), signal.SIGTERM)   # the loop finishes the step and stops at the next read
        return flush(self, t)

    monkeypatch.setattr(RunLog, "flush", stop_at_first_read)
    with pytest.raises(JobInterrupted) as stopped:
        Cells(tmp_path / "job", Progress(2)).get_all(wanted)
    assert "stopped in cells 1-2 of 2, trained as one batch (selsync, seed 0; selsync, seed 1)" in str(stopped.value)
    assert "which run again from their start on resume; the 0 finished cells are kept" in str(stopped.value)
    assert not list((tmp_path / "job").rglob(CELL_FILE))
    monkeypatch.setattr(RunLog, "flush", flush)
    resumed = Cells(tmp_path / "job", Progress(2), keep_states=True).get_all(wanted)
    whole = Cells(tmp_path / "whole", Progress(2), keep_states=True).get_all(
        [(c, f"selsync, seed {c.seed}") for c in cells_of(tmp_path, "whole", "selsync", FAMILIES[2][1], None, (0, 1))])
    assert [state_digest(r.state) for r in resumed] == [state_digest(r.state) for r in whole]
    assert [r.records[-1]["step"] for r in resumed] == [STEPS - 1] * 2


# ------------------------------------------------ a method's budget points as one batch (cell options)

POINTS = [("localsgd", "period", (2, 5), {}),
          ("diloco", "period", (3, 8), {}),
          ("postlocal", "period", (3, 7), {}),
          ("accordion", "low", (2, 4), {"high": 8, "interval": 10}),
          ("selsync", "delta", (0.05, 0.3), {"window": 5}),
          ("selsync", "max_local", (2, 8), {"window": 5, "delta": 5.0}),
          ("triggered", "trigger.syncs", (4, 17), {"trigger": "spread", "trigger.steps": STEPS, "trigger.warmup": 3}),
          # options settled from another one: a superstep's period from its epochs, Sync-Switch's
          # switch from its BSP share, SSD-SGD's GLU weight from its period (1/k)
          ("superstep", "epochs", (0.25, 1.0), {}),
          ("syncswitch", "bsp_fraction", (0.25, 0.5), {}),
          ("ssdsgd", "period", (2, 5), {"warmup_steps": 3}),
          ("streamingdiloco", "period", (4, 10), {})]


def point_cells(tmp_path, where: str, strategy: str, key: str, values, extra: dict, seeds=(0, 1)) -> list[TrainConfig]:
    base = TrainConfig(strategy=strategy, steps=STEPS, progress=False, eval_every=20)
    return [dataclasses.replace(base, strategy_options={**extra, key: v}, seed=s,
                                out_dir=str(tmp_path / where / f"{v}" / f"seed{s}")) for v in values for s in seeds]


@pytest.mark.parametrize("strategy, key, values, extra", POINTS, ids=[f"{p[0]}-{p[1]}" for p in POINTS])
def test_a_method_s_budget_points_train_as_one_batch_each_cell_its_lone_run(tmp_path, strategy, key, values, extra):
    """Points that differ in a cell option (core/cell_options.py) share one program: each
    cell decides from its own value (its sync count exactly its lone run's) and ends as its
    lone run, to float32 rounding."""
    cfgs = point_cells(tmp_path, "batched", strategy, key, values, extra)
    plans = [plan_run(c, job_cell=True) for c in cfgs]
    assert share_program(plans) == [[0, 1, 2, 3]]
    batched = train_cells(plans)
    lone = [train(plan_run(dataclasses.replace(c, out_dir=c.out_dir.replace("batched", "lone")), job_cell=True))
            for c in cfgs]
    for a, b in zip(lone, batched):
        same_cell(a, b)
    synced = [sum(r["synced"] for r in b.records) for b in batched]
    assert synced[0] != synced[2]   # the points' own values decided
    if strategy == "triggered":
        assert synced == [4, 4, 17, 17]


def test_a_cell_ends_with_the_same_bits_beside_its_seeds_or_beside_other_points(tmp_path):
    """Whether a cell's batch holds its own seeds or other points too, the program is the
    same (its options are values on the cell axis either way): the same bits."""
    alone = point_cells(tmp_path, "seeds", "localsgd", "period", (5,), {})
    mixed = point_cells(tmp_path, "mixed", "localsgd", "period", (2, 5), {}, seeds=(0,))
    digests = [state_digest(train_cells([plan_run(c, job_cell=True) for c in cfgs])[-1 if cfgs is mixed else 0].state)
               for cfgs in (alone, mixed)]
    assert digests[0] == digests[1]


def test_points_differing_in_more_than_cell_options_train_apart(tmp_path):
    period = point_cells(tmp_path, "p", "localsgd", "period", (2, 5), {}, seeds=(0,))
    syncs = point_cells(tmp_path, "k", "localsgd", "syncs", (3,), {"total_steps": STEPS}, seeds=(0,))
    capped = point_cells(tmp_path, "c", "selsync", "max_local", (4, 8), {}, seeds=(0,))
    uncapped = point_cells(tmp_path, "u", "selsync", "delta", (0.3,), {}, seeds=(0,))
    after = point_cells(tmp_path, "a", "selsync", "delta", (0.3,), {"sync": "model"}, seeds=(0,))
    plans = [plan_run(c, job_cell=True) for c in (*period, *syncs, *capped, *uncapped, *after)]
    # a period and a sync count are two triggers; a cap or none, two programs; so are the two orders
    assert share_program(plans) == [[0, 1], [2], [3, 4], [5], [6]]


def test_cell_options_bind_a_copy_and_leave_the_built_strategy_alone():
    from jaxsel.core.cell_options import bind, cell_values, program_key
    from jaxsel.strategies.localsgd import LocalSGD
    from jaxsel.strategies.triggered import TriggeredStrategy

    a, b = LocalSGD(period=4), LocalSGD(period=16)
    assert program_key(a) == program_key(b) != program_key(LocalSGD(syncs=3, total_steps=30))
    assert cell_values(a) == {"period": 4, "seed": 0} and cell_values(a)["period"].dtype == np.int32
    bound = bind(a, {"period": np.int32(7)})
    assert bound.period == 7 and a.period == 4 and bound.trigger.period == 7
    spread = TriggeredStrategy(trigger="spread", trigger_options={"syncs": 5, "steps": 40, "warmup": 2})
    assert {k: int(v) for k, v in cell_values(spread).items()} == {"trigger.syncs": 5, "trigger.warmup": 2}
    assert bind(spread, {"trigger.syncs": np.int32(9)}).trigger.syncs == 9 and spread.trigger.syncs == 5


@pytest.mark.parametrize("syncs, steps, warmup", [(0, 40, 0), (5, 40, 0), (37, 40, 24), (24, 40, 24), (40, 40, 3),
                                                  (13, 600, 13), (567, 600, 24), (1, 7, 0)])
def test_a_spread_schedule_traced_fires_exactly_where_its_host_mask_does(syncs, steps, warmup):
    """A cell batch computes Spread's firing steps on the device (int32 arithmetic); they are
    the host's int64 ones (`spread_steps`), over two periods of the pattern."""
    from jaxsel.core.cell_options import bind
    from jaxsel.core.triggers import Spread, spread_steps

    trigger = Spread(syncs, steps, warmup)
    expected = np.zeros(2 * steps, bool)
    for start in (0, steps):
        expected[start + np.arange(warmup)] = True
        expected[start + warmup + spread_steps(syncs - warmup, steps - warmup)] = True
    traced = jax.jit(jax.vmap(lambda t, k, w: bind(trigger, {"syncs": k, "warmup": w}).fires(t), (0, None, None)))(
        np.arange(2 * steps, dtype=np.int32), np.int32(syncs), np.int32(warmup))
    assert np.array_equal(np.asarray(traced), expected)


def test_every_declared_budget_point_groups_with_its_seeds_or_stands_alone(tmp_path):
    """The frontier asks for every method's points and seeds together: grouping them builds
    no strategy anew and never fails; a method's points that differ only in cell options
    share a program (local SGD's five periods, superstep's epochs, Sync-Switch's BSP shares,
    SSD-SGD's and streaming DiLoCo's periods)."""
    from jaxsel.analysis.cells import row_config
    from jaxsel.analysis.frontier import plan_frontier
    from jaxsel.analysis.frontier_points import fired, stand_in
    from jaxsel.training.tasks import task_named

    base = TrainConfig(**dict(task_named("label-skew").settings), progress=False)
    for method, variants in plan_frontier(base, None, None, 2).methods.items():
        plans = [plan_run(row_config(base, stand_in(v) if fired(v) else v, str(tmp_path / f"{i}-{s}"), s),
                          job_cell=True) for i, v in enumerate(variants) for s in (0, 1)]
        groups = share_program(plans)
        assert sorted(i for g in groups for i in g) == list(range(len(plans)))
        if method in ("localsgd", "superstep", "syncswitch", "ssdsgd", "streamingdiloco"):
            assert groups == [list(range(len(plans)))], method


@pytest.mark.parametrize("devices", [1, 8])
def test_cells_stack_and_cut_back_out_to_their_own_bits(devices):
    """A batch stacks its cells' leaves by cached programs (cell_batch._stacker): NumPy's
    stack's bits, each device its replicas of every cell; each cell cut back out
    (`unstacker`) is its own state, placed as it was."""
    from jax.sharding import NamedSharding, PartitionSpec as P

    from jaxsel.core.parallel import AXIS
    from jaxsel.core.state import TrainState
    from jaxsel.training import cell_batch

    mesh = jax.make_mesh((devices,), (AXIS,), devices=jax.devices()[:devices])
    by_replica = NamedSharding(mesh, P(AXIS))
    rng = np.random.default_rng(0)
    states = [TrainState(step=jax.device_put(np.int32(7), NamedSharding(mesh, P())),
                         params={"w": jax.device_put(rng.normal(size=(8, 5, 3)).astype(np.float32), by_replica)},
                         opt_state=(jax.device_put(rng.integers(0, 9, size=(8, 4)).astype(np.int32), by_replica),),
                         model_state={}, strategy_state=()) for _ in range(3)]
    stacked = cell_batch.stack_cells(states)
    for got, *leaves in zip(jax.tree.leaves(stacked.replace(step=None)),
                            *(jax.tree.leaves(s.replace(step=None)) for s in states)):
        assert got.sharding == NamedSharding(mesh, P(None, AXIS))
        assert np.array_equal(np.asarray(got), np.stack([np.asarray(x) for x in leaves]))
    for own, cut in zip(states, cell_batch.unstacker(states[0], 3)(stacked)):
        assert int(cut.step) == 7
        for a, b in zip(jax.tree.leaves(own), jax.tree.leaves(cut)):
            assert a.sharding == b.sharding and np.array_equal(np.asarray(a), np.asarray(b))
