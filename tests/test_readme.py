"""README and the library page run and read as they say. docs/LIBRARY.md's examples (moved
there from README) run as written: the user's own loop, BSP and then SelSync through the
page's diff, a pmean left in failing as the page says; and make_train_step's example.
README's first screen is what a newcomer needs, and its map names where each section went."""
import re
from pathlib import Path

import jax
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
LIBRARY = README.parent / "docs" / "LIBRARY.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", LIBRARY.read_text(), re.S)


def make_train_step_example() -> str:
    return next(block for block in python_blocks() if "jaxsel.make_train_step(" in block)


def applied(code: str, diff: str) -> tuple[str, int]:
    """`code` with the README's diff applied (each removed line found exactly once and
    replaced by the added lines after it), and the number of lines the diff touches."""
    lines, touched = code.splitlines(), 0
    for hunk in re.findall(r"^-(.*)\n((?:\+.*\n)*)", diff + "\n", re.M):
        removed, added = hunk[0], [a[1:] for a in hunk[1].splitlines()]
        assert lines.count(removed) == 1, removed
        i = lines.index(removed)
        lines[i:i + 1] = added
        touched += max(1, len(added))
    return "\n".join(lines) + "\n", touched


def test_readme_own_loop_trains_with_pmean_then_selsync_by_its_diff(capsys):
    """The user's Flax loop (BSP by lax.pmean) learns; the README's diff, two lines, turns it
    into SelSync, which learns as well and syncs on 89 of the 200 steps (24 its warm-up)."""
    import jax
    import numpy as np

    loop = python_blocks()[0]
    assert "jax.shard_map" in loop and "lax.pmean(grads" in loop and "make_train_step" not in loop
    bsp: dict = {}
    exec(compile(loop, "docs/LIBRARY.md", "exec"), bsp)
    assert bsp["accuracy"] > 0.6   # 10 classes: chance is 0.1
    diff = page_diff()
    selsync_loop, touched = applied(loop, diff)
    assert touched == 2 and "lax.pmean" not in selsync_loop
    counted = selsync_loop.replace("    state = train_step(state, jax.device_put(batch, replicas))\n",
                                   "    state = train_step(state, jax.device_put(batch, replicas))\n"
                                   "    synced += jaxsel.sync_facts(state.opt_state)['synced'].all()\n")
    sel: dict = {"synced": 0}
    exec(compile(counted, "docs/LIBRARY.md (SelSync)", "exec"), sel)
    assert sel["accuracy"] > 0.6 and int(sel["synced"]) == 89
    facts = jax.device_get(sel["jaxsel"].sync_facts(sel["state"].opt_state))
    assert sorted(facts) == ["bytes_allreduced", "delta", "synced", "vote", "vote_bytes"]
    assert np.all(np.asarray(sel["state"].opt_state.count) == 200)
    assert capsys.readouterr().out.count("test accuracy") == 2


def page_diff() -> str:
    return re.search(r"```diff\n(.*?)```", LIBRARY.read_text(), re.S)[1]


def test_a_pmean_left_in_stops_at_tx_update_with_a_one_line_message():
    """The page's diff without its second line (the pmean kept): the first step raises a
    ValueError from tx.update, the traceback's last frame, whose message is one line."""
    import traceback

    loop, _ = applied(python_blocks()[0], page_diff().splitlines()[0] + "\n" + page_diff().splitlines()[1] + "\n")
    assert "lax.pmean(grads" in loop and "jaxsel.as_optax(" in loop
    with pytest.raises(ValueError) as info:
        exec(compile(loop, "docs/LIBRARY.md (pmean kept)", "exec"), {})
    message = str(info.value)
    assert "\n" not in message and "lax.pmean over 'data' left in the loop" in message and "remove the pmean" in message
    last = traceback.extract_tb(info.value.__traceback__)[-1]
    assert last.name == "update" and last.filename.endswith("transformation.py")
    assert "already the same on every replica" in LIBRARY.read_text()   # what the page says of it


def test_readme_library_example_runs_and_learns(capsys):
    scope: dict = {}
    exec(compile(make_train_step_example(), "docs/LIBRARY.md", "exec"), scope)
    assert scope["n"] == 8 and scope["metrics"]["replica_loss"].shape == (8,)
    assert scope["eval_params"]["w"].shape == (64, 10)
    assert scope["accuracy"] > 0.6   # 10 classes: chance is 0.1
    assert "test accuracy" in capsys.readouterr().out


