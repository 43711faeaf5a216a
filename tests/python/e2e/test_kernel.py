"""The front end's own reads of /proc and /sys (memcost/kernel.py), one reader each."""

import os
import subprocess
import sys

from memcost import kernel


def test_a_vmstat_counter_is_read_and_a_missing_one_is_none():
    assert isinstance(kernel.vmstat_counter("nr_free_pages"), int)
    assert kernel.vmstat_counter("no_such_counter") is None


def test_a_process_start_time_tells_a_pid_reused_apart_and_a_gone_one_is_none():
    mine = kernel.process_start_ticks(os.getpid())
    assert mine is not None and mine.isdigit()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    try:
        theirs = kernel.process_start_ticks(child.pid)
        assert theirs is not None and int(theirs) >= int(mine)
    finally:
        child.wait()
    assert kernel.process_start_ticks(child.pid) is None  # reaped: gone
    assert kernel.process_start_ticks(4_194_305) is None  # above PID_MAX_LIMIT: no such process


def test_the_pmd_size_is_a_power_of_two_of_at_least_a_megabyte():
    size = kernel.pmd_huge_page_bytes()
    assert size >= 1 << 20 and size & (size - 1) == 0


def test_standard_input_is_named_by_its_file():
    with open(os.devnull) as null:
        found = subprocess.run([sys.executable, "-c", "from memcost import kernel; print(kernel.standard_input_path())"],
                               stdin=null, capture_output=True, text=True, check=True)
    assert found.stdout.strip() == os.devnull
