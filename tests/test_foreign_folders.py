"""A checkpoint folder jaxsel did not make gets nothing written into it (issue 60 item 8): a
folder holding a user's files and no owner file is refused before the owner file or a lock
is written, and the line never advises removing it; config.json's checkpoint_root of a
wrong type is one line too (item 10)."""
import json

import pytest

from jaxsel.cli import main as cli_main
from jaxsel.data.paths import WRITE_PROBE
from jaxsel.training.config import ConfigError
from jaxsel.training.plan import plan_run
from jaxsel.training.rundir.owner import not_jaxsels
from jaxsel.training.train import TrainConfig


def users_folder(path):
    for step in ("5", "7"):
        (path / step).mkdir(parents=True)
        (path / step / "photo.jpg").write_bytes(b"mine")
    (path / "notes.txt").write_text("mine")
    return path


def test_a_users_folder_named_as_checkpoint_dir_is_refused_and_left_as_it_was(tmp_path):
    folder = users_folder(tmp_path / "mine")
    assert not_jaxsels(folder) == ["5", "7", "notes.txt"]
    cfg = TrainConfig(strategy="bsp", steps=4, progress=False, out_dir=str(tmp_path / "out"),
                      checkpoint_dir=str(folder))
    with pytest.raises(ConfigError, match=r"is not a checkpoint folder of jaxsel's: it holds '5' and 2 more") as err:
        plan_run(cfg)
    assert "remove" not in str(err.value)
    assert sorted(p.name for p in folder.iterdir()) == ["5", "7", "notes.txt"]


def test_jaxsels_own_folders_pass(tmp_path):
    (tmp_path / "old" / "4" / "meta").mkdir(parents=True)   # a jaxsel's from before owner files
    (tmp_path / "old" / "8.orbax-checkpoint-tmp-123").mkdir()
    (tmp_path / "old" / ".jaxsel.lock").write_text("1")
    (tmp_path / "old" / WRITE_PROBE.format(pid=14666, thread=139979452521344)).write_bytes(b"")   # another
    # process's probe: process 0 of a multi-host run probes the folder while the others check it
    (tmp_path / "owned" / "x").mkdir(parents=True)
    (tmp_path / "owned" / ".jaxsel-owner.json").write_text("{}")
    assert not_jaxsels(tmp_path / "old") == not_jaxsels(tmp_path / "owned") == not_jaxsels(tmp_path / "no") == []


@pytest.mark.slow
@pytest.mark.parametrize("recorded", ["users", 123])
def test_a_resume_whose_config_names_a_users_folder_or_no_path_is_one_line(tmp_path, capsys, recorded):
    out = tmp_path / "out"
    assert cli_main(["train", "--strategy", "bsp", "--steps", "2", "--no-progress", "--out", str(out),
                     "--checkpoint-dir", str(tmp_path / "ck")]) == 0
    capsys.readouterr()
    folder = users_folder(tmp_path / "mine")
    config = json.loads((out / "config.json").read_text())
    config["checkpoint_root"] = str(folder) if recorded == "users" else recorded
    (out / "config.json").write_text(json.dumps(config))
    code = cli_main(["train", "--out", str(out), "--resume", "--steps", "4", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err and "remove" not in err, err
    assert ("not a checkpoint folder of jaxsel's" if recorded == "users" else "checkpoint_root is 123 (int)") in err
    assert sorted(p.name for p in folder.iterdir()) == ["5", "7", "notes.txt"]
