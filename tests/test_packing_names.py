"""Packed replicas have one name (issue 59): the setting `packing` (`--packing`,
`TrainConfig(packing=)`, `make_train_step(packing=)`), the records' `packing_choice`, and
bench's count `--packed-replicas`. Last release's spellings still work for one release
with one note each (compat/packing_names.py); a run recorded before resumes as it ran."""
import dataclasses
import inspect
import json
import warnings

import jax
import numpy as np
import optax
import pytest

import jaxsel
from helpers import R, run, softmax_batches, softmax_loss
from jaxsel.cli import main as cli_main
from jaxsel.cli.command import build_parser
from jaxsel.cli.deprecated import notes
from jaxsel.compat.packing_names import PackingNameWarning, old_flag_note, read_old_name
from jaxsel.training.config import ConfigError, TrainConfig
from jaxsel.training.config_file import load_settings
from jaxsel.training.old_records import renamed_keys
from jaxsel.training.sections import ReplicaSettings

CHOICE = {"loop": "map", "how": "forced", "ms_per_step": {}, "failed": {}, "key": None}


def test_make_train_step_takes_packing_and_reads_its_old_name_with_one_warning():
    """`local_replicas=` builds the same step as `packing=`, with one DeprecationWarning
    naming the new keyword; both at once is a TypeError naming both."""
    mesh, batches = jaxsel.data_mesh(R, devices=2), softmax_batches(2)
    ref, _ = run(jaxsel.BSP(), mesh, batches, packing="map")
    with pytest.warns(DeprecationWarning) as caught:
        got, _ = run(jaxsel.BSP(), mesh, batches, local_replicas="map")
    assert [str(w.message) for w in caught] == [
        "local_replicas is now called packing (how a device loops over its packed replicas); the old name is "
        "read until the next release: write packing='map'"]
    jax.tree.map(np.testing.assert_array_equal, jax.device_get(got.params), jax.device_get(ref.params))
    with pytest.raises(TypeError, match="local_replicas='map' and packing='vmap' both set packing"):
        jaxsel.make_train_step(softmax_loss, optax.sgd(0.1), jaxsel.BSP(), mesh, packing="vmap",
                               local_replicas="map")
    assert "packing" in inspect.signature(jaxsel.make_train_step).parameters


@pytest.mark.parametrize("cls", [TrainConfig, ReplicaSettings])
def test_settings_take_packing_and_read_local_replicas_with_one_note(cls):
    with pytest.warns(PackingNameWarning) as caught:
        assert cls(local_replicas="vmap").packing == "vmap"
    assert len(caught) == 1 and "write packing='vmap'" in str(caught[0].message)
    assert "until jaxsel 0.2.0" in str(caught[0].message)
    shown = inspect.signature(cls).parameters
    assert "packing" in shown and "local_replicas" not in shown   # the dataclass's own signature
    with pytest.raises(TypeError, match="local_replicas='map' and packing='vmap' both set packing"):
        cls(local_replicas="map", packing="vmap")
    assert not hasattr(cls(), "local_replicas")


def test_the_flag_is_packing_and_last_releases_flag_is_read_with_one_note(capsys):
    parser = build_parser()
    assert parser.parse_args(["train", "--packing", "map"]).packing == "map"
    argv = ["train", "--local-replicas", "unroll"]
    args = parser.parse_args(argv)
    assert args.packing == "unroll"
    assert notes(args, argv) == ["jaxsel: note: --local-replicas is deprecated and goes in the next release; "
                                 "write --packing=unroll"]
    assert notes(parser.parse_args(["train", "--packing", "unroll"]), ["train", "--packing", "unroll"]) == []
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--local-replicas", "scan"])   # the new flag's choices
    err = capsys.readouterr().err
    assert "argument --local-replicas: invalid choice: 'scan'" in err and "unroll" in err
    helped = parser._subparsers._group_actions[0].choices["train"].format_help()
    assert "--packing" in helped and "--local-replicas" not in helped


