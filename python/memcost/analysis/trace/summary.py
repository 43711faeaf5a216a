"""`trace` summary: what a command's big allocations cost the OS, per allocation site (the stack
that created the memory) and per touching site (the stack that faulted it in), with advice.

The probe attributes as the records stream (src/trace/attribution/attribution.hpp) and reports fault counts
per (allocation origin, touching stack, process, page kind) and each origin's lifetime summary;
this module groups them by site (sites.SiteNames), prices them with this machine's measured costs
and gives advice (advice.py). Fault time is estimated from the measured cost per MB (a `memcost
costs` result or a short calibration); where the kernel allowed it, it is also measured by
sampling CPU time in the fault handler (each sample one period of a thread's CPU time, charged to
the fault the thread took last), with its Poisson error, and the share of it spent clearing
pages. munmap, mremap and madvise time is measured from the calls' entry and exit.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Optional

from ...errors import MemcostError
from ..cost_model import CostModel
from ..derived import MB
from .advice import advise, fault_us
from .frames import DEFAULT_FRAMES, FrameFilter, frames_of, runtime_flags_missing, runtime_of, user_frame
from .records import KERNEL_TIME, Site, Trace, ms, read, touch_rows
from .sites import (SiteNames, allocation_names, allocation_site, call_name, parts_of, pinning_frame, readable,
                    touching_names)


def processes_table(trace: Trace) -> list[dict]:
    """Faults per process of the traced tree, one row per program a pid ran (an exec starts a new
    row): which process took them, by pid and name."""
    programs: dict[int, list[tuple[str, int]]] = defaultdict(list)  # pid -> (name, parent) per program, in order
    for event in trace.processes:
        if event["change"] in ("start", "fork", "exec"):
            known = programs[event["pid"]]
            known.append((event["name"], event["parent"] or (known[-1][1] if known else 0)))
    faults: Counter = Counter()
    attributed: Counter = Counter()
    for row in trace.faults:
        key = (row["pid"], row["program"])
        faults[key] += row["faults"] * trace.period
        if row["allocation_call"]:
            attributed[key] += row["faults"] * trace.period
    rows = []
    for pid, known in programs.items():
        for program, (name, parent) in enumerate(known):
            if faults[(pid, program)] or program == len(known) - 1:
                rows.append({"pid": pid, "name": name, "parent": parent, "faults": faults[(pid, program)],
                             "faults_attributed": attributed[(pid, program)]})
    for pid, program in faults:
        if pid not in programs:  # a process no record named (none expected)
            rows.append({"pid": pid, "name": "?", "parent": 0, "faults": faults[(pid, program)],
                         "faults_attributed": attributed[(pid, program)]})
    rows.sort(key=lambda r: r["faults"], reverse=True)
    return rows


def measured(samples: int, period_ns: int) -> dict:
    """Fault time from CPU samples in the fault handler: each stands for one period of CPU time;
    the count is Poisson, so its standard error is its square root."""
    return {"fault_ms_measured": samples * period_ns / 1e6, "fault_ms_measured_error": math.sqrt(samples) * period_ns / 1e6,
            "zeroing_share": None}


def measured_in_kernel(faults: float, time: Counter) -> dict:
    """Fault time measured in the kernel for one fault in N chosen at random (each timed from the
    handler's entry tracepoint to its page-count update; one that updated none counts 0): the timed
    faults' mean time × the faults, and the standard error of that total (the timed ones a random
    sample of the faults; 0 when every fault was timed)."""
    timed = time["timed_faults"]
    if timed <= 0 or faults <= 0:
        return {"fault_ms_kernel": None, "fault_ms_kernel_error": None, "faults_timed": timed}
    mean_ns = time["kernel_ns"] / timed
    # The squares are of t / 16 ns (the kernel's sums stay in 64 bits).
    variance = max(time["kernel_ns_squares"] * 256 / timed - mean_ns ** 2, 0.0) * timed / max(timed - 1, 1)
    unsampled = max(1 - timed / faults, 0.0)
    return {"fault_ms_kernel": faults * mean_ns / 1e6,
            "fault_ms_kernel_error": faults * math.sqrt(variance / timed * unsampled) / 1e6, "faults_timed": timed}


def summarize(trace: Trace, cost: CostModel, which: FrameFilter = DEFAULT_FRAMES) -> dict:
    """`which`: the frames that are the program's own (a site is the first of them)."""
    sites, by_origin = _sites(trace, which)
    faulting_map_ns = _faulting_map_ns(trace, by_origin)
    # The program's own madvise(MADV_NOHUGEPAGE) calls on a site's memory, by name.
    refused_by = {o["huge_refused_by"] for o in trace.origins if o.get("huge_refused_by")}
    refusals = SiteNames(trace.stacks, refused_by, which, parts_of(trace, refused_by, which))
    rows = [_site_row(site, trace, cost, which, faulting_map_ns[site.site], refusals) for site in sites.values()
            if site.faults_base + site.faults_thp or site.total("freed_bytes") or site.total("bytes") >= MB]
    rows.sort(key=lambda r: r["fault_ms"] + r["free_ms"] + r["map_ms"], reverse=True)
    totals = _totals(trace, rows, cost)
    return {"rows": rows, "touching": _touching_sites(trace, cost, which), "processes": processes_table(trace),
            "totals": totals, "headline": headline(rows, totals)}


