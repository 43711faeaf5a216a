#!/usr/bin/env python3
"""The GPU rows of issues 48 and 49's done-when (after issue 41's), measured on a GPU host in one
command and checked: a benchmark, not a test (CI has no GPU, and no session that built these issues
was lent one). Run it where a GPU is:

    python3 bench/gpu_host.py [--size 32G] [--bundle DIR] [--out DIR] [--steps pinned,bigarray,trace,torch,overhead]
        [--hugetlb] [--quick] [--pinned-rounds N] [--pinned-ways LIST] [--verify-rounds N] [--python PYTHON] [--order-seed N]

The steps run one after the other, each in a process of its own, nothing built beside them:
  pinned    `memcost pinned --size SIZE`: every way to pin SIZE, ranked (docs/pinned.md); with
            --hugetlb (as root) the hugetlb way too, its pool grown for the run and restored;
  bigarray  `memcost bigarray --size SIZE` at its defaults, timed by the wall clock (what a user
            waits), its estimate and its populate-or-touch choice read back (docs/bigarray.md);
  trace     `memcost trace` of bench/data/cuda_pinning.cu, built here by nvcc: 1 GiB pinned by
            cudaHostAlloc, 1 GiB by malloc + cudaHostRegister; its sites must be named by the calls.
  torch     `memcost trace --verify 5 --verify-only pinned_memory` of bench/data/torch_pinning.py (PyTorch,
            this Python; the pinning advice alone: with every advice, 3 rounds took 30 runs): its
            pinning named at the script's own function, and the pinned-memory advice measured
            through memcost's preloaded stand-in for the runtime's calls (docs/trace.md).
  overhead  `import torch`, that PyTorch script and a fault storm on every CPU (bench/data/fault_storm.c:
            256 MiB a thread, eight times), each untraced and traced by the whole `memcost trace`
            command, 3 rounds in an order shuffled each round (--order-seed): each within 1.3x by
            the medians, the script's pinned bytes at an allocation site named by
            cudaHostAlloc and its function, and at least 90 % of the faults in its memory named at
            its lines (PyTorch's OpenMP threads' included).
Then one table: each check of the done-when, what was measured, what it needed, and whether it
passed, under the machine's name; kept as OUT/gpu-host.md and OUT/gpu-host.json beside each step's
results document (OUT/pinned.json, ...) and its output (OUT/pinned.log, ...); the overhead step's
timings are kept as they come, in OUT/overhead-timings.json.

--bundle DIR runs memcost from this checkout with what tools/gpu-host-bundle built elsewhere: the
probe and its libraries from DIR/bin, Python from python/ with the host's own packages. Without it,
the installed `memcost` runs. --quick is a rehearsal (fewer rounds; `bigarray --quick`): its
verdicts are not the done-when's.

Exit codes: 0 every check passed; 1 one failed or a step failed; 2 bad arguments; 4 no CUDA driver
or no GPU (the sentence of `memcost pinned`); 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))  # this checkout's memcost: what --bundle runs, and what is installed from it
from memcost.analysis.pinned import HOST_ALLOC_WAY, MEMCOST_WAY, PINNED_COPY_MARGIN, fastest_whole  # noqa: E402
from memcost.experiments.info import headline  # noqa: E402
from memcost.results import machine_label  # noqa: E402
from memcost.units import parse_size  # noqa: E402

STEPS = ("pinned", "bigarray", "trace", "torch", "overhead")
# The done-when (issue 48): memcost's pinned memory in at most 1/14 of cudaHostAlloc's time, first or
# tied among the ways, and unpinned and freed in at most 1/10 of cudaFreeHost's time; bigarray at its
# defaults within 6 minutes on a 16-core host.
TIMES_FASTER_THAN_HOST_ALLOC = 14.0
RELEASE_OF_FREE_HOST = 0.10
BIGARRAY_MINUTES = 6.0
TRACED_CALLS = ("cudaHostAlloc", "cudaHostRegister")  # what bench/data/cuda_pinning.cu calls
CALLED_FROM = {"cudaHostAlloc": "allocate_staging", "cudaHostRegister": "register_buffer"}  # its functions that call them


def check(name: str, measured: str, needed: str, passed: Optional[bool]) -> dict:
    """One row of the table; `passed` None: a figure the done-when reports but does not judge."""
    return {"check": name, "measured": measured, "needed": needed, "passed": passed}


def pinned_checks(summary: dict) -> list[dict]:
    rows = {row["way"]: row for row in summary.get("rows", [])}
    memcost = rows.get(MEMCOST_WAY)
    versus = summary.get("memcost_against_host_alloc")
    if not memcost or not versus:
        return [check("memcost pinned ran both memcost's way and cudaHostAlloc", "no", "both ways measured", False)]
    size = f"{summary['size_bytes'] / (1 << 30):g} GiB"
    result = [
        check(f"{size} pinned by memcost in at most 1/{TIMES_FASTER_THAN_HOST_ALLOC:g} of cudaHostAlloc's time",
              f"{versus['memcost_s']:.2f} s against {versus['cuda_host_alloc_s']:.2f} s: {versus['times_faster']:.1f}× faster",
              f"≥ {TIMES_FASTER_THAN_HOST_ALLOC:g}× faster", versus["times_faster"] >= TIMES_FASTER_THAN_HOST_ALLOC),
        check("memcost's way first or tied among the ways measured",
              f"rank {versus.get('rank')}, {versus['vs_fastest']:.2f}× the fastest" + (" (tied)" if versus.get("tied") else ""),
              "rank 1 or tied", versus.get("rank") == 1 or bool(versus.get("tied"))),
    ]
    host_alloc = rows.get(HOST_ALLOC_WAY) or {}
    if memcost.get("release_s") and host_alloc.get("release_s"):
        fraction = memcost["release_s"] / host_alloc["release_s"]
        result.append(check(f"{size} unpinned and freed by memcost in at most 1/{1 / RELEASE_OF_FREE_HOST:g} of "
                            "cudaFreeHost's time",
                            f"{memcost['release_s']:.3f} s against {host_alloc['release_s']:.3f} s: {fraction:.2f} of it",
                            f"≤ {RELEASE_OF_FREE_HOST:g}", fraction <= RELEASE_OF_FREE_HOST))
    ordinary = summary.get("ordinary_copy_gb_per_s")
    copy = memcost.get("copy_gb_per_s")
    result.append(check("copies from memcost's pinned memory at pinned speed",
                        f"{copy:.1f} GB/s against ordinary memory's {ordinary:.1f}" if copy and ordinary else "not measured",
                        f"≥ {PINNED_COPY_MARGIN:g}× ordinary memory's copy", bool(memcost.get("copies_pinned"))))
    ranked = [row for row in summary["rows"] if row.get("rank")]
    if ranked:
        fastest = ranked[0]
        result.append(check("fastest way", f"{fastest['way']}: {fastest['ready_s']:.2f} s" +
                            (" (no copy across its chunks)" if fastest.get("copy_across_refused") else ""), "", None))
        whole = fastest_whole(ranked)
        if whole and whole is not fastest:
            result.append(check("fastest way as one registration (an array copied whole)",
                                f"{whole['way']}: {whole['ready_s']:.2f} s, "
                                f"{versus['cuda_host_alloc_s'] / whole['ready_s']:.1f}× faster than cudaHostAlloc", "", None))
    one_after = next((r for r in ranked if r["way"].startswith("mmap + MADV_HUGEPAGE +") and r["way"].endswith("touch + register")),
                     None)
    overlapping = [r for r in ranked if any(word in r["way"] for word in ("overlapped", "following", "each touch",
                                                                      "registered by", "registrations (memcost"))]
    if overlapping and one_after:
        result.append(check("do overlapped or threaded registrations pay",
                            f"one after the other {one_after['ready_s']:.2f} s; " +
                            "; ".join(f"{r['way']} {r['ready_s']:.2f} s" for r in overlapping), "", None))
    limits = summary.get("limits") or {}
    if limits.get("fault_gb_per_s") and limits.get("register_gb_per_s"):
        result.append(check("the limits", f"faulting {limits['fault_gb_per_s']:.1f} GB/s, registering "
                            f"{limits['register_gb_per_s']:.1f} GB/s, the two one after the other "
                            f"{limits['one_after_the_other_gb_per_s']:.1f} GB/s", "", None))
    release = summary.get("fastest_release")
    if release and release.get("of_cuda_free_host"):
        result.append(check("unpinned and freed soonest", f"{release['way']}: {release['release_s']:.3f} s, "
                            f"{release['of_cuda_free_host']:.2f} of cudaFreeHost's", "", None))
    refused = [r["way"] for r in summary["rows"] if r.get("copy_across_refused")]
    if refused:
        result.append(check("copies across two registrations side by side", "refused by the driver: " + "; ".join(refused),
                            "", None))
    crossing = [r for r in summary["rows"] if r.get("copy_across_registrations_gb_per_s")]
    if crossing:
        result.append(check("copies across two registrations side by side",
                            "; ".join(f"{r['way']}: {r['copy_across_registrations_gb_per_s']:.1f} GB/s across, "
                                      f"{r['copy_gb_per_s']:.1f} within" for r in crossing), "", None))
    return result


def bigarray_checks(summary: dict, wall_s: float) -> list[dict]:
    result = []
    auto = summary.get("auto_choice") or {}
    for init in ("zero", "value"):
        placed = auto.get(init)
        if not placed:
            result.append(check(f"{init} initialization: make_big_array first or tied", "not measured", "rank 1", False))
            continue
        interval = placed.get("vs_fastest_interval")
        behind = "" if placed["rank"] == 1 and not placed.get("tied") else \
            f" ({placed['slower_than_fastest_percent']:+.0f} % against {placed['fastest']}" + \
            (f", interval {interval[0]:.2f}–{interval[1]:.2f}" if interval else "") + ")"
        result.append(check(f"{init} initialization: make_big_array first or tied",
                            f"rank {placed['rank']} of {placed['of']}" + (" (tied)" if placed.get("tied") else "") + behind,
                            "rank 1", placed["rank"] == 1))
    result.append(check(f"memcost bigarray at its defaults within {BIGARRAY_MINUTES:g} minutes",
                        f"{wall_s / 60:.1f} min", f"≤ {BIGARRAY_MINUTES:g} min", wall_s <= BIGARRAY_MINUTES * 60))
    estimate = summary.get("estimate")
    if estimate:
        result.append(check("its estimate, printed at the start, within ±30 % of the run",
                            f"{estimate['estimated_s'] / 60:.1f} min; the run took {estimate['ratio']:.2f}× that",
                            "0.70–1.30×", 0.7 <= estimate["ratio"] <= 1.3))
    side = summary.get("side_by_side")
    if side:
        kept = side.get("check") or {}
        result.append(check("one-thread rows side by side", f"{side['rows']} at once"
                            + (f"; check: {kept['strategy']} {kept['alone_s']:.1f} s alone, {kept['beside_s']:.1f} s beside "
                               f"({'kept' if kept['kept'] else 'not kept: every row alone after'})" if kept else ""),
                            "", None))
    fault = auto.get("zero_fault")
    if fault:
        result.append(check("zero path: populate or touch, by measurement", f"{fault['method']}: {fault['reason']}", "", None))
    return result


def trace_checks(summary: dict) -> list[dict]:
    """Each pinning call's faults are a site named by the call and, after `←`, the program's own
    function that made it (not the static runtime's hashed internals), with the pinning advice."""
    named = {advice["call"] for advice in summary.get("pinning", [])}
    sites = [row["site"] for row in summary.get("touching", []) if row["site"].startswith(TRACED_CALLS)]

    def by_its_caller(call: str) -> bool:
        return any(site.startswith(call) and CALLED_FROM[call] in site.partition(" ← ")[2] for site in sites)
    return [check(f"trace names the faults {call} took at {CALLED_FROM[call]}, with advice",
                  ", ".join(s for s in sites if s.startswith(call)) or "no such site",
                  f"{call} (…) ← {CALLED_FROM[call]} (…)", call in named and by_its_caller(call)) for call in TRACED_CALLS]


TORCH_CALLED_FROM = "staging_buffer (torch_pinning.py"  # the script's function whose tensor PyTorch pins
# Issue 49's GPU rows: each command traced within 1.3x of itself untraced, medians over the rounds.
TRACED_WITHIN = 1.3
OVERHEAD_ROUNDS = 3
STORM_MIB, STORM_ROUNDS = 256, 8  # per thread, as the storm (16 threads: 8.4 M faults)


def torch_checks(summary: dict) -> list[dict]:
    """The PyTorch script's cudaHostAlloc named at its own function, and the pinned-memory advice
    measured by --verify through the stand-in (a saving shown)."""
    items = [item for item in summary.get("pinning", []) if item["call"] == "cudaHostAlloc"]
    named = [item["site"] for item in items if TORCH_CALLED_FROM in item["site"].partition(" ← ")[2]]
    variants = [v for v in (summary.get("verification") or {}).get("variants", []) if v["kind"] == "pinned_memory"]
    measured = "; ".join(f"{v['verdict']}, {v['measured_saving_ms']:,.0f} ms saved" for v in variants
                         if v.get("measured_saving_ms") is not None) or "no pinned-memory variant ran"
    return [check("trace names PyTorch's cudaHostAlloc at the script's function, with advice",
                  ", ".join(item["site"] for item in items) or "no such site", f"cudaHostAlloc (…) ← {TORCH_CALLED_FROM}…)",
                  bool(named)),
            check("--verify measures the pinned-memory advice through the stand-in", measured, "saving shown",
                  any(v["verdict"] == "saving shown" for v in variants))]


def overhead_checks(timings: dict[str, dict[str, list[float]]]) -> list[dict]:
    """Each command's whole traced run against its untraced run: the medians of the interleaved
    rounds, within TRACED_WITHIN."""
    result = []
    for name, runs in timings.items():
        if not runs["untraced"] or not runs["traced"]:
            result.append(check(f"{name}: traced within {TRACED_WITHIN:g}× of untraced", "not measured",
                                f"≤ {TRACED_WITHIN:g}×", False))
            continue
        untraced, traced = statistics.median(runs["untraced"]), statistics.median(runs["traced"])
        result.append(check(f"{name}: traced within {TRACED_WITHIN:g}× of untraced",
                            f"{traced:.2f} s against {untraced:.2f} s: {traced / untraced:.2f}× "
                            f"(medians of {len(runs['traced'])} interleaved rounds)",
                            f"≤ {TRACED_WITHIN:g}×", traced / untraced <= TRACED_WITHIN))
    return result


def torch_allocation_check(summary: dict, pinned_bytes: int) -> dict:
    """The memory PyTorch's cudaHostAlloc pinned for the script, at an allocation site named by the
    call and the script's function, with its bytes."""
    rows = [row for row in summary.get("rows", []) if row["site"].startswith("cudaHostAlloc")
            and TORCH_CALLED_FROM in row["site"].partition(" ← ")[2]]
    found = max((row.get("bytes") or 0 for row in rows), default=0)
    return check("the script's pinned bytes at their allocation site",
                 ", ".join(f"{row['site']}: {row.get('bytes') or 0:,} bytes" for row in rows) or "no such site",
                 f"cudaHostAlloc ← {TORCH_CALLED_FROM}…), ≥ {pinned_bytes:,} bytes", found >= pinned_bytes)


TOUCHED_AT_LINES = 0.9  # of the faults in the script's memory, named at a line of the script


def torch_touching_check(summary: dict) -> dict:
    """The faults taken in the script's memory (PyTorch's fill_ on its OpenMP threads, the driver
    pinning it) named at a line of the script, whichever thread took them: at least TOUCHED_AT_LINES."""
    script = "torch_pinning.py"
    rows = [row for row in summary.get("touching", []) if script in (row.get("allocation_site") or "")]
    total = sum(row["faults"] for row in rows)
    at_lines = sum(row["faults"] for row in rows if re.search(rf"\({re.escape(script)}:\d+\)", row["site"]))
    share = at_lines / total if total else 0.0
    return check("the faults in the script's memory named at the script's lines",
                 f"{at_lines:,} of {total:,} faults ({share:.0%})" if total else "no faults in the script's memory",
                 f"≥ {TOUCHED_AT_LINES:.0%}", share >= TOUCHED_AT_LINES)


def build_fault_storm(out: Path) -> tuple[Optional[Path], str]:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not compiler:
        return None, "no C compiler here: the fault storm cannot be built"
    binary = out / "fault_storm"
    built = subprocess.run([compiler, "-O2", "-pthread", "-o", str(binary), str(ROOT / "bench" / "data" / "fault_storm.c")],
                           capture_output=True, text=True)
    return (binary, "") if built.returncode == 0 else (None, f"the fault storm did not build: {built.stderr.strip()[-300:]}")


def measure_overhead(runner: "Runner", python: str, trace_bytes: str, storm: Optional[Path], rounds: int,
                     seed: int) -> tuple[dict[str, dict[str, list[float]]], Optional[dict], Optional[dict]]:
    """import torch, the PyTorch pinning script and the fault storm on every CPU, each untraced and
    traced (the whole `memcost trace` command), in an order shuffled each round. Returns each
    command's seconds, the last traced script's summary, and a traced run's document (it names the
    machine)."""
    threads = os.cpu_count() or 1
    commands = {"import torch": [python, "-c", "import torch"],
                "the PyTorch pinning script": [python, str(ROOT / "bench" / "data" / "torch_pinning.py"), trace_bytes]}
    if storm:
        commands[f"a fault storm on {threads} threads"] = [str(storm), str(threads), str(STORM_MIB), str(STORM_ROUNDS)]
    timings = {name: {"untraced": [], "traced": []} for name in commands}
    script_summary, any_document = None, None
    order = random.Random(seed)
    for round_ in range(rounds):
        runs = [(name, traced) for name in commands for traced in (False, True)]
        order.shuffle(runs)
        for name, traced in runs:
            if traced:
                step = f"overhead-{round_}-" + name.split()[1]
                code, wall_s, document = runner.memcost(step, "trace", "--", *commands[name])
                if code != 0 or document is None:
                    continue
                any_document = document
                if name == "the PyTorch pinning script":
                    script_summary = document["summary"]
            else:
                started = time.monotonic()
                code = subprocess.run(commands[name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
                wall_s = time.monotonic() - started
                if code != 0:
                    continue
            timings[name]["traced" if traced else "untraced"].append(wall_s)
            # Each timing as it comes, kept too: a run stopped at its limit keeps what it measured.
            print(f"overhead: round {round_ + 1}: {name}, {'traced' if traced else 'untraced'}: {wall_s:.3f} s", flush=True)
            (runner.out / "overhead-timings.json").write_text(json.dumps(timings, indent=1) + "\n")
        print(f"overhead: round {round_ + 1} of {rounds} done", flush=True)
    return timings, script_summary, any_document


def machine(documents: list[dict], pinned: Optional[dict]) -> str:
    """The machine as the results name it, with what the done-when depends on: CPUs, kernel, GPU."""
    context = next((d["context"] for d in documents if d), None)
    if not context:
        return "unknown machine"
    words = [f"{machine_label(context)}: {context['cpu']['model']}", headline(context),
             f"{context['memory']['total_bytes'] / (1 << 30):.0f} GiB of memory", f"Linux {context['os']['release']}"]
    if context["hypervisor"]["present"]:
        words.append(f"{context['hypervisor']['vendor'] or 'a'} guest")
    if pinned and pinned.get("device"):
        words.append(f"GPU {pinned['device']}")
    return ", ".join(words)


def table(checks: list[dict], machine_name: str, quick: bool) -> str:
    verdict = {True: "passed", False: "FAILED", None: "(figure)"}
    lines = [f"Issues 48 and 49's done-when, measured on {machine_name}" +
             (" (a --quick rehearsal: not the done-when's verdicts)" if quick else ""), "",
             "| check | measured | needed | verdict |", "|---|---|---|---|"]
    lines += [f"| {c['check']} | {c['measured']} | {c['needed']} | {verdict[c['passed']]} |" for c in checks]
    return "\n".join(lines) + "\n"


class Runner:
    """The memcost command, installed or from this checkout with a bundle, each step logged to OUT."""

    def __init__(self, bundle: Optional[Path], out: Path):
        self.out = out
        self.env = dict(os.environ, PYTHONUNBUFFERED="1")
        if bundle:
            self.env["MEMCOST_PROBE"] = str(bundle / "bin" / "memcost-probe")
            self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "python"), self.env.get("PYTHONPATH")]))
            self.command = [sys.executable, "-m", "memcost"]
        else:
            found = shutil.which("memcost")
            self.command = [found] if found else [sys.executable, "-m", "memcost"]

    def memcost(self, step: str, subcommand: str, *args: str) -> tuple[int, float, Optional[dict]]:
        """Runs `memcost SUBCOMMAND --export-json OUT/STEP.json ARGS`; its output goes to the
        terminal and to OUT/STEP.log. Returns the exit code, the wall seconds and the document
        (None if none)."""
        document = self.out / f"{step}.json"
        document.unlink(missing_ok=True)
        command = [*self.command, "--results-dir", str(self.out / "results"), subcommand, "--export-json", str(document),
                   *args]
        started = time.monotonic()
        with open(self.out / f"{step}.log", "w") as log:
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env)
            for line in process.stdout:
                sys.stdout.write(line)
                log.write(line)
            code = process.wait()
        wall_s = time.monotonic() - started
        print(f"bench/gpu_host.py: {step} took {wall_s:.1f} s (exit {code})", flush=True)  # for planning a lent machine's minutes
        return code, wall_s, json.loads(document.read_text()) if code == 0 and document.exists() else None


