"""What memcost changed on this machine and has not put back yet.

Before memcost changes a machine setting (a hugetlb pool's size; later a THP setting or a
tracefs mount) it writes an entry here saying how to put it back, and it removes the entry once
it has. An entry whose owner process is gone was left by a memcost that was killed: the next
memcost command, or `memcost hugepages restore`, puts the setting back and says so.

The journal lives in /run (a tmpfs, empty after a reboot, when the settings are back at their
boot values too) as root, else in $XDG_RUNTIME_DIR or /tmp; $MEMCOST_JOURNAL overrides.
"""

from __future__ import annotations

import fcntl
import importlib
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from . import kernel


def warn(message: str) -> None:
    """A warning through rich's console, loaded only when there is one (`memcost --version` and
    every command that finds nothing to restore load no rich for it)."""
    from .console import warn as say
    say(message)

JOURNAL_ENV = "MEMCOST_JOURNAL"

# kind -> function that puts the setting of one entry back and returns a sentence saying what it did.
_RESTORERS: dict[str, Callable[[dict], str]] = {}

# kind -> the module that registers its restorer when imported: a command imports only what it uses
# (memcost.cli), so a kind left behind by another command's module is imported when it is met.
_RESTORER_MODULES = {"hugetlb_pool": "memcost.hugepool", "tracefs_mount": "memcost.tracefs"}


def register(kind: str, restore: Callable[[dict], str]) -> None:
    _RESTORERS[kind] = restore


def path() -> Path:
    override = os.environ.get(JOURNAL_ENV)
    if override:
        return Path(override)
    if os.geteuid() == 0:
        return Path("/run/memcost/journal.json")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return Path(runtime) / "memcost-journal.json" if runtime else Path(f"/tmp/memcost-{os.getuid()}/journal.json")


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot: a pid reused later has another."""
    return kernel.process_start_ticks(pid)


@contextmanager
def _locked() -> Iterator[list]:
    """The entries, read and written back under an exclusive lock."""
    journal = path()
    journal.parent.mkdir(parents=True, exist_ok=True)
    with open(journal, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        try:
            entries = json.loads(handle.read() or "[]")
            if not isinstance(entries, list):
                entries = []
        except json.JSONDecodeError:
            entries = []
        yield entries
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(entries, indent=1))


def _owner_alive(entry: dict) -> bool:
    return _start_time(entry.get("pid", -1)) == entry.get("pid_start")


def record(kind: str, description: str, **undo) -> dict:
    """Before a change to the machine: how to undo it. Returns the entry for forget()."""
    entry = {"kind": kind, "description": description, "pid": os.getpid(), "pid_start": _start_time(os.getpid()),
             "undo": undo}
    with _locked() as entries:
        entries.append(entry)
    return entry


def forget(entry: dict) -> None:
    """After the change was undone."""
    with _locked() as entries:
        if entry in entries:
            entries.remove(entry)


def left_behind() -> list[dict]:
    if not path().exists():
        return []
    with _locked() as entries:
        return [entry for entry in entries if not _owner_alive(entry)]


def restore_left_behind() -> list[str]:
    """Put back what killed memcost runs changed; one warning line each. Entries that cannot be
    restored now (not root, say) stay, and the warning says how."""
    done: list[str] = []
    try:
        if path().exists():
            _restore_into(done)
    except OSError:
        pass  # an unreadable journal is not this command's business; `hugepages restore` reports it
    return done


def _restore_into(done: list[str]) -> None:
    with _locked() as entries:
        for entry in [e for e in entries if not _owner_alive(e)]:
            if entry.get("kind") not in _RESTORERS and entry.get("kind") in _RESTORER_MODULES:
                importlib.import_module(_RESTORER_MODULES[entry["kind"]])
            restore = _RESTORERS.get(entry.get("kind"))
            if restore is None:
                continue
            try:
                sentence = restore(entry["undo"])
            except Exception as error:  # noqa: BLE001 - it must not stop the command the user asked for
                warn(f"a killed memcost run left {entry['description']} changed and it could not be put back "
                     f"({getattr(error, 'message', error)}); run `memcost hugepages restore` as root")
                continue
            entries.remove(entry)
            done.append(sentence)
            warn(f"{sentence} (left changed by a memcost run that was killed, pid {entry['pid']})")
