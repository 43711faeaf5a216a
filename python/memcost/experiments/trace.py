"""trace: what a real program's big allocations cost the OS, per allocation and touching site
(docs/trace.md; src/probe/experiments/trace.cpp; analysis/trace.py). The command-line front end,
which runs the program, is cli/trace.py."""

from __future__ import annotations

from ..units import format_bytes
from .base import Experiment, Table, number

TOP_ROWS = 15


def tables(summary: dict, top: int = TOP_ROWS) -> list[Table]:
    sites = [[r["site"], r["call"], f"{r['mappings']:,}", f"{r['freed']:,}", format_bytes(r["bytes"]),
              f"{r['faults_base']:,}", f"{r['faults_thp']:,}", number(r["fault_ms"], 1), number(r["free_ms"], 1),
              f"{r['churn']}× {format_bytes(r['churn_bytes'])}" if r["churn"] > 1 else "-", f"{r['wall_share']:.1%}",
              f"{r['cpu_share']:.1%}"] for r in summary["rows"][:top]]
    touching = [[r["site"], f"{r['faults']:,}", number(r["fault_ms"], 1), r["allocation_site"]]
                for r in summary["touching"][:top]]
    processes = summary.get("processes", [])
    shown = [[str(r["pid"]), r["name"], str(r["parent"] or "-"), f"{r['faults']:,}", f"{r['faults_attributed']:,}"]
             for r in processes[:top]]
    by_process = ([("Processes — which process took the faults (a program that exec'd another is two rows)",
                    ["pid", "program", "parent", "faults", "in traced mappings"], shown)]
                  if len(processes) > 1 else [])
    return by_process + [("Allocation sites — where the memory was made",
             ["site", "call", "made", "freed", "bytes", "faults base", "faults THP", "fault ms (est.)", "free ms",
              "churn", "% wall", "% CPU"], sites),
            ("Touching sites — where the pages were faulted in", ["site", "faults", "fault ms (est.)", "memory allocated at"],
             touching)]


def interpret(summary: dict) -> list[str]:
    sentences = [f"{' '.join(summary['totals'].get('command', []))}: {summary['headline']}."
                 if summary["totals"].get("command") else summary["headline"] + "."]
    for row in summary["rows"]:
        sentences += [f"At {row['site']}: {item['text']}." for item in row["advice"]]
    return sentences


def flamegraph(document: dict) -> list[str]:
    """Estimated fault time by allocation stack (each site's stack, root first)."""
    from ..analysis.trace import frame_name
    from ..report import flamegraph as drawing
    stacks = {}
    for sample in document["samples"]:
        if sample["case"].get("record") == "stack":
            stacks[sample["metrics"]["stack"]] = sample["metrics"]["frames"]
    flames = [([frame_name(frame) for frame in reversed(stacks.get(row["stack"], []))], row["fault_ms"])
              for row in document["summary"]["rows"]]
    return [drawing.svg(flames, "Estimated fault time by allocation stack (ms); hover for figures", "ms")]


EXPERIMENT = Experiment(
    name="trace",
    title="What a program's allocations cost (trace)",
    summary="Run a program and measure what its big allocations cost the OS, per site.",
    tables=tables,
    interpret=interpret,
    drawings=flamegraph,
    in_suite=False,  # it needs a program to trace
)
