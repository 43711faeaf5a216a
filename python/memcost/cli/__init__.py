"""The memcost command: one module per subcommand."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from .. import __version__, exit_codes
from ..probe import ProbeFailed
from ..results import DEFAULT_ROOT, ResultsError
from ..console import fail
from .base import Command
from .bigarray import BigarrayCommand
from .compare import CompareCommand
from .costs import CostsCommand
from .hugepages import HugepagesCommand
from .info import InfoCommand
from .monitor import MonitorCommand
from .report import ReportCommand
from .run import RunCommand
from .scaling import ScalingCommand

COMMANDS: list[type[Command]] = [RunCommand, InfoCommand, CostsCommand, ScalingCommand, BigarrayCommand,
                                 ReportCommand, CompareCommand, MonitorCommand, HugepagesCommand]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, as the probe does
        fail(f"{message} (see `{self.prog} --help`)")
        sys.exit(exit_codes.BAD_ARGUMENTS)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="memcost", description=__doc__ and "Measure the true operating-system cost of large memory allocations.")
    parser.add_argument("--version", action="version", version=f"memcost {__version__}")
    parser.add_argument("--results-dir", type=Path, default=DEFAULT_ROOT, metavar="DIR",
                        help="where results are written (default: ./results)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    subparsers.required = True
    for command_class in COMMANDS:
        command = command_class()
        doc = (command_class.__doc__ or "").strip()
        sub = subparsers.add_parser(command.name, help=doc.splitlines()[0] if doc else None, description=doc,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        command.prepare_parser(sub)
        sub.set_defaults(handler=command)
    return parser


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    # SIGTERM takes the same clean path as Ctrl-C: pools and settings restored.
    signal.signal(signal.SIGTERM, _interrupt)
    args = build_parser().parse_args(argv)
    try:
        return args.handler.run(args)
    except ProbeFailed as error:
        fail(error.message)
        return error.exit_code
    except ResultsError as error:
        fail(str(error))
        return exit_codes.FAILURE
    except KeyboardInterrupt:
        fail("interrupted; finished results were kept")
        return exit_codes.INTERRUPTED
