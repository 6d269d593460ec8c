"""Model FLOPs: exact for matmuls and convolutions, inside every kind of nested call; the
textbook figure for ResNet-50; and an error naming the primitive, not an undercount, where
JAX's program has another shape than flops.py reads."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsel.analysis.flops import Uncountable, eqn_flops, forward_flops, training_flops
from jaxsel.core.library_changes import LibraryChanged


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


def test_every_nested_call_is_counted_once_per_run_of_its_body():
    w = jnp.ones((16, 16))
    mm = 2 * 4 * 16 * 16   # one (4, 16) @ (16, 16)

    @jax.custom_jvp
    def custom_jvp(x):
        return x @ w

    custom_jvp.defjvp(lambda primals, tangents: (custom_jvp(primals[0]), tangents[0] @ w))

    @jax.custom_vjp
    def custom_vjp(x):
        return x @ w

    custom_vjp.defvjp(lambda x: (custom_vjp(x), None), lambda _, g: (g @ w.T,))
    x = jnp.ones((4, 16))
    cases = {
        "jit": (lambda x: jax.jit(lambda y: y @ w @ w)(x), 2 * mm),
        "checkpoint": (jax.checkpoint(lambda x: x @ w), mm),
        "custom_jvp": (custom_jvp, mm),
        "custom_vjp": (custom_vjp, mm),
        "cond: the dearer branch": (lambda x: jax.lax.cond(x.sum() > 0, lambda y: y @ w @ w, lambda y: y @ w, x),
                                    2 * mm),
        "switch": (lambda x: jax.lax.switch(1, [lambda y: y, lambda y: y @ w, lambda y: y @ w @ w @ w], x), 3 * mm),
        "fori_loop, static bounds": (lambda x: jax.lax.fori_loop(0, 3, lambda i, c: c @ w, x), 3 * mm),
        "vmap": (jax.vmap(lambda r: r @ w), mm),
        "while without matmuls": (lambda x: jax.lax.while_loop(lambda c: c[0, 0] < 9, lambda c: c + 1, x) @ w, mm),
    }
    for name, (fn, expected) in cases.items():
        assert forward_flops(fn, x) == expected, name


def test_a_while_loop_doing_matmuls_is_refused_not_counted_once():
    w = jnp.ones((16, 16))
    loop = lambda x, n: jax.lax.fori_loop(0, n, lambda i, c: c @ w, x)   # traced bound: a while loop
    with pytest.raises(Uncountable, match="trip count"):
        forward_flops(loop, jnp.ones((4, 16)), 3)


def test_matmul_work_in_another_primitive_is_refused_not_counted_as_zero():
    ragged = lambda l, r: jax.lax.ragged_dot(l, r, jnp.array([2, 2], jnp.int32))
    with pytest.raises(Uncountable, match="'ragged_dot_general' does matmul or convolution work"):
        forward_flops(ragged, jnp.ones((4, 3)), jnp.ones((2, 3, 5)))
    assert forward_flops(lambda x: x.astype(jnp.bfloat16), jnp.ones(3)) == 0   # convert_element_type


def _eqn(fn, *args, primitive):
    (eqn,) = [e for e in jax.make_jaxpr(fn)(*args).eqns if e.primitive.name == primitive]
    return eqn


def test_a_param_jax_renamed_or_reshaped_names_the_primitive():
    """What flops.py reads of each primitive: a JAX that changed it is LibraryChanged naming
    the primitive and the param, never a count that quietly drops the work."""
    x, w = jnp.ones((4, 16)), jnp.ones((16, 16))
    dot = _eqn(lambda a: a @ w, x, primitive="dot_general")
    conv = _eqn(lambda a, k: jax.lax.conv_general_dilated(a, k, (1, 1), "SAME"),
                jnp.ones((1, 3, 8, 8)), jnp.ones((4, 3, 3, 3)), primitive="conv_general_dilated")
    scan = _eqn(lambda a: jax.lax.scan(lambda c, _: (c @ w, None), a, None, length=5)[0], x, primitive="scan")
    cond = _eqn(lambda a: jax.lax.cond(a.sum() > 0, lambda y: y @ w, lambda y: y, a), x, primitive="cond")
    assert (eqn_flops(dot), eqn_flops(scan), eqn_flops(cond)) == (2 * 4 * 16 * 16, 5 * 2 * 4 * 16 * 16,
                                                                 2 * 4 * 16 * 16)
    broken = [
        (dot.replace(params={}), "'dot_general' has no param 'dimension_numbers'"),
        (dot.replace(params={**dot.params, "dimension_numbers": ((1, 0),)}), "'dot_general'.s dimension_numbers"),
        (conv.replace(params={**conv.params, "dimension_numbers": (0, 1, 2, 3)}),
         "'conv_general_dilated'.s dimension_numbers"),
        (scan.replace(params={k: v for k, v in scan.params.items() if k != "length"}), "'scan' has no param 'length'"),
        (scan.replace(params={**scan.params, "length": None}), "'scan'.s length"),
        (cond.replace(params={**cond.params, "branches": ("branch 0", "branch 1")}), "'cond' holds 0 jaxprs"),
        (cond.replace(params={"index_only": 0, **{k: v for k, v in cond.params.items() if k != "branches"}}),
         "'cond' has no param 'branches'"),
    ]
    for eqn, message in broken:
        with pytest.raises(LibraryChanged, match=message):
            eqn_flops(eqn)


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
