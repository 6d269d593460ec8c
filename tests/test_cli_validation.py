"""Every bad input: one error line naming the value and what is allowed, exit code 2, no
traceback, and nothing written (the checks run before any data is read)."""
import pytest

from jaxsel.cli import main as cli_main

BAD = [
    (["--strategy", "selsync:delta=-0.5"], ["delta", "-0.5", ">= 0"]),
    (["--strategy", "selsync:window=0"], ["window", "0", ">= 1"]),
    (["--strategy", "localsgd", "--opt", "period=0"], ["period", "0", ">= 1"]),
    (["--global-batch-size", "100", "--replicas", "8"], ["--global-batch-size 100", "multiple of --replicas 8"]),
    (["--batch-size", "0"], ["batch_size", "0", ">= 1"]),
    (["--replicas", "0"], ["replicas", "0", ">= 1"]),
    (["--steps", "0"], ["steps", "0", ">= 1"]),
    (["--lr", "-1"], ["lr", "-1", "> 0"]),
    (["--log-every", "0"], ["log_every", ">= 1"]),
    (["--strategy", "nope"], ["'nope'", "bsp", "selsync"]),
    (["--model", "nope"], ["unknown model 'nope'", "mlp"]),
    (["--dataset", "nope"], ["unknown dataset 'nope'", "digits"]),
    (["--opt", "aggregator=nope"], ["unknown aggregator 'nope'", "median"]),
    (["--partition", "nope"], ["unknown partition 'nope'", "seldp"]),
    (["--optimizer", "nope"], ["unknown optimizer 'nope'", "adam"]),
    (["--weight-decay", "-1"], ["weight_decay", ">= 0"]),
    (["--dataset", "mnist", "--data-dir", "{tmp}/missing"], ["data_dir", "missing", "does not exist",
                                                            "'mnist' is not prepared", "tfds build mnist"]),
    (["--out", "{tmp}/file/out"], ["--out", "file/out", "cannot be created", "not an existing directory"]),
    (["--checkpoint-dir", "{tmp}/file/ck"], ["--checkpoint-dir", "file/ck", "cannot be created"]),
    (["--checkpoint-every", "0"], ["checkpoint_every", ">= 1"]),
    (["--keep", "0"], ["keep", ">= 1"]),
    (["--resume", "--no-checkpoint"], ["--resume and --no-checkpoint"]),
    (["--coordinator", "localhost", "--num-processes", "2", "--process-id", "0"], ["HOST:PORT", "'localhost'"]),
    (["--coordinator", "127.0.0.1:1234"], ["--num-processes", "--process-id"]),
    (["--coordinator", "127.0.0.1:1234", "--num-processes", "2", "--process-id", "2"], ["--process-id", "0..1", "2"]),
    (["--opt", "window"], ["--opt expects key=value", "'window'"]),
    (["--replicas", "12", "--devices", "8"], ["replicas=12", "8 CPU device(s)", "1..8 or a multiple of 8"]),
    (["--devices", "9"], ["devices=9", "1..8"]),
    (["--devices", "0"], ["devices", ">= 1", "got 0"]),
    (["--platform", "tpu"], ["platform 'tpu'", "not available"]),
    (["--project", "network=token-ring"], ["--project network", "unknown network preset 'token-ring'", "10gbe"]),
    (["--project", "intra_network=infiniband"], ["--project intra_network", "unknown network preset 'infiniband'",
                                                 "pcie"]),
    (["--project", "gpus_per_host=0"], ["project_gpus_per_host", ">= 1", "got 0"]),
    (["--project", "gpus_per_host=3"], ["--project gpus_per_host", "3 must divide replicas 8"]),
    (["--project", "gpus=3"], ["--project has no key 'gpus'", "gpus_per_host"]),
    (["--project", "compute_s=fast"], ["--project compute_s", "'fast'"]),
    # issue 23: each of these crashed after data loading, or was silently accepted
    (["--seed", "9223372036854775808"], ["seed", "9223372036854775808", "<= 4294967295"]),
    (["--strategy", "selsync:aggregator=trimmed:4"], ["'trimmed:4'", "8 replicas", "K must be in 0..3"]),
    (["--opt", "aggregator=trimmed:-1"], ["integer K >= 0", "-1"]),
    (["--opt", "aggregator=trimmed:"], ["integer K", "'trimmed:'"]),
    (["--project", "stragglers=fixed:factor=2,replicas=99"], ["--project stragglers", "[99]", "0..7"]),
    (["--project", "stragglers=lognormal:sigma=1e308"], ["--project stragglers", "sigma", "1e308", "[0, 10]"]),
    (["--partition", "label_skew", "--inject", "0.1,nan"], ["injection beta", "finite", "nan"]),
    (["--partition", "label_skew", "--inject", "2,0.5"], ["injection alpha", "(0, 1]", "2.0"]),
    (["--partition", "seldp", "--inject", "0.1,0.5"], ["label-aware partition", "'seldp'"]),
    (["--partition", "dirichlet", "--partition-opt", "alpha=0"], ["dirichlet alpha", "> 0", "got 0"]),
    (["--partition", "dirichlet", "--partition-opt", "alpha=-1"], ["dirichlet alpha", "> 0", "got -1"]),
    (["--partition", "dirichlet", "--partition-opt", "bogus=1"], ["'bogus'", "its options: alpha"]),
    (["--partition", "label_skew", "--partition-opt", "classes_per_replica=11"], ["classes_per_replica", "1..10",
                                                                                 "11"]),
    (["--partition", "label_skew", "--partition-opt", "classes_per_replica=0"], ["classes_per_replica", "got 0"]),
    (["--dataset-opt", "bogus=1"], ["dataset option(s) 'bogus'", "num_samples"]),
    (["--dataset", "digits", "--dataset-opt", "num_samples=100"], ["dataset 'digits' takes no option 'num_samples'"]),
    (["--dataset", "mnist1d", "--dataset-opt", "num_samples=0"], ["num_samples", "multiple of 10", "got 0"]),
    (["--dataset", "mnist1d", "--dataset-opt", "num_samples=-5"], ["num_samples", "got -5"]),
    (["--dataset", "mnist1d", "--dataset-opt", "num_samples=abc"], ["num_samples", "'abc'"]),
    (["--strategy", "selsync:delta=inf"], ["delta", "finite", "inf"]),
    (["--momentum", "1.5"], ["momentum", "[0, 1)", "1.5"]),
    (["--out", ""], ["out_dir (--out)", "non-empty", "''"]),
    (["--checkpoint-dir", ""], ["checkpoint_dir (--checkpoint-dir)", "non-empty"]),
    (["--data-dir", ""], ["data_dir (--data-dir)", "non-empty"]),
    (["--platform", ""], ["platform (--platform)", "non-empty"]),
    (["--opt", "delta=0.1", "--opt", "delta=0.2"], ["--opt delta is given twice", "give it once"]),
    (["--strategy", "selsync:delta=0.1", "--opt", "delta=0.2"],
     ["--strategy 'selsync:delta=0.1' and --opt delta=0.2 both set delta"]),
    (["--strategy", "selsync:delta"], ["--strategy 'selsync:delta'", "expected NAME:KEY=VALUE"]),
    (["--lr-schedule", "milestones:"], ["lr_schedule", "'milestones:'"]),
    (["--lr-schedule", "milestones:0.5,0.5"], ["lr_schedule", "each M once", "'milestones:0.5,0.5'"]),
    # issue 35: integers past int32 crashed inside jit after the run dir was created
    (["--strategy", "localsgd:period=2147483648"], ["period", "<= 2147483647", "2147483648"]),
    (["--strategy", "selsync", "--opt", "max_local=1e20"], ["max_local", "<= 2147483647", "100000000000000000000"]),
    (["--strategy", "selsync:window=99999999999999999999"], ["window", "<= 2147483647"]),
    (["--eval-every", "2147483648"], ["eval_every", "<= 2147483647", "2147483648"]),
    (["--keep", "2147483648"], ["keep", "<= 2147483647", "2147483648"]),
    (["--strategy", "triggered", "--opt", "trigger=periodic", "--opt", "trigger.period=4294967296"],
     ["period", "<= 2147483647", "4294967296"]),
    (["--dataset", "mnist1d", "--dataset-opt", "num_samples=99999999999999999990"], ["num_samples", "2147483647"]),
]