@pytest.mark.slow
def test_readme_library_example_runs_8_replicas_on_one_cpu(tmp_path):
    """On a CPU-only machine with no environment variable: one CPU device, 8 replicas."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("JAX_NUM_CPU_DEVICES", "JAX_PLATFORMS", "XLA_FLAGS")}
    code = make_train_step_example() + "\nassert len(mesh.devices.flat) == 1 and metrics['replica_loss'].shape == (8,)\n"
    done = subprocess.run([sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "8 replicas on 1 x CPU (cpu), 8 per device" in done.stdout


def test_readme_quick_start_is_two_commands():
    text = README.read_text()
    quick = text.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [l for l in quick.strip().splitlines() if l.strip()]
    assert commands == ['pip install -e . && jaxsel compare', 'pip install -e ".[test]" && python -m pytest -q -n 2']
    ci = (README.parent / ".ci" / "run").read_text()
    assert "MAIN_JOB=$(quick_start 0)" in ci and "TEST_COMMAND=$(quick_start 1)" in ci
    assert 'bash -c "$TEST_COMMAND $tier"' in ci, "CI must run README's test command"
    legs = re.search(r'^for spec in (.*); do$', ci, re.M).group(1)
    assert '"python 3.13, newest JAX|$PYTHON313|"' in legs, "the newest JAX's leg runs the test command as written"
    lines = ci.splitlines()
    main_job = next(i for i, line in enumerate(lines) if 'bash -c "$MAIN_JOB"' in line)
    assert 'HOME="$home"' in ci and "-u JAXSEL_DATA_DIR" in lines[main_job - 1], \
        "CI must run README's first command in a fresh HOME, without the suite's data dir"
    assert "$PYTHON311" in ci and "PYENV_VERSION=3.13.0" in ci, "CI runs both on Python 3.11 and on 3.13"


#: The loop's length and the busy-loop processes beside it: on main 7f3b4eb (no pacing) this
#: test failed in 4 of 4 runs with JAX 0.10.2 on the 2-core box (XLA's abort after 67-79 s),
#: 2 of 4 with 1000 steps; with pacing it passes, in 30-50 s on the shared box. JAX 0.12.0.1
#: holds the host back at about 10 queued steps itself: main did not abort there, so the test
#: runs where it can fail (JAX before 0.12: the whole suite on Python 3.11), not beside the
#: rest of CI's Python 3.12 leg, which its three busy loops slowed by about 2 CPU-minutes.
LONG_LOOP = 2000
BUSY_LOOPS = 3


@pytest.mark.slow
@pytest.mark.skipif(jax.__version_info__ >= (0, 12), reason="JAX 0.12 holds a loop back at about 10 queued steps "
                    "itself: there the unpaced loop did not abort either, so the test could not fail")
def test_readme_library_loop_as_written_outlasts_a_busy_cpu(tmp_path):
    """README's make_train_step loop as written (only `range(200)` made longer), dispatching
    without waiting on 8 simulated CPU devices beside busy-loop processes. Without pacing,
    the loop runs ahead of the starved devices until XLA:CPU aborts the process
    ("Termination timeout ... only 7 of them arrived"); the step's pacing
    (core/pacing.py) keeps it alive."""
    import os
    import subprocess
    import sys

    code = make_train_step_example()
    assert code.count("range(200)") == 1
    code = code.replace("range(200)", f"range({LONG_LOOP})")
    env = {**os.environ, "JAX_NUM_CPU_DEVICES": "8", "JAX_PLATFORMS": "cpu"}
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(BUSY_LOOPS)]
    try:
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              timeout=600, cwd=tmp_path)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert done.returncode == 0, done.stderr[-2000:]
    assert "8 replicas on 8 x CPU (cpu), 1 per device" in done.stdout
    assert "test accuracy" in done.stdout and "jaxsel: a step" not in done.stderr


#: README's first screen: what jaxsel is, the two commands, a sample of the output, the finding
FIRST_SCREEN = 60


def test_readme_first_screen_holds_what_a_newcomer_needs():
    lines = README.read_text().splitlines()
    first = "\n".join(lines[:FIRST_SCREEN])
    assert lines[0] == "# jaxsel" and "## Quick start" in first and "```bash" in first
    head, rest = first.split("```\nstrategy ", 1)   # the sample: a block of what the command prints
    sample = rest.split("```", 1)[0]
    assert "selsync (delta=0.3, W=25, raw, averages" in sample and "budget-matched" in sample
    assert "attribution of selsync" in sample   # what its gap is made of (issue 58)
    assert re.search(r"JAX \d+\.\d+", head.strip().splitlines()[-1]), "the sample says which JAX made it"
    assert "**The finding.**" in first and "docs/DEVELOPMENT.md" in first
    assert max(len(line) for line in lines if not line.startswith(("strategy", " ", "-", "bsp", "localsgd",
                                                                    "selsync", "triggered"))) <= 100


#: README's map: each section that left README, and the page it went to (with its heading)
MOVED = {"docs/COMPARE.md": ["The frontier: the best method at each budget", "Time: bench, projected wall-clock, report"],
         "docs/LIBRARY.md": ["As a library"],
         "docs/STRATEGIES.md": ["Strategies", "A strategy from scratch"],
         "docs/RUNS.md": ["The command line", "Preparing real datasets", "Dashboards, input workers, config files: quick reference",
                          "Checkpoints, resume and faults", "Multi-host"]}


def test_readme_names_where_each_moved_section_is_and_it_is_there():
    text = README.read_text()
    where = " ".join(text.split("## Where to read on", 1)[1].split("\n## ", 1)[0].split())
    for page, headings in MOVED.items():
        held = re.findall(r"^## (.*)$", (README.parent / page).read_text(), re.M)
        for heading in headings:
            assert heading in held, f"{page} has no section {heading!r}"
            assert f'"{heading}"' in where and page in where, f"README's map does not send {heading!r} to {page}"
