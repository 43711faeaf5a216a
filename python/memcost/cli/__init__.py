"""The memcost command: one module per subcommand."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import __version__, exit_codes
from ..errors import MemcostError
from ..results import DEFAULT_ROOT
from ..console import fail
from .. import interrupts, journal
from .. import arguments
from .base import Command
from .bigarray import BigarrayCommand
from .compare import CompareCommand
from .costs import CostsCommand
from .hugepages import HugepagesCommand
from .importing import ImportCommand
from .info import InfoCommand
from .monitor import MonitorCommand
from .pinned import PinnedCommand
from .report import ReportCommand
from .run import RunCommand
from .scaling import ScalingCommand
from .trace import TraceCommand

COMMANDS: list[type[Command]] = [RunCommand, InfoCommand, CostsCommand, ScalingCommand, BigarrayCommand,
                                 PinnedCommand, ReportCommand, CompareCommand, MonitorCommand, HugepagesCommand, TraceCommand,
                                 ImportCommand]


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        # A prefix of a flag must never silently mean another flag (--threads for --threads-size).
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # one line and exit 2, as the probe does
        fail(f"{message} (see `{self.prog} --help`)")
        sys.exit(exit_codes.BAD_ARGUMENTS)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="memcost", description=__doc__ and "Measure the true operating-system cost of large memory allocations.")
    parser.add_argument("--version", action="version", version=f"memcost {__version__}")
    parser.add_argument("--results-dir", type=arguments.output_folder, default=DEFAULT_ROOT, metavar="DIR",
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


def main(argv: list[str] | None = None) -> int:
    """Parse, run, and turn every failure into one line and a documented exit code
    (the entry point, memcost.entry, has already made SIGTERM and SIGINT clean)."""
    args = build_parser().parse_args(argv)
    try:
        journal.restore_left_behind()
        return args.handler.run(args)
    except MemcostError as error:
        fail(error.message)
        return error.exit_code
    except KeyboardInterrupt:
        fail("interrupted; finished results were kept")
        return exit_codes.INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`memcost ... | head`): nothing is left to say to it.
        sys.stderr.close()
        return exit_codes.FAILURE
    except OSError as error:
        where = f"cannot use {error.filename}: " if error.filename else ""
        fail(f"{where}{error.strerror or error}; check the path and its permissions")
        return exit_codes.FAILURE
    except Exception as error:  # a bug: still one line, and a way to report it
        if interrupts.interrupted:
            fail("interrupted; finished results were kept")
            return exit_codes.INTERRUPTED
        fail(f"internal error ({type(error).__name__}: {error}); please report it with the command you ran")
        return exit_codes.FAILURE
