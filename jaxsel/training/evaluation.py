"""A model's test accuracy and loss on a whole in-memory split, one jitted program per
batch shape, run on one device.

The weights a run evaluates are replicated over the mesh (the replica average); running
the forward pass on every device of the mesh would compute the same logits N times, so
the evaluation takes the first device's copy of each (no transfer) and runs there. Host
copies (a multi-process run's, or one replica's own weights) run on the default device:
the same program on one device, so the same figures bit for bit.

The whole batch (logits, correct count, summed cross-entropy) is one program: op by op,
the loss alone was about ten dispatches and a compile of each on a process's first
evaluation (measured on MNIST-1D's 1000 test rows: 13 ms per evaluation and 3.4 s for the
first, against 2.1 ms and 0.7 s).
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from ..models import FunctionalModel


def make_eval_fn(fm: FunctionalModel, spec, batch_size: int = 512) -> Callable[[Any, Any, dict], dict]:
    """evaluate(params, model_state, arrays) -> {"test_accuracy", "test_loss"} over the
    split `arrays` (per example; per token for language models)."""
    figures = jax.jit(batch_figures(fm.logits_fn(spec.input_key), spec.label_key))

    def evaluate(params, model_state, arrays) -> dict:
        params, model_state = on_one_device((params, model_state))
        correct, total_loss, n, rows = 0, 0.0, 0, len(arrays[spec.label_key])
        for i in range(0, rows, batch_size):
            batch = {k: v[i:i + batch_size] for k, v in arrays.items()}
            right, loss = jax.device_get(figures(params, model_state, batch))
            correct += int(right)
            total_loss += float(loss)
            n += batch[spec.label_key].size
        return {"test_accuracy": correct / n, "test_loss": total_loss / n}

    return evaluate


def batch_figures(logits_fn, label_key: str):
    """(params, model_state, batch) -> (correctly classified count, summed cross-entropy)."""
    def figures(params, model_state, batch) -> tuple[jax.Array, jax.Array]:
        logits, labels = logits_fn(params, model_state, batch), batch[label_key]
        right = jnp.sum(jnp.argmax(logits, -1) == labels)
        return right, optax.softmax_cross_entropy_with_integer_labels(logits, labels).sum()
    return figures


def on_one_device(tree):
    """Every replicated array of `tree` as its first device's buffer (no copy); anything
    else (host arrays, one-device or sharded arrays) as it is."""
    def first(x):
        sharding = getattr(x, "sharding", None)
        if sharding is None or len(sharding.device_set) == 1 or not sharding.is_fully_replicated:
            return x
        return x.addressable_data(0)
    return jax.tree.map(first, tree)
