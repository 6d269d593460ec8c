"""Strategy options are declared, checked and never dropped; user-defined triggers and
aggregators are reachable from `jaxsel train`."""
import json
import re
import textwrap

import pytest

from jaxsel.cli import main as cli_main
from jaxsel.core.options import OptionError, option_names
from jaxsel.strategies import STRATEGIES, build_strategy

CONTEXT = dict(replicas=8, total_steps=20, steps_per_epoch=2, base_lr=0.1)


def test_a_misspelt_option_is_an_error_naming_the_valid_ones():
    with pytest.raises(OptionError, match=r"strategy 'localsgd' has no option 'perod'; its options: period"):
        build_strategy("localsgd", {"perod": 5})


def test_option_values_are_coerced_or_refused_by_name():
    assert build_strategy("localsgd", {"period": "5"}).period == 5
    with pytest.raises(OptionError, match=r"option 'delta' must be a finite number, got 'abc'"):
        build_strategy("selsync", {"delta": "abc"})
    with pytest.raises(OptionError, match=r"option 'period' must be an integer, got 2.5"):
        build_strategy("localsgd", {"period": 2.5})


def test_diloco_period_sets_h():
    assert build_strategy("diloco", {"period": 50}).period == 50


@pytest.fixture
def run_args(tmp_path):
    return ["--steps", "4", "--replicas", "8", "--eval-every", "4", "--log-every", "2", "--no-progress",
            "--out", str(tmp_path / "run"), "--no-checkpoint"]


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_unknown_option_exits_2_naming_the_valid_options(name, run_args, capsys):
    code = cli_main(["train", "--strategy", name, "--opt", "bogus=1", *run_args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    valid = [o for o in option_names(STRATEGIES[name]) if o != "trigger_options"]
    assert "'bogus'" in err and all(o in err for o in valid), err


@pytest.mark.parametrize("flags, strategy, missing", [
    (["--opt", "period=5"], "bsp", "'period'"),
    ([], "bsp:delta=0.1", "'delta'"),
    (["--opt", "window=5"], "localsgd", "'window'"),
    ([], "diloco:delta=0.1", "'delta'"),
])
def test_inapplicable_option_exits_2(flags, strategy, missing, run_args, capsys):
    assert cli_main(["train", "--strategy", strategy, *flags, *run_args]) == 2
    err = capsys.readouterr().err.strip()
    assert missing in err and "its options" in err and len(err.splitlines()) == 1


def test_compare_refuses_an_option_no_chosen_strategy_takes(tmp_path, capsys):
    code = cli_main(["compare", "--strategies", "bsp,selsync", "--opt", "period=5", "--out", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert code == 2 and "no strategy of bsp, selsync has option 'period'" in err


def test_help_names_the_defaults_and_strategies_lists_each_ones(capsys):
    with pytest.raises(SystemExit):
        cli_main(["train", "--help"])
    assert "(default: 0.05)" in capsys.readouterr().out
    assert cli_main(["strategies"]) == 0
    out = capsys.readouterr().out
    assert all(re.search(rf"\n  {name} ", out) for name in STRATEGIES)
    assert cli_main(["strategies", "selsync"]) == 0
    assert re.search(r"\n  delta +float +0\.3 ", capsys.readouterr().out)


PLUGIN = textwrap.dedent('''
    """A loss-based trigger and a geometric-mean-of-magnitudes aggregator, as a user writes them."""
    import dataclasses

    import jax

    import jaxsel
    from jaxsel.core.aggregate import Aggregator
    from jaxsel.core.collectives import replica_max, replica_min
    from jaxsel.core.triggers import Trigger, any_replica


    @dataclasses.dataclass(frozen=True)
    class LossAbove(Trigger):
        """Sync when any replica's loss exceeds `threshold`."""

        threshold: float = 1.0

        def __call__(self, tstate, stats, axis):
            vote = stats.loss > self.threshold
            return tstate, any_replica(vote, axis), {"loss_vote": vote}


    @dataclasses.dataclass(frozen=True)
    class MidRange(Aggregator):
        """(min + max) / 2 over replicas."""

        def __call__(self, tree, axis, ctx=None):   # replica_*: over packed replicas and devices
            return jax.tree.map(lambda lo, hi: (lo + hi) / 2, replica_min(tree, axis), replica_max(tree, axis))


    jaxsel.register_trigger("loss_above", LossAbove)
    jaxsel.register_aggregator("midrange", MidRange)
''')


def test_user_trigger_and_aggregator_run_from_jaxsel_train(tmp_path, capsys):
    plugin = tmp_path / "my_sync.py"
    plugin.write_text(PLUGIN)
    out = tmp_path / "run"
    args = ["train", "--plugin", str(plugin), "--strategy", "triggered", "--opt", "trigger=loss_above",
            "--opt", "trigger.threshold=2.0", "--opt", "aggregator=midrange", "--steps", "6", "--replicas", "8",
            "--eval-every", "6", "--log-every", "2", "--no-progress", "--no-checkpoint", "--out", str(out)]
    assert cli_main(args) == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for row in rows:   # synced exactly when some replica's loss was above the threshold
        assert row["synced"] == any(v > 2.0 for v in row["replica_loss"])
        assert row["loss_vote"] == [v > 2.0 for v in row["replica_loss"]]
    assert any(r["synced"] for r in rows)   # digits' initial loss is ~2.3
    assert "midrange" in (out / "final.json").read_text()


def test_a_missing_plugin_is_one_line(capsys):
    assert cli_main(["train", "--plugin", "no_such_module_xyz"]) == 2
    assert "could not be imported" in capsys.readouterr().err
