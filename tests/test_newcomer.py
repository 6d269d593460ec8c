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


@pytest.fixture(scope="module")
def newcomer(tmp_path_factory):
    """(run, cwd, home): `run(command)` runs a shell command as a newcomer would."""
    home = tmp_path_factory.mktemp("empty-home")
    cwd = tmp_path_factory.mktemp("empty-cwd")
    env = {k: v for k, v in os.environ.items() if k not in DEVELOPER_ONLY}
    env["HOME"] = str(home)

    def run(command: str, timeout: int = 600) -> subprocess.CompletedProcess:
        done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
        assert done.returncode == 0, f"{command!r} exited {done.returncode}:\n{done.stderr[-3000:]}"
        return done

    assert not any(home.iterdir()) and not any(cwd.iterdir())
    return run, cwd, home


@pytest.mark.slow
def test_newcomer_runs_the_main_job_then_the_other_commands(newcomer):
    """README's main job exits 0 and writes its results; then `datasets` and `train` work
    in the same fresh HOME (one test: they share the dataset it built)."""
    run, cwd, home = newcomer
    done = run(main_job())
    runs = list((cwd / "runs").iterdir())
    assert len(runs) == 1, runs
    results = json.loads((runs[0] / "results.json").read_text())
    assert results, "results.json is empty"
    assert list(runs[0].glob("*.png")), "the main job drew no pictures"
    assert "wrote" in done.stdout
    assert "WARNING" not in done.stderr, done.stderr   # nothing alarming on first use
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
