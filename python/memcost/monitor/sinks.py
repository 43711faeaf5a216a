"""Where interval records go: the live view, printed tables, JSON lines, CSV, Prometheus. Each
sink takes every record with the two readings it came from (`write`) and cleans up once (`close`)."""

from __future__ import annotations

import argparse
import csv
import json
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from ..console import console
from ..units import format_bytes

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


def _percent(value) -> str:
    return "n/a" if value is None else f"{value:,.1f} %"


def view(record: dict) -> Table:
    table = Table(title=f"memcost monitor — every {record['interval_s']:.1f} s", title_justify="left", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value", justify="right")
    for name, label in MACHINE_LABELS:
        table.add_row(label, _value(record["machine"][name]))
    cpu = record["cpu"]
    table.add_row("system CPU / steal", f"{_percent(cpu['system_percent'])} / {_percent(cpu['steal_percent'])} of a core")
    table.add_row("kswapd / khugepaged / kcompactd / kworkers",
                  " / ".join(_percent(cpu[f"{k}_percent"]) for k in ("kswapd", "khugepaged", "kcompactd", "kworker")))
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


class Sink:
    def write(self, record: dict, before=None, after=None) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class JsonLines(Sink):
    def write(self, record: dict, before=None, after=None) -> None:
        print(json.dumps(record), flush=True)


class CsvFile(Sink):
    """One line per interval, appended; the header once, when the file is new."""

    def __init__(self, path):
        self.file = path.open("a", newline="")
        self.writer = csv.DictWriter(self.file, fieldnames=CSV_FIELDS, extrasaction="ignore")
        if self.file.tell() == 0:
            self.writer.writeheader()

    def write(self, record: dict, before=None, after=None) -> None:
        zeroing = record["zeroing"]
        self.writer.writerow({"time": record["time"], "interval_s": record["interval_s"], **record["machine"],
                              **record["cpu"], "kernel_zeroed_mb_per_s": zeroing["kernel_zeroed_mb_per_s"],
                              "upper_bound_zeroed_mb_per_s": zeroing["upper_bound_mb_per_s"],
                              "estimated_zeroing_cpu_percent": zeroing["estimated_cpu_percent"]})
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class LiveView(Sink):
    def __init__(self):
        self.live = Live(console=console, auto_refresh=False)
        self.live.start()

    def write(self, record: dict, before=None, after=None) -> None:
        self.live.update(view(record), refresh=True)

    def close(self) -> None:
        self.live.stop()


class PrintedTables(Sink):
    def write(self, record: dict, before=None, after=None) -> None:
        console.print(view(record))


class Prometheus(Sink):
    def __init__(self, host: str, port: int, context: dict, top_processes: int, pid_label: bool):
        from .prometheus import Exporter
        self.exporter = Exporter(host, port, context, top_processes, pid_label)

    def write(self, record: dict, before=None, after=None) -> None:
        self.exporter.update(before, after, record)

    def close(self) -> None:
        self.exporter.close()


def sinks_for(args: argparse.Namespace, watching_a_command: bool, context: dict) -> list[Sink]:
    """The sinks the flags ask for. The live view needs a terminal; with no terminal, tables are
    printed unless a command is watched (its totals are printed at the end) or the figures go to
    Prometheus or a CSV file."""
    chosen: list[Sink] = []
    if args.serve:
        chosen.append(Prometheus(*args.serve, context, args.process_metrics, args.process_metrics_pid))
    if args.csv:
        chosen.append(CsvFile(args.csv))
    if args.json:
        chosen.append(JsonLines())
    elif console.is_terminal and not args.once:
        chosen.append(LiveView())
    elif args.once or not (watching_a_command or args.serve or args.csv):
        chosen.append(PrintedTables())  # a service (--serve, --csv without a terminal) keeps its log quiet
    return chosen
