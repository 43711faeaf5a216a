"""pinned: every way to pin host memory for a GPU, each phase timed, and the copy to the GPU from
each (docs/pinned.md; src/probe/experiments/pinned.cpp; analysis/pinned.py; pinning_torch.py for
PyTorch's rows)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from typing import Optional

from .. import arguments
from ..console import console
from ..units import format_bytes
from .base import Comparison, Experiment, Option, Table, comma_list, number
from .shared import budget_option, finish, hugepage_options

OPTIONS = [
    Option("size", "bytes to pin (default 1G, capped by the budget; 32G is the size users pin)", quick=256 << 20,
           parse=arguments.size, metavar="SIZE"),
    Option("copy_size", "bytes copied to the GPU from each way's memory, three times (default 1G, at most --size)",
           parse=arguments.size, metavar="SIZE"),
    Option("host_alloc_chunk", "the chunk of the chunked cuMemHostAlloc way (default 1G)", parse=arguments.size,
           metavar="SIZE"),
    Option("register_chunks", "chunk sizes of the ways that register from every thread (default: 256M and --size "
           "over the threads)", parse=arguments.size_list, metavar="LIST", to_probe=comma_list),
    Option("ways", "only the ways whose names contain one of these", parse=arguments.name_parts, metavar="LIST",
           to_probe=comma_list),
    Option("rounds", "rounds: every way once a round, in an order shuffled each round (default 3)",
           parse=arguments.positive_int),
    Option("threads", "threads that fault memory in (default: every CPU)", parse=arguments.positive_int),
    Option("no_torch", "leave PyTorch's rows out", flag_only=True, to_probe=None),
    budget_option(),
    *hugepage_options(),
]

# PyTorch's pinned allocator: its default (cudaHostAlloc), and its option to register memory it
# allocated itself, on several threads (off by default); each round in a fresh process.
TORCH_ROUND_TIMEOUT_S = 600  # one allocation of the run's size, its copies and its free, in a fresh process
TORCH_WAYS = ["torch.empty(pin_memory=True)", "torch.empty(pin_memory=True), cudaHostRegister on {threads} threads"]


def _register_threads() -> int:
    """PyTorch takes a power of two for pinned_num_register_threads, at most 128."""
    threads = 1
    while threads * 2 <= min(os.cpu_count() or 1, 128):
        threads *= 2
    return threads


def _torch_samples(run, values: dict) -> tuple[list, list]:
    """PyTorch's rows, one process a round and way, when torch can be imported; or why not."""
    if values.get("no_torch"):
        return [], []
    if importlib.util.find_spec("torch") is None:
        return [], [{"code": "torch_absent", "message": "PyTorch is not importable here, so its pinned allocator's rows "
                                                        "are left out"}]
    device = next(s["metrics"] for s in run.samples if s["case"].get("part") == "device")
    rounds = int(run.settings.get("rounds", 3))  # the probe's settings line holds strings
    threads = _register_threads()
    samples = []
    for round_ in range(rounds):
        for way in TORCH_WAYS:
            name = way.format(threads=threads)
            if values.get("ways") and not any(part in name for part in values["ways"]):
                continue  # --ways names the ways to measure, PyTorch's among them
            env = dict(os.environ)
            if "cudaHostRegister" in way:
                env["PYTORCH_CUDA_ALLOC_CONF"] = f"pinned_use_cuda_host_register:True,pinned_num_register_threads:{threads}"
            console.print(f"pinned: {name} (round {round_ + 1} of {rounds})", markup=False)
            try:
                done = subprocess.run([sys.executable, "-m", "memcost.pinning_torch", "--way", name,
                                       "--size", str(device["size_bytes"]), "--copy-size", str(device["copy_bytes"]),
                                       "--round", str(round_), "--threads", str(threads)],
                                      capture_output=True, text=True, env=env, timeout=TORCH_ROUND_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                return [], [{"code": "torch_failed", "message": f"PyTorch's rows are left out: a round of {name} took "
                                                                f"over {TORCH_ROUND_TIMEOUT_S} s"}]
            lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
            error = next((line for line in lines if line.get("type") == "error"), None)
            if done.returncode != 0 or error:
                why = error["message"] if error else (done.stderr.strip().splitlines() or ["it failed"])[-1]
                return [], [{"code": "torch_failed", "message": f"PyTorch's rows are left out: {why}"}]
            samples += [line for line in lines if line.get("type") == "sample"]
    return samples, []


def measure(values: dict, directory) -> dict:
    from ..hugepool import reserved_for_run
    from ..runner import run_with_progress
    params = dict(values)
    with reserved_for_run(values.get("reserve_hugepages"), values.get("hugepage_size", "2M"), params):
        run = run_with_progress("pinned", EXPERIMENT.probe_arguments(values), "pinned")
    torch_samples, torch_notes = _torch_samples(run, values)
    samples = list(run.samples) + torch_samples
    params["probe_settings"] = run.settings
    summary, warnings = analyze(samples)
    return finish(EXPERIMENT, run.context, params, samples, summary, list(run.warnings) + torch_notes + warnings, directory)


def analyze(samples: list) -> tuple[dict, list]:
    from ..analysis import pinned as analysis
    summary = analysis.summarize(samples)
    return summary, analysis.warnings_of(summary)


def _seconds(value: Optional[float]) -> str:
    return "—" if value is None else number(value, 3)


def _versus(row: dict) -> str:
    if row.get("rank") is None:
        return "not ranked (not pinned)"
    if "vs_fastest" not in row:
        return "fastest"
    interval = row.get("vs_fastest_interval")
    text = f"{row['vs_fastest']:.2f}×"
    if interval:
        text += f" ({interval[0]:.2f}–{interval[1]:.2f})"
    return text + (" tied" if row.get("tied") else "")


def _copy(row: dict) -> str:
    text = number(row["copy_gb_per_s"], 1)
    text += " (not pinned speed)" if row.get("copies_pinned") is False else ""
    return text + (" (none across chunks)" if row.get("copy_across_refused") else "")


def tables(summary: dict) -> list[Table]:
    rows = summary["rows"]
    if not rows:
        return []
    size = format_bytes(summary["size_bytes"] or rows[0]["size_bytes"])
    copy = format_bytes(summary["copy_bytes"]) if summary.get("copy_bytes") else "the first bytes"
    result = [(f"{size} pinned for {summary['device']}, every way, ranked by the time until the memory is pinned "
               "(allocate + fault + register; medians over the rounds; vs fastest: the median of the rounds' ratios, "
               f"95 % interval, tied when it reaches 1.05); copy: {copy} to the GPU, median of three",
               ["rank", "way", "seconds", "GB/s", "allocate", "fault", "register", "unregister", "free", "copy GB/s",
                "vs fastest"],
               [[str(r["rank"]) if r.get("rank") else "—", r["way"], _seconds(r["ready_s"]), number(r["gb_per_s"], 1),
                 _seconds(r["allocate_s"]), _seconds(r["fault_s"]), _seconds(r["register_s"]),
                 _seconds(r["unregister_s"]), _seconds(r["free_s"]), _copy(r), _versus(r)] for r in rows])]
    limits = summary["limits"]
    result.append(("The limits the fast ways meet (GB/s)", ["limit", "GB/s", "measured by"],
                   [["faulting memory in (the machine)", number(limits["fault_gb_per_s"], 1), limits["fault_way"] or "—"],
                    ["registering memory already in (the driver)", number(limits["register_gb_per_s"], 1),
                     limits["register_way"] or "—"],
                    ["one after the other (the two times' sum)", number(limits.get("one_after_the_other_gb_per_s"), 1),
                     "the two above"],
                    ["copying ordinary memory to the GPU", number(summary["ordinary_copy_gb_per_s"], 1),
                     "the control: malloc, touched, not pinned"]]))
    crossing = [r for r in rows if r.get("copy_across_registrations_gb_per_s")]
    if crossing:
        result.append(("Memory registered in chunks side by side: a copy within one chunk, and one that crosses from "
                       "one chunk into the next (GB/s, medians)", ["way", "registrations", "within", "across"],
                       [[r["way"], str(r["registrations"]), _copy(r), number(r["copy_across_registrations_gb_per_s"], 1)]
                        for r in crossing]))
    return result


def notes(summary: dict) -> list[str]:
    lines = [f"GPU: {summary['device']} (driver: {summary['driver_library']})"]
    if summary.get("headline"):
        lines.append(summary["headline"])
    return lines


def interpret(summary: dict) -> list[str]:
    versus = summary.get("memcost_against_host_alloc")
    lines = []
    if versus:
        place = "tied for first" if versus["tied"] else (f"rank {versus['rank']}" if versus["rank"] else "unranked")
        lines.append(f"memcost's make_big_array(..., {{.pinned = true}}) pinned the memory in {versus['memcost_s']:.2f} s, "
                     f"{versus['times_faster']:.1f}× faster than cudaHostAlloc's {versus['cuda_host_alloc_s']:.2f} s, "
                     f"{place} among the ways.")
    limits = summary["limits"]
    if limits["fault_gb_per_s"] and limits["register_gb_per_s"]:
        lines.append(f"Faulting the memory in runs at {limits['fault_gb_per_s']:.1f} GB/s here and the driver registers "
                     f"memory already in at {limits['register_gb_per_s']:.1f} GB/s: one after the other, pinning can go "
                     f"no faster than {limits['one_after_the_other_gb_per_s']:.1f} GB/s; "
                     "the overlapped ways show whether doing both at once beats that.")
    release = summary.get("fastest_release")
    if release and release["of_cuda_free_host"]:
        lines.append(f"Unpinned and freed soonest: {release['way']}, in {release['release_s']:.3f} s, "
                     f"{release['of_cuda_free_host']:.2f} of cudaFreeHost's {release['cuda_free_host_s']:.3f} s.")
    return lines


def _figures(summary: dict, host: str, folder):
    from ..plots import pinned as plots  # matplotlib loads only when drawing
    return plots.ways_chart(summary, host, folder)


def _compared(sample: dict) -> Optional[tuple[tuple, list[float]]]:
    if sample["case"].get("part") != "way":
        return None
    return (sample["case"]["way"],), [sample["metrics"]["ready_s"]]


EXPERIMENT = Experiment(
    name="pinned",
    title="Pinned host memory for a GPU (pinned)",
    summary="Rank every way to pin host memory for a GPU, each phase timed, with the copy to the GPU from each.",
    options=OPTIONS,
    measure=measure,
    analyze=analyze,
    figures=_figures,
    tables=tables,
    notes=notes,
    interpret=interpret,
    comparison=Comparison("seconds until pinned", ("way",), _compared),
    in_suite=False,  # it needs a GPU; `memcost run` runs on machines without one
)
