"""How a trace reads: its tables, the lines under them (advice, verification, totals and how
each figure was obtained), the interpretation and the flame graph. The experiment's declaration
(experiments/trace.py) names this module as its prose; every report format and `memcost trace`
render through it."""

from __future__ import annotations

from ..analysis.trace.frames import frame_name
from ..analysis.trace.records import stacks_of
from ..analysis.trace.sites import readable
from ..analysis.trace.summary import fault_time_answer
from ..experiments.base import Table, number
from ..units import format_bytes
from . import flamegraph


TOP_ROWS = 15


def phase_lines(totals: dict) -> list[str]:
    """What memcost itself added to the whole command before and after the command ran."""
    phases = totals.get("memcost_phases")
    if not phases:
        return []
    return [f"memcost's own time around the command: {phases['start_ms']:,.0f} ms before it (Python "
            f"{phases['start_python_ms']:,.0f} ms, the probe's start and its events {phases['start_probe_ms']:,.0f} ms), "
            f"{phases['end_ms']:,.0f} ms after it until the summary (the probe finishing its records "
            f"{phases['end_probe_ms']:,.0f} ms, the summary {phases['end_summary_ms']:,.0f} ms); storing and "
            "printing the results follow."
            + (f" memcost's Python front end used {phases['front_end_cpu_ms']:,.0f} ms of CPU while the probe ran, beside "
               f"the tracer's: {phases['front_end_naming_cpu_ms']:,.0f} ms naming stacks as they came (the "
               "summary's work, done early), the rest reading the probe's records and importing what the summary needs."
               if phases.get("front_end_cpu_ms") is not None else "")]


def overhead_lines(totals: dict) -> list[str]:
    """With --overhead: traced against untraced wall time, and the tracer's presence in the command."""
    if not totals.get("untraced_wall_ms"):
        return []
    return [f"Overhead: traced {totals['wall_ms']:,.0f} ms vs untraced {totals['untraced_wall_ms']:,.0f} ms "
            f"({totals['wall_ms'] / totals['untraced_wall_ms']:.2f}×)" + _presence(totals)]


def _presence(totals: dict) -> str:
    """The tracer's presence in the command's kernel time (--overhead): the traced run's system time
    less the untraced run's, per fault; and the fault time the untraced program would have had,
    the measured fault time less that presence (one run each: an estimate)."""
    untraced = totals.get("untraced_system_ms")
    if untraced is None or not totals.get("faults"):
        return "."
    added = totals["system_ms"] - untraced
    text = (f"; system time {totals['system_ms']:,.0f} ms traced vs {untraced:,.0f} ms untraced: the tracer added "
            f"{added:,.0f} ms inside the command's kernel time, {added * 1e6 / totals['faults']:,.0f} ns a fault")
    measured = totals.get("fault_ms_measured")
    # The sampler already leaves out the samples in the tracer's own functions (tracing_ms): only
    # the rest of its presence (its programs' calls, caches it displaces) is still in the fault time.
    rest = added - totals.get("tracing_ms", 0.0)
    if measured is not None and rest > 0:
        text += (f"; the fault time sampled under it, less the {rest:,.0f} ms of that not already left out as the "
                 f"tracer's own, is ≈ {max(measured - rest, 0):,.1f} ms: what the untraced program would have had "
                 f"(one run each, an estimate)")
    return text + "."


def _measured_cells(row: dict, sampled: bool, in_kernel: bool) -> list[str]:
    cells = []
    if in_kernel:
        cells.append(f"{row['fault_ms_kernel']:,.1f} ± {row['fault_ms_kernel_error']:,.1f}"
                     if row.get("fault_ms_kernel") is not None else "-")
    if sampled:
        zeroing = row.get("zeroing_share")
        cells += [f"{row['fault_ms_measured']:,.1f} ± {row['fault_ms_measured_error']:,.1f}",
                  f"{zeroing:.0%}" if zeroing is not None else "-"]
    return cells


def _sampled_count(row: dict) -> str:
    """A touching site's faults: exact when every fault was recorded, else the estimate from its
    sampled stacks with its error."""
    if "samples" not in row:
        return f"{row['faults']:,}"
    if not row["samples"]:
        return f"{row['faults']:,} (no stack sampled)"
    return f"≈ {row['faults']:,} ± {row['faults_error']:,.0f}"


