"""docs/STRATEGIES.md's "A strategy from scratch" (moved there from README) runs as
written, and does what it says: checked against a NumPy transcription of the method on a
least-squares model (gradients in closed form), with the step's report built by the core
from the strategy's one sync."""
import re
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from helpers import R, identical, run
from jaxsel.strategies import STRATEGIES, build_strategy

PAGE = Path(__file__).resolve().parents[1] / "docs" / "STRATEGIES.md"
B, D, STEPS, LR = 4, 3, 7, 0.05


def strategy_block() -> str:
    section = PAGE.read_text().split("## A strategy from scratch", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the section shows one code block"
    return blocks[0]


@pytest.fixture(scope="module")
def pull():
    """The page's class, registered as "pull" (removed again afterwards)."""
    scope: dict = {}
    exec(compile(strategy_block(), "docs/STRATEGIES.md", "exec"), scope)
    yield scope["Pull"]
    STRATEGIES._classes.pop("pull", None)


def squares(params, batch):
    return 0.5 * jnp.mean((batch["x"] @ params["w"] - batch["y"]) ** 2)


def batches():
    rng = np.random.default_rng(0)
    return [{"x": rng.normal(size=(R * B, D)).astype(np.float32), "y": rng.normal(size=R * B).astype(np.float32)}
            for _ in range(STEPS)]


def reference(period: int, beta: float) -> list[np.ndarray]:
    """The method in NumPy: each replica's SGD step, the pull toward its anchor, and every
    `period` steps the mean of the replicas as their weights and their new anchor."""
    w = np.zeros((R, D), np.float32)
    anchor = w.copy()
    out = []
    for t, batch in enumerate(batches()):
        x, y = batch["x"].reshape(R, B, D), batch["y"].reshape(R, B)
        grad = np.einsum("rbd,rb->rd", x, np.einsum("rbd,rd->rb", x, w) - y) / B
        w = w - LR * grad
        w = w + beta * (anchor - w)
        if (t + 1) % period == 0:
            w = anchor = np.broadcast_to(w.mean(0), w.shape).copy()
        out.append(w)
    return out


def test_readme_strategy_matches_its_numpy_transcription(pull, mesh):
    strat = build_strategy("pull", {"period": 3, "beta": 0.2})
    assert isinstance(strat, pull) and strat.describe() == "pull (period=3, beta=0.2)"
    _, history = run(strat, mesh, batches(), loss=squares, params={"w": jnp.zeros(D)}, opt=optax.sgd(LR))
    want = reference(3, 0.2)
    payload = D * 4   # one float32 vector per replica, only on a sync step
    for t, (state, metrics) in enumerate(history):
        np.testing.assert_allclose(state.params["w"], want[t], rtol=1e-5, atol=1e-6)
        due = (t + 1) % 3 == 0
        assert bool(metrics["synced"]) == due and int(metrics["bytes_allreduced"]) == payload * due
        if due:   # replicas equal after the sync, and the anchor is their average
            assert identical(state.params) and identical(state.strategy_state.anchor)
            np.testing.assert_array_equal(state.strategy_state.anchor["w"], state.params["w"])
    assert not identical(history[0][0].params)   # the replicas drift apart between syncs


def test_readme_strategy_options_are_checked_by_name(pull):
    with pytest.raises(ValueError, match="has no option 'perod'"):
        build_strategy("pull", {"perod": 3})
