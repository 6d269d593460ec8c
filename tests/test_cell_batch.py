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


def cells_of(tmp_path, where: str, strategy: str, options: dict, devices, seeds=(0, 1, 2)) -> list[TrainConfig]:
    base = TrainConfig(strategy=strategy, strategy_options=options, steps=STEPS, progress=False, devices=devices,
                       eval_every=20)
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


def lone_and_batched(tmp_path, strategy: str, options: dict, devices=None):
    cfgs = cells_of(tmp_path, "batched", strategy, options, devices)
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


def test_a_strategy_that_draws_from_the_run_s_seed_trains_alone(tmp_path):
    """SPARTA's entries are drawn from the run's seed, a constant of its program: its seeds'
    steps are not one program, refused before any file is written."""
    cfgs = cells_of(tmp_path, "sparta", "sparta", {}, None, seeds=(0, 1))
    plans = [plan_run(c, job_cell=True) for c in cfgs]
    assert share_program(plans) == [[0, 1]]   # equal but for the seed: the programs tell
    with pytest.raises(NotOneProgram):
        train_cells(plans)
    assert not any((tmp_path / "sparta").rglob("*.json"))


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
