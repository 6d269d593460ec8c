"""Bridge Flax NNX modules to jaxsel's pure functions on pytrees.

The step works on plain dicts of arrays (parameters, model state), so it serves NNX,
Linen, Equinox or raw JAX alike; this module splits an NNX model into those dicts and
builds the loss and eval functions that merge them back.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np
import optax
from flax import nnx


@dataclasses.dataclass
class FunctionalModel:
    """An NNX model split into graph definitions (train / eval mode) and pure dicts."""

    train_def: Any
    eval_def: Any
    params_template: Any
    state_template: Any
    params: dict
    model_state: dict

    @classmethod
    def from_module(cls, model: nnx.Module) -> "FunctionalModel":
        model.eval()
        eval_def, _, _ = nnx.split(model, nnx.Param, ...)
        model.train()
        train_def, params, rest = nnx.split(model, nnx.Param, ...)
        return cls(train_def, eval_def, params, rest, nnx.to_pure_dict(params), nnx.to_pure_dict(rest))

    @property
    def stateful(self) -> bool:
        """True when the model carries mutable state (BatchNorm statistics)."""
        return bool(jax.tree.leaves(self.model_state))

    def _merge(self, graphdef, params, model_state):
        p = jax.tree.map(lambda x: x, self.params_template)
        nnx.replace_by_pure_dict(p, params)
        s = jax.tree.map(lambda x: x, self.state_template)
        nnx.replace_by_pure_dict(s, model_state)
        return nnx.merge(graphdef, p, s)

    def apply(self, params, model_state, x, *, train: bool):
        """Forward pass; in train mode also returns the updated model state."""
        model = self._merge(self.train_def if train else self.eval_def, params, model_state)
        out = model(x)
        if not train:
            return out
        return out, nnx.to_pure_dict(nnx.state(model, nnx.Not(nnx.Param)))

    def classification_loss(self, input_key: str = "image", label_key: str = "label"):
        """Mean softmax cross-entropy; signature fits `make_train_step(stateful=...)`."""
        def with_state(params, model_state, batch):
            logits, new_state = self.apply(params, model_state, batch[input_key], train=True)
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch[label_key]).mean()
            return loss, new_state

        def stateless(params, batch):
            return with_state(params, {}, batch)[0]

        return with_state if self.stateful else stateless

    def logits_fn(self, input_key: str = "image"):
        """Evaluation-mode logits from (params, model_state, batch)."""
        def logits(params, model_state, batch):
            return self.apply(params, model_state, batch[input_key], train=False)
        return logits


def count_params(params) -> int:
    """Parameters of a pytree of arrays or of their shapes (`nnx.eval_shape`'s model: jax
    deprecates `jnp.size` of a ShapeDtypeStruct)."""
    return int(sum(math.prod(np.shape(x)) for x in jax.tree.leaves(params)))
