"""Compositions of trigger-based strategies: `Phases(first, until, then)` and the rule that
only the core builds a step's report."""
from pathlib import Path

import numpy as np
import pytest

import jaxsel
from helpers import identical, run, softmax_batches

STEPS, UNTIL, PERIOD = 7, 3, 2


def test_phases_is_post_local_sgd(mesh):
    """`Phases(BSP(), until, LocalSGD(period))` and `PostLocalSGD` give the same bits; BSP
    syncs every step before `until`, local SGD after every `period` steps counted from it."""
    sync = dict(sync_model_state=False)
    phases = jaxsel.Phases(jaxsel.BSP(**sync), UNTIL, jaxsel.LocalSGD(period=PERIOD, **sync))
    post = jaxsel.PostLocalSGD(switch_step=UNTIL, period=PERIOD, **sync)
    _, a = run(phases, mesh, softmax_batches(STEPS))
    _, b = run(post, mesh, softmax_batches(STEPS))
    want = [t < UNTIL or (t - UNTIL + 1) % PERIOD == 0 for t in range(STEPS)]
    assert [bool(m["synced"]) for _, m in a] == want == [bool(m["synced"]) for _, m in b]
    for (sa, _), (sb, _) in zip(a, b):
        np.testing.assert_array_equal(sa.params["w"], sb.params["w"])
    assert not identical(a[UNTIL][0].params) and identical(a[UNTIL + 1][0].params)


def test_phases_then_counts_its_steps_from_the_switch(mesh):
    """A stateful `then` starts fresh at `until`: SelSync's warm-up (it syncs for its first
    `warmup` steps) runs from the switch, not from step 0, then it stays local."""
    warm = 3   # longer than the raw default's W - 1 = 1, so a warm-up counted from step 0 would show
    then = jaxsel.SelSync(window=2, delta=1e6, warmup=warm)   # after its warm-up it never votes
    _, hist = run(jaxsel.Phases(jaxsel.BSP(), UNTIL, then), mesh, softmax_batches(STEPS))
    assert [bool(m["synced"]) for _, m in hist] == [t < UNTIL + warm for t in range(STEPS)]


def test_phases_rejects_a_strategy_that_is_not_trigger_based():
    with pytest.raises(ValueError, match="then must be a trigger-based strategy"):
        jaxsel.Phases(jaxsel.BSP(), 2, jaxsel.DiLoCo())


def test_no_strategy_builds_or_edits_a_sync_report():
    """The step's report comes from the core's ledger: strategies record syncs through
    `ctx.sync` / `ctx.count` and never construct or `_replace` a SyncReport."""
    root = Path(jaxsel.__file__).parent / "strategies"
    offenders = [p.name for p in root.glob("*.py") if "SyncReport" in p.read_text() or "_replace(synced" in p.read_text()]
    assert offenders == []
