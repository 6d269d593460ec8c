"""Config files: `--config FILE` holds TrainConfig fields (and a command's own options), flags
typed on the command line override it whatever their value, bad files are one line; a run
directory's config.json reproduces the run bit for bit, and environment.json says what it
ran on."""
import dataclasses
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from run_hooks import trees_equal

from jaxsel.cli import main as cli_main
from jaxsel.cli.command import build_parser
from jaxsel.cli.settings_args import apply_config_file, config_from_args, explicit_dests
from jaxsel.cli.train import TRAIN_DEFAULTS
from jaxsel.training.checkpoint import Checkpointer
from jaxsel.training.config import ConfigError, TrainConfig
from jaxsel.training.config_file import load_settings
from jaxsel.training.train import build_run

RUN_TOML = """
[strategy]
strategy = "selsync"
[strategy.strategy_options]
window = 3
delta = 0.4
[optim]
steps = 30
lr = 0.1
lr_schedule = "milestones"
[eval]
progress = false
[data]
prefetch = 3
[data.partition_options]
classes_per_replica = 2
"""


def parsed(argv):
    """(args, TrainConfig) as `jaxsel` builds them, the config file applied."""
    args = build_parser().parse_args(argv)
    if args.config:
        apply_config_file(args, argv, build_parser)
    return args, config_from_args(args, **({"strategy": "bsp"} if args.command == "compare" else {}))


def test_flags_typed_win_over_the_file_whatever_their_value(tmp_path):
    (tmp_path / "run.toml").write_text(RUN_TOML.replace("[data]\n", '[data]\npartition = "label_skew"\n'))
    _, cfg = parsed(["train", "--config", str(tmp_path / "run.toml"), "--lr=0.05", "--opt", "window=5",
                     "--lr-sched", "constant"])   # 0.05 and constant are the defaults: typed, they still win
    assert (cfg.lr, cfg.lr_schedule, cfg.steps, cfg.strategy, cfg.progress, cfg.prefetch) == \
        (0.05, "constant", 30, "selsync", False, 3)
    assert cfg.strategy_options == {"window": 5, "delta": 0.4}   # tables merge key by key
    assert cfg.partition == "label_skew" and cfg.partition_options == {"classes_per_replica": 2}
    _, cfg = parsed(["train", "--config", str(tmp_path / "run.toml"), "--no-progress", "--partition-opt",
                     "classes_per_replica=1"])
    assert cfg.progress is False and cfg.partition_options == {"classes_per_replica": 1} and cfg.lr == 0.1
    _, plain = parsed(["train"])
    assert plain == TrainConfig(**TRAIN_DEFAULTS)   # without --config: TrainConfig's defaults and train's own


def test_explicit_flags_are_read_from_the_command_line_not_guessed_from_values():
    argv = ["compare", "--lr", "0.05", "--steps=600", "--project", "intra_network=nvlink", "--no-progress", "--opt",
            "window=3"]
    assert explicit_dests(build_parser(), argv) == {"lr", "steps", "project", "progress", "opt"}


def test_a_compare_file_sets_the_strategies_and_the_target(tmp_path):
    (tmp_path / "grid.toml").write_text('strategies = ["bsp", "localsgd"]\ntarget = "0.5"\n[optim]\nsteps = 40\n'
                                        '[data]\ndataset = "digits"\n')
    args, cfg = parsed(["compare", "--config", str(tmp_path / "grid.toml"), "--steps", "20"])
    assert (args.strategies, args.target, cfg.steps, cfg.dataset) == ("bsp,localsgd", "0.5", 20, "digits")
    (tmp_path / "bad.toml").write_text("strategy_list = ['bsp']\n")
    with pytest.raises(ConfigError, match=r"unknown key 'strategy_list'; valid keys: .*strategies.*target"):
        parsed(["compare", "--config", str(tmp_path / "bad.toml")])


