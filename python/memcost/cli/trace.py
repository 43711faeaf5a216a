"""`memcost trace -- COMMAND`: what a real program's big allocations cost the OS, per line of code."""

from __future__ import annotations

import argparse
import signal

from .. import arguments, exit_codes, export, probe, tracing
from ..errors import MemcostError
from ..experiments.trace import EXPERIMENT
from ..results import RunDirectory
from .base import Command

# The modules that show a trace, imported while the command runs (tracing.END_MODULES), not before
# it starts: `memcost trace -- true` started its command 0.1 s later when it imported them first.
REPORT_MODULES = ("memcost.console", "memcost.export.folded", "memcost.export.pprof", "memcost.report.trace",
                  "memcost.report.terminal")

# Signals that mean the program crashed, rather than was stopped.
CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT, signal.SIGTRAP, signal.SIGSYS}


class TraceCommand(Command):
    """Run a command and show what its big allocations cost the OS, per line of code (Linux).

    Every mapping call (mmap, munmap, mremap, brk, madvise) with its call stack and measured
    duration, and every page fault with the stack that touched the page, from the kernel's perf
    events; stacks are unwound with DWARF call-frame information (no frame pointers needed) and
    symbolized with elfutils. Faults are charged to the allocation site whose mapping held the
    address. Fault time is estimated from this machine's `memcost costs` result (or a short
    calibration run). Without root, an LD_PRELOAD interposer reports the calls instead of the
    kernel's tracepoints. Exports: folded stacks and pprof. The command's output and exit code
    pass through; Ctrl-C stops the command and keeps what was recorded. See docs/trace.md.
    """

    name = "trace"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        EXPERIMENT.add_options(parser)
        parser.add_argument("--pid", type=arguments.positive_int, metavar="PID",
                            help="instead of a command: watch this running process (root) until it exits, "
                                 "--seconds pass, or Ctrl-C")
        parser.add_argument("--seconds", type=arguments.bounded_seconds(0.0, 1e7, allow_minimum=False), metavar="S",
                            help="with --pid: stop watching after S seconds")
        parser.add_argument("--export-folded", type=arguments.output_file, metavar="PATH",
                            help="folded stacks of faults by allocation site (flamegraph.pl, speedscope)")
        parser.add_argument("--export-pprof", type=arguments.output_path, metavar="PATH",
                            help="gzipped pprof profile (go tool pprof, Pyroscope, Parca); with --every, a folder "
                                 "that gets one profile per window")
        parser.add_argument("--every", type=arguments.bounded_duration(1.0, 1e6), metavar="DURATION",
                            help="with --export-pprof FOLDER: one profile per window of this length (60s, 5m, 1h), "
                                 "written as each window ends, for a continuous profiler")
        export.add_arguments(parser)
        parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                            help="the command to run and trace")

    def run(self, args: argparse.Namespace) -> int:
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if bool(command) == bool(args.pid):
            raise MemcostError("name the command to trace after --, e.g. `memcost trace -- sort big.txt`, "
                               "or a running process with --pid (not both)", exit_codes.BAD_ARGUMENTS)
        if args.pid and args.overhead:
            raise MemcostError("--overhead runs the command again; a process given by --pid cannot be",
                               exit_codes.BAD_ARGUMENTS)
        if args.pid and args.verify:
            raise MemcostError("--verify runs the command again with each advice applied; a service given by --pid "
                               "cannot be restarted: trace its command instead", exit_codes.BAD_ARGUMENTS)
        if args.verify_only and not args.verify:
            raise MemcostError("--verify-only chooses what --verify measures: give --verify too", exit_codes.BAD_ARGUMENTS)
        if args.seconds and not args.pid:
            raise MemcostError("--seconds goes with --pid (a command is traced until it exits)", exit_codes.BAD_ARGUMENTS)
        check_pprof_destination(args)
        values = {**EXPERIMENT.values(args), "command": command, "pid": args.pid, "seconds": args.seconds,
                  "every": args.every, "windows_folder": args.export_pprof if args.every else None}
        document = tracing.measure(values, RunDirectory(args.results_dir), REPORT_MODULES)
        from ..console import console, warn
        from ..export import folded, pprof
        from ..report import trace as prose
        from ..report.terminal import print_closing, print_table
        summary, totals = document["summary"], document["summary"]["totals"]
        for table in prose.tables(summary, values["top"]):
            print_table(table)
        for line in prose.notes(summary):
            console.print(line, markup=False)
        print_closing(document)
        if args.export_folded:
            folded.write(document, args.export_folded)
            console.print(f"Exported: {args.export_folded}", markup=False)
        if document.get("windows"):
            windows = document["windows"]
            console.print(f"Exported: {windows['written']} window profiles of {args.every:g} s in {args.export_pprof} "
                          f"(newest {windows['last']})", markup=False)
        elif args.export_pprof:
            pprof.write(document, args.export_pprof)
            console.print(f"Exported: {args.export_pprof}", markup=False)
        export.export_requested(document, args)
        # The probe closed its events while all this was done (tracing.record): its end is judged now.
        probe.reap()
        if totals["interrupted"]:
            warn(f"interrupted: what was recorded until then is in {document['path']}")
            return exit_codes.INTERRUPTED
        exit_code = 0 if args.pid else totals["exit_code"]  # a watched process is not ours to pass on
        if totals.get("signal") in CRASH_SIGNALS:
            warn(f"{command[0]} crashed ({signal.Signals(totals['signal']).name}); what it did until then is above; "
                 f"memcost passes on {exit_code}, as a shell would")
        elif exit_code:
            warn(f"{command[0]} exited with {exit_code}; memcost passes it on")
        return int(exit_code or 0)


def check_pprof_destination(args: argparse.Namespace) -> None:
    """--every writes a folder of profiles; one profile is a file. Said before anything runs."""
    path = args.export_pprof
    if args.every and not path:
        raise MemcostError("--every writes one pprof profile per window: add --export-pprof FOLDER",
                           exit_codes.BAD_ARGUMENTS)
    if not path:
        return
    if args.every:
        if path.is_file():
            raise MemcostError(f"{path} is a file; with --every, --export-pprof names a folder for the window profiles",
                               exit_codes.BAD_ARGUMENTS)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise MemcostError(f"cannot create {path}: {error.strerror}; choose another folder", exit_codes.FAILURE) \
                from error
    elif path.is_dir():
        raise MemcostError(f"{path} is a folder: name a file for the profile, or add --every for one per window",
                           exit_codes.BAD_ARGUMENTS)