def test_bench_counts_its_packed_replicas_with_packed_replicas():
    parser = build_parser()
    assert parser.parse_args(["bench", "--packed-replicas", "3"]).packed_replicas == 3
    assert parser.parse_args(["bench", "--packing", "vmap"]).packing == "vmap"
    assert old_flag_note("--packed-row", 3) == ("--packed-row is deprecated and read until jaxsel 0.2.0; "
                                                "write --packed-replicas 3")


@pytest.mark.parametrize("text", ['strategy = "bsp"\n[replicas]\nlocal_replicas = "map"\n',
                                  '[strategy]\nstrategy = "bsp"\n[replicas]\nreplicas = 4\nlocal_replicas = "map"\n'])
def test_a_config_files_old_key_is_read_with_one_note(tmp_path, text):
    path = tmp_path / "run.toml"
    path.write_text(text)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        settings = load_settings(path)
    assert settings["packing"] == "map" and "local_replicas" not in settings
    renamed = [w for w in caught if issubclass(w.category, PackingNameWarning)]
    assert len(renamed) == 1 and "[replicas]: local_replicas is now called packing" in str(renamed[0].message)
    path.write_text('[replicas]\nlocal_replicas = "map"\npacking = "vmap"\n')
    with pytest.raises(ConfigError, match=r"\[replicas\]: local_replicas='map' and packing='vmap' both set packing"):
        load_settings(path)
    assert read_old_name({"packing": "unroll"}, "x") == {"packing": "unroll"}


def test_a_record_of_before_is_read_by_its_keys_silently(tmp_path):
    """A config.json of before: the setting was `local_replicas`, the measured choice
    `packing` (a table, or None for one replica per device); today's: `packing` and
    `packing_choice`. Read by key and by the value's type, never noted (records are read
    for ever)."""
    assert renamed_keys({"local_replicas": "map", "packing": CHOICE}) == {"packing": "map", "packing_choice": CHOICE}
    assert renamed_keys({"local_replicas": "auto", "packing": None}) == {"packing": "auto", "packing_choice": None}
    assert renamed_keys({"packing": CHOICE}) == {"packing_choice": CHOICE}   # an environment.json of before
    today = {"packing": "map", "packing_choice": CHOICE}
    assert renamed_keys(today) == today
    settings = {k: v for k, v in dataclasses.asdict(TrainConfig()).items() if k != "packing"}
    old = {**settings, "local_replicas": "map", "layout": "8 replicas", "packing": CHOICE}
    (tmp_path / "config.json").write_text(json.dumps(old))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        settings = load_settings(tmp_path / "config.json")
    assert settings["packing"] == "map" and "packing_choice" not in settings and "local_replicas" not in settings


@pytest.mark.slow
def test_a_run_recorded_before_the_rename_resumes(tmp_path, capsys):
    """A run whose config.json names packing as last release did (`local_replicas`, and its
    measured choice as `packing`) resumes to its new length, silently; a resume that asks
    for another packing is still refused by name."""
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    run = ["train", "--strategy", "bsp", "--batch-size", "8", "--no-progress", "--replicas", "4", "--devices", "2"]
    assert cli_main([*run, "--steps", "2", "--out", out, "--checkpoint-dir", ck, "--packing", "map"]) == 0
    record = tmp_path / "out" / "config.json"
    new = json.loads(record.read_text())
    assert new["packing"] == "map" and new["packing_choice"]["loop"] == "map"
    old = {("local_replicas" if k == "packing" else "packing" if k == "packing_choice" else k): v
           for k, v in new.items()}
    record.write_text(json.dumps(old))
    capsys.readouterr()
    assert cli_main(["train", "--out", out, "--resume", "--steps", "4", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "note:" not in err and "local_replicas" not in err, err
    assert json.loads(record.read_text())["packing_choice"]["loop"] == "map"
    assert cli_main(["train", "--out", out, "--resume", "--steps", "6", "--no-progress", "--packing", "vmap"]) == 2
    assert "packing (--packing) 'map' -> 'vmap'" in capsys.readouterr().err
