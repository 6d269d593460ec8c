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


@pytest.mark.slow
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
    ci = (README.parent / ".ci" / "run").read_text()
    assert "MAIN_JOB=$(quick_start 0)" in ci and "TEST_COMMAND=$(quick_start 1)" in ci
    assert 'bash -c "$TEST_COMMAND"' in ci, "CI must run README's test command"
    lines = ci.splitlines()
    main_job = next(i for i, line in enumerate(lines) if 'bash -c "$MAIN_JOB"' in line)
    assert 'HOME="$home"' in ci and "-u JAXSEL_DATA_DIR" in lines[main_job - 1], \
        "CI must run README's first command in a fresh HOME, without the suite's data dir"
    assert "$PYTHON311" in ci and "PYENV_VERSION=3.12.1" in ci, "CI runs both on Python 3.11 and on 3.12"
