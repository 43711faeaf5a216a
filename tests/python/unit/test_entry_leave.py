"""memcost's exit (entry.leave): without the interpreter's teardown once everything is written, and
with it while a thread that is not a daemon still runs; either way the exit code is the command's
and what it printed reaches the pipe."""

import os
import subprocess
import sys
from pathlib import Path

PYTHON_DIR = Path(__file__).resolve().parents[3] / "python"


def run(script: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)


def test_the_exit_code_and_the_buffered_output_survive_the_short_exit():
    # Standard output to a pipe is block-buffered: unflushed, this line would be lost by os._exit.
    ended = run("import sys, atexit\n"
                "from memcost.entry import leave\n"
                "atexit.register(lambda: print('teardown ran'))\n"
                "print('written'); sys.stderr.write('said\\n')\n"
                "leave(3)\n")
    assert ended.returncode == 3
    assert ended.stdout == "written\n"  # the interpreter's teardown (its atexit) did not run
    assert ended.stderr == "said\n"


def test_a_thread_that_is_not_a_daemon_is_waited_for():
    ended = run("import threading, time\n"
                "from memcost.entry import leave\n"
                "def late():\n"
                "    time.sleep(0.3); print('the thread finished', flush=True)\n"
                "threading.Thread(target=late).start()\n"
                "leave(5)\n")
    assert ended.returncode == 5
    assert ended.stdout == "the thread finished\n"
