#!/usr/bin/env python3
"""What `memcost trace --pid --every` costs a running service: a benchmark, not a test
(docs/trace.md, "A service under --pid").

bench/data/buffer_service.c answers HTTP on 127.0.0.1, mapping, writing and dropping a 16 MiB
buffer per request (4,096 faults each). A client on one keep-alive connection sends requests back
to back and notes when each is answered. Each measurement runs the client --seconds untraced, then
on while `memcost trace --pid PID --every 10s --seconds S` attaches and watches, then --seconds
more untraced once memcost has exited; the rate inside memcost's watched window (when it opened and
how long it lasted come from its records) is divided by the mean of the rates just before and just
after (a drift through the measurement cancels). Each round measures, in an order shuffled from a
recorded seed: untraced (three adjacent stretches, the middle one against the outer two); memcost
at its --pid defaults (faults counted in the kernel); with fault time measured in the kernel; at a
command's defaults; with `--fault-counting perf` (a record of each fault's address); and, where
bpftrace is installed, an empty BPF program on the fault tracepoint (near the floor of any exact
count in the kernel) and bpftrace counting the service's faults per thread; and sampled counts
(`--sample-period 64`, `256`). The client first runs one stretch unmeasured (the service's first
seconds are slower). It prints each variant's median ratio with a distribution-free 95 % interval
of the median, the service's own CPU time per request around ÷ in the window (the same ratio, apart
from waiting), and memcost's own counts against the kernel's.
`--only TEXT` (repeatable) keeps the variants whose label contains TEXT, untraced and the other probe's.
`--other-probe PATH` adds the --pid defaults run by another build of memcost-probe (MEMCOST_PROBE),
so that two builds are compared in one sitting, interleaved. `--soak SECONDS` instead watches once
for that long at the defaults and prints memcost's memory each minute, its count against the
kernel's and the window files it wrote.

    sudo python3 bench/trace_service.py [--rounds 5] [--seconds 12] [--only TEXT] [--memcost .venv/bin/memcost]
        [--other-probe PATH] [--soak 3600]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUEST = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n"


def answer_times(port: int, stop: threading.Event, times: list[float]) -> None:
    """Requests sent one after another on one connection until `stop`; each answer's time
    (CLOCK_MONOTONIC, the clock of memcost's records) appended to `times`."""
    with socket.create_connection(("127.0.0.1", port)) as connection:
        while not stop.is_set():
            connection.sendall(REQUEST)
            reply = b""
            while not reply.endswith(b"\n") or b"\r\n\r\n" not in reply:
                chunk = connection.recv(4096)
                if not chunk:
                    raise RuntimeError("the service closed the connection")
                reply += chunk
            times.append(time.monotonic())


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median: the order statistics k and n + 1 - k, the widest
    pair whose binomial coverage is at least `confidence` (the whole range when there are too few)."""
    ordered = sorted(values)
    n = len(ordered)
    best = (ordered[0], ordered[-1])
    for k in range(1, n // 2 + 1):
        coverage = sum(math.comb(n, i) for i in range(k, n - k + 1)) / 2 ** n
        if coverage < confidence:
            break
        best = (ordered[k - 1], ordered[n - k])
    return best


def ratio_cells(ratios: list[float]) -> str:
    """A row's median ratio, its interval and each round's, as Markdown cells."""
    low, high = median_interval(ratios)
    return (f"**{statistics.median(ratios):.1%}** | {low:.1%}–{high:.1%} | "
            f"{', '.join(f'{ratio:.0%}' for ratio in ratios)} |")


def rate(times: list[float], begin: float, end: float) -> float:
    return sum(begin <= at < end for at in times) / (end - begin)


def cpu_times(pid: int, stop: threading.Event, readings: list[tuple[float, float]]) -> None:
    """The service's own CPU time (user + system, /proc/PID/stat) every 50 ms until `stop`, with
    when it was read: what a request costs the service, apart from how long it waited."""
    tick = os.sysconf("SC_CLK_TCK")
    while not stop.is_set():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        readings.append((time.monotonic(), (int(fields[11]) + int(fields[12])) / tick))
        stop.wait(0.05)


def cpu_per_request(readings: list[tuple[float, float]], times: list[float], begin: float, end: float) -> float:
    """The service's CPU seconds per request between the readings nearest `begin` and `end`."""
    first = min(readings, key=lambda reading: abs(reading[0] - begin))
    last = min(readings, key=lambda reading: abs(reading[0] - end))
    answered = sum(first[0] <= at < last[0] for at in times)
    return (last[1] - first[1]) / answered if answered else float("nan")


def compared(times: list[float], readings: list[tuple[float, float]], before: tuple[float, float],
             during: tuple[float, float], after: tuple[float, float]) -> tuple[float, float, float]:
    """The rate around the window (the mean of the stretches `before` and `after` it, each a begin
    and an end), the rate `during` it, and the service's CPU per request around ÷ during. Taking
    both sides cancels a drift that runs through the measurement, which a stretch before alone
    charges to the window."""
    around = (rate(times, *before) + rate(times, *after)) / 2
    cpu_around = (cpu_per_request(readings, times, *before) + cpu_per_request(readings, times, *after)) / 2
    return around, rate(times, *during), cpu_around / cpu_per_request(readings, times, *during)


@contextlib.contextmanager
def client_running(port: int, pid: int):
    """The client sending requests throughout the block: its answer times (filled as they come),
    the moment it started, and the service's CPU time read as it goes."""
    times: list[float] = []
    readings: list[tuple[float, float]] = []
    stop = threading.Event()
    client = threading.Thread(target=answer_times, args=(port, stop, times))
    reader = threading.Thread(target=cpu_times, args=(pid, stop, readings))
    began = time.monotonic()
    reader.start()
    client.start()
    try:
        yield times, began, readings
    finally:
        stop.set()
        client.join()
        reader.join()


def measured_bpftrace(program: str, pid: int, port: int, seconds: float) -> tuple[float, float, float]:
    """One measurement of bpftrace running `program` (its PID replaced by the service's) for
    `seconds` between two untraced `seconds` of the client: the rate around, the rate from when
    bpftrace said it attached until it was stopped, and the service's CPU per request around ÷ during."""
    with client_running(port, pid) as (times, began, readings):
        time.sleep(seconds)
        tracer = subprocess.Popen(["bpftrace", "-e", program.replace("PID", str(pid))], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
        for line in tracer.stdout:
            if line.startswith("Attaching"):
                break
        opened = time.monotonic()
        time.sleep(seconds)
        closed = time.monotonic()
        tracer.send_signal(2)
        tracer.communicate(timeout=60)
        ended = time.monotonic()
        time.sleep(seconds)
    return compared(times, readings, (began, began + seconds), (opened, closed), (ended, ended + seconds))


def measured(memcost: str, results: Path, pid: int, port: int, seconds: float, flags: list[str] | None,
             probe: str | None = None) -> tuple[float, float, float, dict]:
    """One measurement, the client running throughout: `seconds` untraced, then (flags given)
    memcost attached for `seconds` more, then `seconds` untraced after memcost exited. The rate
    around (the mean of before and after), the rate in memcost's watched window (from its records:
    when it opened and how long it lasted), the service's CPU per request around ÷ in the window,
    and memcost's totals. Untraced (no flags): three adjacent stretches."""
    with client_running(port, pid) as (times, began, readings):
        time.sleep(seconds)
        if flags is None:
            time.sleep(2 * seconds)
            first, second = began + seconds, began + 2 * seconds
            return (*compared(times, readings, (began, first), (first, second), (second, second + seconds)), {})
        command = [memcost, "--results-dir", str(results), "trace", "--pid", str(pid), "--every", "10s",
                   "--export-pprof", str(results / "windows"), "--seconds", str(seconds), *flags]
        environment = {**os.environ, "MEMCOST_PROBE": probe} if probe else None
        watcher = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                 timeout=seconds + 120, env=environment)
        # The stretch after begins once memcost has exited: none of its work (the results written
        # after the window) falls in it.
        ended = time.monotonic()
        time.sleep(seconds)
    if watcher.returncode != 0:
        raise RuntimeError(f"memcost failed (exit {watcher.returncode}): {watcher.stderr.strip()[-400:]}")
    document = json.loads((results / "latest" / "trace.json").read_text())
    opened_ns = min(sample["metrics"]["time_ns"] for sample in document["samples"]
                    if sample["case"].get("record") == "process" and sample["case"].get("change") == "start")
    run = next(sample["metrics"] for sample in document["samples"] if sample["case"].get("record") == "run")
    opened, closed = opened_ns / 1e9, (opened_ns + run["wall_ns"]) / 1e9
    return (*compared(times, readings, (began, began + seconds), (opened, closed), (ended, ended + seconds)),
            document["summary"]["totals"])


def resident_mb(pid: int) -> float:
    """A process's resident memory (VmRSS), in MB; 0 once it has gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    return 0.0


def soak(memcost: str, results: Path, pid: int, port: int, seconds: float) -> int:
    """One long watch at the --pid defaults (--every 10s), the client running throughout: each
    minute, the RSS of memcost's front end and of its probe and the service's rate that minute; at
    the end, the count against the kernel's, records lost, and the window files written."""
    windows = results / "soak-windows"
    command = [memcost, "--results-dir", str(results), "trace", "--pid", str(pid), "--every", "10s",
               "--export-pprof", str(windows), "--seconds", str(seconds)]
    print(f"Soak: `memcost trace --pid PID --every 10s --seconds {seconds:g}` on the service, the client sending "
          "requests throughout; each minute the resident memory (VmRSS) of memcost's front end and probe.")
    print("| minute | front end MB | probe MB | requests/s that minute |")
    print("|---|---|---|---|")
    with client_running(port, pid) as (times, _, _):
        watcher = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        started = time.monotonic()
        minute = 0
        while watcher.poll() is None:
            time.sleep(0.5)
            if time.monotonic() - started < 60 * (minute + 1):
                continue
            minute += 1
            probes = subprocess.run(["pgrep", "-P", str(watcher.pid)], capture_output=True, text=True).stdout.split()
            probe_mb = sum(resident_mb(int(child)) for child in probes)
            now = time.monotonic()
            print(f"| {minute} | {resident_mb(watcher.pid):.1f} | {probe_mb:.1f} | {rate(times, now - 60, now):.1f} |",
                  flush=True)
        stderr = watcher.communicate()[1]
    if watcher.returncode != 0:
        print(f"memcost failed (exit {watcher.returncode}): {stderr.strip()[-400:]}", file=sys.stderr)
        return 1
    totals = json.loads((results / "latest" / "trace.json").read_text())["summary"]["totals"]
    files = sorted(windows.glob("*.pb.gz"))
    print()
    print(f"Faults counted {totals['faults']:,}, the kernel's {totals['kernel_faults']:,}; lost records "
          f"{totals['lost_records']:,}; tracer CPU {totals['tracer_cpu_ms'] / 1e3:,.1f} s in {totals['wall_ms'] / 1e3:,.0f} s; "
          f"{len(files)} window files, {sum(f.stat().st_size for f in files) / 1e3:,.0f} kB in all.")
    return 0


# The settings that decide what watching costs: how faults are counted, how often fault time and
# touching stacks are sampled.
WATCHED = {
    "(defaults: with --pid, 10 touching samples a second per CPU, no cpu-clock sampler, no fault timed)": [],
    "--time-faults-one-in 256 (fault time measured in the kernel)": ["--time-faults-one-in", "256"],
    "--touch-samples-per-second 1000 --cpu-sample-us 1000 --time-faults-one-in 16 (a command's defaults)": [
        "--touch-samples-per-second", "1000", "--cpu-sample-us", "1000", "--time-faults-one-in", "16"],
    "--fault-counting perf": ["--fault-counting", "perf"],
    "--sample-period 64 (one fault in 64 recorded with its stack, counts scaled)": ["--sample-period", "64"],
    "--sample-period 256": ["--sample-period", "256"],
}

# What a user could run instead, and near the floor of any exact count in the kernel: a BPF program
# on the fault tracepoint that does nothing (the classic tracepoint: bpftrace 0.17 has no raw or BTF
# tracepoints, which cost a little less), then one that counts the service's faults per thread.
BPFTRACE = {
    "bpftrace: an empty program on the fault tracepoint (every process's faults)":
        "tracepoint:exceptions:page_fault_user { }",
    "bpftrace: the service's faults counted per thread (tracepoint)":
        "tracepoint:exceptions:page_fault_user /pid == PID/ { @[tid] = count(); }",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=12,
                        help="the untraced stretch and memcost's window, each (default 12)")
    parser.add_argument("--memcost", default=str(ROOT / ".venv" / "bin" / "memcost"))
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--only", action="append", default=[], metavar="TEXT",
                        help="measure only the variants whose label contains TEXT (repeatable; untraced always runs)")
    parser.add_argument("--other-probe", metavar="PATH",
                        help="also the --pid defaults with this memcost-probe build (MEMCOST_PROBE), interleaved")
    parser.add_argument("--soak", type=float, metavar="SECONDS",
                        help="instead: one watch this long at the --pid defaults, memcost's memory each minute")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("trace_service: run as root (memcost trace --pid needs it)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="memcost-service-") as name:
        folder = Path(name)
        binary = folder / "buffer_service"
        subprocess.run(["cc", "-O2", "-o", str(binary), str(ROOT / "bench" / "data" / "buffer_service.c")], check=True)
        results = folder / "results"
        subprocess.run([args.memcost, "--results-dir", str(results), "costs", "--quick"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = folder / "port"
        service = subprocess.Popen([str(binary), str(port_file)])
        try:
            while not port_file.exists() or not port_file.read_text().strip():
                time.sleep(0.01)
            port = int(port_file.read_text())
            # The service's first seconds run slower (its first faults, the client's start): not measured.
            with client_running(port, service.pid):
                time.sleep(args.seconds)
            if args.soak:
                return soak(args.memcost, results, service.pid, port, args.soak)
            variants: dict = {"untraced": None, **{f"memcost trace --pid {label}": flags for label, flags in WATCHED.items()}}
            if shutil.which("bpftrace"):
                variants.update(BPFTRACE)
            else:
                print("bpftrace is not installed: its variants are left out", file=sys.stderr)
            other_label = f"memcost trace --pid (defaults), the probe at {args.other_probe}"
            if args.other_probe:
                variants[other_label] = []
            if args.only:
                variants = {label: flags for label, flags in variants.items()
                            if label in ("untraced", other_label) or any(text in label for text in args.only)}
            around: dict[str, list[float]] = {label: [] for label in variants}
            during: dict[str, list[float]] = {label: [] for label in variants}
            cpu_ratios: dict[str, list[float]] = {label: [] for label in variants}
            counts: dict[str, list[tuple]] = {label: [] for label in variants if isinstance(variants[label], list)}
            order = random.Random(args.seed)
            for round_number in range(args.rounds):
                labels = list(variants)
                order.shuffle(labels)
                for label in labels:
                    if isinstance(variants[label], str):
                        untraced, watched, efficiency = measured_bpftrace(variants[label], service.pid, port, args.seconds)
                        totals = {}
                    else:
                        untraced, watched, efficiency, totals = measured(
                            args.memcost, results, service.pid, port, args.seconds, variants[label],
                            args.other_probe if label == other_label else None)
                    around[label].append(untraced)
                    during[label].append(watched)
                    cpu_ratios[label].append(efficiency)
                    if totals:
                        counts[label].append((totals["faults"], totals["kernel_faults"], totals["lost_records"],
                                              totals["tracer_cpu_ms"], totals["wall_ms"]))
                print(f"round {round_number + 1}/{args.rounds} done", file=sys.stderr)
        finally:
            service.kill()
            service.wait()
    print(f"Service: 16 MiB mapped, written and dropped per request (4,096 faults); {args.rounds} rounds, order "
          f"shuffled from seed {args.seed}. Each measurement: the client runs {args.seconds:g} s untraced, then on "
          f"through memcost's watched window ({args.seconds:g} s; the untraced row: another {args.seconds:g} s), then "
          f"{args.seconds:g} s untraced after memcost exited; the window's rate is divided by the mean of the rates "
          f"before and after it (the service's speed drifts from one minute to the next: the host takes back freed "
          f"memory). Medians over the rounds.")
    print("| variant | requests/s around → in the window (medians) | ÷ the rate around (median) | 95 % interval of the median | each round |")
    print("|---|---|---|---|---|")
    for label in around:
        ratios = [watched / untraced for untraced, watched in zip(around[label], during[label])]
        print(f"| {label} | {statistics.median(around[label]):.1f} → {statistics.median(during[label]):.1f} | "
              f"{ratio_cells(ratios)}")
    print()
    print("The service's own CPU time per request (user + system, /proc/PID/stat every 50 ms), around ÷ in the "
          "window: what watching adds to each request's work, apart from waiting and the client.")
    print("| variant | CPU per request, around ÷ in the window (median) | 95 % interval of the median | each round |")
    print("|---|---|---|---|")
    for label, ratios in cpu_ratios.items():
        print(f"| {label} | {ratio_cells(ratios)}")
    print()
    print("| variant | faults (memcost) | faults (kernel) | lost | tracer CPU ms | watched ms |")
    print("|---|---|---|---|---|---|")
    for label, rows in counts.items():
        for faults, kernel, lost, cpu_ms, wall_ms in rows:
            print(f"| {label} | {faults:,} | {kernel:,} | {lost:,} | {cpu_ms:,.0f} | {wall_ms:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
