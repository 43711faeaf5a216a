"""Exit codes shared by memcost and memcost-probe (documented in README.md)."""

OK = 0
FAILURE = 1
BAD_ARGUMENTS = 2
NOT_ENOUGH_MEMORY = 3
UNSUPPORTED = 4
INTERRUPTED = 130
