"""Every experiment config runs a few steps at tiny scale on embedded data, and its
paper-scale config names the real dataset, model and settings of the study."""
import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jaxsel.strategies.registry import STRATEGIES  # noqa: E402

EXPERIMENTS = sorted(p.stem for p in (ROOT / "experiments").glob("*.py")
                     if p.stem.split("_")[0] in ("selsync", "syncswitch", "ssdsgd", "superstep"))

PAPER = {  # module: (dataset, model, replicas, per-replica batch, optimizer, lr)
    "selsync_resnet101_cifar10": ("cifar10", "resnet101", 10, 32, "sgd", 0.1),
    "selsync_vgg11_cifar100": ("cifar100", "vgg11", 10, 32, "sgd", 0.01),
    "selsync_alexnet_imagenet": ("imagenet2012", "alexnet", 10, 32, "adam", 1e-4),
    "selsync_transformer_lm1b": ("lm1b", "transformer_lm", 10, 32, "sgd", 2.0),
    "syncswitch_resnet32_cifar10": ("cifar10", "resnet32", 8, 128, "sgd", 0.1),
    "ssdsgd_resnet20_cifar10": ("cifar10", "resnet20", 8, 128, "sgd", 0.1),
    "superstep_resnet50_cars196": ("cars196", "resnet50", 8, 32, "sgd", 0.01),
}


def test_every_study_has_a_config():
    assert set(EXPERIMENTS) == set(PAPER)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_paper_scale_config(name):
    exp = importlib.import_module(f"experiments.{name}").EXPERIMENT
    cfg = exp.full("/data/tfds")
    dataset, model, replicas, batch, optimizer, lr = PAPER[name]
    assert (cfg.dataset, cfg.model, cfg.replicas, cfg.batch_size, cfg.optimizer, cfg.lr) == \
        (dataset, model, replicas, batch, optimizer, lr)
    assert cfg.data_dir == "/data/tfds" and cfg.steps >= 900
    cfg.validate()


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_tiny_run(name, tmp_path, capsys):
    mod = importlib.import_module(f"experiments.{name}")
    strategy = mod.EXPERIMENT.tiny(None).strategy
    if strategy not in STRATEGIES:
        pytest.skip(f"strategy {strategy!r} is not registered yet")
    argv = ["--tiny", "--no-progress", "--data-dir", str(tmp_path.parent / "tfds"), "--out", str(tmp_path),
            "--set", "steps=4", "--set", "eval_every=4", "--set", "log_every=2", "--set", "replicas=2"]
    if name == "selsync_vgg11_cifar100":
        argv += ["--noniid", "0.1,0.5"]          # the non-IID mode with data injection
    result = mod.main(mod.EXPERIMENT, argv)
    assert result.final["steps"] == 4 and 0.0 <= result.final["final_test_accuracy"] <= 1.0
    assert (tmp_path / "final.json").exists()
    assert "final test accuracy:" in capsys.readouterr().out
