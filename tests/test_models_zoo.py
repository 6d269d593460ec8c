"""The papers' models: published parameter counts, output shapes, train/eval through
FunctionalModel, per-replica BatchNorm statistics in a jaxsel step.

Big models are never allocated: parameters are counted and forwards shaped with eval_shape.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import jaxsel
from jaxsel.models import MODEL_REGISTRY, FunctionalModel, build_model, lm_loss
from jaxsel.models.alexnet import adaptive_avg_pool
from jaxsel.models.resnet import cifar_resnet


def real_model(name, input_shape, num_classes):
    """Eager initialisation compiles one RNG program per parameter shape; the partitionable
    threefry variant compiles ~4x slower on CPU, which would dominate this file's time."""
    with jax.threefry_partitionable(False):
        return FunctionalModel.from_module(build_model(name, input_shape, num_classes))


@pytest.fixture(scope="module")
def resnet20():
    """One real ResNet-20 shared by the tests that run it."""
    return real_model("resnet20", (32, 32, 3), 10)


def abstract_params(model) -> int:
    return sum(math.prod(x.shape) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


def count(name, input_shape, num_classes) -> int:
    return abstract_params(nnx.eval_shape(lambda: build_model(name, input_shape, num_classes)))


@pytest.mark.parametrize(
    "name, input_shape, num_classes, expected",
    [
        ("resnet18", (32, 32, 3), 10, 11_173_962),
        ("resnet18", (224, 224, 3), 1000, 11_689_512),
        ("resnet34", (224, 224, 3), 1000, 21_797_672),
        ("resnet50", (224, 224, 3), 1000, 25_557_032),
        ("resnet101", (224, 224, 3), 1000, 44_549_160),
        ("resnet20", (32, 32, 3), 10, 269_722),
        ("resnet32", (32, 32, 3), 10, 464_154),
        ("resnet56", (32, 32, 3), 10, 853_018),
        ("vgg11", (32, 32, 3), 10, 9_231_114),
        ("vgg11", (32, 32, 3), 100, 9_277_284),
        ("vgg11_nobn", (32, 32, 3), 10, 9_231_114 - 5_504),     # BatchNorm's scale and bias on 2,752 channels
        ("vgg11_nobn", (32, 32, 3), 100, 9_277_284 - 5_504),
        ("alexnet", (224, 224, 3), 1000, 61_100_840),
    ],
)
def test_published_parameter_counts(name, input_shape, num_classes, expected):
    assert count(name, input_shape, num_classes) == expected


def test_count_params_reads_real_and_abstract_models_alike(resnet20):
    """jaxsel.models.count_params of eval_shape's model (what the projection scripts count)
    is the real model's, without jnp.size of a ShapeDtypeStruct (deprecated in jax 0.10.2 and 0.12:
    pytest's filter makes it an error here)."""
    abstract = FunctionalModel.from_module(nnx.eval_shape(lambda: build_model("resnet20", (32, 32, 3), 10)))
    assert jaxsel.models.count_params(abstract.params) == jaxsel.models.count_params(resnet20.params) == 269_722


def test_option_b_shortcuts_add_the_projections():
    m = nnx.eval_shape(lambda: cifar_resnet(20, 10, shortcut="B", rngs=nnx.Rngs(0)))
    # two 1x1 projections (16->32, 32->64) and their BatchNorm scale/bias
    assert abstract_params(m) == 269_722 + 16 * 32 + 32 * 64 + 2 * (32 + 64)


def test_transformer_parameter_count():
    v, t, d = 1000, 64, 256
    block = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d)
    untied = v * d + t * d + 2 * block + 2 * d + (d * v + v)
    assert count("transformer_lm", (t,), v) == untied


def _forward_shape(name, input_shape, num_classes, train):
    """Output shape of a batch-2 forward through FunctionalModel, without allocating."""
    fm = FunctionalModel.from_module(nnx.eval_shape(lambda: build_model(name, input_shape, num_classes)))
    dtype = jnp.int32 if name == "transformer_lm" else jnp.float32
    x = jax.ShapeDtypeStruct((2, *input_shape), dtype)
    out = jax.eval_shape(lambda p, s, x: fm.apply(p, s, x, train=train), fm.params, fm.model_state, x)
    if train:
        out, new_state = out
        assert jax.tree.structure(new_state) == jax.tree.structure(fm.model_state)
    return out.shape


@pytest.mark.parametrize(
    "name, input_shape, num_classes, expected, train",
    [
        ("resnet18", (32, 32, 3), 10, (2, 10), True),
        ("resnet34", (64, 64, 3), 10, (2, 10), False),
        ("resnet50", (224, 224, 3), 1000, (2, 1000), False),
        ("resnet50", (72, 72, 3), 10, (2, 10), True),
        ("resnet101", (96, 96, 3), 100, (2, 100), False),
        ("resnet20", (32, 32, 3), 10, (2, 10), True),
        ("resnet32", (28, 28, 1), 10, (2, 10), True),
        ("resnet56", (32, 32, 3), 100, (2, 100), False),
        ("vgg11", (32, 32, 3), 100, (2, 100), True),
        ("vgg11", (64, 64, 3), 10, (2, 10), False),
        ("vgg11_nobn", (32, 32, 3), 100, (2, 100), True),
        ("alexnet", (224, 224, 3), 1000, (2, 1000), False),
        ("alexnet", (64, 64, 3), 10, (2, 10), True),
        ("transformer_lm", (16,), 50, (2, 16, 50), True),
        ("transformer_lm", (16,), 50, (2, 16, 50), False),
    ],
)
def test_forward_shapes(name, input_shape, num_classes, expected, train):
    assert _forward_shape(name, input_shape, num_classes, train) == expected


