"""A thread's quiet block (data/quiet.py) never frees the stream another thread prints
through: CPython's print() holds `sys.stdout`'s object without a reference of its own, and a
quiet stream put back and freed under it crashed the process (SIGSEGV within seconds here;
a job's batch threads died of it)."""
import subprocess
import sys
import textwrap
from pathlib import Path

RACE = textwrap.dedent("""
    import io, sys, threading, time
    from jaxsel.data.quiet import quiet_here
    sys.stdout = io.StringIO()
    stop = time.monotonic() + 3

    def printer():
        while time.monotonic() < stop:
            print("a progress line", "in", "parts")

    def quieter():
        while time.monotonic() < stop:
            with quiet_here():
                pass

    threads = [threading.Thread(target=printer) for _ in range(3)] + [threading.Thread(target=quieter) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sys.__stdout__.write("every thread ran to its end\\n")
""")


def test_threads_printing_while_others_turn_quiet_on_and_off_do_not_crash():
    done = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0 and "every thread ran to its end" in done.stdout, (done.returncode, done.stderr[-2000:])