def build_cuda_program(out: Path) -> tuple[Optional[Path], str]:
    nvcc = shutil.which("nvcc") or next((str(p) for p in Path("/usr/local").glob("cuda*/bin/nvcc")), None)
    if not nvcc:
        return None, "nvcc is not installed here: the CUDA program to trace cannot be built"
    binary = out / "cuda_pinning"
    built = subprocess.run([nvcc, "-O2", "-g", "-o", str(binary), str(ROOT / "bench" / "data" / "cuda_pinning.cu")],
                           capture_output=True, text=True)
    if built.returncode != 0:
        return None, f"nvcc could not build bench/data/cuda_pinning.cu: {built.stderr.strip()[-500:]}"
    return binary, ""


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="32G", help="bytes to pin and to allocate (default 32G, the issue's size)")
    parser.add_argument("--bundle", type=Path, help="run from this checkout with tools/gpu-host-bundle's folder")
    parser.add_argument("--out", type=Path, default=Path("gpu-host"), help="where the results go (default ./gpu-host)")
    parser.add_argument("--steps", default=",".join(STEPS), help="which steps, of " + ", ".join(STEPS))
    parser.add_argument("--hugetlb", action="store_true", help="as root: the hugetlb way of `memcost pinned` too")
    parser.add_argument("--quick", action="store_true", help="a rehearsal: fewer rounds, `bigarray --quick`")
    parser.add_argument("--pinned-rounds", type=int,
                        help="rounds of `memcost pinned` (default its own, 3; --quick 2): fewer where device time is short")
    parser.add_argument("--pinned-ways", help="only these ways of `memcost pinned` (its --ways: names containing one "
                                              "of these, comma-separated): fewer where device time is short")
    parser.add_argument("--verify-rounds", type=int, default=5,
                        help="rounds of the torch step's --verify (default 5): fewer where device time is short")
    parser.add_argument("--trace-bytes", default="1073741824", help="bytes the traced CUDA program pins each way")
    parser.add_argument("--python", default=sys.executable,
                        help="the Python with PyTorch that the torch and overhead steps run (default: this one)")
    parser.add_argument("--order-seed", type=int, default=int(time.time()),
                        help="seed of the overhead step's order, shuffled each round (default: the time)")
    args = parser.parse_args(argv)
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    if not steps or set(steps) - set(STEPS):
        parser.error(f"--steps takes a list of {', '.join(STEPS)}")
    try:
        parse_size(args.size)
    except ValueError as error:
        parser.error(f"--size {args.size}: {error}")
    if args.verify_rounds < 2:
        parser.error("--verify-rounds takes a whole number of at least 2")
    if args.pinned_rounds is not None and args.pinned_rounds < 1:
        parser.error("--pinned-rounds takes a whole number of at least 1")
    if args.bundle and not (args.bundle / "bin" / "memcost-probe").is_file():
        parser.error(f"{args.bundle} holds no bin/memcost-probe: make it with tools/gpu-host-bundle")
    args.out.mkdir(parents=True, exist_ok=True)
    runner = Runner(args.bundle, args.out)
    checks: list[dict] = []
    documents: list[dict] = []
    pinned_summary = None
    try:
        if "pinned" in steps:
            rounds = args.pinned_rounds or (2 if args.quick else None)
            extra = ["--rounds", str(rounds)] if rounds else []
            extra += ["--ways", args.pinned_ways] if args.pinned_ways else []
            if args.hugetlb:
                extra += ["--reserve-hugepages", hugetlb_pool_size(args.size)]
            code, _, document = runner.memcost("pinned", "pinned", "--size", args.size, *extra)
            if code == 4:
                print("bench/gpu_host.py: no GPU to measure on (memcost pinned's sentence is above)", file=sys.stderr)
                return 4
            if document is None:
                checks.append(check("memcost pinned ran", f"exit {code} (see {args.out / 'pinned.log'})", "exit 0", False))
            else:
                documents.append(document)
                pinned_summary = document["summary"]
                checks += pinned_checks(pinned_summary)
        if "bigarray" in steps:
            code, wall_s, document = runner.memcost("bigarray", "bigarray", "--size", args.size,
                                                    *(["--quick"] if args.quick else []))
            if document is None:
                checks.append(check("memcost bigarray ran", f"exit {code} (see {args.out / 'bigarray.log'})", "exit 0", False))
            else:
                documents.append(document)
                checks += bigarray_checks(document["summary"], wall_s)
        if "trace" in steps:
            binary, why_not = build_cuda_program(args.out)
            if binary is None:
                checks.append(check("trace of a CUDA program that pins memory", why_not, "nvcc", False))
            else:
                code, _, document = runner.memcost("trace", "trace", "--", str(binary), args.trace_bytes)
                if document is None:
                    checks.append(check("memcost trace ran", f"exit {code} (see {args.out / 'trace.log'})", "exit 0", False))
                else:
                    documents.append(document)
                    checks += trace_checks(document["summary"])
        if "torch" in steps:
            code, _, document = runner.memcost("torch", "trace", "--verify", str(args.verify_rounds), "--verify-only", "pinned_memory", "--",
                                               args.python,
                                               str(ROOT / "bench" / "data" / "torch_pinning.py"), args.trace_bytes)
            if document is None:
                checks.append(check("memcost trace --verify of a PyTorch script ran",
                                    f"exit {code} (see {args.out / 'torch.log'})", "exit 0", False))
            else:
                documents.append(document)
                checks += torch_checks(document["summary"])
        if "overhead" in steps:
            storm, why_not = build_fault_storm(args.out)
            if storm is None:
                checks.append(check("the fault storm", why_not, "a C compiler", False))
            timings, script, document = measure_overhead(runner, args.python, args.trace_bytes, storm,
                                                         1 if args.quick else OVERHEAD_ROUNDS, args.order_seed)
            if document:
                documents.append(document)
            checks += overhead_checks(timings)
            checks.append(torch_allocation_check(script or {}, int(args.trace_bytes)))
            checks.append(torch_touching_check(script or {}))
    except KeyboardInterrupt:
        print("bench/gpu_host.py: interrupted; the steps that ended are in " + str(args.out), file=sys.stderr)
        return 130
    machine_name = machine(documents, pinned_summary)
    text = table(checks, machine_name, args.quick)
    print("\n" + text)
    (args.out / "gpu-host.md").write_text(text)
    (args.out / "gpu-host.json").write_text(json.dumps({"machine": machine_name, "quick": args.quick, "size": args.size,
                                                         "checks": checks}, indent=1) + "\n")
    return 0 if checks and all(c["passed"] is not False for c in checks) else 1


def hugetlb_pool_size(size: str) -> str:
    """The hugetlb pool to grow for the pinned hugetlb way: the size and 1 GiB more, as issue 41 did
    (32G: 33G), so that the pool is not short by the pages the mapping rounds up."""
    return str(parse_size(size) + (1 << 30))


if __name__ == "__main__":
    sys.exit(main())
