"""The supervisor of a multi-host process: exit codes pass through, SIGTERM reaches the
training process once, an abort becomes one clear error line, and the training process
never outlives its supervisor."""
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jaxsel.training.supervisor import ENV, EXIT_PEER_LOST, available

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="supervision is Linux-only")

SUPERVISOR = ("import sys; from jaxsel.training.supervisor import supervise; "
              "sys.exit(supervise(sys.argv[1:], 'process 0 of 2'))")


def child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def supervised(code: str) -> tuple[int, str]:
    """Exit code and output of a fresh supervisor over a child running `code` (a fresh
    process, as in real use: this one has JAX's threads running)."""
    done = subprocess.run([sys.executable, "-c", SUPERVISOR, *child(code)],
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr


def test_exit_codes_pass_through_and_the_child_is_marked():
    assert supervised(f"import os, sys; sys.exit(0 if os.environ['{ENV}'] == '1' else 9)")[0] == 0
    assert supervised("import sys; sys.exit(3)")[0] == 3


def test_an_abort_is_one_clear_error_line():
    code, out = supervised("import os; os.abort()")
    assert code == EXIT_PEER_LOST
    line = out.strip().splitlines()[-1]
    assert line.startswith("jaxsel train: error: process 0 of 2: the training process was aborted (SIGABRT)")
    assert "--resume" in line


def test_a_kill_from_outside_is_named():
    code, out = supervised("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert code == EXIT_PEER_LOST
    assert "the training process was killed by SIGKILL (the out-of-memory killer" in out.strip().splitlines()[-1]


def test_a_supervised_process_does_not_supervise_again(monkeypatch):
    monkeypatch.setenv(ENV, "1")
    assert not available()


def _start(tmp_path: Path, body: str, setup: str = "") -> tuple[subprocess.Popen, Path]:
    """A supervisor whose child runs `setup`, writes its pid to a file (ready) and then runs `body`."""
    pid_file = tmp_path / "child.pid"
    code = (f"import os, pathlib, time, signal\n{setup}\n"
            f"pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))\n{body}")
    sup = subprocess.Popen([sys.executable, "-c", SUPERVISOR, *child(code)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()):
        assert sup.poll() is None and time.monotonic() < deadline, sup.communicate()[0]
        time.sleep(0.05)
    return sup, pid_file


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"   # a zombie waiting for a reaper is gone for our purposes


def test_sigterm_reaches_the_training_process_once(tmp_path):
    """The child says it is ready only once its handler is in place (a SIGTERM before that
    would end it, exit 143), and the supervisor forwards from before the child starts."""
    setup = ("seen = []\n"
             "signal.signal(signal.SIGTERM, lambda s, f: seen.append(s))")
    body = ("deadline = time.monotonic() + 30\n"
            "while not seen and time.monotonic() < deadline: time.sleep(0.01)\n"
            "time.sleep(0.3)\n"
            "print('child saw', len(seen), 'SIGTERM', flush=True)\n"
            "raise SystemExit(0 if seen else 5)")
    sup, _ = _start(tmp_path, body, setup)
    sup.send_signal(signal.SIGTERM)
    out = sup.communicate(timeout=60)[0]
    assert sup.returncode == 0, out
    assert "child saw 1 SIGTERM" in out


def test_a_sigterm_while_the_child_starts_is_forwarded_not_fatal(tmp_path):
    """A SIGTERM that reaches the supervisor before its child exists (sent here from inside
    its `Popen`, the window a loaded host stretches) is forwarded once the child runs: the
    supervisor ends as a forwarded SIGTERM (143; the child died of it before its own
    handler), never killed by it (-15) with its child left to PR_SET_PDEATHSIG."""
    early = ("import os, signal, subprocess, sys\n"
             "from jaxsel.training import supervisor\n"
             "popen = subprocess.Popen\n"
             "def starting(*args, **kwargs):\n"
             "    os.kill(os.getpid(), signal.SIGTERM)\n"
             "    return popen(*args, **kwargs)\n"
             "supervisor.subprocess.Popen = starting\n"
             "sys.exit(supervisor.supervise(sys.argv[1:], 'process 0 of 2'))")
    done = subprocess.run([sys.executable, "-c", early, *child("import time; time.sleep(30)")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 128 + signal.SIGTERM, (done.returncode, done.stdout + done.stderr)


def test_the_training_process_dies_with_its_supervisor(tmp_path):
    sup, pid_file = _start(tmp_path, "time.sleep(120)")
    pid = int(pid_file.read_text())
    assert _alive(pid)
    sup.send_signal(signal.SIGKILL)
    sup.wait(timeout=30)
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)