def _sites(trace: Trace, which: FrameFilter) -> tuple[dict[str, Site], dict[tuple, Site]]:
    """The allocation sites by name, and by the origin (stack, call) of each, with their faults
    and the CPU samples and kernel timings charged to them."""
    sites: dict[str, Site] = {}
    by_origin: dict[tuple, Site] = {}
    names = allocation_names(trace, which)
    for origin in trace.origins:
        name = allocation_site(names, origin["stack"], origin["call"])
        by_origin[(origin["stack"], origin["call"])] = sites.setdefault(name, Site(name, []))
        sites[name].origins.append(origin)
    for row in trace.faults:
        site = by_origin.get((row["allocation_stack"], row["allocation_call"]))
        if site is not None:
            if row["huge"]:
                site.faults_thp += row["faults"] * trace.period
            else:
                site.faults_base += row["faults"] * trace.period
    for row in trace.fault_time:
        site = by_origin.get((row["allocation_stack"], row["allocation_call"]))
        if site is not None:
            site.cpu_samples += row["samples"]
            site.zeroing_samples += row["zeroing_samples"]
            site.kernel_time.update({name: row.get(name, 0) for name in KERNEL_TIME})
    return sites, by_origin


def _faulting_map_ns(trace: Trace, by_origin: dict[tuple, Site]) -> Counter:
    """A mapping call that faulted its pages in (mmap with MAP_POPULATE or MAP_LOCKED): its time is
    fault time, not map time, shared between the sites its faults went to by their number."""
    faulting_map_ns: Counter = Counter()
    touched_by: dict[int, list[dict]] = defaultdict(list)
    for row in trace.faults:
        if row["touch_stack"]:
            touched_by[row["touch_stack"]].append(row)
    for call in trace.call_faults:
        if call["call"] not in ("mmap", "mremap"):
            continue
        charged = [(by_origin.get((row["allocation_stack"], row["allocation_call"])), row["faults"])
                   for row in touched_by[call["stack"]]]
        total = sum(faults for _, faults in charged)
        for site, faults in charged:
            if site is not None and total:
                faulting_map_ns[site.site] += call["call_ns"] * faults / total
    return faulting_map_ns


def _timing_one_in(run: dict) -> int:
    """One fault in this many was timed in the kernel (0: none)."""
    return run.get("fault_timing_one_in", 0) if run.get("counted_in_kernel") else 0


