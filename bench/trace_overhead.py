#!/usr/bin/env python3
"""What tracing a fault storm costs, memcost against the tools a user would pick instead, measured
side by side in one sitting: a benchmark, not a test (docs/trace.md, "What tracing costs").

The storm is tests/python/data/trace_tree.c `repeat 256 N`: 256 MiB mapped, written on base pages
and unmapped N times (N = 32: 2.1 M faults). Each round runs every variant once, in an order
shuffled from a recorded seed; the table gives each variant's median wall time over the rounds,
its ratio to the untraced median, the paired ratio (each round's ÷ that round's untraced: its
median, with a 95 % bootstrap interval), memcost's tracer CPU ÷ the command's, and the storm
process's own system time (GNU time): what the tool adds inside the fault handler, the tracer's
presence in the faults it measures. Variants whose tool is not installed are left out and said so.

`--program pinning` measures bench/data/pinning.c instead: a model of a CUDA program pinning host
memory (64 MiB chunks mapped MAP_FIXED into a reservation and faulted in by a system call in 8 MiB
pieces, 500 small ioctls beside each; `--pinning-chunks N`, 32 by default: 524,288 faults taken
inside system calls, which no exception tracepoint and no perf page-fault event sees).

`-- COMMAND...` measures a command of your own instead, as it is (no compiler run): `-- python3 -c
"import torch"` is the `import torch` of docs/trace.md. Its faults are not known beforehand, so the
per-fault column is left out.

`--only TEXT` (repeatable) keeps the variants whose label contains TEXT, and untraced.
`--other-probe PATH` runs every probe variant with another build of memcost-probe as well, so that
two builds are compared in one sitting, interleaved.

    sudo python3 bench/trace_overhead.py [--rounds 3] [--storm-rounds 32] [--only TEXT] [--memcost .venv/bin/memcost]
        [--other-probe PATH] [--program storm|pinning] [--pinning-chunks 32] [-- COMMAND...]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_program(folder: Path, args) -> tuple[list[str], int, str]:
    """The measured program's command line, the faults it takes (0: not known), and what it is, in words."""
    if args.command:
        return list(args.command), 0, f"The command `{shlex.join(args.command)}`"
    source = ROOT / "bench" / "data" / "pinning.c" if args.program == "pinning" else \
        ROOT / "tests" / "python" / "data" / "trace_tree.c"
    binary = folder / source.stem
    subprocess.run(["cc", "-O2", "-g", "-fomit-frame-pointer", "-o", str(binary), str(source)], check=True)
    if args.program == "pinning":
        return ([str(binary), str(args.pinning_chunks)], args.pinning_chunks * 16384,
                f"Pinning model: {args.pinning_chunks} × 64 MiB faulted in by MADV_POPULATE_WRITE in 8 MiB pieces "
                f"({args.pinning_chunks * 16384:,} faults inside system calls), 500 ioctls a chunk")
    return ([str(binary), "repeat", "256", str(args.storm_rounds)], args.storm_rounds * 256 * 256,
            f"Fault storm: {args.storm_rounds * 256 * 256:,} faults ({args.storm_rounds} × 256 MiB on base pages)")


def variants(storm: list[str], bare_storm: list[str], memcost: str, probe: str, folder: Path,
             other_probe: str | None = None) -> dict[str, list[str]]:
    """Each variant's command line; a tool that is not installed is left out. bpftrace's filter is
    its command's pid: it runs the storm bare (not under GNU time), and its system time is not taken."""
    found = {"untraced": storm}
    if shutil.which("perf"):
        found["perf stat -e page-faults"] = ["perf", "stat", "-e", "page-faults", "-o", str(folder / "stat.txt"), "--", *storm]
        found["perf record -e page-faults -c 1 --call-graph dwarf,4096"] = [
            "perf", "record", "-q", "-e", "page-faults", "-c", "1", "--call-graph", "dwarf,4096",
            "-o", str(folder / "perf.data"), "--", *storm]
    if shutil.which("bpftrace"):
        # bpftrace's -c splits its command at spaces, without quoting, and runs only an ELF file: it
        # runs /bin/sh on a script that execs the command (so that cpid is the command's pid).
        script = folder / "command.sh"
        script.write_text(f"#!/bin/sh\nexec {shlex.join(bare_storm)}\n")
        found["bpftrace, faults per user stack"] = [
            "bpftrace", "-q", "-e", "tracepoint:exceptions:page_fault_user /pid == cpid/ { @[ustack] = count(); }",
            "-c", f"/bin/sh {script}"]
        found["bpftrace, faults per thread"] = [
            "bpftrace", "-q", "-e", "tracepoint:exceptions:page_fault_user /pid == cpid/ { @[tid] = count(); }",
            "-c", f"/bin/sh {script}"]
    if Path(memcost).exists():
        found["memcost trace (defaults, the whole command, a costs result present)"] = [memcost, "--results-dir", str(folder / "results"),
                                                                "trace", "--", *storm]
    if probe:
        # The tracer alone (no front end, no cost calibration), at each setting that decides its cost.
        for label, flags in PROBE_VARIANTS.items():
            found[f"memcost-probe trace {label}"] = [probe, "trace", *flags, "--", *storm]
    if other_probe:
        for label, flags in PROBE_VARIANTS.items():
            found[f"{other_probe} trace {label}"] = [other_probe, "trace", *flags, "--", *storm]
    return found


