"""The README's library example runs as written."""
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_library_example_runs_and_learns(capsys):
    blocks = python_blocks()
    assert blocks, "README has no python example"
    scope: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)
    assert scope["n"] == 8 and scope["metrics"]["grad_norm"].shape == (8,)
    assert scope["eval_params"]["w"].shape == (64, 10)
    assert scope["accuracy"] > 0.6   # 10 classes: chance is 0.1
    assert "test accuracy" in capsys.readouterr().out


def test_readme_library_example_runs_8_replicas_on_one_cpu(tmp_path):
    """On a CPU-only machine with no environment variable: one CPU device, 8 replicas."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("JAX_NUM_CPU_DEVICES", "JAX_PLATFORMS", "XLA_FLAGS")}
    code = python_blocks()[0] + "\nassert len(mesh.devices.flat) == 1 and metrics['grad_norm'].shape == (8,)\n"
    done = subprocess.run([sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "8 replicas on 1 x CPU (cpu), 8 per device" in done.stdout


def test_readme_quick_start_is_two_commands():
    text = README.read_text()
    quick = text.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [l for l in quick.strip().splitlines() if l.strip()]
    assert commands == ['pip install -e . && jaxsel compare', 'pip install -e ".[test]" && python -m pytest -q -n 2']
    ci = (README.parent / ".ci" / "run").read_text().splitlines()
    assert ci[-1] == commands[1].split(" && ")[1], "CI must run README's test command"
    main_job = next(i for i, line in enumerate(ci) if 'bash -c "$(quick_start 0)"' in line)
    assert 'HOME="$home"' in ci[main_job] and "-u JAXSEL_DATA_DIR" in ci[main_job - 1], \
        "CI must run README's first command in a fresh HOME, without the suite's data dir"
    assert main_job < len(ci) - 1


#: The loop's length and the busy-loop processes beside it: on main 7f3b4eb (no pacing) this
#: test failed in 4 of 4 runs with JAX 0.10.2 on the 2-core box (XLA's abort after 67-79 s),
#: 2 of 4 with 1000 steps; with pacing it passes, in 30-50 s on the shared box. (JAX 0.12.0.1
#: holds the host back at about 10 queued steps itself: main did not abort there.)
LONG_LOOP = 2000
BUSY_LOOPS = 3


@pytest.mark.slow
def test_readme_library_loop_as_written_outlasts_a_busy_cpu(tmp_path):
    """README's loop as written (only `range(200)` made longer), dispatching without waiting
    on 8 simulated CPU devices beside busy-loop processes. Without pacing, the loop runs
    ahead of the starved devices until XLA:CPU aborts the process ("Termination timeout ...
    only 7 of them arrived"); the step's pacing (core/pacing.py) keeps it alive."""
    import os
    import subprocess
    import sys

    code = python_blocks()[0]
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