def _site_row(site: Site, trace: Trace, cost: CostModel, which: FrameFilter, faulting_map_ns: float,
              refusals: SiteNames) -> dict:
    """One allocation site's row: what it made and freed, its faults and their time, and advice."""
    run = trace.run
    faults = site.faults_base + site.faults_thp
    fault_ms = fault_us(cost, site.faults_base, site.faults_thp) / 1e3
    free_ms = ms(site.total("free_ns"))
    map_ms = max(ms(site.total("map_ns") - faulting_map_ns), 0.0)
    sizes = {size: summary for size, summary in site.freed_by_size().items() if size}  # 0: sizes not kept apart
    # The churn that cost the most faults (node frees 30 big buffers among many small ones).
    churn_size = max(sizes, key=lambda size: (sizes[size]["freed"] >= 3, sizes[size]["faults_base"]
                                              + sizes[size]["faults_thp"] * cost.huge_bytes // cost.page_bytes,
                                              sizes[size]["freed"], size)) if sizes else 0
    cpu_ms = ms(run.get("user_ns", 0) + run.get("system_ns", 0)) or 1e-9
    row = {
        "site": site.site, "stack": site.origins[0]["stack"], "call": site.origins[0]["call"],
        "mappings": site.total("made"), "freed": site.total("freed"), "bytes": site.total("bytes"),
        "largest_bytes": max(origin["largest_bytes"] for origin in site.origins), "faults": faults,
        "faults_base": site.faults_base, "faults_thp": site.faults_thp,
        "huge_advised": any(origin["huge_advised"] for origin in site.origins),
        # Every mapping a file's or a device's (a library, a driver's memory): results made before
        # the probe said so read as anonymous.
        "file_backed": all(origin.get("file_backed", False) for origin in site.origins),
        "fault_ms": fault_ms, "free_ms": free_ms, "map_ms": map_ms,
        "churn": sizes[churn_size]["freed"] if sizes else 0, "churn_bytes": churn_size,
        # Of the command's CPU time: fault time is CPU time, and many threads' of it exceed the wall time.
        "cpu_share": (fault_ms + free_ms + map_ms) / cpu_ms,
    }
    if run.get("cpu_sample_period_ns", 0):
        row.update(measured(site.cpu_samples, run["cpu_sample_period_ns"]))
        row["zeroing_share"] = site.zeroing_samples / site.cpu_samples if site.cpu_samples else None
    if _timing_one_in(run):
        row.update(measured_in_kernel(faults, site.kernel_time))
    refused_by = next((origin["huge_refused_by"] for origin in site.origins if origin.get("huge_refused_by")), 0)
    row["huge_refused_by"] = refusals(refused_by) if refused_by else None
    row["runtime"] = runtime_of(user_frame(trace.stacks.get(row["stack"], []), which))
    row["kind"] = "-" if not faults else ("thp" if row["faults_thp"] * cost.huge_bytes > row["faults_base"] * cost.page_bytes
                                           else "base")
    # The machine's THP setting (always, madvise, never; "absent" without THP), as the probe read it.
    thp_available = run.get("thp_mode", "absent") in ("always", "madvise")
    row["advice"] = advise(row, site, cost, thp_available, ms(run.get("wall_ns", 0)) or 1e-9, trace.period)
    return row


