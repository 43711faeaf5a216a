"""What every subcommand shares: the Command interface and the console."""

from __future__ import annotations

import argparse

from rich.console import Console

# One console for all output; rich drops colour and live displays by itself
# when stdout is not a terminal.
console = Console(highlight=False)
errors = Console(stderr=True, highlight=False)


class Command:
    """A subcommand: its docstring is its help, prepare_parser() its flags, run() its work."""

    name = ""

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        pass

    def run(self, args: argparse.Namespace) -> int:
        raise NotImplementedError


def fail(message: str) -> None:
    """Print one line that says what was wrong and what to do."""
    errors.print(f"memcost: error: {message}", markup=False, soft_wrap=True)


def warn(message: str) -> None:
    errors.print(f"memcost: warning: {message}", markup=False, soft_wrap=True)
