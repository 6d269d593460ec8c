"""`--clip-at gradients` (issue 42, item 3): each replica's gradients clipped in the backward
pass, so the method's statistic (SelSync's s_t, the `grad_norm` metric), its gradient
syncs and its update all see the clipped gradients, as in SelSync's authors' Transformer
(`clip_grad_norm_` right after `backward()`, then the norms). Checked against the softmax
regression's gradients in float64 NumPy on 8 devices and 8 packed on 2."""
import dataclasses
import json

import jax
import numpy as np
import optax
import pytest

import jaxsel
from helpers import R, run, softmax_batches, softmax_grad_numpy, softmax_loss, softmax_params

from jaxsel import TrainConfig, train
from jaxsel.training.config import ConfigError, check_config
from jaxsel.training.grad_clip import with_clipped_gradients

CLIP = 0.05   # below every replica's gradient norm on these batches: every replica is clipped
B = 4


def clipped_numpy(params, batch, r: int, c: float) -> list:
    """Replica r's gradient (jax.tree.leaves order: b, w) clipped to global norm c, float64."""
    x, y = batch["x"][r * B:(r + 1) * B], batch["y"][r * B:(r + 1) * B]
    g = softmax_grad_numpy(jax.tree.leaves(params), x, y)
    norm = np.sqrt(sum(np.sum(t ** 2) for t in g))
    return [t * min(1.0, c / norm) for t in g], norm


@pytest.mark.parametrize("devices", [8, 2])
def test_the_statistic_and_the_synced_gradients_are_the_clipped_ones(devices):
    """BSP (gradient averaging): the grad_norm metric is s_t = sum of the clipped tensors'
    norms, and the update is the mean of the clipped gradients (not the clip of their mean,
    what an optimizer's clip would apply)."""
    mesh = jaxsel.data_mesh(replicas=R, devices=devices)
    params, batch = softmax_params(), softmax_batches(1, seed=4)[0]
    loss = with_clipped_gradients(softmax_loss, CLIP)
    state, [(_, metrics)] = run(jaxsel.BSP(), mesh, [batch], loss=loss, params=params, opt=optax.sgd(1.0),
                                grad_norm_metric=True)
    clipped = [clipped_numpy(params, batch, r, CLIP) for r in range(R)]
    assert min(norm for _, norm in clipped) > CLIP
    np.testing.assert_allclose(metrics["grad_norm"], [sum(np.linalg.norm(t) for t in g) for g, _ in clipped],
                               rtol=1e-5)
    mean = [np.mean([g[i] for g, _ in clipped], axis=0) for i in range(2)]
    new = [np.asarray(p)[0] for p in jax.tree.leaves(state.params)]
    for got, p, m in zip(new, jax.tree.leaves(params), mean):
        np.testing.assert_allclose(got, np.asarray(p) - m, rtol=1e-5, atol=1e-7)
    raw = [np.mean([softmax_grad_numpy(jax.tree.leaves(params), batch["x"][r * B:(r + 1) * B],
                                       batch["y"][r * B:(r + 1) * B])[i] for r in range(R)], axis=0) for i in range(2)]
    clip_of_mean = [t * CLIP / np.sqrt(sum(np.sum(u ** 2) for u in raw)) for t in raw]
    assert not np.allclose(mean[1], clip_of_mean[1], rtol=1e-3)   # the two orders differ here


def test_a_method_that_averages_parameters_updates_as_the_optimizers_clip(mesh):
    """Local SGD syncs parameters, so clipping before it or in the optimizer applies the same
    update (to float32 rounding: XLA fuses the clip into the backward pass). Only the
    statistic (grad_norm) differs."""
    batches = softmax_batches(4, seed=5)
    before, h1 = run(jaxsel.LocalSGD(period=2), mesh, batches, loss=with_clipped_gradients(softmax_loss, CLIP),
                     opt=optax.sgd(0.1, momentum=0.9), grad_norm_metric=True)
    inside, h2 = run(jaxsel.LocalSGD(period=2), mesh, batches,
                     opt=optax.chain(optax.clip_by_global_norm(CLIP), optax.sgd(0.1, momentum=0.9)),
                     grad_norm_metric=True)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8), before.params, inside.params)
    assert (np.asarray(h1[0][1]["grad_norm"]) < np.asarray(h2[0][1]["grad_norm"])).all()


def test_the_value_is_the_loss_and_bad_norms_are_one_line():
    params, batch = softmax_params(), softmax_batches(1)[0]
    assert float(with_clipped_gradients(softmax_loss, 1.0)(params, batch)) == float(softmax_loss(params, batch))
    assert with_clipped_gradients(softmax_loss, None) is softmax_loss
    for bad in (0, -1.0, float("nan"), True):
        with pytest.raises(ValueError, match="clip_norm must be a finite number > 0"):
            with_clipped_gradients(softmax_loss, bad)


def test_clip_at_is_checked():
    with pytest.raises(ConfigError, match=r"clip_at \(--clip-at\) gradients clips to clip_norm \(--clip-norm\), "
                                          r"which is unset"):
        check_config(TrainConfig(clip_at="gradients"))
    with pytest.raises(ConfigError, match="clip_at must be one of update, gradients, got 'loss'"):
        check_config(TrainConfig(clip_at="loss", clip_norm=1.0))
    check_config(TrainConfig(clip_at="gradients", clip_norm=2.0))


def test_a_run_clipping_its_gradients_reports_the_clipped_statistic(tmp_path):
    """`train` with clip_at="gradients": every replica's s_t over the MLP's 6 tensors is at
    most sqrt(6) x the clip (6 norms whose squares add up to at most the clip's square);
    the same run clipping its updates reports the raw, larger s_t."""
    cfg = TrainConfig(strategy="selsync", steps=2, batch_size=8, log_every=2, eval_every=2, progress=False,
                      clip_norm=0.01, clip_at="gradients", out_dir=str(tmp_path / "g"))
    train(cfg)
    train(dataclasses.replace(cfg, clip_at="update", out_dir=str(tmp_path / "u")))
    rows = {k: [json.loads(line) for line in (tmp_path / k / "metrics.jsonl").read_text().splitlines()]
            for k in "gu"}
    clipped, raw = (np.array([r["grad_norm"] for r in rows[k]]) for k in "gu")
    bound = np.sqrt(6) * 0.01 * (1 + 1e-5)
    assert (clipped <= bound).all() and (raw > bound).all()


def test_a_checkpoint_written_before_clip_at_existed_resumes_and_one_that_clipped_elsewhere_does_not():
    """A checkpoint's recorded settings lack a field its jaxsel did not have: it ran as the
    default, so it resumes; a real difference is still named. (Local SGD: a SelSync record
    that old ran the smoothed statistic, old_records.py, and resumes as that.)"""
    from jaxsel.training.checkpoint import CheckpointMismatch, check_identity, run_identity

    now = run_identity(TrainConfig(strategy="localsgd", clip_norm=1.0))
    before = {**now, "config_hash": "older", "config": {k: v for k, v in now["config"].items() if k != "clip_at"}}
    check_identity(before, now, "x")
    with pytest.raises(CheckpointMismatch, match=r"clip_at 'update' -> 'gradients'"):
        check_identity(before, run_identity(TrainConfig(strategy="localsgd", clip_norm=1.0, clip_at="gradients")), "x")
