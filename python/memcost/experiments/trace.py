"""trace: what a real program's big allocations cost the OS, per allocation and touching site
(docs/trace.md; src/trace/ and src/probe/experiments/trace.cpp; analysis/trace.py). Its options,
measure, analysis, tables, notes, reading and comparison are declared here like any other
experiment's; the command line (cli/trace.py) adds what names the program to trace."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from .. import arguments, interrupts, tracefs
from ..errors import MemcostError
from ..units import format_bytes
from .base import Comparison, Experiment, Option, Table, number

TOP_ROWS = 15

OPTIONS = [
    Option("sample_period", "record one fault in N (default 1: every fault, exact counts)", parse=arguments.positive_int,
           metavar="N"),
    Option("stack_bytes", "user stack copied per sample for unwinding (default 4096; deeper stacks are cut)",
           parse=arguments.positive_int, metavar="BYTES"),
    Option("cpu_sample_us", "measure fault time by sampling each thread's CPU time in the kernel every US µs (default "
           "1000, with --pid 0; 0: not sampled). Needs root or kernel.perf_event_paranoid <= 1; otherwise estimated, and said so",
           parse=arguments.non_negative_int, metavar="US"),
    Option("fault_counting", "kernel: count every fault in the kernel (a BPF program, as root); perf: a perf record "
           "of every fault's address. Either way the touching stacks are sampled (default kernel; perf where BPF cannot "
           "load, said so)", choices=["kernel", "perf"], metavar="HOW"),
    Option("touch_samples_per_second", "touching stacks sampled per second per CPU, every fault being counted apart "
           "(default 1000, with --pid 10; 0: a stack recorded with every fault, by perf: exact touching sites, at "
           "several times the cost)", parse=arguments.non_negative_int, metavar="N"),
    Option("time_faults_one_in", "counting in the kernel: time one fault in N, chosen at random, in the kernel, from "
           "the handler's entry to its page-count update (default 16, with --pid 0; 1: every fault, about 8 percent more time on a fault "
           "storm here; 0: none, and no program on the page-count update)", parse=arguments.non_negative_int, metavar="N"),
    Option("no_runtime_flags", "do not ask node and the JVM for perf maps of their JIT-compiled code (through "
           "NODE_OPTIONS and JAVA_TOOL_OPTIONS); their functions then go unnamed", flag_only=True),
    Option("no_python_frames", "do not load memcost's preload library into the command for Python stacks (as root it "
           "is loaded for them alone)", flag_only=True),
    Option("top", "sites shown (default 10)", default=10, parse=arguments.positive_int, metavar="N", to_probe=None),
    Option("calibrate", "measure the fault cost now instead of using the newest `memcost costs` result", flag_only=True,
           to_probe=None),
    Option("overhead", "run the command a second time, untraced, and report the tracing overhead: wall time, and "
           "the system time the tracer adds inside the command (its presence in every fault)", flag_only=True,
           to_probe=None),
    Option("verify", "after the trace, run the command again untraced with each advice applied through the preload "
           "library, interleaved with runs without it, N rounds (default 5, fewer when that would take over 10 times "
           "the command's time), and measure the saving (docs/trace.md, Verifying advice)",
           parse=arguments.positive_int, metavar="N", const=True, to_probe=None),
    Option("skip_frames", "also skip frames whose function matches REGEX when naming a site (beside the default list of "
           "allocators, runtimes and standard libraries: docs/trace.md)", parse=arguments.regex, metavar="REGEX",
           to_probe=None),
    Option("keep_frames", "never skip frames whose function matches REGEX (say `^std::` to name the standard library's "
           "frames again)", parse=arguments.regex, metavar="REGEX", to_probe=None),
    Option("raw", "also keep every fault and call, compressed, beside the results (trace.raw.gz, about 5 bytes a fault); "
           "`memcost report --reaggregate` reads it again", flag_only=True, to_probe=None),
]
RAW_NAME = "trace.raw.gz"




CALIBRATION = {"pages": "base,thp", "routes": "os", "parts": "rows,threads,reuse", "sizes": "64M", "reps": 5,
               "warmup": 1, "threads_size": "64M", "frames": 50}


def this_machines_cost(directory, calibrate: bool, notes: list):
    """This machine's fault cost: the newest `memcost costs` result for this host, else a short
    calibration run now (said so in the output), kept in `directory` as this host's costs result:
    the traces after it reuse it instead of paying for it again (2.5 s on a 2-vCPU VM)."""
    from ..analysis.cost_model import CostModel
    from ..results import make_document
    if not calibrate:
        model = CostModel.newest(directory.root)
        if model:
            return model
    from ..analysis import costs as costs_analysis
    from ..runner import run_with_progress
    arguments = [part for name, value in CALIBRATION.items() for part in (f"--{name.replace('_', '-')}", str(value))]
    run = run_with_progress("costs", arguments, "calibrating fault cost")
    summary = costs_analysis.summarize(run.samples)
    model = CostModel.from_costs_summary(summary, "a calibration run of memcost costs just now (64 MiB, 5 repetitions)",
                                         run.context.get("pages"))
    if model is None:
        raise MemcostError("the calibration run measured no fault cost; run `memcost costs --quick` and try again")
    kept = directory.write(make_document("costs", run.context, {**CALIBRATION, "calibration_for": "trace"}, run.samples,
                                         summary, run.warnings))
    notes.append(f"no `memcost costs` result for this host was found: fault time comes from a calibration run just "
                 f"now, kept as this host's costs result ({kept}) for the traces after it (`memcost costs` measures "
                 "more)")
    return model


# Attached to a running service (--pid), the sampling is sized to cost it little (docs/trace.md, "A
# service under --pid"): touching stacks 10 a second per CPU, no cpu-clock sampler, and no fault
# timed in the kernel: timing puts a second program on every fault of the machine (the page-count
# update), 7 % more of a fault storm's system time even at one fault in 256. Fault time is then the
# estimate. A flag the user gives wins.
SERVICE_DEFAULTS = {"touch_samples_per_second": 10, "cpu_sample_us": 0, "time_faults_one_in": 0}


def record(values: dict, raw_path: Optional[Path] = None, on_sample=None):
    """Run the probe around the command (or attached to a pid). Ctrl-C and SIGTERM go to the probe,
    which passes them to the command (src/trace/tracer.hpp) and still reports what it recorded."""
    from ..probe import run_probe
    if values.get("pid"):
        values = {**values, **{name: value for name, value in SERVICE_DEFAULTS.items() if values.get(name) is None}}
    probe_arguments = EXPERIMENT.probe_arguments(values)
    if values.get("pid"):
        probe_arguments += ["--attach", str(values["pid"])]
        probe_arguments += ["--attach-seconds", str(values["seconds"])] if values.get("seconds") else []
    probe_arguments += ["--raw-file", str(raw_path)] if raw_path else []
    probe_arguments += ["--window-seconds", f"{values['every']:g}"] if values.get("every") else []
    stdout_copy = os.dup(sys.stdout.fileno())  # the command's output goes to the user, not into the protocol
    sys.stdout.flush()
    try:
        with tracefs.available():
            target = ["--command-stdout-fd", str(stdout_copy), "--", *values["command"]] if values.get("command") else []
            return run_probe("trace", [*probe_arguments, *target], pass_fds=(stdout_copy,), forward_interrupts=True,
                             on_sample=on_sample)
    finally:
        os.close(stdout_copy)


def analyze(samples: list, costs_summary: Optional[dict] = None, cost=None, params: Optional[dict] = None) \
        -> tuple[dict, list]:
    """The summary of a trace, priced by the traced machine's costs (a `memcost costs` summary of
    that machine, or a cost model), and the warnings it adds; `params` say how sites are named."""
    from ..analysis import trace as analysis
    from ..analysis.cost_model import CostModel
    if cost is None:
        run = next((s["metrics"] for s in samples if s["case"]["record"] == "run"), {})
        pages = {"base_page_bytes": run.get("base_page_bytes"), "thp": {"pmd_size_bytes": run.get("huge_page_bytes")}}
        cost = CostModel.from_costs_summary(costs_summary or {}, "the memcost costs result of the traced machine", pages)
    if cost is None:
        raise MemcostError("a trace is priced by its machine's measured fault cost, and no `costs` result of that machine "
                           "has one: capture `memcost-probe costs` there too and import both")
    summary = analysis.summarize(samples, cost, analysis.frames_of(params or {}))
    totals, warnings = summary["totals"], []
    if totals["sample_period"] == 1 and totals["kernel_faults"] and \
            abs(totals["faults"] - totals["kernel_faults"]) > 0.02 * totals["kernel_faults"] + 100:
        warnings.append({"code": "fault_count_mismatch",
                         "message": f"{totals['faults']:,} faults were counted but the kernel counted "
                                    f"{totals['kernel_faults']:,} for the command: {analysis.count_gap_reason(totals)}"})
    if totals.get("malformed_records"):
        warnings.append({"code": "malformed_records",
                         "message": f"{totals['malformed_records']:,} records that were not of their format "
                                    f"({totals['malformed_bytes']:,} bytes) were dropped and the rest read: something in "
                                    "the command wrote into the preload library's descriptor "
                                    "(MEMCOST_PRELOAD_FD); the calls they stood for are missing from the tables"})
    refused = next((s["metrics"].get("refused_perf_maps", 0) for s in samples if s["case"]["record"] == "run"), 0)
    if refused:
        warnings.append({"code": "perf_map_refused",
                         "message": f"{refused} perf map file(s) in /tmp were not read: not a regular file owned by the "
                                    "traced program's user or root (anyone can create /tmp/perf-PID.map first); "
                                    "their JIT-compiled frames stay unnamed"})
    warnings += [{"code": "runtime_unnamed", "message": message} for message in analysis.runtime_flags_missing(samples)]
    return summary, warnings


def measure(values: dict, directory) -> dict:
    """Trace values["command"] (or values["pid"]), price it with this machine's costs, store it."""
    from .shared import finish
    # Raw records are written beside the results root first, and moved beside the document once it exists.
    raw = directory.root / f".{RAW_NAME}.{os.getpid()}" if values.get("raw") else None
    if raw:
        directory.root.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    windows = None
    # The cost model comes first (a calibration run, if this host has no `costs` result): windows are
    # priced as they are written, and a Ctrl-C during calibration then ends before anything ran.
    cost = this_machines_cost(directory, values.get("calibrate"), notes)
    if values.get("windows_folder"):
        from ..export.pprof import Windows
        from ..analysis.trace import frames_of
        windows = Windows(values["windows_folder"], cost, frames_of(values), socket.gethostname(),
                          str(values["pid"]) if values.get("pid") else Path(values["command"][0]).name)
    try:
        run = record(values, raw, windows.take if windows else None)
    except BaseException:
        if raw:
            raw.unlink(missing_ok=True)
        raise
    # What was recorded is written whole: a Ctrl-C from here on is noted, and ends the command
    # with 130 once the document is stored.
    with interrupts.held():
        document = _store(values, directory, run, cost, raw, windows, notes)
    if values.get("verify") and values.get("command") and not document["summary"]["totals"]["interrupted"]:
        # The trace is stored first: a Ctrl-C while verifying ends with 130 and keeps it as it is.
        _verify(document, values)
    return document


