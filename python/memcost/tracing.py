"""Running a trace (`memcost trace`, `memcost report --reaggregate`): this machine's fault cost
(its newest `costs` result, or a short calibration kept as one), the probe around the command or
attached to a process, continuous pprof windows, the untraced rerun (--overhead), verification
(--verify) and the replay of raw records. The experiment itself is declared in
experiments/trace.py; its analysis is analysis/trace/, its prose report/trace.py."""

from __future__ import annotations

import importlib
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from . import interrupts, tracefs
from .analysis.cost_model import CostModel
from .errors import MemcostError
from .experiments.trace import EXPERIMENT, RAW_NAME
from . import probe
from .probe import run_probe
from .results import as_text, document_text, documents_of_host, load_document, make_document, write_atomically

if TYPE_CHECKING:
    from .analysis.trace.records import Trace


# What a trace needs once its command has ended (its analysis, advice, verification, results and
# rich's console), and what reads its stacks as they come (StacksMeanwhile), imported on a thread of
# its own while the command runs: importing them first held the command's start back by 0.1 s on
# the 2-vCPU guest, the most of `memcost trace -- true`'s fixed cost on the Python side. A module the
# end needs before the thread has imported it waits for that import (Python's import lock), and an
# import that fails fails again there, and is said.
END_MODULES = ("memcost.analysis.trace.records", "memcost.analysis.trace.sites", "memcost.analysis.trace.summary",
               "memcost.analysis.trace.advice",
               "memcost.analysis.verify", "memcost.experiments.shared", "memcost.console", "memcost.verify")


# Imported only when a command asks for them: a calibration run (no `costs` result of this host),
# and continuous pprof windows (--every).
CALIBRATION_MODULES = ("memcost.analysis.costs", "memcost.runner")
WINDOW_MODULES = ("memcost.analysis.trace.frames", "memcost.export.pprof")


class ImportsMeanwhile:
    """END_MODULES imported on a thread of its own, started once the probe is: started before, it
    held the GIL on the way to the probe's start, and the probe's own set-up now runs beside it
    (`memcost trace -- true` on the 2-vCPU guest, medians of 15 interleaved: the probe started
    114 → 107 ms after Python did, the whole command 297 → 266 ms)."""

    def __init__(self, modules):
        self.modules, self.thread = modules, None

    def start(self) -> None:
        def load() -> None:
            for name in self.modules:
                try:
                    importlib.import_module(name)
                except Exception:  # imported again where it is used, and failing there, said there
                    pass
        self.thread = threading.Thread(target=load, name="memcost-imports", daemon=True)
        self.thread.start()

    def is_alive(self) -> bool:
        return self.thread is None or self.thread.is_alive()

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()


class StacksMeanwhile:
    """The trace's stacks read as the probe sends them, each one's part of its site's name worked
    out as it comes (sites.stack_parts), while the command runs: after it had ended, that took 60 ms
    of a traced `import torch`'s 0.1 s summary on the 2-vCPU guest. Stacks that come while
    `importing` still imports the modules that read them wait for it (never two threads importing);
    the rest are read at once."""

    def __init__(self, values: dict, importing: ImportsMeanwhile):
        self.values, self.importing = values, importing
        self.waiting: list = []
        self.stacks = None  # records.Stacks, once the modules are there
        self.which = None
        self.parts: dict = {}
        self.naming_cpu_s = 0.0  # this thread's CPU naming them as they came (memcost_phases)

    def take(self, sample: dict) -> bool:
        """run_probe's on_sample: never keeps a sample from the run."""
        if sample["case"].get("record") == "stack":
            self.waiting.append(sample["metrics"])
            if not self.importing.is_alive():
                began = time.thread_time()
                self.catch_up()
                self.naming_cpu_s += time.thread_time() - began
        return False

    def catch_up(self) -> None:
        """Reads the stacks that waited (all of them, once the command has ended)."""
        if self.stacks is None:
            from .analysis.trace.frames import frames_of
            from .analysis.trace.records import Stacks
            self.stacks, self.which = Stacks(), frames_of(self.values)
        from .analysis.trace.sites import stack_parts
        for metrics in self.waiting:
            self.parts[metrics["stack"]] = stack_parts(self.stacks.take(metrics), self.which)
        self.waiting.clear()

    def read(self, samples: list) -> "Trace":
        """The trace of the run's samples, with its stacks and their parts read already."""
        from .analysis.trace import records, sites
        self.catch_up()
        trace = records.read(samples, self.stacks)
        trace.memo[(sites.STACK_PARTS, self.which)] = self.parts
        return trace


CALIBRATION = {"pages": "base,thp", "routes": "os", "parts": "rows,threads,reuse", "sizes": "64M", "reps": 5,
               "warmup": 1, "threads_size": "64M", "frames": 50}


def this_machines_cost(directory, calibrate: bool, notes: list):
    """This machine's fault cost: the newest `memcost costs` result for this host, else a short
    calibration run now (said so in the output), kept in `directory` as this host's costs result:
    the traces after it reuse it instead of paying for it again (2.5 s on a 2-vCPU VM)."""
    if not calibrate:
        model = CostModel.newest(directory.root)
        if model:
            return model
    from .analysis import costs as costs_analysis
    from .runner import run_with_progress
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


