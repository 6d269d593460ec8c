"""Each replica's own model, evaluated one by one.

A run's test accuracy is that of the model its strategy evaluates: the replica average
(`run.evaluation_weights`). SelSync's authors test each worker's local model instead.
Both are legitimate and they differ when replicas drift apart, so every run also reports
`replica_accuracy` (and `replica_loss`): {mean, min, max, per_replica} over the replicas'
own parameters and model state (`TrainState.params`, the weights each replica trains,
also for methods that evaluate a global model of their own, DiLoCo and SSD-SGD).

`TrainConfig.eval_replicas`: "final" (default) evaluates them once, at the end of the run,
so a large model does not pay N evaluations per evaluation; "every" at every evaluation;
"off" never. The replicas are copied to the host once (all of them: N x the model), as
the multi-process evaluation path does (`distributed.to_host`).
"""
from __future__ import annotations

from typing import Any

import jax
import numpy as np

from . import distributed


def replica_weights(state) -> tuple[Any, Any]:
    """Host copies (NumPy, leading replica axis) of every replica's params and model state,
    on every process of a multi-process run."""
    return distributed.to_host((state.params, state.model_state))


def spread(values: list[float]) -> dict:
    return {"mean": float(np.mean(values)), "min": float(np.min(values)), "max": float(np.max(values)),
            "per_replica": [float(v) for v in values]}


def evaluate_replicas(run, state) -> dict:
    """{"replica_accuracy": spread, "replica_loss": spread} of `state`'s replicas, each
    evaluated on its own parameters and model state."""
    params, model_state = replica_weights(state)
    n = jax.tree.leaves(params)[0].shape[0]
    own = lambda tree, r: jax.tree.map(lambda x: x[r], tree)
    results = [run.evaluate(own(params, r), own(model_state, r), run.test) for r in range(n)]
    return {"replica_accuracy": spread([r["test_accuracy"] for r in results]),
            "replica_loss": spread([r["test_loss"] for r in results])}
