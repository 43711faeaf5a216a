"""`memcost trace -- COMMAND`: what a real program's big allocations cost the OS, per line of code."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


from .. import exit_codes, export, tracefs
from ..console import console, warn
from ..errors import MemcostError
from ..results import RunDirectory, documents_of_host, make_document
from .. import arguments
from .base import Command, print_closing

# Signals that mean the program crashed, rather than was stopped.
CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT, signal.SIGTRAP, signal.SIGSYS}


def perf_event_paranoid() -> int:
    """The kernel's perf_event_paranoid: above 2 (a Debian patch) users may not use perf at all."""
    setting = Path("/proc/sys/kernel/perf_event_paranoid")
    return int(setting.read_text()) if setting.exists() else 2


def cost_model(results_root: Path, calibrate: bool, notes: list):
    """This machine's fault cost: the newest `memcost costs` result for this host, else a short
    calibration run now (said so in the output)."""
    from ..analysis import trace as analysis
    if not calibrate:
        for path, document in documents_of_host(results_root, "costs", socket.gethostname()):
            model = analysis.CostModel.from_costs_summary(document.get("summary", {}), f"memcost costs result {path}")
            if model:
                return model
    from ..analysis import costs as costs_analysis
    from ..runner import run_with_progress
    run = run_with_progress("costs", ["--pages", "base,thp", "--routes", "os", "--parts", "rows,threads,reuse", "--sizes",
                                      "64M", "--reps", "5", "--warmup", "1", "--threads-size", "64M", "--frames", "50"],
                            "calibrating fault cost")
    model = analysis.CostModel.from_costs_summary(costs_analysis.summarize(run.samples),
                                                  "a calibration run of memcost costs just now (64 MiB, 5 repetitions)")
    if model is None:
        raise MemcostError("the calibration run measured no fault cost; run `memcost costs --quick` and try again")
    notes.append("no `memcost costs` result for this host was found: fault time comes from a calibration run "
                       "(run `memcost costs` once to keep one)")
    return model


def record(command: list[str], args: argparse.Namespace):
    """Run the probe around the command (or attached to --pid); Ctrl-C goes to the command, or
    ends the watch of a running process, as from the terminal, and what was recorded is kept."""
    from ..probe import run_probe
    probe_arguments = ["--sample-period", str(args.sample_period), "--stack-bytes", str(args.stack_bytes)]
    if args.pid:
        probe_arguments += ["--attach", str(args.pid)] + (["--attach-seconds", str(args.seconds)] if args.seconds else [])
    stdout_copy = os.dup(sys.stdout.fileno())
    sys.stdout.flush()
    try:
        with tracefs.available():
            target = ["--command-stdout-fd", str(stdout_copy), "--", *command] if command else []
            # Ctrl-C and SIGTERM go to the probe, which passes them to the command (see
            # src/os/trace.hpp) and still reports what it recorded.
            return run_probe("trace", [*probe_arguments, *target], pass_fds=(stdout_copy,), forward_interrupts=True)
    finally:
        os.close(stdout_copy)


def untraced_wall_s(command: list[str]) -> float:
    started = time.monotonic()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - started


