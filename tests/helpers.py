"""What the strategy tests share: a tiny softmax regression, its batch stream, and the loop
that trains a strategy on it. Shapes: R = 8 replicas (every test's mesh), a per-replica
batch of `b` rows of `d` features, `c` classes; each test file picks its own sizes."""
import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxsel

R = 8


def softmax_loss(params, batch):
    logits = batch["x"] @ params["w"] + params["b"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()


def softmax_params(d: int = 5, c: int = 3, seed: int = 0) -> dict:
    return {"w": 0.1 * jax.random.normal(jax.random.key(seed), (d, c)), "b": jnp.zeros(c)}


def softmax_batches(steps: int, seed: int = 0, b: int = 4, d: int = 5, c: int = 3) -> list[dict]:
    """`steps` global batches of R x b rows, drawn in order from one seeded generator."""
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(size=(R * b, d)).astype(np.float32), "y": rng.integers(0, c, R * b)}
            for _ in range(steps)]


def softmax_grad_numpy(params, x, y) -> list:
    """The softmax regression's mean cross-entropy gradient in float64 NumPy, for
    references: `params` and the result as [b, w] (jax.tree.leaves order)."""
    b, w = (np.asarray(p, np.float64) for p in params)
    x = np.asarray(x, np.float64)
    logits = x @ w + b
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    p /= len(y)
    return [p.sum(0), x.T @ p]


def run(strategy, mesh, batches, loss=softmax_loss, params=None, opt=None, before_step=None, model_state=None,
        replicas: int = R, **step_options):
    """Train `replicas` replicas of `strategy` on `mesh`'s devices on `batches` (SGD 0.1 with
    momentum 0.9 unless `opt`; the softmax
    regression's parameters unless `params`): (final state, [(state, metrics) on the host
    after each step]). `before_step(t, state) -> state` edits the state before step t;
    `step_options` go to `make_train_step` (stateful=True with `model_state`, ...)."""
    opt = opt or optax.sgd(0.1, momentum=0.9)
    params = params if params is not None else softmax_params()
    state = jaxsel.init_state(params, opt, strategy, mesh, model_state=model_state, replicas=replicas)
    step = jaxsel.make_train_step(loss, opt, strategy, mesh, **step_options)
    history = []
    for t, batch in enumerate(batches):
        if before_step is not None:
            state = before_step(t, state)
        state, metrics = step(state, batch)
        history.append((jax.device_get(state), jax.device_get(metrics)))
    return state, history


def identical(tree) -> bool:
    """Every leaf equal across the replica axis."""
    return all(np.array_equal(x[0], x[r]) for x in jax.tree.leaves(tree) for r in range(len(x)))
