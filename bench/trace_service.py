#!/usr/bin/env python3
"""What `memcost trace --pid --every` costs a running service: a benchmark, not a test
(docs/trace.md, "A service under --pid").

bench/data/buffer_service.c answers HTTP on 127.0.0.1, mapping, writing and dropping a 16 MiB
buffer per request (4,096 faults each). A client on one keep-alive connection sends requests back
to back for --seconds and counts the answers. Each round measures, in an order shuffled from a
recorded seed: untraced; watched by `memcost trace --pid PID --every 10s` at its defaults (faults
counted in the kernel); and watched with `--fault-counting perf` (a record per fault). The
service runs throughout; memcost attaches, the client starts once memcost's window is open, and
memcost stops after the client. It prints each variant's median requests per second and its ratio
to untraced, and memcost's own counts against the kernel's.

    sudo python3 bench/trace_service.py [--rounds 3] [--seconds 20] [--memcost .venv/bin/memcost]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUEST = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n"


def requests_for(port: int, seconds: float) -> int:
    """Requests answered in `seconds`, one after another on one connection."""
    answered = 0
    with socket.create_connection(("127.0.0.1", port)) as connection:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            connection.sendall(REQUEST)
            reply = b""
            while not reply.endswith(b"\n") or b"\r\n\r\n" not in reply:
                chunk = connection.recv(4096)
                if not chunk:
                    raise RuntimeError("the service closed the connection")
                reply += chunk
            answered += 1
    return answered


def traced(memcost: str, results: Path, pid: int, port: int, seconds: float, flags: list[str]) -> tuple[int, dict]:
    """Requests answered while memcost watches the service, and memcost's totals."""
    command = [memcost, "--results-dir", str(results), "trace", "--pid", str(pid), "--every", "10s",
               "--export-pprof", str(results / "windows"), "--seconds", str(seconds + 4), *flags]
    watcher = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(2)  # its start-up: the window opens within it (a costs result is present)
    answered = requests_for(port, seconds)
    _, errors = watcher.communicate(timeout=seconds + 120)
    if watcher.returncode != 0:
        raise RuntimeError(f"memcost failed (exit {watcher.returncode}): {errors.strip()[-400:]}")
    document = json.loads((results / "latest" / "trace.json").read_text())
    return answered, document["summary"]["totals"]


# The settings that decide what watching costs: how faults are counted, how often fault time and
# touching stacks are sampled.
WATCHED = {
    "(defaults: with --pid, 10 touching samples a second per CPU, no cpu-clock sampler, one fault in 256 timed)": [],
    "--touch-samples-per-second 1000 --cpu-sample-us 1000 --time-faults-one-in 16 (a command's defaults)": [
        "--touch-samples-per-second", "1000", "--cpu-sample-us", "1000", "--time-faults-one-in", "16"],
    "--touch-samples-per-second 1 --cpu-sample-us 0 --time-faults-one-in 0": [
        "--touch-samples-per-second", "1", "--cpu-sample-us", "0", "--time-faults-one-in", "0"],
    "--fault-counting perf": ["--fault-counting", "perf"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20, help="the client's time per measurement (default 20)")
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
            variants = {"untraced": None, **{f"memcost trace --pid {label}": flags for label, flags in WATCHED.items()}}
            rates: dict[str, list[float]] = {label: [] for label in variants}
            counts: dict[str, list[tuple]] = {label: [] for label in variants if variants[label] is not None}
            order = random.Random(args.seed)
            for round_number in range(args.rounds):
                labels = list(variants)
                order.shuffle(labels)
                for label in labels:
                    if variants[label] is None:
                        rates[label].append(requests_for(port, args.seconds) / args.seconds)
                        continue
                    answered, totals = traced(args.memcost, results, service.pid, port, args.seconds, variants[label])
                    rates[label].append(answered / args.seconds)
                    counts[label].append((totals["faults"], totals["kernel_faults"], totals["lost_records"],
                                          totals["tracer_cpu_ms"], totals["wall_ms"]))
                print(f"round {round_number + 1}/{args.rounds} done", file=sys.stderr)
        finally:
            service.kill()
            service.wait()
    base = statistics.median(rates["untraced"])
    print(f"Service: 16 MiB mapped, written and dropped per request (4,096 faults); {args.rounds} rounds of "
          f"{args.seconds:g} s, order shuffled from seed {args.seed}; medians.")
    print("| variant | requests/s (median) | each round | ÷ untraced |")
    print("|---|---|---|---|")
    for label, values in rates.items():
        median = statistics.median(values)
        print(f"| {label} | {median:.1f} | {', '.join(f'{v:.1f}' for v in values)} | {median / base:.0%} |")
    print()
    print("| variant | faults (memcost) | faults (kernel) | lost | tracer CPU ms | watched ms |")
    print("|---|---|---|---|---|---|")
    for label, rows in counts.items():
        for faults, kernel, lost, cpu_ms, wall_ms in rows:
            print(f"| {label} | {faults:,} | {kernel:,} | {lost:,} | {cpu_ms:,.0f} | {wall_ms:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
