#!/usr/bin/env python3
"""Does `memcost costs` agree with an independent probe? A benchmark, not a test (docs/costs.md,
"Checked against an independent probe").

tests/python/data/first_touch.c measures the fault column from the docs' description alone (map,
advise, write, write again, unmap, 20 ms settle; first touch minus second touch, per MiB), sharing
no code with memcost (test_costs.py runs it too, with a loose bound). Each round runs, in an order shuffled from a recorded seed, `memcost costs`
on one size over base pages and THP (os route, rows only) and the plain probe on the same size,
page kinds, warm-ups and repetitions. It prints each round's medians, each tool's median over the
rounds, and memcost's over the plain probe's per page kind, the round-by-round ratios beside it.

    python3 bench/costs_agreement.py [--rounds 3] [--size-mib 256] [--reps 5] [--warmup 2] [--whole]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("base", "thp")


def build_plain_probe(folder: Path) -> Path:
    binary = folder / "first_touch"
    subprocess.run(["cc", "-O2", "-o", str(binary), str(ROOT / "tests/python/data/first_touch.c")], check=True)
    return binary


def plain_round(binary: Path, size_mib: int, warmup: int, reps: int) -> dict[str, float]:
    result = {}
    for kind in KINDS:
        out = subprocess.run([str(binary), str(size_mib << 20), kind, str(warmup), str(reps)],
                             check=True, capture_output=True, text=True).stdout
        result[kind] = float(out)
    return result


def memcost_round(memcost: str, folder: Path, size_mib: int, warmup: int, reps: int, whole: bool) -> dict[str, float]:
    """`memcost costs` on the size: base and THP over the os route, rows only; or, `whole`, every
    page kind, route and part at their defaults (the run a user types), its os-route rows read."""
    results = folder / "results"
    narrowing = [] if whole else ["--pages", ",".join(KINDS), "--routes", "os", "--parts", "rows"]
    subprocess.run([memcost, "--results-dir", str(results), "costs", "--sizes", f"{size_mib}M", *narrowing,
                    "--reps", str(reps), "--warmup", str(warmup)],
                   check=True, capture_output=True, text=True)
    document = json.loads((results / "latest" / "costs.json").read_text())
    return {row["page"]: row["fault_us_per_mb"] for row in document["summary"]["rows"]
            if row["route"] == "os" and row["page"] in KINDS}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=random.randrange(1 << 32))
    parser.add_argument("--memcost", default=str(ROOT / ".venv/bin/memcost"))
    parser.add_argument("--whole", action="store_true",
                        help="run `memcost costs` whole (every page kind, route and part), not base and THP rows only")
    args = parser.parse_args()
    order = random.Random(args.seed)
    figures: dict[str, dict[str, list[float]]] = {tool: {kind: [] for kind in KINDS} for tool in ("memcost", "plain")}
    print(f"seed {args.seed}; {args.size_mib} MiB, {args.warmup} warm-ups and {args.reps} repetitions per run"
          f"{'; memcost costs run whole' if args.whole else ''}; fault µs/MB, medians")
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        binary = build_plain_probe(folder)
        for round_number in range(1, args.rounds + 1):
            tools = ["memcost", "plain"]
            order.shuffle(tools)
            for tool in tools:
                measured = (memcost_round(args.memcost, folder, args.size_mib, args.warmup, args.reps, args.whole)
                            if tool == "memcost"
                            else plain_round(binary, args.size_mib, args.warmup, args.reps))
                for kind in KINDS:
                    figures[tool][kind].append(measured[kind])
                print(f"round {round_number} {tool:8s} " + "  ".join(f"{k} {measured[k]:7.1f}" for k in KINDS), flush=True)
    worst = 0.0
    for kind in KINDS:
        ours, theirs = figures["memcost"][kind], figures["plain"][kind]
        ratio = statistics.median(ours) / statistics.median(theirs)
        paired = [a / b for a, b in zip(ours, theirs)]
        worst = max(worst, abs(ratio - 1))
        print(f"{kind:4s}: memcost {statistics.median(ours):7.1f}, plain {statistics.median(theirs):7.1f} µs/MB: "
              f"{ratio:.2f}× (rounds: {', '.join(f'{r:.2f}' for r in paired)})")
    print(f"largest difference of the medians: {worst:.0%} (the issue's target: within 15 %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
