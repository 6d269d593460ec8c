"""experiments/gpu_session.sh, the script every GPU session runs first: it parses, writes
at most 8 files (the device tool brings back no more), and its smoke mode runs every step
end to end on a CPU at toy sizes."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "gpu_session.sh"
STEPS = ("1-default-job.txt", "2-packing-sweep.txt", "3-bench-cnn-fp32.txt", "4-bench-resnet18-bf16.txt",
         "5-resnet18-vs-pytorch.txt", "6-xla-ab.txt")


def test_the_session_script_parses_and_names_at_most_eight_files():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0
    text = SCRIPT.read_text()
    written = set(re.findall(r'\$out/([\w.\-]+)', text)) | set(re.findall(r"^run ([\w.\-]+)", text, re.M))
    log = re.search(r"^log=\$out/([\w.\-]+)", text, re.M).group(1)
    assert written | {log} == set(STEPS) | {log, "5-resnet18-vs-pytorch.json"} and len(written | {log}) <= 8
    assert sorted(STEPS) == list(STEPS)   # most important first, in name order too


def test_without_an_outdir_it_says_how_to_call_it():
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode != 0 and "usage: experiments/gpu_session.sh OUTDIR" in done.stderr


def test_a_step_the_budget_no_longer_fits_says_so_in_its_first_line(tmp_path):
    """With no time left every step is skipped, and each step file's first line says so
    (a capped or failed step's first line says that the same way: OK / CAPPED / FAILED)."""
    out = tmp_path / "out"
    env = {**os.environ, "JAXSEL_SESSION_BUDGET": "1", "PYTHON": sys.executable, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(["bash", str(SCRIPT), str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for name in STEPS:
        assert (out / name).read_text().startswith("SKIPPED: the session's 1 s were spent"), name
    assert "devices:" in (out / "1-default-job.txt").read_text()   # the header, kept below the first line


@pytest.mark.slow
def test_the_smoke_session_runs_every_step(tmp_path):
    """On one CPU device, as the GPU host has one GPU: on the suite's 8, the ResNet-18 bf16
    bench alone trained 8 replicas for 30 minutes of the 2-core box (a 49-minute suite).
    Its steps compile into the suite's kept cache (JAX_COMPILATION_CACHE_DIR, which the
    script keeps when its caller set one): on a warm cache the run took 83 s of a whole
    suite's worker instead of 96 s."""
    out = tmp_path / "out"
    env = {**os.environ, "JAXSEL_SESSION_SMOKE": "1", "JAXSEL_SESSION_BUDGET": "3000", "PYTHON": sys.executable,
           "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "1"}
    done = subprocess.run(["bash", str(SCRIPT), str(out)], env=env, capture_output=True, text=True, timeout=3300)
    assert done.returncode == 0, done.stderr[-2000:]
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and set(STEPS) <= set(files), files
    log = (out / "8-session-log.txt").read_text()
    for name in STEPS:
        assert re.search(rf"{re.escape(name)} exit 0 after \d+ s", log), (name, log)
        assert (out / name).read_text().startswith("OK: exit 0 after "), name
    default_job = (out / "1-default-job.txt").read_text()
    assert "devices:" in default_job and "packed by" in default_job   # the layout line of a packed run
    assert "fraction_of_one_replica=" in (out / "2-packing-sweep.txt").read_text()
    assert "packing=map" in (out / "2-packing-sweep.txt").read_text()   # the default sweep's last loop