def process_started_monotonic() -> Optional[float]:
    """When this process started, on time.monotonic()'s clock (CLOCK_MONOTONIC), to within the
    kernel's clock tick: /proc/self/stat's start time counts ticks since boot (CLOCK_BOOTTIME)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        since_boot_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return time.monotonic() - (time.clock_gettime(time.CLOCK_BOOTTIME) - since_boot_s)


def memcost_phases(run_record: dict, marks: dict) -> Optional[dict]:
    """What memcost itself added before and after the command, in ms, from the front end's marks
    (`marks`: when Python started, when it started the probe, when the probe's output ended, when
    the summary was done, on time.monotonic(); the front end's CPU time, time.process_time(), when
    it started the probe and when its output ended, and its thread's CPU naming stacks meanwhile)
    and the probe's (run_record: when it began, when the command started and how long it ran, when
    its records were done). None where a mark is missing (a replay, a back end without them)."""
    started_ns, began_ns, done_ns = (run_record.get(k) for k in ("command_started_ns", "probe_began_ns", "records_done_ns"))
    if not (started_ns and began_ns and done_ns) or None in marks.values():
        return None
    started, began, done = started_ns / 1e9, began_ns / 1e9, done_ns / 1e9
    ended = started + run_record.get("wall_ns", 0) / 1e9
    parts = {"start_python_ms": marks["probe_spawned"] - marks["python_started"],
             "start_probe_ms": started - marks["probe_spawned"],
             "end_probe_ms": marks["output_ended"] - ended,
             "end_summary_ms": marks["summarized"] - marks["output_ended"]}
    phases = {name: round(seconds * 1e3, 1) for name, seconds in parts.items()}
    phases["probe_setup_ms"] = round((started - began) * 1e3, 1)     # of start_probe: after the probe's own start-up
    phases["probe_records_ms"] = round((done - ended) * 1e3, 1)      # of end_probe: the records finished and sent
    # The front end's own CPU (all its threads) while the probe ran: reading its records, naming
    # their stacks as they came (StacksMeanwhile), importing what the end needs (ImportsMeanwhile).
    # It runs on the command's CPUs as the tracer does, and is not in the tracer's CPU (the probe's).
    phases["front_end_cpu_ms"] = round((marks["cpu_at_output_end"] - marks["cpu_at_spawn"]) * 1e3, 1)
    # Of which naming stacks: the summary's own work, done early (after the command, it was most of
    # the summary's time).
    phases["front_end_naming_cpu_ms"] = round(marks["naming_cpu_s"] * 1e3, 1)
    phases["start_ms"] = round(phases["start_python_ms"] + phases["start_probe_ms"], 1)
    phases["end_ms"] = round(phases["end_probe_ms"] + phases["end_summary_ms"], 1)
    return phases


def record(values: dict, raw_path: Optional[Path] = None, on_sample=None, marks: Optional[dict] = None,
           on_started=None):
    """Run the probe around the command (or attached to a pid). Ctrl-C and SIGTERM go to the probe,
    which passes them to the command (src/trace/tracer.hpp) and still reports what it recorded.
    `marks` gets when the probe was started and when its output ended (memcost_phases);
    `on_started` is called once it is."""
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
        with tracefs.available(unmount_later=True):
            target = ["--command-stdout-fd", str(stdout_copy), "--", *values["command"]] if values.get("command") else []
            if marks is not None:
                marks["probe_spawned"], marks["cpu_at_spawn"] = time.monotonic(), time.process_time()
            run = run_probe("trace", [*probe_arguments, *target], pass_fds=(stdout_copy,), forward_interrupts=True,
                             on_sample=on_sample, reap_later=True, on_started=on_started)
            if marks is not None:
                marks["output_ended"], marks["cpu_at_output_end"] = time.monotonic(), time.process_time()
            return run
    finally:
        os.close(stdout_copy)


def measure(values: dict, directory, report_modules=()) -> dict:
    """Trace values["command"] (or values["pid"]), price it with this machine's costs, store it.
    `report_modules`: what the caller will show it with, imported while the command runs too."""
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
        from .analysis.trace.frames import frames_of
        from .export.pprof import Windows
        windows = Windows(values["windows_folder"], cost, frames_of(values), socket.gethostname(),
                          str(values["pid"]) if values.get("pid") else Path(values["command"][0]).name)
    importing = ImportsMeanwhile(END_MODULES + tuple(report_modules))
    stacks = StacksMeanwhile(values, importing)
    marks = {"python_started": process_started_monotonic()}
    try:
        run = record(values, raw, lambda sample: stacks.take(sample) or bool(windows and windows.take(sample)), marks,
                     on_started=importing.start)
        marks["naming_cpu_s"] = stacks.naming_cpu_s
    except BaseException:
        importing.join()
        if raw:
            raw.unlink(missing_ok=True)
        raise
    # What was recorded is written whole: a Ctrl-C from here on (the probe may still be closing
    # its events, probe.reap) is noted, and ends the command with 130 once the document is stored.
    with interrupts.held():
        importing.join()  # from here on this thread imports: never two threads at once
        trace = stacks.read(run.samples)
        document = _store(values, directory, run, trace, cost, raw, windows, notes, marks)
    if values.get("verify") and values.get("command") and not document["summary"]["totals"]["interrupted"]:
        # The trace is stored first: a Ctrl-C while verifying ends with 130 and keeps it as it is.
        probe.reap()
        _verify(document, trace, values)
    return document


# Beside a verified trace.json, what its verification measured, alone: the next trace of the host
# learns from these small files instead of parsing every trace document it ever wrote (a results
# folder with a few PyTorch traces made each `memcost trace -- true` read 1.4 s of JSON).
VERIFIED_NAME = "verification.jsonl"


def _verified_traces(results_root: Path, host: str):
    """This host's verifications, newest first, as learned_ratios reads trace documents."""
    found = sorted(Path(results_root).glob(f"*/{VERIFIED_NAME}"), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in found:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("host") == host:
            yield {"summary": {"totals": {"command": record.get("command")}, "verification": record.get("verification")}}


def _corrected_by_verification(summary: dict, results_root: Path, host: str) -> None:
    """Estimates corrected by what `--verify` measured on this host before (analysis/verify.py)."""
    from .analysis.verify import correct_estimates, learned_ratios
    correct_estimates(summary, learned_ratios(_verified_traces(results_root, host)))


def _verify(document: dict, trace: Trace, values: dict) -> None:
    """Measure each advice's saving (verify.py), then store the document again with what was measured."""
    from .analysis.verify import PINNED
    from .console import console
    from .verify import verify
    verification = verify(trace, document["summary"], values,
                          lambda text: console.print(f"  {text}", markup=False, style="dim"))
    with interrupts.held():
        document["summary"]["verification"] = verification
        # The preload library's variant speaks for the advice; a malloc tunable is shown beside it.
        measured = {(v["site"], v["kind"]): v for v in verification["variants"] if v["action"] != "tunable"}
        for row in document["summary"]["rows"]:
            for item in row["advice"]:
                item["estimated_saving_ms"] = item["saving_ms"]
                _take_measured(item, measured.get((row["site"], item["kind"])))
        for item in document["summary"].get("pinning", []):
            _take_measured(item, measured.get((item["site"], PINNED)))
        stored = {key: value for key, value in document.items() if key != "path"}
        write_atomically(Path(document["path"]), document_text(stored))
        learned = {"host": document["context"].get("host"), "command": document["summary"]["totals"].get("command"),
                   "verification": verification}
        write_atomically(Path(document["path"]).parent / VERIFIED_NAME, json.dumps(learned) + "\n")


def _take_measured(item: dict, found: Optional[dict]) -> None:
    """An advice item with what its variant measured, where one ran."""
    item["verified"] = bool(found and found["verified"])
    if found:
        item.update(measured_saving_ms=found["measured_saving_ms"],
                    measured_saving_interval_ms=found["measured_saving_interval_ms"], verdict=found["verdict"])


def _store(values: dict, directory, run, trace: Trace, cost, raw, windows, notes: list, marks: dict) -> dict:
    from .analysis.trace import summary as trace_summary
    from .analysis.trace.advice import pinning_advice
    from .experiments.shared import finish
    if windows:
        windows.finish(run.samples)
    summary, warnings = trace_summary.analyze_trace(trace, cost=cost, params=values)
    summary["totals"]["command"] = as_text(values.get("command")) or [f"pid {values['pid']}"]
    # Memory pinned by a CUDA call, with what the fast way measured on this host (`memcost pinned`).
    pinned = next((document["summary"] for _, document in documents_of_host(directory.root, "pinned",
                                                                                 run.context.get("host", ""))), None)
    summary["pinning"] = pinning_advice(summary["touching"], pinned)
    _corrected_by_verification(summary, directory.root, run.context.get("host", ""))
    summary["totals"]["interrupted"] = summary["totals"]["interrupted"] or interrupts.interrupted
    marks["summarized"] = time.monotonic()
    summary["totals"]["memcost_phases"] = memcost_phases(trace.run, marks)
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
    document = load_document(path)
    raw = path.parent / (document.get("params", {}).get("raw_records") or "")
    if not document.get("params", {}).get("raw_records") or not raw.is_file():
        return False
    totals = document["summary"]["totals"]
    run = run_probe("trace", ["--replay", str(raw), "--thp-mode", totals["thp_mode"]])
    kept = [s for s in document["samples"] if s["case"]["record"] not in ("faults", "allocations")]
    document["samples"] = kept + run.samples
    cost = CostModel(totals["base_fault_us_per_mb"], totals["thp_fault_us_per_mb"], totals["cost_source"])
    from .analysis.trace import summary as trace_summary
    summary, _ = trace_summary.analyze(document["samples"], cost=cost, params=document.get("params", {}))
    for key in ("command", "untraced_wall_ms", "untraced_system_ms"):
        if key in totals:
            summary["totals"][key] = totals[key]
    document["summary"] = {**summary, "figures": document["summary"].get("figures", [])}
    write_atomically(path, document_text(document))
    return True

