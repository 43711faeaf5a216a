"""`memcost monitor`: live page-fault and page-zeroing activity."""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Optional

from rich.live import Live
from rich.markup import escape
from rich.table import Table

from .. import exit_codes
from ..console import console
from ..monitor.sampler import CostModel, Sampler
from ..monitor.zeroing import KernelZeroingStream
from ..errors import MemcostError
from ..units import format_bytes
from .. import arguments
from .base import Command

MACHINE_LABELS = [("minor_faults_per_s", "minor faults/s"), ("major_faults_per_s", "major faults/s"),
                  ("pages_allocated_per_s", "pages allocated/s"), ("pages_freed_per_s", "pages freed/s"),
                  ("thp_faults_per_s", "THP faults/s"), ("thp_fallbacks_per_s", "THP fallbacks/s"),
                  ("thp_collapses_per_s", "THP collapses/s"), ("compaction_stalls_per_s", "compaction stalls/s"),
                  ("pages_reclaimed_per_s", "pages reclaimed/s")]
CSV_FIELDS = ["time", "interval_s"] + [name for name, _ in MACHINE_LABELS] + [
    "system_percent", "steal_percent", "kswapd_percent", "khugepaged_percent", "kcompactd_percent", "kworker_percent",
    "kernel_zeroed_mb_per_s", "upper_bound_zeroed_mb_per_s", "estimated_zeroing_cpu_percent"]


def _value(value, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def view(record: dict) -> Table:
    table = Table(title=f"memcost monitor — every {record['interval_s']:.1f} s", title_justify="left", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value", justify="right")
    for name, label in MACHINE_LABELS:
        table.add_row(label, _value(record["machine"][name]))
    cpu = record["cpu"]
    table.add_row("system CPU / steal", f"{_value(cpu['system_percent'], 1)} % / {_value(cpu['steal_percent'], 1)} % of a core")
    table.add_row("kswapd / khugepaged / kcompactd / kworkers",
                  " / ".join(f"{_value(cpu[f'{k}_percent'], 1)} %" for k in ("kswapd", "khugepaged", "kcompactd", "kworker")))
    zeroing = record["zeroing"]
    table.add_row("zeroed by the kernel (its count)",
                  f"{_value(zeroing['kernel_zeroed_mb_per_s'], 1)} MB/s" if zeroing["kernel_zeroed_mb_per_s"] is not None
                  else f"n/a: {escape(zeroing['kernel_count_note'] or '')}")
    table.add_row("zeroed at most (from faults)", f"{_value(zeroing['upper_bound_mb_per_s'], 1)} MB/s, an upper bound")
    table.add_row("estimated zeroing cost",
                  f"{_value(zeroing['estimated_cpu_percent'], 1)} % of a core ({zeroing['estimate_basis']}; "
                  f"cost per fault from {escape(zeroing['source'])})"
                  if zeroing["estimated_cpu_percent"] is not None else escape(zeroing["note"]))
    for process in record["processes"]:
        table.add_row(f"  {escape(process['comm'])} ({process['pid']})",
                      f"{_value(process['minor_faults_per_s'])} faults/s, RSS {format_bytes(process['rss_growth_bytes_per_s'])}/s, "
                      f"system {_value(process['system_cpu_percent'], 1)} %")
    if record["hidden_processes"]:
        table.add_row("not readable or gone", f"{record['hidden_processes']} processes")
    return table


def csv_row(record: dict) -> dict:
    return {"time": record["time"], "interval_s": record["interval_s"], **record["machine"],
            **{k: v for k, v in record["cpu"].items()},
            "kernel_zeroed_mb_per_s": record["zeroing"]["kernel_zeroed_mb_per_s"],
            "upper_bound_zeroed_mb_per_s": record["zeroing"]["upper_bound_mb_per_s"],
            "estimated_zeroing_cpu_percent": record["zeroing"]["estimated_cpu_percent"]}


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
        parser.add_argument("--pid", type=arguments.positive_int, action="append", metavar="PID",
                            help="only these processes (repeatable)")
        parser.add_argument("--duration", type=arguments.bounded_seconds(0.0, 1e7, allow_minimum=False), metavar="S", help="stop after this many seconds")
        parser.add_argument("--top", type=arguments.positive_int, default=5, help="processes shown (default 5)")
        parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                            help="run COMMAND and monitor it until it exits")

    def run(self, args: argparse.Namespace) -> int:
        if not Path("/proc/vmstat").exists():
            raise MemcostError("memcost monitor reads /proc/vmstat, which this system does not have (Linux only)",
                               exit_codes.UNSUPPORTED)
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        # The kernel's own count of zeroed pages comes from a probe beside the monitor (root only);
        # counting before the command starts, so that none of its work comes before the first count.
        stream = KernelZeroingStream(args.interval)
        stream.wait_ready()
        try:
            child: Optional[subprocess.Popen] = start_command(command) if command else None
        except MemcostError:
            stream.close()
            raise
        pids = list(args.pid or []) + ([child.pid] if child else [])
        sampler = Sampler(pids=pids or None, top=args.top, cost=CostModel.load(args.results_dir), kernel_zeroing=stream)
        exporter = None
        if args.serve:
            from ..monitor.prometheus import Exporter
            exporter = Exporter(*args.serve)
        csv_file = args.csv.open("a", newline="") if args.csv else None
        writer = csv.DictWriter(csv_file, fieldnames=CSV_FIELDS, extrasaction="ignore") if csv_file else None
        if writer and csv_file.tell() == 0:
            writer.writeheader()
        live = Live(console=console, auto_refresh=False) if console.is_terminal and not args.json and not args.once else None
        started = time.monotonic()
        exit_code = exit_codes.OK
        ended = None  # (wait status, rusage) of the command once it exits
        try:
            if live:
                live.start()
            previous = sampler.read()
            while True:
                time.sleep(args.interval)
                current = sampler.read()
                sampler.page_bytes = stream.page_bytes() or sampler.page_bytes
                sampler.huge_bytes = stream.thp_bytes() or sampler.huge_bytes
                record = sampler.interval(previous, current)
                previous = current
                if exporter:
                    exporter.update(record)
                if writer:
                    writer.writerow(csv_row(record))
                    csv_file.flush()
                if args.json:
                    print(json.dumps(record), flush=True)
                elif live:
                    live.update(view(record), refresh=True)
                elif args.once or not child:
                    console.print(view(record))
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
            if live:
                live.stop()
            if exporter:
                exporter.close()
            if csv_file:
                csv_file.close()
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