# The tracer's settings compared: how faults are counted, and how fault time is measured (timed in the
# kernel, one fault in N; sampled by cpu-clock).
PROBE_VARIANTS = {
    "(defaults)": [],
    "--time-faults-one-in 1": ["--time-faults-one-in", "1"],
    "--time-faults-one-in 0": ["--time-faults-one-in", "0"],
    "--cpu-sample-us 0": ["--cpu-sample-us", "0"],
    "--cpu-sample-us 0 --time-faults-one-in 0": ["--cpu-sample-us", "0", "--time-faults-one-in", "0"],
    "--fault-counting perf": ["--fault-counting", "perf"],
    "--fault-counting perf --touch-samples-per-second 0": ["--fault-counting", "perf", "--touch-samples-per-second", "0"],
    # What `trace --pid` samples by default (docs/trace.md, "A service under --pid"), and sampled
    # counts instead: one fault in N recorded with its stack by perf, no program on every fault.
    "--touch-samples-per-second 10 --cpu-sample-us 0 --time-faults-one-in 0 (the --pid defaults)": [
        "--touch-samples-per-second", "10", "--cpu-sample-us", "0", "--time-faults-one-in", "0"],
    "--sample-period 64 --cpu-sample-us 0": ["--sample-period", "64", "--cpu-sample-us", "0"],
    "--sample-period 256 --cpu-sample-us 0": ["--sample-period", "256", "--cpu-sample-us", "0"],
}


def installed_probe(memcost: str) -> str:
    """The probe the memcost command runs (its package's _bin), or "" when not found."""
    python = Path(memcost).with_name("python")
    if not python.exists():
        return ""
    found = subprocess.run([str(python), "-c", "import memcost, pathlib; "
                            "print(pathlib.Path(memcost.__file__).parent / '_bin' / 'memcost-probe')"],
                           capture_output=True, text=True)
    path = found.stdout.strip()
    return path if found.returncode == 0 and Path(path).exists() else ""


def timed(command: list[str], output: Path, storm_time: Path | None) -> tuple[float, float | None]:
    """The command's wall time, and the storm's own system time where GNU time reported it."""
    if storm_time is not None:
        storm_time.unlink(missing_ok=True)
    started = time.monotonic()
    with open(output, "w") as sink:  # the probe's records go to a file, as the memcost command keeps them
        result = subprocess.run(command, stdout=sink, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{command[0]} failed (exit {result.returncode}): {result.stderr.strip()[-300:]}")
    wall = time.monotonic() - started
    system = float(storm_time.read_text().split()[-1]) if storm_time is not None and storm_time.exists() else None
    return wall, system


def paired_ratio(values: list[float], base: list[float], resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """The median over rounds of each round's time ÷ that round's untraced time, with its 95 %
    percentile-bootstrap interval: a round's two runs are minutes apart at most, so the host's
    drift between rounds (this 2-vCPU guest's speed moves by a third within an hour) moves it less
    than the ratio of the two medians."""
    ratios = [value / untraced for value, untraced in zip(values, base)]
    generator = random.Random(seed)
    medians = sorted(statistics.median(generator.choices(ratios, k=len(ratios))) for _ in range(resamples))
    return statistics.median(ratios), medians[int(resamples * 0.025)], medians[int(resamples * 0.975) - 1]


def tracer_share(results: Path) -> float | None:
    """The tracer's CPU ÷ the traced command's, from the run record of the trace just stored."""
    try:
        document = json.loads((results / "latest" / "trace.json").read_text())
        run = next(s["metrics"] for s in document["samples"] if s["case"].get("record") == "run")
        return (run["tracer_user_ns"] + run["tracer_system_ns"]) / (run["user_ns"] + run["system_ns"])
    except (OSError, ValueError, KeyError, StopIteration, ZeroDivisionError):
        return None


def gnu_time() -> str:
    """GNU time (Debian's `time` package), which can write a child's system time to a file, or ""."""
    found = shutil.which("time") or ("/usr/bin/time" if Path("/usr/bin/time").exists() else "")
    if not found:
        return ""
    answer = subprocess.run([found, "--version"], capture_output=True, text=True)
    return found if "GNU" in answer.stdout + answer.stderr else ""


TRACEFS = Path("/sys/kernel/tracing")


def mount_tracefs() -> bool:
    """bpftrace reads tracepoints' formats from tracefs, which is not mounted after a boot here:
    mounted for the benchmark when missing (True), and unmounted after it."""
    if (TRACEFS / "events").exists():
        return False
    subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=True)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every variant (default 3)")
    parser.add_argument("--storm-rounds", type=int, default=32, help="256 MiB written and freed this many times (default 32)")
    parser.add_argument("--program", choices=("storm", "pinning"), default="storm",
                        help="the fault storm (default), or the model of a CUDA program pinning memory")
    parser.add_argument("--pinning-chunks", type=int, default=32, help="64 MiB chunks pinned (default 32)")
    parser.add_argument("--memcost", default=str(ROOT / ".venv" / "bin" / "memcost"), help="the memcost command to measure")
    parser.add_argument("--seed", type=int, default=int(time.time()), help="the order's seed (recorded in the output)")
    parser.add_argument("--only", action="append", default=[], metavar="TEXT",
                        help="measure only the variants whose label contains TEXT (repeatable; untraced always runs)")
    parser.add_argument("--other-probe", metavar="PATH",
                        help="also every probe variant with this memcost-probe build, interleaved")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                        help="measure this command instead of --program's")
    args = parser.parse_args()
    args.command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if os.geteuid() != 0:
        print("trace_overhead: run as root (perf record, bpftrace and memcost trace need it)", file=sys.stderr)
        return 2
    mounted = mount_tracefs()
    try:
        return measure(args)
    finally:
        if mounted:
            subprocess.run(["umount", str(TRACEFS)], check=False)


