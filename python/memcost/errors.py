"""The one failure type the command turns into a line and an exit code."""

from __future__ import annotations

from . import exit_codes


class MemcostError(Exception):
    """Something the user can act on: the message says what was wrong and what to do."""

    def __init__(self, message: str, exit_code: int = exit_codes.FAILURE):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
