"""The `memcost` command's entry point: light on purpose, so that Ctrl-C or SIGTERM at any
moment, even while the heavy modules load, ends in one line and exit code 130."""

import os
import signal
import sys

from . import interrupts


def _unraisable(report) -> None:
    """An interrupt that landed where Python cannot raise it (a weakref callback inside the import
    machinery) would be printed with a traceback and then lost: deliver it again a millisecond
    later (SIGALRM, same handler), once that callback is over, so that it reaches the command's own
    handling. Raising it here, inside the hook, would only be swallowed again."""
    if report.exc_type is not None and issubclass(report.exc_type, KeyboardInterrupt):
        signal.setitimer(signal.ITIMER_REAL, 0.001)
        return
    sys.__unraisablehook__(report)


def _from_interrupt(error: BaseException) -> bool:
    """Whether a KeyboardInterrupt is among the causes of `error`."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def main() -> int:
    # SIGTERM takes the same clean path as Ctrl-C: pools and settings restored.
    signal.signal(signal.SIGINT, interrupts.handle)
    signal.signal(signal.SIGTERM, interrupts.handle)
    signal.signal(signal.SIGALRM, interrupts.handle)
    sys.unraisablehook = _unraisable
    from . import early_signals
    if early_signals:  # it came while this module was loading
        sys.stderr.write("memcost: error: interrupted before anything was done\n")
        return 130
    try:
        from .cli import main as run_command
        code = run_command()
    except KeyboardInterrupt:
        sys.stderr.write("memcost: error: interrupted; finished results were kept\n")
        code = 130
    except RuntimeError as error:
        # An interrupt that landed inside a class's creation while a module loaded (a dataclass
        # field's __set_name__) comes out wrapped in a RuntimeError: it is still the interrupt.
        if not _from_interrupt(error):
            raise
        sys.stderr.write("memcost: error: interrupted before anything was done\n")
        code = 130
    probe = sys.modules.get("memcost.probe")  # loaded only by the commands that run one
    if probe is not None:
        probe.wait_unreaped()
    tracefs = sys.modules.get("memcost.tracefs")  # likewise: a mount made for the run is undone before memcost leaves
    if tracefs is not None:
        tracefs.wait_unmounted()
    if interrupts.interrupted:
        # Python ends a process by the signal itself when a KeyboardInterrupt passed through C code
        # unhandled (a library's start-up): everything is cleaned up by now, so leave with 130.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    return code


def leave(code: int) -> None:
    """Ends the process with `code`, once everything is written: without the interpreter's own
    teardown, which frees every object one by one (a traced `import torch`'s document and stacks:
    25 ms of its 2.2 s on the 2-vCPU guest, 10 interleaved rounds), unless a thread that is not a
    daemon still runs (Python would wait for it)."""
    import threading
    if any(not thread.daemon for thread in threading.enumerate() if thread is not threading.main_thread()):
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`memcost ... | head`), a closed stream
            pass
    os._exit(code if isinstance(code, int) else 1)


def run() -> None:
    """The `memcost` command (pyproject's script, and `python -m memcost`)."""
    leave(main())

