"""Running memcost-probe and reading its JSON-lines protocol."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections import deque
from pathlib import Path
from typing import Callable, Optional

from . import exit_codes, kernel
from .errors import MemcostError

PROBE_ENV = "MEMCOST_PROBE"


class ProbeFailed(MemcostError):
    """The probe ended with an error; `message` says what to do about it."""

    def __init__(self, exit_code: int, code: str, message: str):
        super().__init__(message, exit_code)
        self.code = code


class ProbeSample(dict):
    """A sample as the probe sent it: {"case": …, "metrics": …}, with `text`, its JSON as the probe
    wrote it (an ASCII line; else None), which a results document reuses instead of encoding it
    again (results.document_text: 36 ms of a traced import torch's 64 ms of storing, on the 2-vCPU
    guest). No analysis changes a sample it reads: it copies what it derives."""
    __slots__ = ("text",)


_SAMPLE_PREFIX = '{"type":"sample",'


def _sample_of(record: dict, line: Optional[str]) -> ProbeSample:
    sample = ProbeSample(case=record["case"], metrics=record["metrics"])
    sample.text = "{" + line[len(_SAMPLE_PREFIX):].rstrip("\n") if line and line.startswith(_SAMPLE_PREFIX) and \
        line.isascii() and list(record) == ["type", "case", "metrics"] else None
    return sample


class ProbeRun:
    """What one probe run reported. A plain class, not a dataclass: `dataclasses` (with the
    `inspect` and `ast` it loads) was 12 ms of `memcost trace`'s start before the probe's spawn."""
    __slots__ = ("context", "samples", "settings", "warnings", "interrupted")

    def __init__(self, context: dict, samples: Optional[list] = None, settings: Optional[dict] = None,
                 warnings: Optional[list] = None, interrupted: bool = False):
        self.context = context
        self.samples = [] if samples is None else samples
        self.settings = {} if settings is None else settings  # the values the probe ran with, its defaults included
        self.warnings = [] if warnings is None else warnings
        self.interrupted = interrupted  # with forward_interrupts: SIGINT or SIGTERM came and was passed to the probe

    def __repr__(self) -> str:
        return f"ProbeRun(context={self.context!r}, {len(self.samples)} samples, {len(self.warnings)} warnings)"


def probe_path() -> Path:
    """The probe binary: $MEMCOST_PROBE, else the one installed inside this package, else PATH."""
    override = os.environ.get(PROBE_ENV)
    if override:
        return Path(override)
    for name in ("memcost-probe", "memcost-probe.exe"):
        bundled = Path(__file__).parent / "_bin" / name
        if bundled.exists():
            return bundled
    import shutil  # only where no probe is bundled: it loads the compression modules
    found = shutil.which("memcost-probe")
    if found:
        return Path(found)
    raise ProbeFailed(exit_codes.FAILURE, "probe_missing",
                      "memcost-probe was not found: reinstall with `pip install .` (or `make run`), "
                      f"or point {PROBE_ENV} at the binary")


ProgressCallback = Callable[[int, int, str], None]
WarningCallback = Callable[[dict], None]


def run_probe(experiment: str, arguments: list[str] | None = None, *,
              global_arguments: list[str] | None = None,
              on_progress: Optional[ProgressCallback] = None,
              on_warning: Optional[WarningCallback] = None,
              env: Optional[dict] = None,
              pass_fds: tuple = (),
              forward_interrupts: bool = False,
              on_sample: Optional[Callable[[dict], bool]] = None,
              reap_later: bool = False,
              on_started: Optional[Callable[[], None]] = None) -> ProbeRun:
    """Run one experiment in a fresh probe process and collect what it reports.
    `global_arguments` go before the experiment's name (e.g. --legacy-layout); `pass_fds` are
    descriptors the probe inherits (trace gives the command the user's stdout this way).
    `forward_interrupts`: SIGINT and SIGTERM are passed to the probe, which decides what they mean
    and still reports what it has (trace: they end the traced command); the run says they came.
    `on_sample` sees each sample as it comes; one it returns True for is not kept (a long trace's
    windows are written as they end, not held). `reap_later`: a probe still closing (reap()).
    `on_started`: called once the probe runs, before its first line is read."""
    oom_kills_before = _oom_kills()
    process, drain, stderr_tail = _start([str(probe_path()), *(global_arguments or []), experiment, *(arguments or [])],
                                         env, pass_fds)
    if on_started:
        on_started()

    run: Optional[ProbeRun] = None
    error: Optional[dict] = None
    interrupted = False
    previous_handlers = {}
    if forward_interrupts:
        def forward(signum, frame):
            nonlocal interrupted
            interrupted = True
            try:
                process.send_signal(signum)
            except ProcessLookupError:
                pass
        previous_handlers = {signum: signal.signal(signum, forward) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        for line in process.stdout:
            record = _parse_line(line)
            kind = record.get("type")
            if kind == "sample" and on_sample and run is not None and on_sample(record):
                continue
            run = _take(record, run, line)
            if kind == "progress" and on_progress:
                on_progress(record["done"], record["total"], record.get("label", ""))
            elif kind == "warning" and run is not None and on_warning:
                on_warning(run.warnings[-1])
            elif kind == "error":
                error = record
        returncode = process.poll() if reap_later and error is None and run is not None else process.wait()
    except BaseException:
        # Ctrl-C reaches the probe too (same process group); make sure it is gone.
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        raise
    finally:
        for signum, handler in previous_handlers.items():
            signal.signal(signum, handler)
    if returncode is None:
        run.interrupted = interrupted
        _unreaped.append((experiment, process, drain, stderr_tail, oom_kills_before))
        return run
    drain.join(timeout=5)

    _check_ending(experiment, returncode, error, "".join(stderr_tail), oom_kills_before)
    if run is None:
        raise ProbeFailed(exit_codes.FAILURE, "protocol", f"memcost-probe {experiment} printed no context line")
    run.interrupted = interrupted
    return run


def _start(command: list[str], env: Optional[dict], pass_fds: tuple):
    """The probe started, and its stderr drained on a thread so that a chatty probe can never block
    on a full pipe: the process, the thread, and the last lines."""
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=env, pass_fds=pass_fds)
    except OSError as error:
        raise ProbeFailed(exit_codes.FAILURE, "probe_missing", f"cannot start {command[0]}: {error.strerror}") from error
    stderr_tail: deque[str] = deque(maxlen=20)
    drain = threading.Thread(target=lambda: stderr_tail.extend(process.stderr), daemon=True)
    drain.start()
    return process, drain, stderr_tail


_unreaped: list = []  # run_probe's reap_later probes, not yet waited for


def reap() -> None:
    """Waits for the probes run_probe left to end, and judges how they ended, as run_probe would
    have. With `reap_later`, a probe that has said all it had without an error and is still
    closing what it holds (a trace's perf events wait for the kernel, 0.1 s) is not waited for
    by run_probe: its caller uses what it said meanwhile, then calls this. A probe killed or
    failed while it closed is said after its results."""
    while _unreaped:
        experiment, process, drain, stderr_tail, oom_kills_before = _unreaped.pop()
        returncode = process.wait()
        drain.join(timeout=5)
        _check_ending(experiment, returncode, None, "".join(stderr_tail), oom_kills_before)


def wait_unreaped(timeout_s: float = 10.0) -> None:
    """Waits, without judging, for the probes run_probe left to end that reap() did not (a command
    that ended by an error or a Ctrl-C first): no probe outlives the front end. One that does not
    end in `timeout_s`, or a second Ctrl-C meanwhile, ends it at once."""
    while _unreaped:
        _, process, drain, _, _ = _unreaped.pop()
        try:
            process.wait(timeout=timeout_s)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            process.kill()
            process.wait()
        drain.join(timeout=5)


def _check_ending(experiment: str, returncode: int, error: Optional[dict], stderr_tail: str,
                  oom_kills_before: Optional[int]) -> None:
    """How the probe ended, as an exception unless it ended well: an interrupt, a kill (by the OOM
    killer where its count moved), or a failure with the probe's own message."""
    if returncode in (-signal.SIGINT, -signal.SIGTERM) or (error and error.get("code") == "interrupted"):
        # A terminal's Ctrl-C reaches every process of the group: the probe ended by it (or said it
        # was interrupted before it recorded anything) is an interrupt, not a failure.
        raise KeyboardInterrupt
    if returncode < 0:
        name = signal.Signals(-returncode).name
        oom = -returncode == signal.SIGKILL and oom_kills_before is not None and (_oom_kills() or 0) > oom_kills_before
        hint = " by the kernel's OOM killer (its count moved): lower the sizes or the budget (--budget)" if oom else ""
        raise ProbeFailed(exit_codes.FAILURE, "probe_killed", f"memcost-probe {experiment} was killed ({name}){hint}")
    if returncode != 0:
        if error:
            raise ProbeFailed(returncode, error.get("code", "failure"), error.get("message", "unknown error"))
        detail = stderr_tail.strip() or "no message"
        raise ProbeFailed(returncode, "failure", f"memcost-probe {experiment} failed (exit {returncode}): {detail}")


def _oom_kills() -> Optional[int]:
    """The kernel's count of OOM kills (Linux 4.13+), or None where it is not kept."""
    return kernel.vmstat_counter("oom_kill")


def _take(record: dict, run: Optional[ProbeRun], line: Optional[str] = None) -> Optional[ProbeRun]:
    """One protocol record into the run it belongs to (a context line starts one); `line`, the
    text it was read from."""
    kind = record.get("type")
    if kind == "context":
        return ProbeRun(context={k: v for k, v in record.items() if k not in ("type", "settings")},
                        settings=record.get("settings", {}))
    if kind == "sample" and run is not None:
        run.samples.append(_sample_of(record, line))
    elif kind == "warning" and run is not None:
        run.warnings.append({"code": record["code"], "message": record["message"]})
    return run


def read_capture(path: Path) -> ProbeRun:
    """A probe's output saved to a file (`memcost-probe costs > costs.jsonl`, on any machine),
    read as run_probe reads a live probe. A capture that ended in an error line or holds no
    context line is refused: half a run makes no results."""
    run: Optional[ProbeRun] = None
    with open(path, encoding="utf-8", errors="strict") as capture:
        for number, line in enumerate(capture, start=1):
            if not line.strip():
                continue
            try:
                record = _parse_line(line)
                if record.get("type") == "error":
                    raise ProbeFailed(exit_codes.FAILURE, "capture_failed",
                                      f"{path}: the probe stopped with an error on line {number}: "
                                      f"{record.get('message', 'no message')}; rerun it and capture again")
                run = _take(record, run, line)
            except (KeyError, TypeError) as error:
                raise ProbeFailed(exit_codes.FAILURE, "protocol",
                                  f"{path}, line {number}: a record without its fields ({error})") from error
            except ProbeFailed as error:
                if error.code == "capture_failed":
                    raise
                raise ProbeFailed(exit_codes.FAILURE, "protocol", f"{path}, line {number}: {error}") from error
    if run is None:
        raise ProbeFailed(exit_codes.FAILURE, "protocol", f"{path} holds no context line: it is not memcost-probe output")
    return run


def _parse_line(line: str) -> dict:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise ProbeFailed(exit_codes.FAILURE, "protocol",
                          f"memcost-probe printed a line that is not JSON: {line.strip()[:200]!r}") from error
    if not isinstance(record, dict) or "type" not in record:
        raise ProbeFailed(exit_codes.FAILURE, "protocol", f"memcost-probe printed a record without a type: {line.strip()[:200]!r}")
    return record
