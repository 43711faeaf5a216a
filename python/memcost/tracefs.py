"""tracefs, which the probe's kernel tracepoints need (trace's mapping calls, monitor's count of
zeroed pages). A fresh boot leaves it unmounted. As root, a command that needs it mounts it for its
own run: journaled before the mount, unmounted when the command ends, and unmounted by the next
memcost command if this one was killed (journal.py). Without root nothing is mounted: the probe
says what it could not count and what to do."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from . import interrupts, journal

TRACEFS = "/sys/kernel/tracing"
_ROOTS = (TRACEFS, "/sys/kernel/debug/tracing")


def mounted() -> bool:
    return any(os.path.isdir(f"{root}/events") for root in _ROOTS)


def _unmount(undo: dict) -> str:
    if os.path.isdir(f"{undo['path']}/events"):
        subprocess.run(["umount", undo["path"]], check=True, capture_output=True)
    return f"tracefs at {undo['path']} unmounted"


journal.register("tracefs_mount", _unmount)


# Unmounts started by available(unmount_later=True), joined by wait_unmounted().
_unmounting: list = []


@contextmanager
def available(unmount_later: bool = False) -> Iterator[bool]:
    """tracefs mounted for the duration, where this process may mount it; yields whether it is there.
    `unmount_later`: the unmount (a `umount` process, 4-20 ms after a traced `import torch` on the
    2-vCPU guest, where the front end is large to fork) runs on a thread of its own, beside what
    the caller does next; wait_unmounted() waits for it, and memcost.entry does before it leaves."""
    wait_unmounted()  # an unmount still under way would take the mount from under this one
    entry = None
    interrupted_before = interrupts.interrupted
    try:
        if os.geteuid() == 0 and not mounted() and os.path.isdir(TRACEFS):
            # A Ctrl-C while mounting (it reaches `mount` too) is held until the mount is journaled
            # and known, then raised: the mount is undone below, not left for the next command.
            with interrupts.held():
                entry = journal.record("tracefs_mount", f"tracefs at {TRACEFS}", path=TRACEFS)
                try:
                    subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS], check=True, capture_output=True)
                except (OSError, subprocess.CalledProcessError):
                    pass
                if not mounted():
                    journal.forget(entry)  # nothing was changed; the probe says what it could not count
                    entry = None
            if interrupts.interrupted and not interrupted_before:
                raise KeyboardInterrupt
        yield mounted()
    finally:
        if entry is not None and unmount_later:
            thread = threading.Thread(target=_unmount_or_leave, args=(entry,), name="memcost-umount", daemon=True)
            thread.start()
            _unmounting.append(thread)
        elif entry is not None:
            _unmount_or_leave(entry)


def wait_unmounted() -> None:
    """Returns once the unmounts that available(unmount_later=True) started are done (or left in
    the journal for the next command, and said)."""
    while _unmounting:
        _unmounting.pop().join()


def _unmount_or_leave(entry: dict) -> None:
    """Unmounted and forgotten; if it stays busy (a shell whose folder is in it), left in the
    journal for the next memcost command to unmount, and said. The probe holds no file there while
    it closes its events, after its last line: tried for a second in case something else did."""
    for _ in range(20):
        try:
            _unmount({"path": TRACEFS})
        except (OSError, subprocess.CalledProcessError):
            time.sleep(0.05)
            continue
        journal.forget(entry)
        return
    journal.warn(f"tracefs at {TRACEFS} is busy and stays mounted; the next memcost command unmounts it "
                 f"(or `umount {TRACEFS}`)")
