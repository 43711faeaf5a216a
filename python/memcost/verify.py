"""`memcost trace --verify`: the command run again, untraced, with each advice applied through the
preload library, interleaved with runs without it, and the saving measured (analysis/verify.py
decides what is applied and what the runs show; docs/trace.md, "Verifying advice")."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import struct
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

from . import kernel
from .analysis import verify as analysis
from .analysis.trace.records import Trace
from .probe import probe_path
from .stats import interleaved_order

DEFAULT_ROUNDS = 5
BUDGET_COMMAND_TIMES = 10  # the verification takes at most about this many times the command's own time
PT_INTERP = 3


def preload_library() -> Path:
    return probe_path().parent / "libmemcost-preload.so"


def pinning_library() -> Path:
    """The stand-in for the CUDA runtime's pinning calls (src/trace/preload/pinning_standin.c)."""
    return probe_path().parent / "libmemcost-pinning.so"


def dynamically_linked(command: list[str]) -> Optional[str]:
    """None when the command's program loads shared libraries (the preload library can enter it),
    else why not. A script is judged by its interpreter."""
    path = shutil.which(command[0]) or command[0]
    for _ in range(2):  # the script, then its interpreter
        try:
            with open(path, "rb") as program:
                head = program.read(64)
                if head.startswith(b"#!"):
                    path = head[2:].split(b"\n")[0].strip().split(b" ")[0].decode()
                    continue
                if head[:4] != b"\x7fELF" or head[4] != 2:
                    return f"{command[0]} is not a 64-bit ELF program"
                phoff, = struct.unpack_from("<Q", head, 0x20)
                entry_size, count = struct.unpack_from("<HH", head, 0x36)
                program.seek(phoff)
                headers = program.read(entry_size * count)
        except OSError as error:
            return f"{path}: {error.strerror}"
        types = [struct.unpack_from("<I", headers, i * entry_size)[0] for i in range(count)]
        return None if PT_INTERP in types else (f"{Path(path).name} is statically linked: no preload library can "
                                                "enter it")
    return f"{command[0]}: a script whose interpreter is a script"


def standard_input() -> tuple[Optional[str], Optional[str]]:
    """What each rerun reads: memcost's standard input again when it is a file (the path), nothing
    when it is a terminal or /dev/null, and why not when it is a pipe or socket (it was read once)."""
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        return None, None
    if stat.S_ISREG(mode):
        return kernel.standard_input_path(), None
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        return None, ("its standard input is a pipe, read once by the traced run: the reruns could not be given it "
                      "again (redirect a file instead)")
    return None, None