def render(document: dict, top: int) -> None:
    from ..experiments import trace as experiment
    from ..report.terminal import print_table
    summary, totals = document["summary"], document["summary"]["totals"]
    for table in experiment.tables(summary, top):
        print_table(table)
    advice = [(row["site"], item) for row in summary["rows"] for item in row["advice"]]
    if advice:
        console.print("[bold]Advice[/bold] (what-if figures from this machine's measured costs)")
        for site, item in sorted(advice, key=lambda pair: pair[1]["saving_ms"], reverse=True):
            console.print(f" • {site}: {item['text']}", markup=False)
    else:
        console.print("No advice: no site's allocations cost enough to be worth changing.")
    console.print(
        f"Totals: {totals['faults']:,} page faults sampled ({totals['faults_attributed']:,} in traced mappings; the kernel "
        f"counted {totals['kernel_faults']:,} for the command), fault time ≈ {totals['fault_ms']:,.1f} ms, "
        f"free {totals['free_ms']:,.1f} ms, map {totals['map_ms']:,.1f} ms; the command ran {totals['wall_ms']:,.0f} ms "
        f"(user {totals['user_ms']:,.0f} ms, system {totals['system_ms']:,.0f} ms"
        + (f", {totals['elsewhere_ms']:,.1f} ms charged elsewhere, memcost's own front end included"
           if totals.get("elsewhere_ms") is not None else "")
        + f"); tracing cost {totals['tracer_cpu_ms']:,.0f} ms of CPU.", markup=False)
    if totals.get("untraced_wall_ms"):
        console.print(f"Overhead: traced {totals['wall_ms']:,.0f} ms vs untraced {totals['untraced_wall_ms']:,.0f} ms "
                      f"({totals['wall_ms'] / totals['untraced_wall_ms']:.2f}×)", markup=False)
    console.print(
        f"How: faults from {totals['fault_source']} (every {totals['sample_period']} fault"
        f"{'s' if totals['sample_period'] > 1 else ''}), charged to the mapping live at their address; calls from "
        f"{totals['call_source']}; fault time "
        f"estimated at {totals['base_fault_us_per_mb']:,.0f} µs/MB on base pages"
        + (f" and {totals['thp_fault_us_per_mb']:,.0f} on THP" if totals.get("thp_fault_us_per_mb") else "")
        + f" from {totals['cost_source']}; call durations measured.", markup=False)


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
        parser.add_argument("--sample-period", type=arguments.positive_int, default=1, metavar="N",
                            help="record one fault in N (default 1: every fault, exact counts)")
        parser.add_argument("--stack-bytes", type=arguments.positive_int, default=4096, metavar="BYTES",
                            help="user stack copied per sample for unwinding (default 4096; deeper stacks are cut)")
        parser.add_argument("--top", type=arguments.positive_int, default=10, help="sites shown (default 10)")
        parser.add_argument("--calibrate", action="store_true",
                            help="measure the fault cost now instead of using the newest `memcost costs` result")
        parser.add_argument("--overhead", action="store_true",
                            help="run the command a second time, untraced, and report the tracing overhead")
        parser.add_argument("--pid", type=arguments.positive_int, metavar="PID",
                            help="instead of a command: watch this running process (root) until it exits, "
                                 "--seconds pass, or Ctrl-C")
        parser.add_argument("--seconds", type=arguments.bounded_seconds(0.0, 1e7, allow_minimum=False), metavar="S",
                            help="with --pid: stop watching after S seconds")
        parser.add_argument("--export-folded", type=arguments.output_file, metavar="PATH",
                            help="folded stacks of faults by allocation site (flamegraph.pl, speedscope)")
        parser.add_argument("--export-pprof", type=arguments.output_file, metavar="PATH",
                            help="gzipped pprof profile (go tool pprof, Pyroscope, Parca)")
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
        if args.seconds and not args.pid:
            raise MemcostError("--seconds goes with --pid (a command is traced until it exits)", exit_codes.BAD_ARGUMENTS)
        if args.pid and not Path(f"/proc/{args.pid}").exists():
            raise MemcostError(f"there is no process {args.pid} (it may have exited): check the PID")
        if not Path("/proc/self/maps").exists():
            raise MemcostError("memcost trace needs Linux perf events (this is not Linux)", exit_codes.UNSUPPORTED)
        if os.geteuid() != 0:
            level = perf_event_paranoid()
            if level > 2:
                raise MemcostError(f"memcost trace needs perf events, which kernel.perf_event_paranoid {level} denies "
                                   "to users: run it with sudo, or as root `sysctl kernel.perf_event_paranoid=2` "
                                   "(user-mode faults, calls through LD_PRELOAD) or -1 (everything)",
                                   exit_codes.UNSUPPORTED)
        notes: list[str] = []
        from ..analysis import trace as analysis
        cost = cost_model(args.results_dir, args.calibrate, notes)
        run = record(command, args)
        thp = run.context.get("pages", {}).get("thp", {})
        summary = analysis.summarize(run.samples, cost, thp.get("enabled", "never") if thp.get("present") else "absent")
        summary["totals"]["command"] = command or [f"pid {args.pid}"]
        if args.overhead:
            summary["totals"]["untraced_wall_ms"] = untraced_wall_s(command) * 1e3
        warnings = list(run.warnings) + [{"code": "calibrated", "message": note} for note in notes]
        totals = summary["totals"]
        if totals["sample_period"] == 1 and totals["kernel_faults"] and \
                abs(totals["faults"] - totals["kernel_faults"]) > 0.02 * totals["kernel_faults"] + 100:
            warnings.append({"code": "fault_count_mismatch",
                             "message": f"{totals['faults']:,} faults were sampled but the kernel counted "
                                        f"{totals['kernel_faults']:,}: some were lost or happened in children that "
                                        "outlived the command; per-site counts are a lower bound"})
        params = {"command": command, "pid": args.pid, "seconds": args.seconds, "sample_period": args.sample_period,
                  "stack_bytes": args.stack_bytes}
        document = make_document("trace", run.context, params, run.samples, summary, warnings)
        document["path"] = str(RunDirectory(args.results_dir).write(document))
        render(document, args.top)
        print_closing(document)
        if args.export_folded:
            from ..export import folded
            folded.write(document, args.export_folded)
            console.print(f"Exported: {args.export_folded}", markup=False)
        if args.export_pprof:
            from ..export import pprof
            pprof.write(document, args.export_pprof)
            console.print(f"Exported: {args.export_pprof}", markup=False)
        export.export_requested(document, args)
        if run.interrupted:
            warn(f"interrupted: what was recorded until then is in {document['path']}")
            return exit_codes.INTERRUPTED
        exit_code = 0 if args.pid else totals["exit_code"]  # a watched process is not ours to pass on
        if totals.get("signal") in CRASH_SIGNALS:
            warn(f"{command[0]} crashed ({signal.Signals(totals['signal']).name}); what it did until then is above; "
                 f"memcost passes on {exit_code}, as a shell would")
        elif exit_code:
            warn(f"{command[0]} exited with {exit_code}; memcost passes it on")
        return int(exit_code or 0)