def _totals(trace: Trace, rows: list[dict], cost: CostModel) -> dict:
    """The command's totals: what it ran, what was counted and how, and the fault time by each method."""
    run, period = trace.run, trace.period
    sample_period_ns = run.get("cpu_sample_period_ns", 0)
    sampled = sum(row["faults"] for row in trace.faults) * period
    attributed = sum(row["faults"] for row in trace.faults if row["allocation_call"]) * period
    totals = {
        "wall_ms": ms(run.get("wall_ns", 0)) or 1e-9, "user_ms": ms(run.get("user_ns", 0)),
        "system_ms": ms(run.get("system_ns", 0)),
        "elsewhere_ms": ms(run["elsewhere_ns"]) if run.get("elsewhere_ns") is not None else None,
        "elsewhere_method": run.get("elsewhere_method"),
        "tracer_cpu_ms": ms(run.get("tracer_user_ns", 0) + run.get("tracer_system_ns", 0)),
        # The kernel's count for the command, less what memcost's fork took before it exec'd it.
        "faults": sampled, "faults_attributed": attributed, "kernel_faults": run.get("rusage_minor_faults", 0)
        + run.get("rusage_major_faults", 0) - run.get("faults_before_exec", 0), "lost_records": run.get("lost_records", 0),
        "malformed_records": run.get("malformed_records", 0), "malformed_bytes": run.get("malformed_bytes", 0),
        "sample_period": period, "exit_code": run.get("exit_code"), "thp_mode": run.get("thp_mode", "absent"),
        "fault_source": run.get("fault_source", "?"), "call_source": run.get("call_source", "?"),
        "counted_in_kernel": bool(run.get("counted_in_kernel")), "kernel_counting": run.get("kernel_counting", ""),
        "touch_samples": run.get("touch_samples", 0), "faults_uncounted": run.get("kernel_faults_uncounted", 0),
        "faults_in_calls": run.get("faults_in_calls", 0),
        "faults_in_calls_kernel": run.get("kernel_faults_in_calls"),
        "fault_ms": sum(r["fault_ms"] for r in rows), "free_ms": sum(r["free_ms"] for r in rows),
        "map_ms": sum(r["map_ms"] for r in rows),
        "cost_source": cost.source, "base_fault_us_per_mb": cost.base_us_per_mb, "thp_fault_us_per_mb": cost.thp_us_per_mb,
        "signal": run.get("signal", 0), "interrupted": bool(run.get("interrupted")),
        "cpu_sample_period_ns": sample_period_ns, "cpu_sampling": run.get("cpu_sampling", "not recorded"),
    }
    if sample_period_ns:
        in_faults = sum(row["samples"] for row in trace.fault_time)
        attributed_samples = sum(row["samples"] for row in trace.fault_time if row["allocation_call"])
        totals.update(measured(in_faults, sample_period_ns))
        totals["zeroing_share"] = (sum(row["zeroing_samples"] for row in trace.fault_time) / in_faults
                                   if in_faults else None)
        totals["fault_ms_measured_attributed"] = attributed_samples * sample_period_ns / 1e6
        # The tracer in the handler (perf recording samples, the BPF counter), inside the command's system time: not fault time.
        totals["tracing_ms"] = run.get("cpu_samples_tracing", 0) * sample_period_ns / 1e6
        totals["kernel_sampled_ms"] = run.get("cpu_samples", 0) * sample_period_ns / 1e6
    totals["fault_timing_one_in"] = _timing_one_in(run)
    if totals["fault_timing_one_in"]:
        every: Counter = Counter()
        for row in trace.fault_time:
            every.update({name: row.get(name, 0) for name in KERNEL_TIME})
        totals.update(measured_in_kernel(sampled, every))
        totals["faults_timed_unended"] = every["timed_faults"] - every["timings_ended"]
    return totals


def count_gap_reason(totals: dict) -> str:
    """Why the faults counted differ from the kernel's own count for the command: the reasons this
    trace itself recorded, or a plain statement that it recorded none."""
    counted, kernel = totals["faults"], totals["kernel_faults"]
    reasons = []
    if totals.get("lost_records"):
        reasons.append(f"{totals['lost_records']:,} records were lost")
    if totals.get("malformed_records"):
        reasons.append(f"{totals['malformed_records']:,} malformed records were dropped")
    if totals.get("faults_uncounted"):
        reasons.append(f"{totals['faults_uncounted']:,} faults could not be counted: the in-kernel region map was full")
    in_calls_kernel = totals.get("faults_in_calls_kernel")
    if in_calls_kernel is not None and in_calls_kernel > totals.get("faults_in_calls", 0):
        reasons.append(f"{in_calls_kernel - totals.get('faults_in_calls', 0):,} faults taken inside system calls were "
                       "counted in the kernel but their records did not arrive")
    if not totals.get("counted_in_kernel") and counted < kernel:
        reasons.append("without root, faults taken inside system calls are seen only in the calls the preload "
                       "library wraps (mmap, madvise, mlock, mlock2, mlockall, ioctl), and faults in kernel mode "
                       "only where perf_event_paranoid allows")
    if counted > kernel:
        reasons.append("the kernel's count covers the command and the children it waited for; processes it did not "
                       "wait for were traced too")
    if not reasons:
        return "this trace recorded nothing that explains the difference; per-site counts may be incomplete"
    return "; ".join(reasons)