def _corrected_by_verification(summary: dict, results_root: Path, host: str) -> None:
    """Estimates corrected by what `--verify` measured on this host before (analysis/verify.py)."""
    from ..analysis.verify import correct_estimates, learned_ratios
    from ..results import documents_of_host
    correct_estimates(summary, learned_ratios(document for _, document in documents_of_host(results_root, "trace", host)))


def _verify(document: dict, values: dict) -> None:
    """Measure each advice's saving (verify.py), then store the document again with what was measured."""
    import json
    from ..console import console
    from ..results import write_atomically
    from ..verify import verify
    verification = verify(document["samples"], document["summary"], values,
                          lambda text: console.print(f"  {text}", markup=False, style="dim"))
    with interrupts.held():
        document["summary"]["verification"] = verification
        # The preload library's variant speaks for the advice; a malloc tunable is shown beside it.
        measured = {(v["site"], v["kind"]): v for v in verification["variants"] if v["action"] != "tunable"}
        for row in document["summary"]["rows"]:
            for item in row["advice"]:
                found = measured.get((row["site"], item["kind"]))
                item["estimated_saving_ms"] = item["saving_ms"]
                item["verified"] = bool(found and found["verified"])
                if found:
                    item.update(measured_saving_ms=found["measured_saving_ms"],
                                measured_saving_interval_ms=found["measured_saving_interval_ms"],
                                verdict=found["verdict"])
        stored = {key: value for key, value in document.items() if key != "path"}
        write_atomically(Path(document["path"]), json.dumps(stored, indent=1) + "\n")


