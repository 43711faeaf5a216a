"""`memcost monitor`: live page-fault and page-zeroing activity."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import time
from typing import Optional

from .. import arguments, exit_codes, tracefs
from ..console import console
from ..errors import MemcostError
from ..analysis.cost_model import CostModel
from ..monitor.sampler import Sampler
from ..monitor.sinks import sinks_for
from ..monitor.stream import MonitorStream
from .base import Command


def serve_address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"'{text}': give PORT or HOST:PORT, e.g. 127.0.0.1:9464")
    return host or "127.0.0.1", int(port)


class MonitorCommand(Command):
    """Watch page faults, page allocation and zeroing, live (Linux).

    Machine-wide rates from /proc/vmstat, CPU of the memory-management kernel
    threads, an estimated zeroing cost from this machine's `memcost costs`
    result, and the processes faulting most. `-- COMMAND ...` runs a command
    and monitors it until it exits, then prints its lifetime totals.
    """

    name = "monitor"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--interval", type=arguments.bounded_seconds(0.0, 3600.0, allow_minimum=False), default=1.0, metavar="S", help="seconds between samples (default 1)")
        parser.add_argument("--once", action="store_true", help="one sample over one interval, printed once")
        parser.add_argument("--json", action="store_true", help="one JSON record per interval on stdout")
        parser.add_argument("--csv", type=arguments.output_file, metavar="FILE", help="append one CSV line per interval to FILE")
        parser.add_argument("--serve", type=serve_address, metavar="[HOST:]PORT",
                            help="expose the figures as Prometheus metrics (host 127.0.0.1 unless given)")
        parser.add_argument("--process-metrics", type=arguments.non_negative_int, default=0, metavar="N",
                            help="with --serve: per-process counters for the N busiest process names, the rest "
                                 "summed as comm=\"other\" (default 0: none)")
        parser.add_argument("--process-metrics-pid", action="store_true",
                            help="with --process-metrics: a pid label too (series come and go with pids)")
        parser.add_argument("--pid", type=arguments.positive_int, action="append", metavar="PID",
                            help="only these processes (repeatable)")
        parser.add_argument("--duration", type=arguments.bounded_seconds(0.0, 1e7, allow_minimum=False), metavar="S", help="stop after this many seconds")
        parser.add_argument("--top", type=arguments.positive_int, default=5, help="processes shown (default 5)")
        parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                            help="run COMMAND and monitor it until it exits")

    def run(self, args: argparse.Namespace) -> int:
        if (args.process_metrics or args.process_metrics_pid) and not args.serve:
            raise MemcostError("--process-metrics and --process-metrics-pid shape the Prometheus metrics: add --serve",
                               exit_codes.BAD_ARGUMENTS)
        if args.process_metrics > 1000:
            raise MemcostError(f"--process-metrics {args.process_metrics}: at most 1000 series of processes, or a "
                               "Prometheus server pays for every one; 10 to 50 shows the busy ones", exit_codes.BAD_ARGUMENTS)
        if args.process_metrics_pid and not args.process_metrics:
            raise MemcostError("--process-metrics-pid labels the per-process series: add --process-metrics N",
                               exit_codes.BAD_ARGUMENTS)
        # The kernel's count of zeroed pages needs tracefs: mounted for this run where root may.
        with tracefs.available():
            return self._monitor(args)

    def _monitor(self, args: argparse.Namespace) -> int:
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        # The probe samples; its first sample comes before the command starts, so none of the
        # command's work falls before the first reading.
        stream = MonitorStream(args.interval)
        started = time.monotonic()
        sinks: list = []
        child: Optional[subprocess.Popen] = None
        exit_code = exit_codes.OK
        ended = None  # (wait status, rusage) of the command once it exits
        try:
            previous = stream.next_reading()
            child = start_command(command) if command else None
            pids = list(args.pid or []) + ([child.pid] if child else [])
            stream.pids = pids or None
            sampler = Sampler(pids=stream.pids, top=args.top, cost=CostModel.newest(args.results_dir),
                              zeroing_method=stream.zeroing_method, zeroing_unavailable=stream.zeroing_unavailable)
            sampler.page_bytes = stream.page_bytes() or sampler.page_bytes
            sampler.huge_bytes = stream.thp_bytes() or sampler.huge_bytes
            sinks = sinks_for(args, watching_a_command=child is not None, context=stream.context)
            while True:
                current = stream.next_reading()
                record = sampler.interval(previous, current)
                for sink in sinks:
                    sink.write(record, previous, current)
                previous = current
                if args.once or (args.duration and time.monotonic() - started >= args.duration):
                    break
                if child and ended is None:
                    pid, status, usage = os.wait4(child.pid, os.WNOHANG)
                    if pid:
                        ended = (status, usage)
                        break
        except KeyboardInterrupt:
            exit_code = exit_codes.INTERRUPTED
        finally:
            stream.close()
            for sink in sinks:
                sink.close()
        if child:
            if ended is None:
                # Stopped first (--duration, --once, Ctrl-C): the command gets the same end. Not
                # Popen.terminate(), which may reap the child and lose its accounting to wait4.
                try:
                    os.kill(child.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                _, status, usage = os.wait4(child.pid, 0)
                ended = (status, usage)
            child.returncode = os.waitstatus_to_exitcode(ended[0])
            total = child_total(command, ended, started)
            if args.json:
                print(json.dumps(total), flush=True)
            else:
                console.print(f"{' '.join(command)}: exit {total['exit_code']}, {total['minor_faults']:,} minor and "
                              f"{total['major_faults']:,} major faults, {total['system_cpu_s']:.2f} s system CPU, "
                              f"{total['elapsed_s']:.1f} s", markup=False)
        return exit_code


def start_command(command: list[str]) -> subprocess.Popen:
    """The user's command, or one line saying why it cannot start."""
    try:
        return subprocess.Popen(command)
    except OSError as error:
        raise MemcostError(f"cannot run {command[0]!r}: {error.strerror}; check the command's name and path",
                           exit_codes.FAILURE) from error


def child_total(command: list[str], ended: tuple, started: float) -> dict:
    """Lifetime totals of the command, from the kernel's own accounting (wait4)."""
    status, usage = ended
    return {"type": "total", "command": command, "exit_code": os.waitstatus_to_exitcode(status),
            "minor_faults": usage.ru_minflt, "major_faults": usage.ru_majflt, "system_cpu_s": usage.ru_stime,
            "user_cpu_s": usage.ru_utime, "elapsed_s": time.monotonic() - started}
