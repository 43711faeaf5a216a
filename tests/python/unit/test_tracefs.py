"""tracefs mounted for a command's run and always put back: a Ctrl-C that arrives while `mount`
runs (a terminal sends it to `mount` too) is held until the mount is journaled and known, then
raised, and the mount is undone at once, not left for the next memcost command."""

import json
import os
import signal
import subprocess

import pytest

from memcost import interrupts, tracefs


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """A stand-in for the machine: whether tracefs is mounted, and the mount and umount commands."""
    state = {"mounted": False, "interrupt_in_mount": False, "calls": []}
    monkeypatch.setenv("MEMCOST_JOURNAL", str(tmp_path / "journal.json"))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(os.path, "isdir", lambda path: True)
    monkeypatch.setattr(tracefs, "mounted", lambda: state["mounted"])

    def run(command, **_):
        state["calls"].append(command[0])
        state["mounted"] = command[0] == "mount"
        if command[0] == "mount" and state["interrupt_in_mount"]:
            os.kill(os.getpid(), signal.SIGINT)
        return subprocess.CompletedProcess(command, 0)
    monkeypatch.setattr(subprocess, "run", run)
    previous = signal.signal(signal.SIGINT, interrupts.handle)  # as memcost's entry point installs it
    monkeypatch.setattr(interrupts, "interrupted", False)
    yield state
    signal.signal(signal.SIGINT, previous)


def test_it_is_mounted_for_the_run_and_unmounted_after(machine, tmp_path):
    with tracefs.available() as there:
        assert there and machine["mounted"]
    assert not machine["mounted"] and machine["calls"] == ["mount", "umount"]
    assert json.loads((tmp_path / "journal.json").read_text()) == []


def test_a_ctrl_c_while_mounting_unmounts_at_once_and_is_raised(machine, tmp_path):
    machine["interrupt_in_mount"] = True
    with pytest.raises(KeyboardInterrupt):
        with tracefs.available():
            pytest.fail("the run must not start after a Ctrl-C")
    assert not machine["mounted"] and machine["calls"] == ["mount", "umount"]
    assert interrupts.interrupted
    assert json.loads((tmp_path / "journal.json").read_text()) == []


def test_a_mount_that_stays_busy_is_left_to_the_journal_and_said(machine, tmp_path, monkeypatch, capsys):
    """umount refused (a shell whose folder is in tracefs): tried for a while, then left journaled
    for the next memcost command, with one sentence, not a traceback."""
    busy = {"left": 3}
    run = subprocess.run

    def refusing(command, **kwargs):
        if command[0] == "umount" and busy["left"]:
            busy["left"] -= 1
            raise subprocess.CalledProcessError(32, command, stderr=b"target is busy")
        return run(command, **kwargs)
    monkeypatch.setattr(subprocess, "run", refusing)
    monkeypatch.setattr(tracefs.time, "sleep", lambda seconds: None)
    with tracefs.available():
        pass
    assert not machine["mounted"] and machine["calls"] == ["mount", "umount"]  # the fourth try
    assert json.loads((tmp_path / "journal.json").read_text()) == []
    busy["left"] = 1000
    with tracefs.available():
        pass
    assert machine["mounted"]
    [left] = json.loads((tmp_path / "journal.json").read_text())
    assert left["kind"] == "tracefs_mount"
    assert "stays mounted" in capsys.readouterr().err


def test_an_unmount_left_for_later_runs_beside_the_caller_and_is_waited_for(machine, tmp_path, monkeypatch):
    """`memcost trace` unmounts on a thread of its own while it summarizes (unmount_later): the
    mount is still undone and forgotten once wait_unmounted() returns, and the next mount waits for
    an unmount still under way rather than have it taken from under itself."""
    import threading
    release = threading.Event()
    run = subprocess.run

    def slow_umount(command, **kwargs):
        if command[0] == "umount":
            assert release.wait(5)
        return run(command, **kwargs)
    monkeypatch.setattr(subprocess, "run", slow_umount)
    with tracefs.available(unmount_later=True) as there:
        assert there
    assert machine["mounted"]  # the caller goes on while `umount` runs
    release.set()
    tracefs.wait_unmounted()
    assert not machine["mounted"] and machine["calls"] == ["mount", "umount"]
    assert json.loads((tmp_path / "journal.json").read_text()) == []

    release.clear()
    with tracefs.available(unmount_later=True):
        pass
    threading.Timer(0.05, release.set).start()
    with tracefs.available():  # waits for the unmount above, then mounts afresh
        assert machine["mounted"] and machine["calls"] == ["mount", "umount", "mount", "umount", "mount"]
    assert not machine["mounted"]
    assert json.loads((tmp_path / "journal.json").read_text()) == []