def tables(summary: dict, top: int = TOP_ROWS) -> list[Table]:
    """Sites shown readable (analysis.trace.sites.readable); the results keep their full names."""
    sampled = summary["totals"].get("fault_ms_measured") is not None
    in_kernel = summary["totals"].get("fault_ms_kernel") is not None
    sites = [[readable(r["site"]), r["call"], f"{r['mappings']:,}", f"{r['freed']:,}", format_bytes(r["bytes"]),
              f"{r['faults_base']:,}", f"{r['faults_thp']:,}", *_measured_cells(r, sampled, in_kernel),
              number(r["fault_ms"], 1),
              number(r["free_ms"], 1), f"{r['churn']}× {format_bytes(r['churn_bytes'])}" if r["churn"] > 1 else "-",
              f"{r['cpu_share']:.1%}"] for r in summary["rows"][:top]]
    # A system call that faulted pages in: its time from entry to return, measured.
    in_calls = any("call_ms" in r for r in summary["touching"][:top])
    touching = [[readable(r["site"]), _sampled_count(r), number(r["fault_ms"], 1),
                 *([number(r["call_ms"], 1) if "call_ms" in r else "-"] if in_calls else []),
                 readable(r["allocation_site"])] for r in summary["touching"][:top]]
    processes = summary.get("processes", [])
    shown = [[str(r["pid"]), r["name"], str(r["parent"] or "-"), f"{r['faults']:,}", f"{r['faults_attributed']:,}"]
             for r in processes[:top]]
    by_process = ([("Processes — which process took the faults (a program that exec'd another is two rows)",
                    ["pid", "program", "parent", "faults", "in traced mappings"], shown)]
                  if len(processes) > 1 else [])
    measured_headers = ((["fault ms (in kernel)"] if in_kernel else [])
                        + (["fault ms (sampled)", "zeroing"] if sampled else []))
    return by_process + [("Allocation sites — where the memory was made",
                          ["site", "call", "made", "freed", "bytes", "faults base", "faults THP", *measured_headers,
                           "fault ms (est.)", "free ms", "churn", "% of CPU"], sites),
                         ("Touching sites — where the pages were faulted in",
                          ["site", "faults", "fault ms (est.)", *(["ms in the call"] if in_calls else []),
                           "memory allocated at"], touching)] \
        + verification_tables(summary)


def _interval(pair, digits: int = 1) -> str:
    return f"[{pair[0]:,.{digits}f}, {pair[1]:,.{digits}f}]" if pair else "-"


def verification_tables(summary: dict) -> list[Table]:
    """`--verify`: per advice, the saving measured by rerunning the command with it applied."""
    verification = summary.get("verification")
    if not verification or not (verification["variants"] or verification["unverifiable"]):
        return []
    rows = [[readable(v["site"]), v["kind"] + (" (glibc tunable)" if v["action"] == "tunable" else ""),
             number(v["estimated_saving_ms"], 1),
             f"{number(v['measured_saving_ms'], 1)} {_interval(v['measured_saving_interval_ms'])}",
             f"{number(v['measured_cpu_saving_ms'], 1)} {_interval(v['measured_cpu_saving_interval_ms'])}",
             number(v["measured_faults_saved"]),
             f"{v['estimate_ratio']:.2f}" if v.get("estimate_ratio") else "-", v["verdict"]]
            for v in verification["variants"]]
    rows += [[readable(u["site"]), u["kind"], number(u["estimated_saving_ms"], 1), "-", "-", "-", "-",
              "unverified (below)"] for u in verification["unverifiable"]]
    return [(f"Advice verified by experiment — the command run again, untraced, {verification['rounds']} rounds of each "
             "advice alone and of no advice, interleaved (medians of the paired differences, 95% bootstrap intervals)",
             ["site", "advice", "estimated ms", "measured wall ms saved", "CPU ms saved", "faults saved",
              "estimate ÷ measured", "verdict"], rows)]


