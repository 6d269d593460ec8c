"""Multi-host through jax.distributed: 2 processes x 2 CPU devices x 2 packed replicas
(gloo on 127.0.0.1); the crash tests use 2 processes x 4 devices.

The 2-process job must train every strategy to the parameters one process with 8
devices (one replica each) reaches (same seed; float sums may be ordered differently across processes, so
to float32 rounding), checkpoint and resume across processes, and a process that dies
must make the other exit with a clear error instead of hanging. Its hierarchical run, with
the default groups (one per process), must match groups=2 on one process with 4 devices.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxsel.training.supervisor import EXIT_PEER_LOST

HERE = Path(__file__).parent
WORKER = HERE / "multihost_worker.py"

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def built_datasets():
    """Build the datasets once here, not concurrently in both processes: digits (the
    library's default, the worker's runs) and mnist1d (train's default task)."""
    from jaxsel.data import load_arrays

    for name in ("digits", "mnist1d"):
        load_arrays(name, "train")


def outputs(procs: list, timeout: float) -> list[str]:
    """What each process printed once it ended (each waited for up to `timeout` s); any
    still running after that is killed."""
    try:
        return [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def env4(devices: int = 4) -> dict:
    return {**os.environ, "JAX_NUM_CPU_DEVICES": str(devices), "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}


def test_two_processes_match_one_process(tmp_path):
    from multihost_worker import configs, flat

    from jaxsel import train

    port = free_port()
    # "auto" measures as on accelerators, each process with a cache of its own: the processes
    # must still choose one loop (each candidate's slowest process decides)
    measuring = lambda i: {**env4(2), "JAXSEL_PACKING_MEASURE": "1", "JAXSEL_CACHE_DIR": str(tmp_path / f"cache{i}")}
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(port), "2", str(i), str(tmp_path)],
                              env=measuring(i), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    logs = outputs(procs, 420)
    for i, p in enumerate(procs):
        assert p.returncode == 0, f"process {i} failed:\n{logs[i][-3000:]}"

    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    for name, cfg in configs(ref_dir, reference=True):
        result = train(cfg)
        ours = flat(jax.device_get(result.state.params))
        theirs = np.load(tmp_path / f"{name}.npz")
        assert sorted(ours) == sorted(theirs.files), name
        for key in ours:
            np.testing.assert_allclose(theirs[key], ours[key], rtol=2e-5, atol=2e-6, err_msg=f"{name} {key}")
        final = json.loads((tmp_path / f"{name}.json").read_text())
        assert final["layout"].startswith("8 replicas on 2 processes x 2 x CPU (cpu), 2 per device, packed by "), \
            (name, final["layout"])
        loops = {(tmp_path / f"{name}.layout.{i}").read_text().split("packed by ")[1].split()[0] for i in range(2)}
        assert len(loops) == 1, (name, loops)   # both processes ran the same loop
        # each replica's own model, evaluated from host copies gathered across the processes
        assert final["replica_accuracy"]["per_replica"] == \
            pytest.approx(result.final["replica_accuracy"]["per_replica"], abs=0.01), name
    told = {name: (tmp_path / f"{name}.layout.0").read_text() for name in ("bsp", "ssp")}
    assert "(measured per step: " in told["bsp"] and "(measured earlier per step: " in told["ssp"], told
    hier = np.load(tmp_path / "hierarchical.npz")   # group = process: replicas 0-3 and 4-7
    assert all(np.array_equal(hier[k][0], hier[k][r]) and np.array_equal(hier[k][4], hier[k][4 + r])
               for k in hier.files for r in range(4))
    assert not all(np.allclose(hier[k][0], hier[k][4]) for k in hier.files)
    assert (tmp_path / "ck").is_dir() and (tmp_path / "ck" / "6").is_dir()


# What the survivor says: ours when a worker dies (the watchdog's, or the supervisor's
# when gloo aborted the training process first); when the coordinator (process 0) dies,
# jax's coordination client ends the others itself, at once, with its fatal log.
ABORTED = "the training process was aborted (SIGABRT)"
DEATH = {1: ("process 1 of 2 stopped responding", "process 1 of 2 failed", ABORTED),
         0: ("another task died", "lost contact with the coordinator", ABORTED)}


@pytest.mark.parametrize("victim", [1, 0])
def test_dead_process_makes_the_other_exit(tmp_path, victim):
    port = free_port()
    args = ["train", "--strategy", "selsync", "--steps", "1000000", "--batch-size", "4",
            "--log-every", "2", "--eval-every", "1000000", "--no-checkpoint", "--no-progress",
            "--out", str(tmp_path / "out"), "--coordinator", f"127.0.0.1:{port}",
            "--num-processes", "2", "--peer-timeout", "10"]
    procs = [subprocess.Popen([sys.executable, "-m", "jaxsel.cli", *args, "--process-id", str(i)],
                              env=env4(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    try:
        log = tmp_path / "out" / "metrics.jsonl"
        deadline = time.monotonic() + 240
        while not (log.exists() and log.stat().st_size) and time.monotonic() < deadline:
            assert all(p.poll() is None for p in procs), procs[0].communicate()[0][-3000:]
            time.sleep(0.5)
        assert log.exists(), "training never started"
        procs[victim].send_signal(signal.SIGKILL)
        survivor = procs[1 - victim]
        out = survivor.communicate(timeout=120)[0]   # bounded: it must not hang
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert survivor.returncode not in (0, None)
    assert any(text in out for text in DEATH[victim]), out[-3000:]


#: a library caller's process: joins, then process 1 raises an error of its own
RAISES = """
import sys
from jaxsel.training import distributed
port, pid = sys.argv[1], int(sys.argv[2])
distributed.start(f"127.0.0.1:{port}", 2, pid, peer_timeout=10)
if pid == 1:
    raise ValueError("process 1's own error")
distributed.barrier("never-passed")
"""


def test_an_uncaught_error_in_one_process_ends_the_others_naming_it(tmp_path):
    """Not through `jaxsel train` (whose handler tells the peers): process 1 of a library
    caller's job raises; process 0, waiting at a barrier, exits at once with the error's
    line (it waited there until JAX's shutdown deadline aborted it, SIGABRT)."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-c", RAISES, str(port), str(i)], env=env4(2),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    outs = outputs(procs, 120)
    assert "ValueError: process 1's own error" in outs[1] and procs[1].returncode != 0
    assert "process 1 of 2 failed: ValueError: process 1's own error" in outs[0], outs[0][-3000:]
    assert procs[0].returncode == EXIT_PEER_LOST


def test_distributed_auto_without_a_cluster_is_a_clear_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "jaxsel.cli", "train", "--distributed", "auto",
                           "--out", str(tmp_path / "out"), "--steps", "2"],
                          env=env4(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--distributed auto found no cluster environment" in done.stderr


def test_a_process_that_never_joins_or_a_duplicate_process_id_is_named_in_one_line(tmp_path):
    """Before JAX's coordination service (which waits, then aborts with a C++ fatal log):
    process 0 alone; a second process 0 (this test holds the port, as the first one would);
    --process-id 1 given twice in a job of 3. Every process exits 2 with one line, within
    --join-timeout."""
    ports = [free_port() for _ in range(3)]

    def start(port: int, n: int, pid: int, timeout: float) -> subprocess.Popen:
        argv = ["train", "--strategy", "bsp", "--steps", "2", "--no-checkpoint", "--no-progress",
                "--out", str(tmp_path / f"out-{port}"), "--coordinator", f"127.0.0.1:{port}",
                "--num-processes", str(n), "--process-id", str(pid), "--join-timeout", str(timeout)]
        return subprocess.Popen([sys.executable, "-m", "jaxsel.cli", *argv], env=env4(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    first = socket.create_server(("", ports[1]))   # the process 0 that came first
    procs = {"alone": start(ports[0], 2, 0, 3), "twin": start(ports[1], 2, 0, 60),
             **{f"trio{i}": start(ports[2], 3, pid, 60) for i, pid in enumerate((0, 1, 1))}}
    try:
        ends = {name: (p.communicate(timeout=180)[1], p.returncode) for name, p in procs.items()}
    finally:
        first.close()
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    for name, (err, code) in ends.items():
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, (name, err[-2000:])
    assert f"process 1 of 2 never joined 127.0.0.1:{ports[0]} within 3 s" in ends["alone"][0]
    assert f"cannot listen on port {ports[1]}" in ends["twin"][0] and "--process-id 0 given twice" in ends["twin"][0]
    for i in range(3):
        assert "process id 1 was given to two processes" in ends[f"trio{i}"][0], ends[f"trio{i}"][0]