def measure(args) -> int:
    with tempfile.TemporaryDirectory(prefix="memcost-bench-") as name:
        folder = Path(name)
        bare_storm, faults, described = build_program(folder, args)
        storm = bare_storm
        # The storm's own system time under each tool: what the tool adds inside the fault handler
        # (its programs, its perf events, its stack copies), apart from its own process's work.
        timer = gnu_time()
        storm_time = folder / "storm-time.txt" if timer else None
        if timer:
            storm = [timer, "-f", "%S", "-o", str(storm_time), *storm]
        else:
            print("GNU time is not installed (Debian: time): the storm's own system time is left out", file=sys.stderr)
        commands = variants(storm, bare_storm, args.memcost, installed_probe(args.memcost), folder, args.other_probe)
        if args.only:
            commands = {label: command for label, command in commands.items()
                        if label == "untraced" or any(text in label for text in args.only)}
        if Path(args.memcost).exists():
            # As a user has it after `memcost costs` once: the trace prices faults from it, not a calibration run.
            subprocess.run([args.memcost, "--results-dir", str(folder / "results"), "costs", "--quick"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for tool in ("perf", "bpftrace"):
            if not shutil.which(tool):
                print(f"{tool} is not installed: its variants are left out", file=sys.stderr)
        order = random.Random(args.seed)
        times: dict[str, list[float]] = {label: [] for label in commands}
        systems: dict[str, list[float]] = {label: [] for label in commands}
        shares: dict[str, list[float]] = {label: [] for label in commands}
        for round_number in range(args.rounds):
            labels = list(commands)
            order.shuffle(labels)
            for label in labels:
                wall, system = timed(commands[label], folder / "probe-output.jsonl", storm_time)
                times[label].append(wall)
                if system is not None and not label.startswith("bpftrace"):
                    systems[label].append(system)
                if label.startswith("memcost trace") and (share := tracer_share(folder / "results")) is not None:
                    shares[label].append(share)
            print(f"round {round_number + 1}/{args.rounds} done", file=sys.stderr)
    base = statistics.median(times["untraced"])
    base_system = statistics.median(systems["untraced"]) if systems["untraced"] else None
    print(f"{described}; {args.rounds} rounds, "
          f"order shuffled from seed {args.seed}; medians. Paired: each round's time ÷ that round's untraced "
          f"time, its median over the rounds and that median's 95 % bootstrap interval. The program's system time "
          f"(GNU time, 10 ms steps) is its process's own: what a tool adds inside its fault handler, per fault "
          f"beside it. The tracer's CPU is memcost-probe's own, ÷ the traced command's (its run record).")
    print("| variant | wall s (median) | each round | ÷ untraced | paired ÷ untraced (95 % interval) "
          "| program's system s (median) | ÷ untraced | added a fault | the tracer's CPU ÷ the command's |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, values in times.items():
        median = statistics.median(values)
        paired, low, high = paired_ratio(values, times["untraced"])
        row = (f"| {label} | {median:.2f} | {', '.join(f'{v:.2f}' for v in values)} | {median / base:.2f}× "
               f"| {paired:.2f}× ({low:.2f}–{high:.2f}) |")
        if base_system and len(systems[label]) == len(values):
            system = statistics.median(systems[label])
            per_fault = f"{(system - base_system) / faults * 1e9:,.0f} ns" if faults else "—"
            row += f" {system:.2f} | {system / base_system:.2f}× | {per_fault} |"
        else:
            row += " — | — | — |"
        row += f" {statistics.median(shares[label]) * 100:.1f} % |" if shares[label] else " — |"
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
