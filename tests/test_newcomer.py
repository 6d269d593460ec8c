"""A newcomer's first commands, as README writes them, on a machine with none of our state.

The rest of the suite runs with a private data dir (`JAXSEL_DATA_DIR`), 8 simulated
devices and a shared compilation cache; a developer's machine has `~/.cache/jaxsel`,
`runs/` and `checkpoints/` from earlier runs. Any of these can hide a failure that every
new user meets, so here each command runs in a subprocess with an empty HOME, an empty
working directory, and none of those variables set.
"""
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
#: variables the suite (conftest.py) or a developer sets that a newcomer does not have
#: (PYTHONPATH stays: conftest points it at this checkout, which is what is under test)
DEVELOPER_ONLY = ("JAXSEL_DATA_DIR", "JAX_NUM_CPU_DEVICES", "XLA_FLAGS", "JAX_PLATFORMS",
                  "JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
                  "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "MPLCONFIGDIR", "XDG_CACHE_HOME",
                  "XDG_CONFIG_HOME", "TFDS_DATA_DIR")


def quick_start_commands() -> list[str]:
    """The commands of README's quick start, one per line."""
    quick = README.read_text().split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.strip() for line in quick.strip().splitlines() if line.strip()]


def main_job() -> str:
    """README's first command without its install step (the suite runs installed)."""
    first = quick_start_commands()[0]
    install, job = first.split(" && ", 1)
    assert install.startswith("pip install"), first
    return job


#: set by .ci/run, which ran README's main job just before the suite as a newcomer does (a
#: fresh virtual environment, an empty HOME, none of these variables): a folder holding its
#: stdout, stderr, run directory and HOME. The main job's test checks that run instead of
#: training the same job a second time (about 2 minutes of CI's 2 cores per leg).
CI_MAIN_JOB = "JAXSEL_CI_MAIN_JOB"
#: set to 1 to train README's main job in this suite where .ci/run has not handed one: a
#: developer's whole suite leaves it to CI's first step, which runs it on a fresher machine
#: than this test can (a new virtual environment as well as an empty HOME). Trained here it
#: was 105 of a whole suite's 928 test CPU-s, the largest single cost (issue 43).
TRAIN_MAIN_JOB = "JAXSEL_TEST_MAIN_JOB"


def as_newcomer(home: Path, cwd: Path):
    """`run(command)`: a shell command run in `cwd` as a newcomer would, with HOME=`home`."""
    env = {k: v for k, v in os.environ.items() if k not in DEVELOPER_ONLY + (CI_MAIN_JOB, TRAIN_MAIN_JOB)}
    env["HOME"] = str(home)

    def run(command: str, timeout: int = 600) -> subprocess.CompletedProcess:
        done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
        assert done.returncode == 0, f"{command!r} exited {done.returncode}:\n{done.stderr[-3000:]}"
        return done
    return run


def empty_home_and_cwd(tmp_path_factory) -> tuple[Path, Path]:
    home = tmp_path_factory.mktemp("empty-home")
    cwd = tmp_path_factory.mktemp("empty-cwd")
    assert not any(home.iterdir()) and not any(cwd.iterdir())
    return home, cwd


def the_default_data_dir_is_made_and_named(home: Path, run) -> None:
    """The default data dir exists in `home`, made with its parents, and `jaxsel datasets`
    (run by `run`, in that HOME) names it."""
    data_dir = home / ".cache" / "jaxsel" / "tfds"
    assert data_dir.is_dir()
    assert f"data dir: {data_dir}" in run("jaxsel datasets").stdout


def the_main_job(tmp_path_factory) -> tuple[Path, str, str, Path]:
    """(its run directory, stdout, stderr, the HOME it ran in): the run .ci/run made just
    before the suite where it says so, else one trained here where asked (TRAIN_MAIN_JOB),
    else the test is skipped, saying how to run it."""
    record = os.environ.get(CI_MAIN_JOB)
    if record:
        record = Path(record)
        read = lambda name: (record / name).read_text()
        return Path(read("run_dir").strip()), read("stdout"), read("stderr"), Path(read("home").strip())
    if os.environ.get(TRAIN_MAIN_JOB) != "1":
        pytest.skip(f"README's main job is .ci/run's first step, checked here under CI ({CI_MAIN_JOB}); "
                    f"{TRAIN_MAIN_JOB}=1 trains it in this suite too (105 CPU-s of a whole suite on 2 cores)")
    home, cwd = empty_home_and_cwd(tmp_path_factory)
    done = as_newcomer(home, cwd)(main_job())
    runs = list((cwd / "runs").iterdir())
    assert len(runs) == 1, runs
    return runs[0], done.stdout, done.stderr, home


@pytest.mark.slow
def test_newcomer_s_main_job_writes_its_results_and_pictures_quietly(tmp_path_factory):
    """README's main job, in an empty HOME, exits 0, writes its results and pictures with
    nothing alarming on stderr, and makes the default data dir, which `jaxsel datasets`
    then names."""
    run_dir, stdout, stderr, home = the_main_job(tmp_path_factory)
    results = json.loads((run_dir / "results.json").read_text())
    assert results, "results.json is empty"
    assert list(run_dir.glob("*.png")), "the main job drew no pictures"
    assert "wrote" in stdout
    assert "WARNING" not in stderr, stderr   # nothing alarming on first use
    the_default_data_dir_is_made_and_named(home, as_newcomer(home, tmp_path_factory.mktemp("cwd")))


@pytest.mark.slow
def test_newcomer_s_first_train_builds_its_data_in_an_empty_home(tmp_path_factory):
    """`jaxsel train` as a newcomer's first command (no main job before it): it makes the
    default data dir with its parents, builds its dataset there and trains; `jaxsel
    datasets` then names that dir."""
    home, cwd = empty_home_and_cwd(tmp_path_factory)
    run = as_newcomer(home, cwd)
    done = run("jaxsel train --steps 20 --no-progress --out " + shlex.quote(str(cwd / "first-train")))
    assert json.loads((cwd / "first-train" / "final.json").read_text())
    assert "WARNING" not in done.stderr, done.stderr
    the_default_data_dir_is_made_and_named(home, run)


def test_the_default_data_dir_is_made_with_its_parents_a_given_one_is_not(tmp_path, monkeypatch):
    """jaxsel's own default gets its parents; a path the user typed keeps the one-leaf rule."""
    from jaxsel.data import sources
    from jaxsel.data.paths import UnusablePath

    default = tmp_path / "home" / ".cache" / "jaxsel" / "tfds"
    monkeypatch.setattr(sources, "DEFAULT_DATA_DIR", default)
    assert sources.ensure_data_dir(None) == default and default.is_dir()
    assert sources.ensure_data_dir(str(default)) == default   # the default, spelled out: still fine
    with pytest.raises(UnusablePath, match="creates only the last component"):
        sources.ensure_data_dir(tmp_path / "typo" / "tfds")
