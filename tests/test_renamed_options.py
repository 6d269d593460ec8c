"""Issue 44 item 6, one name per concept: the local steps between two syncs are `period` in
every strategy that has them (DiLoCo's and Streaming DiLoCo's `inner_steps`, SSD-SGD's `k`
were renamed), and what a sync averages is `sync` (SelSync's `aggregate` renamed, as
`triggered` names it). The last release's name still works for one release, from Python, the
command line (`NAME:inner_steps=8`, `--opt`, the old flag), a config file and an old run's
records: it sets `period`, with one DeprecationWarning naming it (one note on the command
line); a record that holds it resumes as the run it was."""
import dataclasses
import json
import warnings
from pathlib import Path

import pytest

import jaxsel
from jaxsel.cli import main as cli_main
from jaxsel.compat.renamed_options import RenamedOptionWarning
from jaxsel.core.options import OptionError
from jaxsel.strategies import STRATEGIES, build_strategy
from jaxsel.training.config import TrainConfig

#: strategy -> (its class, the option's old name); the new name is `period` in all
RENAMED = {"diloco": (jaxsel.DiLoCo, "inner_steps"), "streamingdiloco": (jaxsel.StreamingDiLoCo, "inner_steps"),
           "ssdsgd": (jaxsel.SSDSGD, "k")}
TINY = ["--steps", "4", "--replicas", "2", "--eval-every", "4", "--log-every", "1", "--no-progress",
        "--lr-schedule", "constant"]


def one_warning(record) -> str:
    """The one RenamedOptionWarning recorded (there is exactly one), its text."""
    renamed = [w for w in record if issubclass(w.category, RenamedOptionWarning)]
    assert len(renamed) == 1, [str(w.message) for w in renamed]
    assert issubclass(renamed[0].category, DeprecationWarning)
    return str(renamed[0].message)


