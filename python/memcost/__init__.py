"""memcost: measure the true operating-system cost of large memory allocations."""

__version__ = "0.1.0"
