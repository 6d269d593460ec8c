"""`jaxsel compare` on a packed layout, and its flags' checks (the grid end to end: test_fair_compare.py)."""
import json

from jaxsel.cli import main


def test_compare_packed_says_so(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["compare", "--strategies", "selsync", "--devices", "2", "--steps", "6", "--eval-every", "6",
                 "--seeds", "1", "--no-match-budget", "--out", str(out), "--no-progress"]) == 0
    layout = "8 replicas on 2 x CPU (cpu), 4 per device"
    ran = f"{layout}, packed by unroll (static default on CPU, not measured)"   # the runs' records say how
    assert f"layout: {layout}" in capsys.readouterr().out
    assert json.loads((out / "results.json").read_text())[0]["layout"] == ran
    assert json.loads((out / "selsync" / "seed0" / "config.json").read_text())["layout"] == ran


def test_compare_options_go_to_the_strategies_that_take_them(tmp_path, capsys):
    from jaxsel.strategies.build import options_for

    shared = {"delta": 0.05, "window": 2, "period": 5, "aggregator": "median"}
    assert options_for("selsync", shared) == {"delta": 0.05, "window": 2, "aggregator": "median"}
    assert options_for("localsgd", shared) == {"period": 5, "aggregator": "median"}
    assert options_for("diloco", shared) == {"period": 5, "aggregator": "median"}   # period sets H
    assert options_for("bsp", shared) == {"aggregator": "median"}
    assert main(["compare", "--strategies", "bsp", "--opt", "period=5", "--out", str(tmp_path / "x")]) == 2
    assert "no strategy of bsp has option 'period'" in capsys.readouterr().err


def test_compare_two_level_flags(tmp_path, capsys):
    from jaxsel import TrainConfig
    from jaxsel.analysis.compare import format_table, network_label

    for argv, text in ((["--project", "gpus_per_host=3"], "3 must divide replicas 8"),
                       (["--project", "intra_network=ib"], "unknown network preset 'ib'")):
        assert main(["compare", *argv, "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and text in err[0] and err[0].startswith("jaxsel compare: error: ")
    two = TrainConfig(project_gpus_per_host=4, project_intra_network="pcie")
    assert network_label(two) == "2 hosts x 4 (pcie inside, 10gbe between)"
    assert network_label(TrainConfig(project_network="1gbe")) == "1gbe"   # one network: as given
    row = {"strategy": "bsp", "final_test_accuracy": 0.5, "sync_fraction": 1.0, "bytes_allreduced": 1,
           "wall_time_s": 1.0, "target": "99%", "project_network": network_label(two)}
    assert "projected wall-clock on 2 hosts x 4 (pcie inside, 10gbe between)" in format_table([row])


def test_compare_rejects_unknown_strategy_and_bad_target(tmp_path, capsys):
    assert main(["compare", "--strategies", "bsp,nope", "--out", str(tmp_path)]) == 2
    assert "unknown strategy 'nope'" in capsys.readouterr().err
    assert main(["compare", "--target", "150%", "--out", str(tmp_path)]) == 2
    assert "--target" in capsys.readouterr().err
