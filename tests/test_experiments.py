"""Every experiment config runs a few steps at tiny scale on embedded data, and its
paper-scale config names the real dataset, model and settings of the study."""
import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jaxsel.strategies import STRATEGIES  # noqa: E402

EXPERIMENTS = sorted(p.stem for p in (ROOT / "experiments").glob("*.py")
                     if p.stem.split("_")[0] in ("selsync", "syncswitch", "ssdsgd", "superstep"))

PAPER = {  # module: (dataset, model, replicas, per-replica batch, optimizer, lr)
    "selsync_resnet101_cifar10": ("cifar10", "resnet101", 10, 32, "sgd", 0.1),
    "selsync_vgg11_cifar100": ("cifar100", "vgg11_nobn", 10, 32, "sgd", 0.01),
    "selsync_alexnet_imagenet": ("imagenet2012", "alexnet", 10, 128, "adam", 1e-4),
    "selsync_transformer_lm1b": ("lm1b", "transformer_lm_200", 8, 20, "sgd", 2.0),
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


#: what each SelSync recipe takes from the authors' scripts (experiments' docstrings say where):
#: SelSync's options, the schedule, clipping, the partition, the optimizer's extras, FedAvg's
AUTHORS = {
    "selsync_resnet101_cifar10": (
        {"delta": 0.3, "window": 25, "alpha": 0.01, "sync": "params"}, "sample-epochs:110,150,190,250@0.1",
        (None, "update"), "seldp", (0.9, 1e-4), {"period": 250, "aggregator": "mean", "sync_model_state": False}),
    "selsync_vgg11_cifar100": (
        {"delta": 0.3, "window": 25, "alpha": 0.25, "sync": "params"}, "sample-epochs:50,75,100@0.1",
        (None, "update"), "seldp", (0.9, 5e-4), {"period": 250, "aggregator": "mean"}),
    "selsync_alexnet_imagenet": (
        {"delta": 0.3, "window": 25, "alpha": 0.01, "sync": "params"}, "constant",
        (None, "update"), "seldp", (0.0, 0.0), {"period": 250, "aggregator": "mean"}),
    "selsync_transformer_lm1b": (
        {"delta": 0.3, "window": 25, "alpha": 0.01, "sync": "params"}, "every:4000@0.8",
        (2.0, "gradients"), "disjoint", (0.0, 0.0), {"aggregator": "mean"}),
}


@pytest.mark.parametrize("name", sorted(AUTHORS))
def test_selsync_recipes_are_the_authors(name):
    from experiments._runner import config, parser

    mod = importlib.import_module(f"experiments.{name}")
    cfg = mod.EXPERIMENT.full(None)
    options, schedule, clip, partition, extras, fedavg = AUTHORS[name]
    assert (cfg.strategy_options, cfg.lr_schedule, (cfg.clip_norm, cfg.clip_at), cfg.partition,
            (cfg.momentum, cfg.weight_decay)) == (options, schedule, clip, partition, extras)
    baseline = config(mod.EXPERIMENT, parser(mod.EXPERIMENT).parse_args(["--strategy", "fedavg"]))
    assert (baseline.strategy, baseline.strategy_options) == ("fedavg", fedavg)
    assert baseline.partition == "disjoint" and baseline.lr_schedule == cfg.lr_schedule
    noniid = config(mod.EXPERIMENT, parser(mod.EXPERIMENT).parse_args(["--strategy", "fedavg", "--noniid"]))
    assert (noniid.partition, noniid.partition_options) == \
        ("label_skew", {"classes_per_replica": "floor", "injection": (0.25, 0.25)})


@pytest.mark.parametrize("name", EXPERIMENTS)
@pytest.mark.slow
def test_tiny_run(name, tmp_path, capsys):
    mod = importlib.import_module(f"experiments.{name}")
    strategy = mod.EXPERIMENT.tiny(None).strategy
    if strategy not in STRATEGIES:
        pytest.skip(f"strategy {strategy!r} is not registered yet")
    argv = ["--tiny", "--no-progress", "--data-dir", str(tmp_path.parent / "tfds"), "--out", str(tmp_path),
            "--steps", "4", "--eval-every", "4", "--log-every", "2", "--replicas", "2"]
    if name == "selsync_vgg11_cifar100":
        argv += ["--noniid"]          # the authors' non-IID mode: floor(C/N) classes, injection 0.25, 0.25
    result = mod.main(mod.EXPERIMENT, argv)
    assert result.final["steps"] == 4 and 0.0 <= result.final["final_test_accuracy"] <= 1.0
    assert (tmp_path / "final.json").exists()
    assert "final test accuracy:" in capsys.readouterr().out


@pytest.mark.slow
def test_syncswitch_search_tiny(tmp_path, capsys):
    """`--search` probes BSP first, then binary-searches; the choice is a probed fraction
    and search.json records every probe with its verdict against BSP's accuracy."""
    import json

    mod = importlib.import_module("experiments.syncswitch_resnet32_cifar10")
    argv = ["--tiny", "--search", "--no-progress", "--out", str(tmp_path), "--resolution", "0.25",
            "--tolerance", "0.02", "--steps", "16", "--eval-every", "16", "--log-every", "4", "--replicas", "2"]
    summary = mod.main(mod.EXPERIMENT, argv)
    out = capsys.readouterr().out
    fractions = [p["fraction"] for p in summary["probes"]]
    assert fractions[0] == 1.0 and summary["probes"][0]["verdict"] == "reference"
    assert len(fractions) == len(set(fractions)) == 3          # BSP + log2(1 / 0.25) probes
    assert summary["fraction"] in fractions and 0.0 <= summary["fraction"] <= 1.0
    for p in summary["probes"][1:]:
        assert p["verdict"] == ("kept" if p["test_accuracy"] >= summary["target_accuracy"] else "rejected")
        assert p["switch_step"] == round(p["fraction"] * 16)
    assert all(p["fraction"] < summary["fraction"] for p in summary["probes"] if p["verdict"] == "rejected")
    assert out.count("probe ") == 3 and "chosen BSP fraction:" in out
    assert json.loads((tmp_path / "search.json").read_text()) == json.loads(json.dumps(summary))
    assert all((tmp_path / f"bsp_fraction_{f:.4f}" / "final.json").exists() for f in fractions)


@pytest.mark.slow
def test_superstep_grid_tiny(tmp_path, capsys):
    """`--grid --out` (here 2 periods x 2 aggregators + BSP) prints the table and writes
    grid.json and grid.png; times are relative to BSP's."""
    import json

    mod = importlib.import_module("experiments.superstep_resnet50_cars196")
    argv = ["--tiny", "--grid", "--no-progress", "--out", str(tmp_path), "--periods", "10,3",
            "--aggregators", "mean,max", "--steps", "8", "--eval-every", "8", "--log-every", "4", "--replicas", "2"]
    mod.main(mod.EXPERIMENT, argv)
    out = capsys.readouterr().out
    rows = json.loads((tmp_path / "grid.json").read_text())
    assert [r["label"] for r in rows] == ["bsp (serial)", "mean every 0.333 ep", "max every 0.333 ep",
                                          "mean every 0.1 ep", "max every 0.1 ep"]
    assert rows[0]["projected_speedup"] == rows[0]["wall_speedup"] == 1.0
    for r in rows:
        assert r["projected_time_s"] > 0 and r["wall_time_s"] > 0
        assert r["projected_speedup"] == rows[0]["projected_time_s"] / r["projected_time_s"]
    table = out[out.index("run "):].splitlines()
    assert table[0].split() == ["run", "test", "acc", "test", "loss", "train", "loss", "sync", "frac",
                                "proj", "s", "proj", "x", "wall", "s", "wall", "x"]
    assert [l.split("  ")[0] for l in table[2:7]] == [r["label"] for r in rows]
    png = tmp_path / "grid.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(list(tmp_path.glob("0*/final.json"))) == 5


def test_the_runner_speaks_the_cli_grammar_and_typed_flags_alone_change_the_config(capsys):
    """Issue 44 item 2: an experiment takes `jaxsel train`'s flags; only those typed change
    its config (a flag left out keeps the experiment's value, not `jaxsel train`'s default),
    and the last release's `--set FIELD=VALUE` still works, noted."""
    from experiments._runner import config, parser

    mod = importlib.import_module("experiments.selsync_resnet101_cifar10")
    exp = mod.EXPERIMENT
    tiny = exp.tiny(None)
    argv = ["--tiny", "--steps", "7", "--strategy", "selsync:delta=0.1", "--opt", "window=3", "--project",
            "network=25gbe"]
    cfg = config(exp, parser(exp).parse_args(argv))
    assert (cfg.steps, cfg.project_network) == (7, "25gbe")
    assert cfg.strategy_options == {**tiny.strategy_options, "delta": 0.1, "window": 3}
    untouched = {"steps", "strategy_options", "project_network", "out_dir"}
    assert {k: v for k, v in vars(cfg).items() if k not in untouched} == \
        {k: v for k, v in vars(tiny).items() if k not in untouched}
    cfg = config(exp, parser(exp).parse_args(["--tiny", "--set", "steps=5"]))
    assert cfg.steps == 5 and "--set is deprecated" in capsys.readouterr().err