@pytest.mark.parametrize("name", sorted(RENAMED))
def test_the_new_name_sets_the_period_silently_and_the_old_one_sets_it_with_one_warning(name):
    cls, old = RENAMED[name]
    assert STRATEGIES[name] is cls and cls.aliases == {old: "period"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert build_strategy(name, {"period": 7}).period == 7 == cls(period=7).period == cls(7).period
    for make in (lambda: build_strategy(name, {old: 7}), lambda: cls(**{old: 7})):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            strategy = make()
        assert strategy == cls(period=7)   # the same strategy, every option alike
        assert one_warning(record) == (f"strategy {name!r} option {old!r} is now called 'period'; the old name "
                                       f"goes in the next release: write period=7")
    with pytest.raises(OptionError, match=f"{old}=3 and period=4 both set period .*give it once, as period"):
        build_strategy(name, {old: 3, "period": 4})
    with pytest.raises(OptionError, match=f"{old}=3 and period=4 both set period"):
        cls(**{old: 3, "period": 4})


def test_what_is_not_the_same_concept_keeps_its_name():
    """Accordion's `interval` is the window its decision looks at, local SGD's `syncs` a
    count of syncs, superstep's `epochs` a period in epochs: other concepts, not renamed."""
    from jaxsel.core.options import option_names

    assert {"interval", "low", "high"} <= set(option_names(STRATEGIES["accordion"]))
    assert {"period", "syncs"} <= set(option_names(STRATEGIES["localsgd"]))
    assert "epochs" in option_names(STRATEGIES["superstep"])
    assert not any("inner_steps" in option_names(c) or "k" in option_names(c) for c in STRATEGIES.values())


def test_the_listing_names_period_and_the_old_name_as_deprecated():
    from jaxsel.cli.strategies import details

    text = details("diloco")
    assert any(line.split()[:2] == ["period", "int"] for line in text.splitlines())
    assert text.splitlines()[-1] == "deprecated (read for one more release): inner_steps, now period"
    assert details("ssdsgd").splitlines()[-1] == "deprecated (read for one more release): k, now period"
    assert "deprecated" not in details("localsgd")


def test_a_config_file_and_the_command_line_options_read_the_old_name_as_period(tmp_path, capsys):
    """A config file's `[strategy_options]`, `--opt` and the entry: the plan builds the
    run with `period` (its records say period) and warns once; the command line prints
    that warning once as a note, the old flag's note names `period`."""
    from jaxsel.cli.deprecated import notes, renamed_option_notes
    from jaxsel.cli.command import build_parser
    from jaxsel.training.config_file import load_settings
    from jaxsel.training.run import named_now

    (tmp_path / "run.toml").write_text('[strategy]\nstrategy = "diloco"\n[strategy.strategy_options]\ninner_steps = 8\n')
    cfg = TrainConfig(**load_settings(tmp_path / "run.toml"))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert named_now(cfg).strategy_options == {"period": 8}
    assert "write period=8" in one_warning(record)
    with renamed_option_notes():   # as `jaxsel train` runs: each once, as a note
        for _ in range(3):
            named_now(cfg)
            build_strategy("ssdsgd", {"k": 2})
    assert capsys.readouterr().err.splitlines() == [
        "jaxsel: note: strategy 'diloco' option 'inner_steps' is now called 'period'; the old name goes in the next "
        "release: write period=8",
        "jaxsel: note: strategy 'ssdsgd' option 'k' is now called 'period'; the old name goes in the next release: "
        "write period=2"]
    argv = ["train", "--strategy", "diloco", "--inner-steps", "8"]
    assert notes(build_parser().parse_args(argv), argv) == [
        "jaxsel: note: --inner-steps is deprecated and goes in the next release; write the option in the "
        "strategy's entry (--strategy diloco:period=8) or as --opt period=8"]


@pytest.mark.slow
def test_a_run_given_the_old_name_and_an_old_record_of_it_resume_as_they_ran(tmp_path, capsys):
    """`diloco:inner_steps=2` on the command line trains with period 2, says so once, and
    records `period`; a run directory and checkpoints recorded with `inner_steps` (an
    earlier jaxsel's) resume with no flag, no mismatch and no warning, to the same losses
    as the run that never stopped."""
    out, ck = tmp_path / "old", tmp_path / "ck"
    assert cli_main(["train", "--strategy", "diloco:inner_steps=2", *TINY, "--checkpoint-every", "2",
                     "--checkpoint-dir", str(ck), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("jaxsel: note: strategy 'diloco' option 'inner_steps' is now called 'period'") == 1
    record = json.loads((out / "config.json").read_text())
    assert record["strategy_options"] == {"period": 2}
    (out / "config.json").write_text(json.dumps({**record, "strategy_options": {"inner_steps": 2}}))
    for meta in ck.glob("*/meta/metadata"):   # the checkpoints' identity, as the earlier jaxsel wrote it
        saved = json.loads(meta.read_text())
        saved["identity"]["config"]["strategy_options"] = {"inner_steps": 2}
        saved["identity"]["config_hash"] = "written-before-the-rename"
        meta.write_text(json.dumps(saved))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)   # an old record is read silently
        assert cli_main(["train", "--out", str(out), "--resume", "--steps", "6"]) == 0
    resumed = capsys.readouterr()
    assert "note" not in resumed.err and "resumed: with the settings" in resumed.out
    assert json.loads((out / "config.json").read_text())["strategy_options"] == {"period": 2}
    whole = tmp_path / "whole"
    assert cli_main(["train", "--strategy", "diloco:period=2", *TINY[:1], "6", *TINY[2:], "--out", str(whole)]) == 0
    losses = [[json.loads(line)["loss"] for line in (d / "metrics.jsonl").read_text().splitlines()]
              for d in (out, whole)]
    assert len(losses[0]) == 6 and losses[0] == losses[1]


def test_selsync_s_sync_mode_is_sync_as_triggered_s_and_aggregate_is_read_for_one_release():
    """One word for what a sync averages: `sync` (params, grads; triggered's also model),
    SelSync's `aggregate` of the last release read as it with one warning."""
    from jaxsel.core.options import option_names

    assert "sync" in option_names(jaxsel.SelSync) and "sync" in option_names(STRATEGIES["triggered"])
    assert not any("aggregate" in option_names(c) for c in STRATEGIES.values())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert jaxsel.SelSync(sync="grads").sync == "grads" == build_strategy("selsync", {"sync": "grads"}).sync
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        strategy = build_strategy("selsync", {"aggregate": "grads", "window": 2})
    assert strategy == jaxsel.SelSync(sync="grads", window=2)
    assert one_warning(record) == ("strategy 'selsync' option 'aggregate' is now called 'sync'; the old name "
                                   "goes in the next release: write sync='grads'")
    with pytest.raises(ValueError, match=r"sync must be one of \('grads', 'params', 'model'\), got 'both'"):
        jaxsel.SelSync(sync="both")