def verification_lines(summary: dict) -> list[str]:
    verification = summary.get("verification")
    if not verification:
        return []
    # Advice that no rerun could apply is said with its reason whether or not the command was refused.
    unverified = [f"Unverified: {u['kind']} at {readable(u['site'])}: {u['reason']}." for u in verification["unverifiable"]]
    if verification.get("refused"):
        return [f"Not verified: the command was refused, {verification['refused']}."] + unverified
    if not verification["variants"]:
        return unverified or ["Verified: no advice was worth a rerun."]
    baseline = verification["baseline"]
    applied = "; ".join(sorted({f"{v['kind']}: {v['applied']}" for v in verification["variants"]}))
    return [f"How it was verified: {verification['rounds']} rounds, each running the command once without advice and "
            f"once per advice (the order shuffled each round from seed {verification['seed']}), after one run that "
            "timed it; every run untraced with memcost's preload library loaded, the advice its only difference, the "
            "site found by its call path (the return addresses the trace saw; pinned memory: the runtime's calls, by "
            "size); its standard output hashed and compared, "
            f"its standard error dropped. Without advice it ran {min(baseline['wall_ms']):,.0f}–"
            f"{max(baseline['wall_ms']):,.0f} ms (spread {baseline['spread']:.0%}). What was applied: {applied}."] \
        + unverified


def _ranked_saving(item: dict) -> float:
    """Advice ranks by its measured saving where verification measured one, else by its estimate;
    advice that proved unsafe ranks last."""
    if item.get("verdict", "").startswith("unsafe"):
        return float("-inf")
    return item["measured_saving_ms"] if item.get("verified") else item["saving_ms"]


def advice_lines(summary: dict) -> list[str]:
    advice = [(readable(row["site"]), item) for row in summary["rows"] for item in row["advice"]]
    lines = []
    for site, item in sorted(advice, key=lambda pair: _ranked_saving(pair[1]), reverse=True):
        lines.append(f"{site}: {item['text']}" + (_measured(item) if "verdict" in item else ""))
    return lines


def _measured(item: dict) -> str:
    """What --verify measured of an advice: its verdict and saving."""
    interval = _interval(item.get("measured_saving_interval_ms"))
    text = (f"; measured: {item['verdict']}, {item['measured_saving_ms']:,.1f} ms {interval}"
            if item.get("measured_saving_ms") is not None else f"; {item['verdict']}")
    return text + (" — do not apply" if item["verdict"].startswith("unsafe") else "")


def totals_lines(summary: dict) -> list[str]:
    """What was counted, what it cost, and how each figure was obtained."""
    totals = summary["totals"]
    lines = [
        f"Totals: {totals['faults']:,} page faults {'counted' if totals.get('counted_in_kernel') else 'sampled'} "
        f"({totals['faults_attributed']:,} in traced mappings; the kernel "
        f"counted {totals['kernel_faults']:,} for the command), fault time ≈ {totals['fault_ms']:,.1f} ms, "
        f"free {totals['free_ms']:,.1f} ms, map {totals['map_ms']:,.1f} ms; the command ran {totals['wall_ms']:,.0f} ms "
        f"(user {totals['user_ms']:,.0f} ms, system {totals['system_ms']:,.0f} ms"
        + (f", {totals['elsewhere_ms']:,.1f} ms charged elsewhere, memcost's own front end included"
           if totals.get("elsewhere_ms") is not None else "")
        + f"); the tracer (memcost-probe) used {totals['tracer_cpu_ms']:,.0f} ms of CPU."]
    lines += phase_lines(totals) + overhead_lines(totals)
    if totals.get("counted_in_kernel"):
        how = (f"How: faults from {totals['fault_source']}: every fault counted, charged in the probe to the mappings "
               f"live in its region within one generation (no page taken away between), the touching sites shared out "
               f"by {totals['touch_samples']:,} sampled stacks (± binomial error)")
    elif totals.get("touch_samples"):
        how = (f"How: faults from {totals['fault_source']}"
               + (f" (not counted in the kernel: {totals['kernel_counting']})" if totals.get("kernel_counting") else "")
               + f": every fault charged in the probe to the mapping live at its address at its moment, the touching "
               f"sites shared out by {totals['touch_samples']:,} sampled stacks (± binomial error)")
    else:
        how = (f"How: faults from {totals['fault_source']} (every {totals['sample_period']} fault"
               f"{'s' if totals['sample_period'] > 1 else ''}"
               + (f"; not counted in the kernel: {totals['kernel_counting']}" if totals.get("kernel_counting") else "")
               + "), charged in the probe to the mapping live at their address at their moment")
    lines.append(
        how + f"; calls from {totals['call_source']}; fault time estimated at "
        f"{totals['base_fault_us_per_mb']:,.0f} µs/MB on base pages"
        + (f" and {totals['thp_fault_us_per_mb']:,.0f} on THP" if totals.get("thp_fault_us_per_mb") else "")
        + f" from {totals['cost_source']}; call durations measured.")
    lines.append(fault_time_lines(totals))
    return lines


