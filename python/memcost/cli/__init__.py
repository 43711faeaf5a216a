"""The memcost command: one module per subcommand."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from .. import __version__, exit_codes
from ..errors import MemcostError
from ..results import DEFAULT_ROOT
from .. import interrupts, journal
from .. import arguments
from .base import Command

# Each subcommand's module (under memcost.cli) and class. A command line imports only the module of
# the command it names, so that `memcost trace -- true` loads no plotting and no statistics it does
# not use, and `memcost --version` none at all; help, or a line that names no command, loads them all.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "RunCommand"), "info": ("info", "InfoCommand"), "costs": ("costs", "CostsCommand"),
    "scaling": ("scaling", "ScalingCommand"), "bigarray": ("bigarray", "BigarrayCommand"),
    "pinned": ("pinned", "PinnedCommand"), "report": ("report", "ReportCommand"),
    "compare": ("compare", "CompareCommand"), "monitor": ("monitor", "MonitorCommand"),
    "hugepages": ("hugepages", "HugepagesCommand"), "trace": ("trace", "TraceCommand"),
    "import": ("importing", "ImportCommand"),
}


def command_class(name: str) -> type[Command]:
    module, class_name = COMMANDS[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), class_name)


def _commands_named(argv: list[str]) -> list[str]:
    """The commands a command line needs parsers for: the one it names; none for `--version`
    alone; every one for help or a line that names none (argparse then lists them)."""
    index = 0
    while index < len(argv):
        word = argv[index]
        if word in ("-h", "--help"):
            break
        if word == "--results-dir":
            index += 2
            continue
        if not word.startswith("-"):
            return [word] if word in COMMANDS else list(COMMANDS)
        index += 1
    return [] if "--version" in argv and not {"-h", "--help"} & set(argv) else list(COMMANDS)


def fail(message: str) -> None:
    """One line on standard error (rich's console, loaded only when something is to be said)."""
    from ..console import fail as say
    say(message)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        # A prefix of a flag must never silently mean another flag (--threads for --threads-size).
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # one line and exit 2, as the probe does
        fail(f"{message} (see `{self.prog} --help`)")
        sys.exit(exit_codes.BAD_ARGUMENTS)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser for a command line (`argv`: only the parsers it needs), or for every command."""
    parser = _Parser(prog="memcost", description=__doc__ and "Measure the true operating-system cost of large memory allocations.")
    parser.add_argument("--version", action="version", version=f"memcost {__version__}")
    parser.add_argument("--results-dir", type=arguments.output_folder, default=DEFAULT_ROOT, metavar="DIR",
                        help="where results are written (default: ./results)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    subparsers.required = True
    for name in _commands_named(argv) if argv is not None else COMMANDS:
        command = command_class(name)()
        doc = (type(command).__doc__ or "").strip()
        sub = subparsers.add_parser(command.name, help=doc.splitlines()[0] if doc else None, description=doc,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        command.prepare_parser(sub)
        sub.set_defaults(handler=command)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse, run, and turn every failure into one line and a documented exit code
    (the entry point, memcost.entry, has already made SIGTERM and SIGINT clean)."""
    args = build_parser(sys.argv[1:] if argv is None else argv).parse_args(argv)
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
