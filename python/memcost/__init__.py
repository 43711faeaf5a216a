"""memcost: measure the true operating-system cost of large memory allocations."""

import sys as _sys

__version__ = "0.1.0"

# Ctrl-C or SIGTERM in the first instant of the `memcost` command, before its entry point has
# loaded, is noted here instead of ending in a traceback; the entry point then leaves with 130.
# Only when memcost is the program (`memcost ...`, `python -m memcost`), never as a library.
early_signals: list = []
if _sys.argv and (_sys.argv[0] == "-m" or _sys.argv[0].rsplit("/", 1)[-1] == "memcost"):
    import _signal  # the C module: nothing else loads before the handler is in place

    _signal.signal(_signal.SIGINT, lambda signum, frame: early_signals.append(signum))
    _signal.signal(_signal.SIGTERM, lambda signum, frame: early_signals.append(signum))
