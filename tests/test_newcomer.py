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
#: stdout, stderr, run directory and HOME. The newcomer test checks that run instead of
#: training the same job a second time (about 2 minutes of CI's 2 cores per leg).
CI_MAIN_JOB = "JAXSEL_CI_MAIN_JOB"


def as_newcomer(home: Path, cwd: Path):
    """`run(command)`: a shell command run in `cwd` as a newcomer would, with HOME=`home`."""
    env = {k: v for k, v in os.environ.items() if k not in DEVELOPER_ONLY + (CI_MAIN_JOB,)}
    env["HOME"] = str(home)

    def run(command: str, timeout: int = 600) -> subprocess.CompletedProcess:
        done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
        assert done.returncode == 0, f"{command!r} exited {done.returncode}:\n{done.stderr[-3000:]}"
        return done
    return run


@pytest.fixture(scope="module")
def newcomer(tmp_path_factory):
    """(run, cwd, home): `run(command)` runs a shell command as a newcomer would."""
    home = tmp_path_factory.mktemp("empty-home")
    cwd = tmp_path_factory.mktemp("empty-cwd")
    assert not any(home.iterdir()) and not any(cwd.iterdir())
    return as_newcomer(home, cwd), cwd, home


def the_main_job(run, cwd: Path) -> tuple[Path, str, str, Path | None]:
    """(its run directory, stdout, stderr, the HOME it ran in or None for this test's own):
    the run .ci/run made just before the suite where it says so, else one made here."""
    record = os.environ.get(CI_MAIN_JOB)
    if record:
        record = Path(record)
        read = lambda name: (record / name).read_text()
        return Path(read("run_dir").strip()), read("stdout"), read("stderr"), Path(read("home").strip())
    done = run(main_job())
    runs = list((cwd / "runs").iterdir())
    assert len(runs) == 1, runs
    return runs[0], done.stdout, done.stderr, None


@pytest.mark.slow
def test_newcomer_runs_the_main_job_then_the_other_commands(newcomer):
    """README's main job exits 0 and writes its results; then `datasets` and `train` work
    in the same fresh HOME (one test: they share the dataset it built). Under .ci/run the
    main job is CI's own first step, checked here."""
    run, cwd, home = newcomer
    run_dir, stdout, stderr, ci_home = the_main_job(run, cwd)
    if ci_home is not None:   # the next commands in the HOME the main job filled
        home, run = ci_home, as_newcomer(ci_home, cwd)
    results = json.loads((run_dir / "results.json").read_text())
    assert results, "results.json is empty"
    assert list(run_dir.glob("*.png")), "the main job drew no pictures"
    assert "wrote" in stdout
    assert "WARNING" not in stderr, stderr   # nothing alarming on first use
    assert (home / ".cache" / "jaxsel" / "tfds").is_dir()   # the default data dir, made with its parents

    listed = run("jaxsel datasets").stdout
    assert f"data dir: {home / '.cache' / 'jaxsel' / 'tfds'}" in listed

    run("jaxsel train --steps 20 --no-progress --out " + shlex.quote(str(cwd / "first-train")))
    assert json.loads((cwd / "first-train" / "final.json").read_text())


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