def run_once(command: list[str], env: dict, stdin_path: Optional[str] = None) -> dict:
    """One run: wall time, the CPU time and faults the kernel counted for it (wait4), its exit
    code and a hash of its standard output (not shown; its standard error is dropped)."""
    started = time.monotonic()
    stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
    try:
        process = subprocess.Popen(command, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    finally:
        if stdin_path:
            stdin.close()
    digest = hashlib.sha256()
    try:
        with process.stdout:
            for chunk in iter(lambda: process.stdout.read(1 << 16), b""):
                digest.update(chunk)
        _, status, usage = os.wait4(process.pid, 0)
    except BaseException:
        process.kill()
        process.wait()
        raise
    process.returncode = os.waitstatus_to_exitcode(status)
    return {"wall_ms": (time.monotonic() - started) * 1e3, "cpu_ms": (usage.ru_utime + usage.ru_stime) * 1e3,
            "user_ms": usage.ru_utime * 1e3, "system_ms": usage.ru_stime * 1e3,
            "faults": usage.ru_minflt + usage.ru_majflt, "exit_code": process.returncode,
            "stdout_sha256": digest.hexdigest()}


def rounds_for(asked, variants: int) -> int:
    """N pairs as asked; by default 5, fewer when that would take more than about 10 × the
    command's own time (never fewer than 3: a median of 2 says little)."""
    if isinstance(asked, int) and not isinstance(asked, bool) and asked > 0:  # --verify alone gives True
        return asked
    return max(3, min(DEFAULT_ROUNDS, BUDGET_COMMAND_TIMES // (variants + 1)))


def verify(trace: Trace, summary: dict, params: dict, progress: Callable[[str], None]) -> dict:
    """Run the verification of a trace and return what the results keep under summary["verification"]."""
    command = params["command"]
    variants, unverifiable = analysis.plan(trace, summary, params, os.cpu_count() or 1)
    result = {"variants": [], "unverifiable": unverifiable, "refused": None, "seed": None, "rounds": 0, "runs": []}
    if not variants:
        return result
    stdin_path, reason = standard_input()
    reason = reason or dynamically_linked(command)
    if reason:
        result["unverifiable"] += [{"site": v.site, "kind": v.kind, "estimated_saving_ms": v.estimated_saving_ms,
                                    "verified": False, "reason": reason} for v in variants]
        return result
    with tempfile.TemporaryDirectory(prefix="memcost-verify-") as folder:
        spec, plain_spec = Path(folder) / "advice", Path(folder) / "no-advice"
        # Without advice, every site is still looked for (and left alone): the search costs the same.
        plain_spec.write_text("\n".join(line for v in variants for line in v.spec_lines("none")) + "\n")
        # The pinning stand-in, where an advice needs it, is loaded into every run: without its
        # configuration it passes each call to the runtime, so the plain runs pay for the same lookups.
        pinning = [str(pinning_library())] if any(v.action == "pinned" for v in variants) else []
        base_env = {**os.environ, "LD_PRELOAD": " ".join(filter(None, [str(preload_library()), *pinning,
                                                                       os.environ.get("LD_PRELOAD")])),
                    "MEMCOST_PRELOAD_PYTHON": "0"}
        for key in ("MEMCOST_PRELOAD_FD", "MEMCOST_APPLY_FILE", "MEMCOST_APPLY_REPORT", "MEMCOST_PINNING"):
            base_env.pop(key, None)

        def env_for(variant: Optional[analysis.Variant], report: Path) -> dict:
            if variant is None:
                return {**base_env, "MEMCOST_APPLY_FILE": str(plain_spec)}
            if variant.action == "pinned":  # the stand-in reports what it served
                return {**base_env, **variant.environment, "MEMCOST_APPLY_FILE": str(plain_spec),
                        "MEMCOST_APPLY_REPORT": str(report)}
            if variant.environment:
                return {**base_env, **variant.environment, "MEMCOST_APPLY_FILE": str(plain_spec)}
            spec.write_text("\n".join(variant.spec_lines()) + "\n")
            return {**base_env, "MEMCOST_APPLY_FILE": str(spec), "MEMCOST_APPLY_REPORT": str(report)}

        progress("verifying: a first run, untraced: the exit code every plain run must match")
        first_run = run_once(command, env_for(None, Path(folder) / "report-0"), stdin_path)
        rounds = rounds_for(params.get("verify"), len(variants))
        seed = int.from_bytes(os.urandom(4), "little")
        order = interleaved_order([0] + [v.id for v in variants], rounds, seed)
        result.update(seed=seed, rounds=rounds, first_run=first_run)
        by_id = {v.id: v for v in variants}
        measured: dict[int, dict[int, dict]] = {0: {}, **{v.id: {} for v in variants}}
        applied: set[int] = set()
        overridden: set[int] = set()  # the program's own call against the advice was skipped
        total = rounds * (len(variants) + 1)
        for number, (round_index, variant_id) in enumerate(((r, v) for r, names in enumerate(order) for v in names), 1):
            variant = by_id.get(variant_id)
            progress(f"verifying: run {number} of {total} (round {round_index + 1}: "
                     f"{'no advice' if variant is None else variant.kind + ' at ' + variant.site})")
            report = Path(folder) / f"report-{number}"
            run = run_once(command, env_for(variant, report), stdin_path)
            if variant is not None and (variant.action == "tunable" or (report.exists() and
                                                                      f"applied {variant_id} " in report.read_text())):
                applied.add(variant_id)  # a tunable is glibc's to apply: its faults saved say whether it did
            if variant is not None and report.exists() and f"overridden {variant_id} " in report.read_text():
                overridden.add(variant_id)
            result["runs"].append({"round": round_index, "variant": variant_id, **run})
            measured[variant_id][round_index] = run
            if variant is None and run["exit_code"] != first_run["exit_code"]:
                break  # refused below at once: no later run could make its runs comparable
    baseline = [measured[0][r] for r in sorted(measured[0])]
    result["baseline"] = {"wall_ms": [run["wall_ms"] for run in baseline], "exit_codes": sorted({r["exit_code"] for r in baseline}),
                          "spread": analysis.spread_of([run["wall_ms"] for run in baseline])}
    result["refused"] = analysis.refusal(baseline, first_run)
    if result["refused"] and len(result["runs"]) < total:
        return result  # stopped early (exit codes that differ): nothing to show per advice
    result["variants"] = [analysis.evaluate(v, measured[0], measured[v.id], v.id in applied, seed, v.id in overridden)
                          for v in variants]
    if result["refused"]:
        result["variants"] = [analysis.not_compared(variant) for variant in result["variants"]]
    return result