def fault_time_lines(totals: dict) -> str:
    """One fault-time answer, then every method that ran beside it, each with what it covers."""
    fault_ms, error, how = fault_time_answer(totals)
    methods = []
    if totals.get("fault_ms_measured") is not None:
        zeroing = totals.get("zeroing_share")
        methods.append(
            f"sampled, {totals['fault_ms_measured']:,.1f} ± {totals['fault_ms_measured_error']:,.1f} ms: CPU time in the "
            f"kernel's fault handler ({totals['fault_ms_measured_attributed']:,.1f} ms of it in traced mappings"
            + (f", {zeroing:.0%} clearing pages" if zeroing is not None else "")
            + f"), by {totals['cpu_sampling']}, each sample charged to the fault its thread took last; the tracer's own "
              f"work in the handler ({totals['tracing_ms']:,.1f} ms: perf recording samples, memcost's BPF counter) left out")
    if totals.get("fault_ms_kernel") is not None:
        methods.append(
            f"timed in the kernel, {totals['fault_ms_kernel']:,.1f} ± {totals['fault_ms_kernel_error']:,.1f} ms: one fault "
            f"in {totals['fault_timing_one_in']:,} chosen at random ({totals['faults_timed']:,.0f} timed), each from the "
            "handler's entry tracepoint to its page-count update (rss_stat), so a part of each fault: not the "
            "exception's entry and return, nor setting the page-table entry"
            + (f"; {totals['faults_timed_unended']:,.0f} timed faults updated no page count (a copy-on-write, a "
               "spurious fault) and count 0" if totals.get("faults_timed_unended") else ""))
    elif totals.get("counted_in_kernel") and totals.get("fault_timing_one_in") == 0:
        methods.append("not timed in the kernel (--time-faults-one-in 0, the default with --pid: timing adds a program "
                       "to every fault; --time-faults-one-in 256 measures it)")
    methods.append(f"estimated, {totals['fault_ms']:,.1f} ms: the faults at this machine's measured cost per MB "
                   f"({totals['cost_source']})")
    if totals.get("fault_ms_measured") is None:
        methods.append(f"not sampled: {totals.get('cpu_sampling', 'not recorded')}")
    return (f"Fault time: {fault_ms:,.1f}" + (f" ± {error:,.1f}" if error is not None else "") + f" ms, {how}. "
            "Methods side by side: " + "; ".join(methods) + ".")


def pinning_lines(summary: dict) -> list[str]:
    """Memory a CUDA call pinned, the fast way, and what --verify measured of it, or whether it
    can (analysis/trace/advice.py)."""
    return [f"{readable(item['site'])}: {item['text']}" + (_measured(item) if "verdict" in item else f"; {item['verify']}")
            for item in summary.get("pinning", [])]


def notes(summary: dict) -> list[str]:
    advice = advice_lines(summary) + pinning_lines(summary)
    return ((["Advice (what-if figures from this machine's measured costs):"] + [f" • {line}" for line in advice])
            if advice else ["No advice: no site's allocations cost enough to be worth changing."]) \
        + verification_lines(summary) + totals_lines(summary)


def interpret(summary: dict) -> list[str]:
    sentences = [f"{' '.join(summary['totals'].get('command', []))}: {summary['headline']}."
                 if summary["totals"].get("command") else summary["headline"] + "."]
    sentences += [f"At {line}." for line in advice_lines(summary) + pinning_lines(summary)]
    return sentences + verification_lines(summary) + totals_lines(summary)


def drawings(document: dict) -> list[str]:
    """Estimated fault time by allocation stack (each site's stack, root first)."""
    stacks = stacks_of(document["samples"])
    flames = [([frame_name(frame) for frame in reversed(stacks.get(row["stack"], []))], row["fault_ms"])
              for row in document["summary"]["rows"]]
    return [flamegraph.svg(flames, "Estimated fault time by allocation stack (ms); hover for figures", "ms")]

