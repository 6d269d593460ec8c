"""Every bad input: one error line naming the value and what is allowed, exit code 2, no
traceback, and nothing written (the checks run before any data is read)."""
import pytest

from jaxsel.cli import main as cli_main

BAD = [
    (["--strategy", "selsync", "--delta", "-0.5"], ["delta", "-0.5", ">= 0"]),
    (["--strategy", "selsync", "--window", "0"], ["window", "0", ">= 1"]),
    (["--strategy", "localsgd", "--period", "0"], ["period", "0", ">= 1"]),
    (["--global-batch-size", "100", "--replicas", "8"], ["--global-batch-size 100", "multiple of --replicas 8"]),
    (["--batch-size", "0"], ["batch_size", "0", ">= 1"]),
    (["--replicas", "0"], ["replicas", "0", ">= 1"]),
    (["--steps", "0"], ["steps", "0", ">= 1"]),
    (["--lr", "-1"], ["lr", "-1", "> 0"]),
    (["--log-every", "0"], ["log_every", ">= 1"]),
    (["--strategy", "nope"], ["'nope'", "bsp", "selsync"]),
    (["--model", "nope"], ["unknown model 'nope'", "mlp"]),
    (["--dataset", "nope"], ["unknown dataset 'nope'", "digits"]),
    (["--aggregator", "nope"], ["unknown aggregator 'nope'", "median"]),
    (["--partition", "nope"], ["unknown partition 'nope'", "seldp"]),
    (["--optimizer", "nope"], ["unknown optimizer 'nope'", "adam"]),
    (["--weight-decay", "-1"], ["weight_decay", ">= 0"]),
    (["--dataset", "mnist", "--data-dir", "{tmp}/missing"], ["data_dir", "missing", "does not exist",
                                                            "'mnist' is not prepared", "tfds build mnist"]),
    (["--out", "{tmp}/file/out"], ["--out", "file/out", "cannot be created", "not an existing directory"]),
    (["--out", "{tmp}/no/such/out"], ["--out", "no/such/out", "jaxsel creates only the last component"]),
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
    (["--devices", "0"], ["devices=0", "choose 1..8"]),
    (["--platform", "tpu"], ["platform 'tpu'", "not available"]),
    (["--project-network", "token-ring"], ["--project-network", "unknown network preset 'token-ring'", "10gbe"]),
    (["--intra-network", "infiniband"], ["--intra-network", "unknown network preset 'infiniband'", "pcie"]),
    (["--gpus-per-host", "0"], ["project_gpus_per_host", ">= 1", "got 0"]),
    (["--gpus-per-host", "3"], ["--gpus-per-host", "3 must divide replicas 8"]),
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
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jaxsel train: error: "), err
    for text in expected:
        assert text in lines[0], (text, lines[0])
    assert "Traceback" not in err
    assert not (tmp / "out" / "metrics.jsonl").exists()


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
    from jaxsel.train import TrainConfig
    from jaxsel.run import check_paths

    check_paths(TrainConfig(dataset="digits", data_dir=str(tmp_path / "new")))
    err = capsys.readouterr().err
    assert f"created --data-dir directory {tmp_path / 'new'}" in err and (tmp_path / "new").is_dir()
    with pytest.raises(ValueError, match="jaxsel creates only the last component"):
        check_paths(TrainConfig(dataset="digits", data_dir=str(tmp_path / "a" / "b")))


def test_a_run_that_fails_before_its_first_step_leaves_nothing_behind(tmp_path, capsys):
    from jaxsel.data import load_arrays

    load_arrays("digits", "train")   # built already, whichever test ran first: its one-time note is no error
    capsys.readouterr()
    out = tmp_path / "run"
    assert cli_main(["train", "--strategy", "bsp", "--delta", "0.1", "--out", str(out),
                     "--checkpoint-dir", str(tmp_path / "ck")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not out.exists() and not (tmp_path / "ck").exists()