def _touching_sites(trace: Trace, cost: CostModel, which: FrameFilter) -> list[dict]:
    counts: dict[str, Counter] = defaultdict(Counter)
    fault_ms: dict[str, float] = defaultdict(float)
    stack_of: dict[str, int] = {}
    samples: Counter = Counter()
    exact: Counter = Counter()  # counted with their own stack, where the rest are shared out by samples
    allocations, touching = allocation_names(trace, which), touching_names(trace, which)
    # A system call's faults are touched by the call: named by it ("madvise ← by_madv_populate"), or
    # by the CUDA call that made it ("cudaHostAlloc (ioctl) ← load_batch").
    # The module of a CUDA call's frame, the runtime as a shared library (libcudart.so) or linked
    # into the program (nvcc's default), decides whether --verify can stand in for it.
    calls_at, pinning_modules = {}, {}
    for row in trace.call_faults:
        frame = pinning_frame(trace.stacks.get(row["stack"], []))
        calls_at[row["stack"]] = call_name(row["call"], frame)
        if frame:
            pinning_modules[row["stack"]] = Path(frame.get("module") or "").name

    def touching_site(stack: int) -> str:
        return f"{calls_at[stack]} ← {touching.plain(stack)}" if stack in calls_at else touching(stack)

    call_ms: Counter = Counter()
    for row in trace.call_faults:
        call_ms[touching_site(row["stack"])] += row["call_ns"] / 1e6
    for row in touch_rows(trace):
        site = touching_site(row["touch_stack"])
        stack_of.setdefault(site, row["touch_stack"])
        faults = row["faults"] * trace.period
        counts[site][allocation_site(allocations, row["allocation_stack"], row["allocation_call"])] += faults
        fault_ms[site] += faults * cost.fault_us("thp" if row["huge"] else "base") / 1e3
        samples[site] += row.get("samples", 0)
        if "samples" not in row:
            exact[site] += faults
    rows = [{"site": site, "stack": stack_of[site], "faults": round(sum(c.values())), "fault_ms": fault_ms[site],
             "allocation_site": c.most_common(1)[0][0], **({"call_ms": call_ms[site]} if site in call_ms else {}),
             **({"pinning_module": pinning_modules[stack_of[site]]} if stack_of[site] in pinning_modules else {})}
            for site, c in counts.items()]
    if trace.touch_samples:
        # Sampled stacks: a site's share is a proportion estimated from its samples (binomial error);
        # a site whose faults were all counted with their stack is exact (no `samples`).
        for row in rows:
            n, estimated = samples[row["site"]], row["faults"] - exact[row["site"]]
            if not estimated:
                continue
            row["samples"] = n
            row["faults_error"] = estimated / math.sqrt(n) if n else None
    rows.sort(key=lambda r: r["faults"], reverse=True)
    return rows


# How the one fault-time answer was obtained, widest scope first: CPU time sampled in the kernel's
# fault handler covers all of it; the faults timed in the kernel cover the handler from its entry
# tracepoint to the page-count update (a part of each fault); the estimate prices the faults at
# this machine's measured cost per MB.
FAULT_TIME_METHODS = (("fault_ms_measured", "fault_ms_measured_error", "measured by sampling"),
                      ("fault_ms_kernel", "fault_ms_kernel_error", "measured in the kernel, a part of each fault"),
                      ("fault_ms", None, "estimated"))


def fault_time_answer(totals: dict) -> tuple[float, Optional[float], str]:
    """The one fault time a trace reports: the widest-scope method that ran (FAULT_TIME_METHODS),
    its error (None for the estimate) and how it was obtained, in words."""
    for value, error, how in FAULT_TIME_METHODS:
        if totals.get(value) is not None:
            return totals[value], (totals[error] if error else None), how
    return 0.0, None, "not known"


def cpu_base_ms(totals: dict) -> float:
    """What a share of time is taken against: the command's CPU time (fault time is CPU time, and
    many threads' of it exceed the wall time); the wall time only where no CPU time was counted."""
    return (totals.get("user_ms", 0) + totals.get("system_ms", 0)) or totals["wall_ms"]


