"""Ctrl-C and SIGTERM for the `memcost` command: one flag and one handler, shared by the entry
point (which installs it) and the commands (which read it, or hold an interrupt back while they
write what was recorded). A terminal's Ctrl-C reaches memcost and every probe it runs at once."""

from __future__ import annotations

import contextlib
import signal

# Set by Ctrl-C or SIGTERM. A library that catches the KeyboardInterrupt inside its own start-up
# (numpy turns it into "ImportError: initialization failed") still ends as an interrupt.
interrupted = False


def handle(signum, frame):
    global interrupted
    interrupted = True
    raise KeyboardInterrupt


@contextlib.contextmanager
def held():
    """Within it, Ctrl-C and SIGTERM are noted, not raised: a trace's results are written whole
    (no partial document), and the command ends with 130 afterwards (`interrupted` is set)."""
    def note(signum, frame):
        global interrupted
        interrupted = True
    previous = {signum: signal.signal(signum, note) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