@pytest.mark.parametrize("text, message", [
    ("lrr = 0.1\n", r"unknown key 'lrr'; valid keys: augment, batch_size, .*lr, lr_schedule, "),
    ('steps = "many"\n', r"steps must be an integer, got 'many'"),
    ("strategy_options = 3\n", r"strategy_options must be a table of KEY = VALUE, got 3"),
    ("steps = \n", r"is not valid TOML: "),
])
def test_a_bad_file_is_one_line_and_nothing_is_created(text, message, tmp_path, capsys):
    (tmp_path / "run.toml").write_text(text)
    assert cli_main(["train", "--config", str(tmp_path / "run.toml"), "--out", str(tmp_path / "out")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("jaxsel train: error: --config ")
    assert re.search(message, err[0]), err[0]
    assert not (tmp_path / "out").exists()


def test_yaml_and_json_files_hold_the_same_settings(tmp_path):
    (tmp_path / "run.yaml").write_text("optim:\n  steps: 30\n  clip_norm: null\nstrategy:\n  strategy_options:\n"
                                       "    window: 3\n")
    (tmp_path / "run.json").write_text('{"optim": {"steps": 30, "clip_norm": null}, '
                                       '"strategy": {"strategy_options": {"window": 3}}}')
    assert load_settings(tmp_path / "run.yaml") == load_settings(tmp_path / "run.json") == \
        {"steps": 30, "strategy_options": {"window": 3}, "clip_norm": None}


def final_state(cfg: TrainConfig, checkpoint_dir):
    run = build_run(dataclasses.replace(cfg, resume=True, checkpoint_dir=str(checkpoint_dir)))
    ckpt = Checkpointer(checkpoint_dir, run.mesh)
    try:
        return ckpt.restore_latest(run.state).state
    finally:
        ckpt.close()


def without_times(rows):
    return [{k: v for k, v in r.items() if k not in ("train_time_s", "projected_time_s")} for r in rows]


@pytest.mark.slow
def test_a_run_directory_config_reproduces_the_run_bit_for_bit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # default checkpoint dirs: checkpoints/<run name>
    (tmp_path / "runs").mkdir()
    assert cli_main(["train", "--strategy", "selsync:window=3:delta=0.2", "--lr", "0.08",
                     "--partition", "label_skew", "--inject", "0.2,0.5", "--steps", "12", "--log-every", "4",
                     "--eval-every", "6", "--checkpoint-every", "6", "--seed", "4", "--no-progress",
                     "--out", "runs/a"]) == 0
    assert cli_main(["train", "--config", "runs/a/config.json", "--out", "runs/b"]) == 0
    a, b = tmp_path / "runs" / "a", tmp_path / "runs" / "b"
    rows = [[json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()] for d in (a, b)]
    assert without_times(rows[0]) == without_times(rows[1]) and len(rows[0]) == 12
    evals = [json.loads((d / "evals.json").read_text()) for d in (a, b)]
    assert without_times(evals[0]) == without_times(evals[1])
    configs = [json.loads((d / "config.json").read_text()) for d in (a, b)]
    where = {"out_dir": None, "checkpoint_root": None, "run_id": None}   # each run in its own folders, itself
    assert {**configs[0], **where} == {**configs[1], **where}
    assert configs[0]["checkpoint_root"] != configs[1]["checkpoint_root"]
    settings = load_settings(a / "config.json")
    assert "out_dir" not in settings and settings["partition_options"] == {"injection": [0.2, 0.5]}
    cfg = TrainConfig(**settings)
    assert trees_equal(*(final_state(cfg, c["checkpoint_root"]) for c in configs))
    env = json.loads((b / "environment.json").read_text())
    assert env["argv"] == sys.argv and env["cwd"] == str(tmp_path)   # in-process: this process's command line
    assert {"jaxsel", "git", "python", "packages", "devices", "layout", "command", "cwd"} <= set(env)
    assert {"jax", "jaxlib", "flax", "optax", "orbax-checkpoint"} <= set(env["packages"])
    assert len(env["devices"]) == 8 and env["layout"] == json.loads((b / "config.json").read_text())["layout"]


def test_the_documented_config_example_is_a_valid_run(tmp_path):
    """docs/RUNS.md's run.toml (moved there from README) is a valid run."""
    from pathlib import Path

    from jaxsel.training.config import check_config
    from jaxsel.training.run import configured_strategy

    page = (Path(__file__).resolve().parents[1] / "docs" / "RUNS.md").read_text()
    (block,) = re.findall(r"```toml\n(.*?)```", page, re.S)
    (tmp_path / "run.toml").write_text(block)
    cfg = TrainConfig(**load_settings(tmp_path / "run.toml"))
    check_config(cfg)
    configured_strategy(cfg)
    assert cfg.strategy_options == {"delta": 0.05, "window": 25} and cfg.model == "resnet18"


# issue 35 ---------------------------------------------------------------------------------

def alias_bomb(key: str) -> str:
    """About 370 bytes of YAML under `key` that expand to 9**9 strings: 9 levels of 9
    aliases (a "billion laughs"); jaxsel before it refused aliases spent minutes on it."""
    lines = ["anchors:", '  - &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"  - &{name} [{','.join([f'*{prev}'] * 9)}]")
    return "\n".join(lines).replace("anchors:", f"{key}:", 1) + "\n"


@pytest.mark.slow
@pytest.mark.parametrize("command, key", [("train", "dataset_options"), ("compare", "strategies")])
def test_a_yaml_alias_bomb_is_refused_at_once(command, key, tmp_path):
    (tmp_path / "bomb.yaml").write_text(alias_bomb(key))
    done = subprocess.run([sys.executable, "-m", "jaxsel.cli", command, "--config", str(tmp_path / "bomb.yaml"),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(err) == 1, done.stderr[-2000:]
    assert "alias" in err[0] and "bomb.yaml" in err[0] and not (tmp_path / "out").exists(), err[0]


@pytest.mark.parametrize("command, text, dest, value", [
    ("compare", 'match_budget = "false"\n', "match_budget", False),
    ("compare", 'match_budget = "true"\n', "match_budget", True),
    ("compare", 'seeds = "2"\n', "seeds", 2),
    ("compare", "target = 0.5\n", "target", "0.5"),
    ("train", 'no_checkpoint = "false"\n', "no_checkpoint", False),
    ("train", "no_checkpoint = true\n", "no_checkpoint", True),
    ("train", 'peer_timeout = "30"\n', "peer_timeout", 30.0),
    ("train", '[data]\naugment = "on"\n', "augment", True),   # --augment's own spelling
])
def test_config_values_are_read_by_their_flags_parser(command, text, dest, value, tmp_path):
    (tmp_path / "run.toml").write_text(text)
    args, _ = parsed([command, "--config", str(tmp_path / "run.toml")])
    got = getattr(args, dest)
    assert got == value and type(got) is type(value), (dest, got)


@pytest.mark.parametrize("text, message", [
    ('distributed = "maybe"\n', r"distributed must be one of off, auto, got 'maybe'"),
    ('peer_timeout = "abc"\n', r"peer_timeout .*'abc'"),
    ('join_timeout = "abc"\n', r"join_timeout .*'abc'"),
    ('no_checkpoint = "nope"\n', r"no_checkpoint must be true/false, got 'nope'"),
    ('num_processes = 2.5\n', r"num_processes must be an integer, got 2.5"),
    ('augment = "sometimes"\n', r"augment \(--augment\) invalid choice: 'sometimes'"),
    ('eval_replicas = "twice"\n', r"eval_replicas .*'twice'"),
    ("[optim]\nprefetch = 3\n", r"\[optim\] has no setting 'prefetch'; it holds model, batch_size, steps"),   # sections
    ("[data]\nlrr = 0.1\n", r"\[data\] has no setting 'lrr'; it holds dataset, partition"),
    ("[optim]\nsteps = 0.5\n", r"steps must be an integer, got 0.5"),
])
def test_a_config_value_its_flag_would_refuse_is_one_line(text, message, tmp_path, capsys):
    (tmp_path / "run.toml").write_text(text)
    assert cli_main(["train", "--config", str(tmp_path / "run.toml"), "--out", str(tmp_path / "out")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("jaxsel train: error: --config "), err
    assert re.search(message, err[0]), err[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, raw, message", [
    ("run.toml", b"\xff\xfesteps = 2\n", "is not UTF-8 text"),
    ("run.json", b'\xff{"steps": 2}', "is not UTF-8 text"),
    ("run.yaml", b"1: 2\nfoo: 3\n", "keys must be names, got 1"),
    ("run.yaml", b"true: 2\nfoo: 3\n", "keys must be names, got True"),
    ("run.yaml", b"strategy_options:\n  1: 2\n  delta: 0.1\n", "strategy_options: keys must be names, got 1"),
    ("run.toml", b"steps = 1979-05-27\n", "steps must be text, a number, true/false, a list or a table, got a date"),
    ("run.yaml", b"strategy_options:\n  delta: !!set {a: null}\n", "strategy_options.delta must be text"),
    ("run.json", b"[" * 100000 + b"]" * 100000, "nests lists or tables too deeply"),
    ("run.yaml", b"a: " + b"[" * 100000 + b"]" * 100000, "nests lists or tables too deeply"),
    ("run.toml", b"a = " + b"[" * 100000 + b"]" * 100000, "nests lists or tables too deeply"),
    ("run.json", b'{"strategy_options": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5001, "nests lists or tables too deeply"),
])
def test_a_malformed_config_file_is_one_line(name, raw, message, tmp_path, capsys):
    (tmp_path / name).write_bytes(raw)
    assert cli_main(["train", "--config", str(tmp_path / name), "--out", str(tmp_path / "out")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and f"--config {str(tmp_path / name)!r}" in err[0] and message in err[0], err


@pytest.mark.parametrize("make, message", [
    (lambda p: p.mkdir(), "is a directory, not a file"),
    (lambda p: p.symlink_to(p), "is a symbolic link to nothing"),
    (lambda p: os.mkfifo(p), "is not a regular file"),
    (None, "is not a regular file"),   # /dev/zero
])
def test_config_that_is_not_a_regular_file_says_what_it_is(make, message, tmp_path, capsys):
    path = tmp_path / "run.toml"
    if make is None:
        path = Path("/dev/zero")
    else:
        make(path)
    assert cli_main(["train", "--config", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "no such file" not in err[0], err


FLAT_TOML = """
strategy = "selsync"
steps = 30
lr = 0.1
prefetch = 3
[strategy_options]
window = 3
"""


def test_a_flat_file_of_last_release_reads_as_its_sections_with_one_note(tmp_path):
    """Settings outside their sections are read as before, and one note names each with the
    table it belongs in (compat/flat_settings.py, until its REMOVED_IN)."""
    from jaxsel.compat.flat_settings import REMOVED_IN, FlatSettingsWarning

    (tmp_path / "flat.toml").write_text(FLAT_TOML)
    (tmp_path / "sections.toml").write_text('[strategy]\nstrategy = "selsync"\n[strategy.strategy_options]\n'
                                            'window = 3\n[optim]\nsteps = 30\nlr = 0.1\n[data]\nprefetch = 3\n')
    with pytest.warns(FlatSettingsWarning) as noted:
        flat = load_settings(tmp_path / "flat.toml")
    assert len(noted) == 1 and REMOVED_IN in str(noted[0].message)
    assert "[strategy] strategy, [optim] steps, [optim] lr, [data] prefetch, [strategy] strategy_options" in \
        str(noted[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_settings(tmp_path / "sections.toml") == flat


@pytest.mark.slow
def test_a_file_in_sections_runs_and_a_flat_one_runs_the_same_with_one_note(tmp_path, capsys):
    (tmp_path / "sections.toml").write_text('[optim]\nsteps = 2\nbatch_size = 8\n[strategy]\nstrategy = "bsp"\n'
                                            '[eval]\nprogress = false\n')
    (tmp_path / "flat.toml").write_text('steps = 2\nbatch_size = 8\nstrategy = "bsp"\nprogress = false\n')
    records = []
    for name in ("sections", "flat"):
        out = tmp_path / name
        assert cli_main(["train", "--config", str(tmp_path / f"{name}.toml"), "--out", str(out)]) == 0
        notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("jaxsel: note:")]
        assert len(notes) == (1 if name == "flat" else 0), notes
        final = json.loads((out / "final.json").read_text())
        config = json.loads((out / "config.json").read_text())
        records.append(({k: v for k, v in final.items() if "time" not in k and k != "projection"},
                        {k: v for k, v in config.items() if k not in ("out_dir", "run_id", "checkpoint_root")}))
    assert records[0] == records[1]