@pytest.fixture
def tmp(tmp_path):
    (tmp_path / "file").write_text("a file, not a directory")
    return tmp_path


@pytest.mark.parametrize("args, expected", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_and_exit_code_2(args, expected, tmp, capsys):
    args = [a.replace("{tmp}", str(tmp)) for a in args]
    if "--out" not in args:
        args += ["--out", str(tmp / "out")]
    if "--checkpoint-dir" not in args:   # keep the default root (./checkpoints) untouched
        args += ["--checkpoint-dir", str(tmp / "ck")]
    code = cli_main(["train", "--no-progress", "--steps", "2", *args] if "--steps" not in args
                    else ["train", "--no-progress", *args])
    out, err = capsys.readouterr()
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jaxsel train: error: "), err
    for text in expected:
        assert text in lines[0], (text, lines[0])
    assert "Traceback" not in err
    assert out == ""   # checked before anything is printed ("run directory:", "layout:")
    assert not (tmp / "out").exists() and not (tmp / "ck").exists()   # and before anything is created


@pytest.mark.parametrize("args", [["--seed", "-1"], ["--partition", "dirichlet", "--partition-opt", "alpha=0"],
                                  ["--momentum", "1.5"],
                                  # issue 35: found only once the run was being built
                                  ["--dataset", "cifar10"], ["--strategy", "selsync:window=2000000000"],
                                  ["--strategy", "selsync:window=99999999999999999999"]])
def test_a_usage_error_leaves_no_default_folders_behind(args, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli_main(["train", "--no-progress", "--steps", "2", *args]) == 2
    assert capsys.readouterr().out == ""
    assert list(tmp_path.iterdir()) == []   # no runs/<run> nor checkpoints/<run>


PLUGINS = [
    ("raises.py", "raise RuntimeError('plugin broke\\nsecond line')\n",
     "failed while loading: RuntimeError: plugin broke"),
    ("syntax.py", "x = (\n", "failed while loading: SyntaxError: '(' was never closed"),
    ("", None, "--plugin needs a module name or a .py file, got ''"),
]


@pytest.mark.parametrize("name, code, message", PLUGINS, ids=["raises", "syntax-error", "empty"])
def test_a_broken_plugin_is_one_line_naming_the_file(name, code, message, tmp_path, capsys):
    plugin = tmp_path / name if name else ""
    if code is not None:
        plugin.write_text(code)
    assert cli_main(["train", "--plugin", str(plugin), "--steps", "2"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert message in err and (not name or f"--plugin '{plugin}'" in err), err


def test_out_makes_its_parents_and_removes_them_when_the_run_fails_early(tmp_path, capsys):
    """Issue 36/44: `--out results/exp1` works when results/ does not exist yet, as every tool
    that writes a run directory does; a run refused before writing leaves none of it."""
    out = tmp_path / "results" / "deep" / "exp1"
    assert cli_main(["train", "--strategy", "bsp", "--steps", "2", "--eval-every", "2", "--log-every", "2",
                     "--no-progress", "--no-checkpoint", "--out", str(out)]) == 0
    assert (out / "metrics.jsonl").is_file()
    late = tmp_path / "later" / "x" / "run"
    assert cli_main(["train", "--strategy", "selsync:window=1000000000", "--steps", "2", "--no-progress",
                     "--no-checkpoint", "--out", str(late)]) == 2   # refused once the run is built
    assert not (tmp_path / "later").exists()


def test_resume_needs_to_know_the_run(capsys):
    assert cli_main(["train", "--resume"]) == 2
    assert "--resume needs --out" in capsys.readouterr().err


def test_unprepared_dataset_is_reported_not_raised(tmp_path, capsys):
    code = cli_main(["train", "--dataset", "cifar10", "--data-dir", str(tmp_path), "--steps", "2",
                     "--out", str(tmp_path / "out"), "--checkpoint-dir", str(tmp_path / "ck"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "cifar10" in err and "not prepared" in err, err


def test_argparse_type_errors_exit_2_without_traceback(capsys):
    with pytest.raises(SystemExit) as info:
        cli_main(["train", "--steps", "many"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid int value: 'many'" in err and "Traceback" not in err


def test_missing_data_dir_for_an_embedded_dataset_is_reported_not_fatal(tmp_path, capsys):
    """Embedded datasets are built into the data dir, so a new one is fine: it is said, not refused."""
    from jaxsel import TrainConfig
    from jaxsel.training.run import check_paths

    check_paths(TrainConfig(dataset="digits", data_dir=str(tmp_path / "new")))
    err = capsys.readouterr().err
    assert f"created --data-dir directory {tmp_path / 'new'}" in err and (tmp_path / "new").is_dir()
    with pytest.raises(ValueError, match="jaxsel creates only the last component"):
        check_paths(TrainConfig(dataset="digits", data_dir=str(tmp_path / "a" / "b")))


def test_a_run_that_fails_before_its_first_step_leaves_nothing_behind(tmp_path, capsys):
    from jaxsel.cli.train import TRAIN_DEFAULTS
    from jaxsel.data import load_arrays

    load_arrays(TRAIN_DEFAULTS["dataset"], "train")   # built already, whichever test ran first: its note is no error
    capsys.readouterr()
    out = tmp_path / "run"
    assert cli_main(["train", "--strategy", "bsp:delta=0.1", "--out", str(out),
                     "--checkpoint-dir", str(tmp_path / "ck")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not out.exists() and not (tmp_path / "ck").exists()


# issue 35 ---------------------------------------------------------------------------------

def test_every_integer_option_of_every_strategy_and_trigger_is_bounded_to_int32():
    """Each one reaches jit as an int32 (a seed: 32 bits of a PRNG key): past that is one
    line naming the option, its value and the allowed range, never an OverflowError in jit."""
    import typing

    from jaxsel.core.options import OptionError, allowed_types, option_names, type_hints
    from jaxsel.core.triggers import TRIGGERS
    from jaxsel.strategies import STRATEGIES, build_strategy

    checked = 0
    for kind, registry in (("strategy", STRATEGIES), ("trigger", TRIGGERS)):
        for name, cls in registry.items():
            hints = type_hints(cls)
            for option in option_names(cls):
                if int not in allowed_types(hints.get(option, typing.Any))[0]:
                    continue
                limit = 2**32 - 1 if option == "seed" else 2**31 - 1
                options = {option: limit + 1}
                if kind == "trigger":
                    name_, options = "triggered", {"trigger": name, f"trigger.{option}": limit + 1}
                with pytest.raises(OptionError) as err:
                    build_strategy(name_ if kind == "trigger" else name, options, replicas=8, total_steps=100,
                                   steps_per_epoch=10, seed=0)
                line = str(err.value)
                assert option in line and f"<= {limit}" in line and str(limit + 1) in line, (name, option, line)
                checked += 1
    assert checked >= 30


def test_every_integer_setting_of_trainconfig_is_bounded():
    import dataclasses
    import typing

    from jaxsel.core.options import allowed_types
    from jaxsel.training.config import ConfigError, TrainConfig, check_config

    hints = typing.get_type_hints(TrainConfig)
    names = [f.name for f in dataclasses.fields(TrainConfig) if int in allowed_types(hints[f.name])[0]]
    assert len(names) >= 15
    for name in names:   # each within int32 (a seed: 32 bits), or a tighter bound of its own
        limit = 2**32 - 1 if name == "seed" else 2**31 - 1
        with pytest.raises(ConfigError) as err:
            check_config(TrainConfig(**{name: limit + 1}))
        line = str(err.value)
        assert name in line and "<= " in line and str(limit + 1) in line, (name, line)


def test_compare_entries_past_int32_are_one_line(tmp_path, capsys):
    code = cli_main(["compare", "--strategies", "bsp,localsgd:period=99999999999999999999", "--seeds", "1",
                     "--out", str(tmp_path / "cmp")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "period" in err[0] and "<= 2147483647" in err[0], err
    assert not (tmp_path / "cmp").exists()


@pytest.mark.parametrize("argv, shown", [
    (["--lr", "0.1", "--lr", "0.2"], "--lr"),
    (["--lr=0.1", "--lr", "0.2"], "--lr"),
    (["--progress", "--no-progress"], "--progress/--no-progress"),
    (["--intra-network", "pcie", "--project-intra-network", "nvlink"], "--intra-network"),
    (["--strategy", "bsp", "--strategy", "selsync"], "--strategy"),
    (["--delta", "0.1", "--delta", "0.2"], "--delta"),   # last release's flag (hidden, noted) too
    (["--seed", "1", "--seed", "1"], "--seed"),   # the same value twice is still a typo
])
def test_an_option_given_twice_is_refused(argv, shown, capsys):
    with pytest.raises(SystemExit) as info:
        cli_main(["train", *argv, "--steps", "2"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "Traceback" not in err
    assert f"argument {shown}" in err and "given twice" in err, err


def test_repeatable_options_may_repeat():
    from jaxsel.cli.command import build_parser

    args = build_parser().parse_args(["train", "--opt", "delta=0.1", "--opt", "window=3", "--partition-opt", "a=1",
                                      "--partition-opt", "b=2"])
    assert args.opt == ["delta=0.1", "window=3"] and args.partition_options == ["a=1", "b=2"]


def test_compare_help_shows_percent_signs_once(capsys):
    with pytest.raises(SystemExit):
        cli_main(["compare", "--help"])
    out = capsys.readouterr().out
    assert "50% and 75%" in " ".join(out.split()) and "%%" not in out


def test_variant_labels_of_close_values_stay_distinct():
    from jaxsel.analysis.variants import parse_strategies

    rows = parse_strategies("selsync:delta=0.1000001,selsync:delta=0.1000002,selsync:delta=0.05,localsgd:period=8")
    labels = [v.label("") for v in rows]
    assert labels == ["selsync (delta=0.1000001)", "selsync (delta=0.1000002)", "selsync (delta=0.05)",
                      "localsgd (period=8)"]
