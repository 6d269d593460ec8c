"""A thread's quiet block (data/quiet.py) hides that thread's output only, and never frees
the stream another thread prints through: CPython's print() holds `sys.stdout`'s object
without a reference of its own, and a quiet stream put back and freed under it crashed the
process (SIGSEGV within seconds here; a job's batch threads died of it)."""
import subprocess
import sys
import textwrap
import threading
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


def test_a_thread_opening_its_dataset_hides_its_own_output_only(capsys):
    """TFDS's lines are hidden while a thread probes its data dir (data/quiet.py); another
    thread's progress line printed meanwhile is kept (a global redirect of stdout lost it)."""
    from absl import logging

    from jaxsel.data.sources import quiet_tfds

    level = logging.get_verbosity()
    inside, printed = threading.Event(), threading.Event()

    def progress_line():
        inside.wait(10)
        print("[cells 1-3 of 9] another batch's line")
        printed.set()

    thread = threading.Thread(target=progress_line)
    thread.start()
    with quiet_tfds():
        print("Downloading and preparing dataset ...")
        assert logging.get_verbosity() == logging.ERROR
        inside.set()
        assert printed.wait(10)
    thread.join()
    assert capsys.readouterr().out == "[cells 1-3 of 9] another batch's line\n"
    assert logging.get_verbosity() == level
