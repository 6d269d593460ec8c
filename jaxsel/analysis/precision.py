"""Mixed precision as the benchmarks train: bf16 compute, fp32 parameters and optimizer state.

One definition, shared by `jaxsel bench --dtype bf16` and `experiments/gpu_throughput.py`,
so the overhead ratios and the throughput figures describe the same step: the Flax layers
(Conv, Linear, BatchNorm) compute in bfloat16 while their parameters, the BatchNorm
statistics and the optimizer state stay float32; the loss (softmax cross-entropy) is taken
in float32 from the bf16 logits.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from ..models import FunctionalModel, build_model

DTYPES = ("fp32", "bf16")
COMPUTE_DTYPE = {"fp32": None, "bf16": jnp.bfloat16}
#: the layers whose compute dtype mixed precision sets (their params keep `param_dtype`)
LAYERS = (nnx.Conv, nnx.Linear, nnx.BatchNorm)


def check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return dtype


def compute_in(model: nnx.Module, dtype: str) -> nnx.Module:
    """`model` with its layers computing in `dtype` (in place; fp32 leaves it as built)."""
    compute = COMPUTE_DTYPE[check_dtype(dtype)]
    if compute is not None:
        for _, module in nnx.iter_modules(model):
            if isinstance(module, LAYERS):
                module.dtype = compute
    return model


def build(name: str, input_shape, num_classes: int, seed: int = 0, dtype: str = "fp32") -> FunctionalModel:
    """A `jaxsel.models` model as a FunctionalModel computing in `dtype` (params fp32)."""
    return FunctionalModel.from_module(compute_in(build_model(name, input_shape, num_classes, seed), dtype))


def classification_loss(fm: FunctionalModel, dtype: str = "fp32", input_key: str = "image",
                        label_key: str = "label"):
    """Mean softmax cross-entropy with `make_train_step`'s signature (stateful when the model
    is). fp32: exactly `fm.classification_loss()`. bf16: the input cast to bf16, the loss in
    fp32 from the logits, the new model state cast back to its stored dtypes."""
    if COMPUTE_DTYPE[check_dtype(dtype)] is None:
        return fm.classification_loss(input_key, label_key)
    compute = COMPUTE_DTYPE[dtype]

    def with_state(params, model_state, batch):
        logits, new_state = fm.apply(params, model_state, batch[input_key].astype(compute), train=True)
        new_state = jax.tree.map(lambda new, old: new.astype(old.dtype), new_state, model_state)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), batch[label_key]).mean()
        return loss, new_state

    def stateless(params, batch):
        return with_state(params, {}, batch)[0]

    return with_state if fm.stateful else stateless
