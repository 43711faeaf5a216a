#!/usr/bin/env python3
"""What `memcost trace --pid --every` costs a running service: a benchmark, not a test
(docs/trace.md, "A service under --pid").

bench/data/buffer_service.c answers HTTP on 127.0.0.1, mapping, writing and dropping a 16 MiB
buffer per request (4,096 faults each). A client on one keep-alive connection sends requests back
to back and notes when each is answered. Each measurement runs the client --seconds untraced, then
on while `memcost trace --pid PID --every 10s --seconds S` attaches and watches; the rate inside
memcost's watched window (when it opened and how long it lasted come from its records) is divided
by the rate just before. Each round measures, in an order shuffled from a recorded seed: untraced
(two adjacent stretches); memcost at its --pid defaults (faults counted in the kernel); with fault
time measured in the kernel; at a command's defaults; with `--fault-counting perf` (a record of
each fault's address); and, where bpftrace is installed, an empty BPF program on the fault
tracepoint (near the floor of any exact count in the kernel) and bpftrace counting the service's faults
per thread. It prints each variant's median ratio and memcost's own counts against the kernel's.

    sudo python3 bench/trace_service.py [--rounds 5] [--seconds 12] [--memcost .venv/bin/memcost]
"""

from __future__ import annotations

import argparse
import contextlib
import json
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


def rate(times: list[float], begin: float, end: float) -> float:
    return sum(begin <= at < end for at in times) / (end - begin)


@contextlib.contextmanager
def client_running(port: int):
    """The client sending requests throughout the block: its answer times (filled as they come)
    and the moment it started."""
    times: list[float] = []
    stop = threading.Event()
    client = threading.Thread(target=answer_times, args=(port, stop, times))
    began = time.monotonic()
    client.start()
    try:
        yield times, began
    finally:
        stop.set()
        client.join()


def measured_bpftrace(program: str, pid: int, port: int, seconds: float) -> tuple[float, float]:
    """One measurement of bpftrace running `program` (its PID replaced by the service's) for
    `seconds` after the client's untraced `seconds`: the rate before, and the rate from when
    bpftrace said it attached until it was stopped."""
    with client_running(port) as (times, began):
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
    return rate(times, began, began + seconds), rate(times, opened, closed)


def measured(memcost: str, results: Path, pid: int, port: int, seconds: float, flags: list[str] | None) -> tuple[float, float, dict]:
    """One measurement, the client running throughout: `seconds` untraced, then (flags given)
    memcost attached for `seconds` more. The rate before, the rate in memcost's watched window
    (from its records: when it opened and how long it lasted), and memcost's totals. Untraced
    (no flags): the rates of two adjacent stretches of `seconds`."""
    with client_running(port) as (times, began):
        time.sleep(seconds)
        if flags is None:
            time.sleep(seconds)
            return rate(times, began, began + seconds), rate(times, began + seconds, began + 2 * seconds), {}
        command = [memcost, "--results-dir", str(results), "trace", "--pid", str(pid), "--every", "10s",
                   "--export-pprof", str(results / "windows"), "--seconds", str(seconds), *flags]
        watcher = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                 timeout=seconds + 120)
    if watcher.returncode != 0:
        raise RuntimeError(f"memcost failed (exit {watcher.returncode}): {watcher.stderr.strip()[-400:]}")
    document = json.loads((results / "latest" / "trace.json").read_text())
    opened_ns = min(sample["metrics"]["time_ns"] for sample in document["samples"]
                    if sample["case"].get("record") == "process" and sample["case"].get("change") == "start")
    run = next(sample["metrics"] for sample in document["samples"] if sample["case"].get("record") == "run")
    opened = opened_ns / 1e9
    return (rate(times, began, began + seconds), rate(times, opened, opened + run["wall_ns"] / 1e9),
            document["summary"]["totals"])


# The settings that decide what watching costs: how faults are counted, how often fault time and
# touching stacks are sampled.
WATCHED = {
    "(defaults: with --pid, 10 touching samples a second per CPU, no cpu-clock sampler, no fault timed)": [],
    "--time-faults-one-in 256 (fault time measured in the kernel)": ["--time-faults-one-in", "256"],
    "--touch-samples-per-second 1000 --cpu-sample-us 1000 --time-faults-one-in 16 (a command's defaults)": [
        "--touch-samples-per-second", "1000", "--cpu-sample-us", "1000", "--time-faults-one-in", "16"],
    "--fault-counting perf": ["--fault-counting", "perf"],
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
            variants: dict = {"untraced": None, **{f"memcost trace --pid {label}": flags for label, flags in WATCHED.items()}}
            if shutil.which("bpftrace"):
                variants.update(BPFTRACE)
            else:
                print("bpftrace is not installed: its variants are left out", file=sys.stderr)
            before: dict[str, list[float]] = {label: [] for label in variants}
            during: dict[str, list[float]] = {label: [] for label in variants}
            counts: dict[str, list[tuple]] = {label: [] for label in variants if isinstance(variants[label], list)}
            order = random.Random(args.seed)
            for round_number in range(args.rounds):
                labels = list(variants)
                order.shuffle(labels)
                for label in labels:
                    if isinstance(variants[label], str):
                        untraced, watched = measured_bpftrace(variants[label], service.pid, port, args.seconds)
                        totals = {}
                    else:
                        untraced, watched, totals = measured(args.memcost, results, service.pid, port, args.seconds,
                                                             variants[label])
                    before[label].append(untraced)
                    during[label].append(watched)
                    if totals:
                        counts[label].append((totals["faults"], totals["kernel_faults"], totals["lost_records"],
                                              totals["tracer_cpu_ms"], totals["wall_ms"]))
                print(f"round {round_number + 1}/{args.rounds} done", file=sys.stderr)
        finally:
            service.kill()
            service.wait()
    print(f"Service: 16 MiB mapped, written and dropped per request (4,096 faults); {args.rounds} rounds, order "
          f"shuffled from seed {args.seed}. Each measurement: the client runs {args.seconds:g} s untraced, then on "
          f"through memcost's watched window ({args.seconds:g} s; the untraced row: another {args.seconds:g} s); "
          f"the window's rate is divided by the rate just before it (the service's speed drifts from one minute "
          f"to the next: the host takes back freed memory). Medians over the rounds.")
    print("| variant | requests/s before → in the window (medians) | ÷ the rate just before (median) | each round |")
    print("|---|---|---|---|")
    for label in before:
        ratios = [watched / untraced for untraced, watched in zip(before[label], during[label])]
        print(f"| {label} | {statistics.median(before[label]):.1f} → {statistics.median(during[label]):.1f} | "
              f"**{statistics.median(ratios):.1%}** | {', '.join(f'{ratio:.0%}' for ratio in ratios)} |")
    print()
    print("| variant | faults (memcost) | faults (kernel) | lost | tracer CPU ms | watched ms |")
    print("|---|---|---|---|---|---|")
    for label, rows in counts.items():
        for faults, kernel, lost, cpu_ms, wall_ms in rows:
            print(f"| {label} | {faults:,} | {kernel:,} | {lost:,} | {cpu_ms:,.0f} | {wall_ms:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
