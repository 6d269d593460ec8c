"""Model FLOPs: exact for matmuls and convolutions, and the textbook figure for ResNet-50."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsel.analysis.flops import forward_flops, training_flops


def test_matmul_and_batched_matmul_are_exact():
    a, b = jnp.ones((8, 16)), jnp.ones((16, 32))
    assert forward_flops(lambda x, y: x @ y, a, b) == 2 * 8 * 16 * 32
    a, b = jnp.ones((4, 8, 16)), jnp.ones((4, 16, 5))
    assert forward_flops(lambda x, y: jnp.einsum("bik,bkj->bij", x, y), a, b) == 2 * 4 * 8 * 16 * 5


def test_convolution_counts_kernel_times_input_channels_per_output():
    x, w = jnp.ones((2, 3, 32, 32)), jnp.ones((16, 3, 3, 3))      # NCHW, OIHW
    conv = lambda x, w: jax.lax.conv_general_dilated(x, w, (2, 2), "SAME")
    out = jax.eval_shape(conv, x, w).shape                          # (2, 16, 16, 16)
    assert forward_flops(conv, x, w) == 2 * np.prod(out) * 3 * 3 * 3
    grouped = lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=4)
    x, w = jnp.ones((1, 8, 10, 10)), jnp.ones((8, 2, 3, 3))
    assert forward_flops(grouped, x, w) == 2 * (8 * 10 * 10) * (2 * 3 * 3)


def test_scan_multiplies_its_body():
    w = jnp.ones((16, 16))
    f = lambda x: jax.lax.scan(lambda c, _: (c @ w, None), x, None, length=5)[0]
    assert forward_flops(f, jnp.ones((4, 16))) == 5 * 2 * 4 * 16 * 16


def test_resnet50_is_the_textbook_4_1_gmacs_per_image():
    from flax import nnx

    from jaxsel.models import FunctionalModel, build_model

    model = nnx.eval_shape(lambda: build_model("resnet50", (224, 224, 3), 1000, 0))   # shapes only
    fm = FunctionalModel.from_module(model)
    logits = fm.logits_fn("image")
    batch = {"image": jax.ShapeDtypeStruct((2, 224, 224, 3), jnp.float32)}
    per_image = forward_flops(logits, fm.params, fm.model_state, batch) / 2
    assert per_image / 2 == pytest.approx(4.1e9, rel=0.03)          # multiply-adds
    assert training_flops(logits, fm.params, fm.model_state, batch) == 3 * 2 * per_image