def headline(rows: list[dict], totals: dict) -> str:
    top = readable(rows[0]["site"]) if rows else "no site"
    fault_ms, error, how = fault_time_answer(totals)
    cost = fault_ms + totals["free_ms"] + totals["map_ms"]
    faults = (f"{totals['faults']:,} page faults took {fault_ms:,.1f}" + (f" ± {error:,.1f}" if error is not None else "")
              + f" ms ({how})")
    base = cpu_base_ms(totals)
    # A fault's and a free's time run from its start to its end, waiting included: where threads
    # wait on each other (one's munmap holds the address space while the others fault), their sum
    # can pass the CPU time the command used, and is no share of it.
    share = (f"{cost / base:.0%} of the command's {base:,.0f} ms of CPU time" if cost <= base else
             f"more than the command's {base:,.0f} ms of CPU time: their times include waiting (for the address "
             f"space, held by another thread's call)")
    return f"{faults} and {totals['free_ms']:,.1f} ms of freeing (measured): {share}; most at {top}"


def analyze(samples: list, costs_summary: Optional[dict] = None, cost: Optional[CostModel] = None,
            params: Optional[dict] = None) -> tuple[dict, list]:
    """The summary of a trace's samples (the experiment's analysis: analyze_trace of them, read once)."""
    return analyze_trace(read(samples), costs_summary, cost, params)


def analyze_trace(trace: Trace, costs_summary: Optional[dict] = None, cost: Optional[CostModel] = None,
                  params: Optional[dict] = None) -> tuple[dict, list]:
    """The summary of a trace, priced by the traced machine's costs (a `memcost costs` summary of
    that machine, or a cost model), and the warnings it adds; `params` say how sites are named."""
    if cost is None:
        run = trace.run
        pages = {"base_page_bytes": run.get("base_page_bytes"), "thp": {"pmd_size_bytes": run.get("huge_page_bytes")}}
        cost = CostModel.from_costs_summary(costs_summary or {}, "the memcost costs result of the traced machine", pages)
    if cost is None:
        raise MemcostError("a trace is priced by its machine's measured fault cost, and no `costs` result of that machine "
                           "has one: capture `memcost-probe costs` there too and import both")
    summary = summarize(trace, cost, frames_of(params or {}))
    return summary, _warnings(summary["totals"], trace)


# The tracer's own CPU time beyond which a trace says so: its share of the command's.
TRACER_CPU_WARNING = 0.10


def _warnings(totals: dict, trace: Trace) -> list[dict]:
    """What the reader should know before trusting the tables: counts that disagree with the
    kernel's, records dropped, perf maps refused, runtimes that could not name their code."""
    warnings = []
    if totals["sample_period"] == 1 and totals["kernel_faults"] and \
            abs(totals["faults"] - totals["kernel_faults"]) > 0.02 * totals["kernel_faults"] + 100:
        warnings.append({"code": "fault_count_mismatch",
                         "message": f"{totals['faults']:,} faults were counted but the kernel counted "
                                    f"{totals['kernel_faults']:,} for the command: {count_gap_reason(totals)}"})
    if totals.get("malformed_records"):
        warnings.append({"code": "malformed_records",
                         "message": f"{totals['malformed_records']:,} records that were not of their format "
                                    f"({totals['malformed_bytes']:,} bytes) were dropped and the rest read: something in "
                                    "the command wrote into the preload library's descriptor "
                                    "(MEMCOST_PRELOAD_FD); the calls they stood for are missing from the tables"})
    command_cpu_ms = totals.get("user_ms", 0) + totals.get("system_ms", 0)
    if command_cpu_ms and totals.get("tracer_cpu_ms", 0) > TRACER_CPU_WARNING * command_cpu_ms:
        warnings.append({"code": "tracer_cost",
                         "message": f"the tracer itself used {totals['tracer_cpu_ms']:,.0f} ms of CPU, "
                                    f"{totals['tracer_cpu_ms'] / command_cpu_ms:.0%} of the command's {command_cpu_ms:,.0f} ms: "
                                    "on a short command its start and end weigh most; on a long one, fewer touching "
                                    "samples (--touch-samples-per-second) or --no-python-frames cost less"})
    refused = trace.run.get("refused_perf_maps", 0)
    if refused:
        warnings.append({"code": "perf_map_refused",
                         "message": f"{refused} perf map file(s) in /tmp were not read: not a regular file owned by the "
                                    "traced program's user or root (anyone can create /tmp/perf-PID.map first); "
                                    "their JIT-compiled frames stay unnamed"})
    return warnings + [{"code": "runtime_unnamed", "message": message} for message in runtime_flags_missing(trace)]

