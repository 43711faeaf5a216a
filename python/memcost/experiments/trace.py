"""trace: what a real program's big allocations cost the OS, per allocation and touching site
(docs/trace.md; src/trace/ and src/probe/experiments/trace.cpp). Declared here like any other
experiment: its options, analysis (analysis/trace/), prose (report/trace.py) and comparison. Running
it (calibration, the probe, reruns, verification, windows) is tracing.py's; the command line
(cli/trace.py) adds what names the program to trace."""

from __future__ import annotations

from .. import arguments
from .base import Comparison, Experiment, Option

OPTIONS = [
    Option("sample_period", "record one fault in N (default 1: every fault, exact counts)", parse=arguments.positive_int,
           metavar="N"),
    Option("stack_bytes", "user stack copied per fault sample for unwinding (default 4096; deeper stacks are cut; an mmap, brk or madvise copies 32 KiB at least)",
           parse=arguments.positive_int, metavar="BYTES"),
    Option("cpu_sample_us", "measure fault time by sampling each thread's CPU time in the kernel every US µs (default "
           "4000, with --pid 0; 0: not sampled). Needs root or kernel.perf_event_paranoid <= 1; otherwise estimated, and said so",
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
    Option("verify_only", "with --verify: only these kinds of advice (comma-separated: huge_pages, parallel, reuse, "
           "pinned_memory); the others are listed as not verified, with that reason. Each advice verified costs its "
           "rounds of the command", parse=arguments.choice_list(["huge_pages", "parallel", "reuse", "pinned_memory"]),
           metavar="KINDS", to_probe=None),
    Option("skip_frames", "also skip frames whose function matches REGEX when naming a site (beside the default list of "
           "allocators, runtimes and standard libraries: docs/trace.md)", parse=arguments.regex, metavar="REGEX",
           to_probe=None),
    Option("keep_frames", "never skip frames whose function matches REGEX (say `^std::` to name the standard library's "
           "frames again)", parse=arguments.regex, metavar="REGEX", to_probe=None),
    Option("raw", "also keep every fault and call, compressed, beside the results (trace.raw.gz, about 5 bytes a fault); "
           "`memcost report --reaggregate` reads it again", flag_only=True, to_probe=None),
]


RAW_NAME = "trace.raw.gz"


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


# Imported when a trace is summarized, not when `memcost trace` parses its command line: the
# command starts first (memcost.tracing imports the analysis while it runs).
ANALYSIS_MODULES = ("memcost.analysis.trace.summary",)


def analyze(*arguments, **options):
    from ..analysis.trace import summary
    return summary.analyze(*arguments, **options)


EXPERIMENT = Experiment(
    name="trace",
    title="What a program's allocations cost (trace)",
    summary="Run a program and measure what its big allocations cost the OS, per site.",
    options=OPTIONS,
    analyze=analyze,
    prices_from="costs",
    prose="trace",  # report/trace.py: its tables, notes, interpretation and flame graph
    comparison=Comparison("value", ("site", "figure"), lambda sample: None, rows_of=compared_rows,
                          untested="one trace a run: faults are exact counts; compare the ratio itself"),
    in_suite=False,  # it needs a program to trace
)