def test_stem_is_chosen_by_input_size():
    small = nnx.eval_shape(lambda: build_model("resnet18", (64, 64, 3), 10))
    large = nnx.eval_shape(lambda: build_model("resnet18", (65, 65, 3), 10))
    assert small.stem == "cifar" and small.conv1.kernel.shape == (3, 3, 3, 64)
    assert large.stem == "imagenet" and large.conv1.kernel.shape == (7, 7, 3, 64)


def test_model_rngs_draw_nnx_rngs_keys_eagerly_and_traced():
    """build_model's RNG streams (jaxsel.models.model_rngs: a counter that a traced update
    replaces directly) give the very parameters and statistics of flax's own nnx.Rngs, and
    the same abstract model under eval_shape."""
    from jaxsel.models import model_rngs

    for name, shape, classes in (("resnet20", (32, 32, 3), 10), ("transformer_lm", (16,), 50)):
        make = MODEL_REGISTRY[name]
        with jax.threefry_partitionable(False):
            ours, flax_own = make(shape, classes, model_rngs(7)), make(shape, classes, nnx.Rngs(7))
        assert jax.tree.structure(nnx.state(ours)) == jax.tree.structure(nnx.state(flax_own))
        assert all(np.array_equal(a, b) for a, b in
                   zip(jax.tree.leaves(nnx.state(ours)), jax.tree.leaves(nnx.state(flax_own))))
        abstract = nnx.eval_shape(lambda: make(shape, classes, model_rngs(7)))
        assert [(x.shape, x.dtype) for x in jax.tree.leaves(nnx.state(abstract))] == \
            [(x.shape, x.dtype) for x in jax.tree.leaves(nnx.state(flax_own))]


def test_traced_counter_and_running_stat_updates_never_take_flax_indexed_set_value(monkeypatch):
    """jaxsel.models.traced_updates' speed-up (ResNet-101 built under eval_shape: 3.4 s ->
    0.6 s) rests on flax updating an RNG counter and a BatchNorm running statistic with
    `var[...] = value`, which RngCounter and RunningStat turn into a plain `set_value`.
    flax's own indexed `set_value` compares shardings on the tracer, which is what grew
    quadratically; a flax that updates them another way must fail here, not get slow."""
    from jaxsel.models.traced_updates import PlainReplace

    updates = {"plain": set(), "indexed": set()}
    flax_set_value = nnx.Variable.set_value

    def spy(self, value, **kwargs):
        if isinstance(self, PlainReplace) and isinstance(value, jax.core.Tracer):
            updates["indexed" if "index" in kwargs else "plain"].add(type(self).__name__)
        return flax_set_value(self, value, **kwargs)

    monkeypatch.setattr(nnx.Variable, "set_value", spy)

    def build_and_train_forward():   # traced: the seed's key, every counter and statistic
        model = build_model("resnet20", (32, 32, 3), 10, 0)
        model.train()
        return model(jnp.zeros((2, 32, 32, 3)))

    jax.eval_shape(build_and_train_forward)
    assert updates == {"plain": {"RngCounter", "RunningStat"}, "indexed": set()}


def test_too_small_inputs_fail_clearly():
    with pytest.raises(ValueError, match="at least 63"):
        _forward_shape("alexnet", (32, 32, 3), 10, False)
    with pytest.raises(ValueError, match="at least 32"):
        build_model("vgg11", (8, 8, 1), 10)


def test_adaptive_pool_matches_torch_bins():
    x = jnp.arange(2 * 5 * 7 * 1, dtype=jnp.float32).reshape(2, 5, 7, 1)
    y = adaptive_avg_pool(x, (3, 3))
    # torch bins for 5 -> 3: [0,2), [1,4), [3,5); for 7 -> 3: [0,3), [2,5), [4,7)
    rows, cols = [(0, 2), (1, 4), (3, 5)], [(0, 3), (2, 5), (4, 7)]
    want = np.array([[[x[n, r0:r1, c0:c1, 0].mean() for c0, c1 in cols] for r0, r1 in rows] for n in range(2)])
    np.testing.assert_allclose(y[..., 0], want, rtol=1e-6)
    same = jnp.ones((1, 6, 6, 4))
    np.testing.assert_allclose(adaptive_avg_pool(same, (6, 6)), same)