def _store(values: dict, directory, run, cost, raw, windows, notes: list) -> dict:
    from .shared import finish
    if windows:
        windows.finish(run.samples)
    summary, warnings = analyze(run.samples, cost=cost, params=values)
    summary["totals"]["command"] = values.get("command") or [f"pid {values['pid']}"]
    _corrected_by_verification(summary, directory.root, run.context.get("host", ""))
    summary["totals"]["interrupted"] = summary["totals"]["interrupted"] or interrupts.interrupted
    if values.get("overhead") and values.get("command") and not summary["totals"]["interrupted"]:
        summary["totals"].update(_untraced_run(values["command"]))
    params = {**{k: v for k, v in values.items() if k != "windows_folder"}, "probe_settings": run.settings, "raw_records": RAW_NAME if raw else None}
    document = finish(EXPERIMENT, run.context, params, run.samples, summary,
                      run.warnings + warnings + [{"code": "calibrated", "message": note} for note in notes], directory)
    if raw:
        os.replace(raw, Path(document["path"]).parent / RAW_NAME)
    if windows:
        document["windows"] = {"written": windows.written, "last": str(windows.last_written)}
    return document


def _untraced_run(command: list[str]) -> dict:
    """The command run again untraced (--overhead): its wall time, and its system time (its
    processes' own, from the kernel's rusage of the children waited for): the traced run's system
    time less this is the tracer's presence in the command's kernel time (its programs and events
    in every fault), measured once."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall_ms = (time.monotonic() - started) * 1e3
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"untraced_wall_ms": wall_ms, "untraced_system_ms": (after.ru_stime - before.ru_stime) * 1e3}


def reaggregate(path: Path) -> bool:
    """A trace document whose raw records were kept: attributed again from them by the probe
    (the same attribution as when it was traced), summarized and stored again. False when it
    kept none."""
    from ..analysis import trace as analysis
    from ..probe import run_probe
    from ..results import load_document, write_atomically
    import json
    document = load_document(path)
    raw = path.parent / (document.get("params", {}).get("raw_records") or "")
    if not document.get("params", {}).get("raw_records") or not raw.is_file():
        return False
    totals = document["summary"]["totals"]
    run = run_probe("trace", ["--replay", str(raw), "--thp-mode", totals["thp_mode"]])
    kept = [s for s in document["samples"] if s["case"]["record"] not in ("faults", "allocations")]
    document["samples"] = kept + run.samples
    cost = analysis.CostModel(totals["base_fault_us_per_mb"], totals["thp_fault_us_per_mb"], totals["cost_source"])
    summary, _ = analyze(document["samples"], cost=cost, params=document.get("params", {}))
    for key in ("command", "untraced_wall_ms", "untraced_system_ms"):
        if key in totals:
            summary["totals"][key] = totals[key]
    document["summary"] = {**summary, "figures": document["summary"].get("figures", [])}
    write_atomically(path, json.dumps(document, indent=1) + "\n")
    return True


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
    """Sites shown readable (analysis.trace.readable); the results keep their full names."""
    from ..analysis.trace import readable
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
    from ..analysis.trace import readable
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
    if verification.get("refused"):
        return [f"Not verified: the command was refused, {verification['refused']}."]
    from ..analysis.trace import readable
    unverified = [f"Unverified: {u['kind']} at {readable(u['site'])}: {u['reason']}." for u in verification["unverifiable"]]
    if not verification["variants"]:
        return unverified or ["Verified: no advice was worth a rerun."]
    baseline = verification["baseline"]
    applied = "; ".join(sorted({f"{v['kind']}: {v['applied']}" for v in verification["variants"]}))
    return [f"How it was verified: {verification['rounds']} rounds, each running the command once without advice and "
            f"once per advice (the order shuffled each round from seed {verification['seed']}), after one run that "
            "timed it; every run untraced with memcost's preload library loaded, the advice its only difference, the "
            "site found by its call path (the return addresses the trace saw); its standard output hashed and compared, "
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
    from ..analysis.trace import readable
    advice = [(readable(row["site"]), item) for row in summary["rows"] for item in row["advice"]]
    lines = []
    for site, item in sorted(advice, key=lambda pair: _ranked_saving(pair[1]), reverse=True):
        line = f"{site}: {item['text']}"
        if "verdict" in item:
            interval = _interval(item.get("measured_saving_interval_ms"))
            line += (f"; measured: {item['verdict']}, {item['measured_saving_ms']:,.1f} ms {interval}"
                     if item.get("measured_saving_ms") is not None else f"; {item['verdict']}")
            if item["verdict"].startswith("unsafe"):
                line += " — do not apply"
        lines.append(line)
    return lines


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
        + f"); tracing cost {totals['tracer_cpu_ms']:,.0f} ms of CPU."]
    lines += overhead_lines(totals)
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
    from ..analysis.trace import fault_time_answer
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


def notes(summary: dict) -> list[str]:
    advice = advice_lines(summary)
    return ((["Advice (what-if figures from this machine's measured costs):"] + [f" • {line}" for line in advice])
            if advice else ["No advice: no site's allocations cost enough to be worth changing."]) \
        + verification_lines(summary) + totals_lines(summary)


def interpret(summary: dict) -> list[str]:
    sentences = [f"{' '.join(summary['totals'].get('command', []))}: {summary['headline']}."
                 if summary["totals"].get("command") else summary["headline"] + "."]
    sentences += [f"At {line}." for line in advice_lines(summary)]
    return sentences + verification_lines(summary) + totals_lines(summary)


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


COMPARED = (("faults", "faults"), ("fault ms (est.)", "fault_ms"), ("free ms", "free_ms"))


def compared_rows(document: dict) -> dict[tuple, list[float]]:
    """Per allocation site: its faults, estimated fault time and measured free time (one value
    each: a trace is one run of the program; counts are exact, so no noise test applies); and,
    where --verify measured it, each advice's measured saving (the median of its rounds)."""
    rows = {(row["site"], figure): [float(row[key])] for row in document["summary"]["rows"] for figure, key in COMPARED}
    for variant in (document["summary"].get("verification") or {}).get("variants", []):
        if variant.get("measured_saving_ms") is not None and variant["action"] != "tunable":
            rows[(variant["site"], f"{variant['kind']} saving ms (measured)")] = [float(variant["measured_saving_ms"])]
    return rows


EXPERIMENT = Experiment(
    name="trace",
    title="What a program's allocations cost (trace)",
    summary="Run a program and measure what its big allocations cost the OS, per site.",
    options=OPTIONS,
    measure=measure,
    analyze=analyze,
    prices_from="costs",
    tables=tables,
    notes=notes,
    interpret=interpret,
    drawings=flamegraph,
    comparison=Comparison("value", ("site", "figure"), lambda sample: None, rows_of=compared_rows,
                          untested="one trace a run: faults are exact counts; compare the ratio itself"),
    in_suite=False,  # it needs a program to trace
)