def test_resnet20_train_mode_updates_batchnorm_eval_mode_does_not(resnet20):
    fm = resnet20
    assert fm.stateful
    x = jnp.asarray(np.random.default_rng(1).normal(size=(2, 32, 32, 3)), jnp.float32)

    @jax.jit
    def train_then_eval(params, model_state, x):
        logits, new_state = fm.apply(params, model_state, x, train=True)
        return logits, new_state, fm.apply(params, new_state, x, train=False)

    logits, new_state, eval_logits = train_then_eval(fm.params, fm.model_state, x)
    assert logits.shape == (2, 10) and bool(jnp.all(jnp.isfinite(logits)))
    moved = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), fm.model_state, new_state)
    assert all(jax.tree.leaves(moved))
    assert eval_logits.shape == (2, 10)
    # eval mode normalises with the running statistics, not the batch's
    assert not np.allclose(eval_logits, logits)


def test_transformer_is_causal_and_lm_loss_starts_near_log_vocab():
    vocab, seq = 40, 12
    fm = real_model("transformer_lm", (seq,), vocab)
    assert not fm.stateful
    tokens = np.random.default_rng(2).integers(0, vocab, size=(2, seq)).astype(np.int32)
    changed = tokens.copy()
    changed[:, 8] = (changed[:, 8] + 1) % vocab

    @jax.jit
    def run(params, tokens, changed):
        a = fm.apply(params, fm.model_state, tokens, train=False)
        b = fm.apply(params, fm.model_state, changed, train=False)
        loss, grads = jax.value_and_grad(lm_loss(fm))(params, {"tokens": tokens})
        # shorter sequences use the first positions; explicit targets score every position
        short = lm_loss(fm, target_key="targets")(params, {"tokens": tokens[:, :5], "targets": tokens[:, 1:6]})
        return a, b, loss, grads, short

    a, b, loss, grads, short = run(fm.params, tokens, changed)
    np.testing.assert_allclose(a[:, :8], b[:, :8], atol=1e-5)
    assert not np.allclose(a[:, 8:], b[:, 8:])
    assert abs(float(loss) - math.log(vocab)) < 0.3
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(grads))
    assert np.isfinite(float(short))


def test_tied_head_reuses_the_embedding():
    from jaxsel.models import TransformerLM

    untied = nnx.eval_shape(lambda: TransformerLM(100, 8, rngs=nnx.Rngs(0)))
    tied = nnx.eval_shape(lambda: TransformerLM(100, 8, tie_embeddings=True, rngs=nnx.Rngs(0)))
    assert abstract_params(untied) - abstract_params(tied) == 256 * 100 + 100
    out = jax.eval_shape(lambda m, x: m(x), tied, jax.ShapeDtypeStruct((2, 8), jnp.int32))
    assert out.shape == (2, 8, 100)


def test_resnet20_batchnorm_statistics_stay_per_replica(mesh, resnet20):
    fm = resnet20
    opt, strat = optax.sgd(0.1), jaxsel.SelSync(window=2)
    state = jaxsel.init_state(fm.params, opt, strat, mesh, model_state=fm.model_state, replicas=8)
    step = jaxsel.make_train_step(fm.classification_loss(), opt, strat, mesh, stateful=fm.stateful)
    rng = np.random.default_rng(0)
    for _ in range(2):
        batch = {
            "image": jnp.asarray(rng.normal(size=(16, 32, 32, 3)), jnp.float32),
            "label": jnp.asarray(rng.integers(0, 10, size=16), jnp.int32),
        }
        state, metrics = step(state, batch)
    assert np.isfinite(float(metrics["loss"]))
    assert int(state.step) == 2
    for stats in jax.tree.leaves(state.model_state):
        stats = np.asarray(stats)
        assert stats.shape[0] == 8
        # every replica normalised its own data and BatchNorm state is not synced by default
        # (with window=2 both steps are SelSync warm-up syncs, which average parameters only)
        flat = stats.reshape(8, -1)
        assert all(not np.array_equal(flat[i], flat[j]) for i in range(8) for j in range(i))


def test_registry_names():
    for name in ["resnet18", "resnet34", "resnet50", "resnet101", "resnet20", "resnet32",
                 "resnet56", "vgg11", "vgg11_nobn", "alexnet", "transformer_lm"]:
        assert name in MODEL_REGISTRY


def test_vgg11_without_batchnorm_keeps_no_state_and_starts_as_torchvision():
    """No model state; convolution kernels He-normal over their fan-out (std sqrt(2 / (9 *
    out channels))), linear kernels N(0, 0.01), biases zero."""
    fm = FunctionalModel.from_module(build_model("vgg11_nobn", (32, 32, 3), 100, seed=0))
    assert not fm.stateful and not jax.tree.leaves(fm.model_state)
    kernels = [x for x in jax.tree.leaves(fm.params) if np.ndim(x) == 4]
    assert len(kernels) == 8
    for k in kernels:
        assert np.std(np.asarray(k)) == pytest.approx(np.sqrt(2 / (9 * k.shape[-1])), rel=0.1)
    heads = [x for x in jax.tree.leaves(fm.params) if np.ndim(x) == 2]
    assert [np.std(np.asarray(h)) for h in heads] == pytest.approx([0.01], rel=0.1)
    assert all(not np.asarray(b).any() for b in jax.tree.leaves(fm.params) if np.ndim(b) == 1)
