"""memcost trace on a test program with known sites (tests/python/data/trace_sites.c), built
here with -O2 and no frame pointers, as distribution binaries are."""

import gzip
import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from memcost import exit_codes
from memcost.analysis.trace.records import stacks_of
from memcost.results import load_document

from conftest import DATA, finish, needs_tracing, run_memcost, start_memcost, summarize_trace

MIB = 1 << 20


@pytest.fixture(scope="module")
def sites_program(c_program) -> Path:
    return c_program("trace_sites")


@pytest.fixture(scope="module")
def results_root(golden_results, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("trace_results")
    shutil.copytree(golden_results, root, dirs_exist_ok=True)
    return root


@pytest.fixture(scope="module")
def traced(sites_program, results_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("trace_exports")
    result = run_memcost("--results-dir", str(results_root), "trace", "--export-pprof", str(out / "faults.pb.gz"),
                         "--export-folded", str(out / "faults.folded"), "--", str(sites_program), "fresh", "3")
    document = load_document(results_root / "latest" / "trace.json") if (results_root / "latest").exists() else None
    return result, document, out


def _line_of(source: str, text: str) -> int:
    lines = (DATA / source).read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


def _row(document, function):
    rows = [r for r in document["summary"]["rows"] if r["site"].startswith(function)]
    assert len(rows) == 1, [r["site"] for r in document["summary"]["rows"]]
    return rows[0]


@needs_tracing
def test_faults_are_charged_exactly_to_the_allocation_sites(traced):
    result, document, _ = traced
    assert document is not None, result.stderr
    a, b = _row(document, "site_a_frames"), _row(document, "site_b_allocate")
    assert a["faults"] == pytest.approx(50 * 2048, rel=0.02)
    assert b["faults"] == pytest.approx(65536, rel=0.02)
    assert (a["mappings"], a["freed"], a["churn"], a["churn_bytes"]) == (50, 50, 50, 8 * MIB)
    assert "trace_sites.c:" in a["site"] and "trace_sites.c:" in b["site"]


@needs_tracing
def test_the_touching_site_is_the_writer_not_memset_or_the_allocator(traced):
    _, document, _ = traced
    touching = {row["site"].split(" ")[0].split(".")[0]: row for row in document["summary"]["touching"]}
    assert touching["site_b_writer"]["faults"] == pytest.approx(65536, rel=0.02)
    assert touching["site_b_writer"]["allocation_site"].startswith("site_b_allocate")
    assert touching["frame_work"]["allocation_site"].startswith("site_a_frames")  # memset in libc is skipped


@needs_tracing
def test_the_run_says_faults_were_counted_in_the_kernel_where_it_can(traced):
    """As root on a kernel with BTF (this machine, make test), the default path is the BPF counter."""
    _, document, _ = traced
    totals = document["summary"]["totals"]
    if os.geteuid() != 0 or not Path("/sys/kernel/btf/vmlinux").exists():
        assert not totals["counted_in_kernel"] and totals["kernel_counting"]  # and says why not
        return
    assert totals["counted_in_kernel"], totals["kernel_counting"]
    assert totals["faults_uncounted"] == 0 and totals["touch_samples"] > 0
    assert totals["faults"] == pytest.approx(totals["kernel_faults"], abs=20)


@needs_tracing
def test_counting_in_the_kernel_times_one_fault_in_16_there(traced):
    """The in-kernel counter times one fault in 16 at random, from the handler's entry to its
    page-count update: about a 16th of the faults, every site with faults has a time, and the
    time is a part of the handler's (the sampler's measure of the whole handler, where it runs)."""
    result, document, _ = traced
    totals = document["summary"]["totals"]
    if not totals["counted_in_kernel"]:
        pytest.skip(totals["kernel_counting"])
    assert totals["fault_timing_one_in"] == 16
    # Binomial: about 10,000 of 167,000 faults, ± 100.
    assert totals["faults_timed"] == pytest.approx(totals["faults"] / 16, rel=0.1)
    assert totals["faults_timed_unended"] <= 0.01 * totals["faults_timed"]  # fresh anonymous pages update a count
    in_kernel, error = totals["fault_ms_kernel"], totals["fault_ms_kernel_error"]
    assert 0 < error < 0.2 * in_kernel
    assert in_kernel <= totals["system_ms"]
    if totals.get("fault_ms_measured") is not None:
        sampled = totals["fault_ms_measured"]
        assert 0.3 * sampled <= in_kernel <= sampled + 3 * (totals["fault_ms_measured_error"] + error)
    for function in ("site_a_frames", "site_b_allocate"):
        row = _row(document, function)
        assert row["fault_ms_kernel"] > 0 and row["faults_timed"] > 0
    # One answer, and the methods that ran beside it, each as a method.
    assert result.stdout.count("Fault time: ") == 1 and "timed in the kernel, " in result.stdout


@needs_tracing
@pytest.mark.parametrize("touching", ["sampled", "every fault"])
def test_the_perf_path_gives_the_same_sites_and_counts(traced, sites_program, golden_results, tmp_path, touching):
    """The perf path (--fault-counting perf), which runs wherever BPF cannot load, charges the same
    faults to the same sites as the in-kernel counter: every fault a record of its address, the
    touching stacks sampled; or, with --touch-samples-per-second 0, every fault with its stack,
    and then the touching counts are exact."""
    _, counted, _ = traced
    root = tmp_path / "results"
    shutil.copytree(golden_results, root)
    every = ["--touch-samples-per-second", "0"] if touching == "every fault" else []
    result = run_memcost("--results-dir", str(root), "trace", "--fault-counting", "perf", *every, "--",
                         str(sites_program), "fresh", "3")
    assert result.returncode == 3, result.stderr  # the program's own exit code, passed on
    recorded = load_document(root / "latest" / "trace.json")
    totals = recorded["summary"]["totals"]
    assert not totals["counted_in_kernel"]
    assert totals["kernel_counting"] == "not asked for"
    assert totals["lost_records"] == 0
    for function in ("site_a_frames", "site_b_allocate"):
        assert _row(recorded, function)["faults"] == pytest.approx(_row(counted, function)["faults"], abs=20)
    touching_rows = {row["site"].split(" ")[0].split(".")[0]: row for row in recorded["summary"]["touching"]}
    writer = touching_rows["site_b_writer"]
    if every:
        assert "samples" not in writer  # exact: no sampling error to show
        assert writer["faults"] == pytest.approx(65536, rel=0.02)
        assert totals["touch_samples"] == 0
    else:
        assert writer["samples"] > 0 and totals["touch_samples"] > 0
        assert "every fault recorded by its address" in totals["fault_source"]
        assert "sampled stacks" in result.stdout
        # The writer's share of the counted faults, estimated from its samples (binomial error).
        assert abs(writer["faults"] - 65536) <= 4 * writer["faults_error"] + 0.02 * 65536, writer


@needs_tracing
def test_reuse_advice_for_the_churning_site_only(traced):
    _, document, _ = traced
    a, b = _row(document, "site_a_frames"), _row(document, "site_b_allocate")
    assert [item["kind"] for item in a["advice"]].count("reuse") == 1
    assert "reuse" not in [item["kind"] for item in b["advice"]]
    reuse = next(item for item in a["advice"] if item["kind"] == "reuse")
    assert reuse["saving_ms"] > 0 and "8 MiB" in reuse["text"]


@needs_tracing
def test_unmap_time_is_measured_and_the_exit_code_passes_through(traced):
    result, document, _ = traced
    assert result.returncode == 3, result.stderr
    assert "done" in result.stdout  # the command's own output reaches the user
    assert _row(document, "site_a_frames")["free_ms"] > 0
    # The document holds the aggregate, not a record per fault or call.
    assert {s["case"]["record"] for s in document["samples"]} <= {"stack", "process", "faults", "touch_samples", "fault_time", "allocations", "run"}
    assert sum(len(s["metrics"]["faults"]) for s in document["samples"] if s["case"]["record"] == "faults") < 100
    assert document["summary"]["totals"]["lost_records"] == 0


@needs_tracing
def test_pprof_export_reads_back_with_the_same_totals(traced):
    _, document, out = traced
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        pytest.skip("Go is not installed: `go tool pprof` cannot read the export back")
    raw = subprocess.run([go, "tool", "pprof", "-raw", str(out / "faults.pb.gz")], capture_output=True, text=True,
                         timeout=300)
    assert raw.returncode == 0, raw.stderr
    assert "faults/count fault_time/nanoseconds freed/bytes" in raw.stdout
    values = [tuple(int(v) for v in match) for match in re.findall(r"^\s+(\d+)\s+(\d+)\s+(\d+):", raw.stdout, re.M)]
    assert sum(v[0] for v in values) == document["summary"]["totals"]["faults"]
    freed = sum(v[2] for v in values)
    assert freed >= 50 * 8 * MIB + 256 * MIB
    assert gzip.decompress((out / "faults.pb.gz").read_bytes())  # gzipped, as pprof expects


@needs_tracing
def test_folded_stacks_put_the_allocation_stack_root_first(traced):
    _, document, out = traced
    lines = (out / "faults.folded").read_text().splitlines()
    total = sum(int(line.rsplit(" ", 1)[1]) for line in lines)
    assert total == document["summary"]["totals"]["faults"]
    allocations = [line.split(";[touched_by]")[0] for line in lines]
    site_a = [stack for stack in allocations if "site_a_frames" in stack]
    assert site_a and all(stack.index("main") < stack.index("site_a_frames") for stack in site_a)


def _paranoid() -> int:
    return int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to set the sysctl and drop to a user")
def test_where_users_may_not_use_perf_the_command_says_what_to_do():
    from memcost.probe import probe_path
    setting = Path("/proc/sys/kernel/perf_event_paranoid")
    before = setting.read_text()
    try:
        setting.write_text("3")  # put back below, whatever happens; the suite checks it is
        result = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(probe_path()),
                                 "trace", "--", "true"], capture_output=True, text=True, timeout=60, cwd="/tmp")
    finally:
        setting.write_text(before)
    assert result.returncode == exit_codes.UNSUPPORTED, result.stdout + result.stderr
    error = json.loads(result.stdout.splitlines()[-1])
    assert "perf_event_paranoid 3" in error["message"] and "sudo" in error["message"]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or _paranoid() <= -1 or _paranoid() > 2,
                    reason="needs root to drop to an unprivileged user, and perf_event_paranoid 0 to 2")
@needs_tracing
def test_fault_time_is_measured_by_sampling_where_the_kernel_allows(traced):
    result, document, _ = traced
    totals = document["summary"]["totals"]
    assert totals["cpu_sample_period_ns"] == 4_000_000, totals["cpu_sampling"]
    measured, error = totals["fault_ms_measured"], totals["fault_ms_measured_error"]
    # A part of the command's system time; perf recording each fault for the trace is inside the
    # system time too, measured by the same samples, and is not the faults' own.
    assert 0 < measured - 2 * error <= totals["system_ms"]
    assert measured >= 0.5 * (totals["system_ms"] - totals["tracing_ms"])
    assert totals["zeroing_share"] > 0
    b = _row(document, "site_b_allocate")
    assert b["fault_ms_measured"] > 0 and 0 < b["zeroing_share"] < 1
    assert "Fault time: " in result.stdout and "measured by sampling" in document["summary"]["headline"]
    assert "of the command's" in document["summary"]["headline"]  # a share of CPU time, which can hold many threads' faults


def test_without_privilege_the_interposer_gives_the_same_totals(sites_program):
    """As an ordinary user: no tracepoints, so the preload library reports the calls, and faults
    are sampled in user mode (all of the test program's are)."""
    import tempfile
    from memcost.analysis.cost_model import CostModel
    from memcost.probe import probe_path
    folder = Path(tempfile.mkdtemp(prefix="memcost-unprivileged-", dir="/tmp"))  # a user can reach /tmp/x, not pytest's
    try:
        for name in (probe_path(), probe_path().parent / "libmemcost-preload.so", sites_program):
            shutil.copy(name, folder / Path(name).name)
            (folder / Path(name).name).chmod(0o755)
        folder.chmod(0o755)
        result = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                 str(folder / "memcost-probe"), "trace", "--command-stdout-fd", "2", "--", str(folder / sites_program.name), "fresh"],
                                capture_output=True, text=True, timeout=120, cwd="/tmp")
    finally:
        shutil.rmtree(folder)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]  # the program prints too
    samples = [{"case": r["case"], "metrics": r["metrics"]} for r in records if r["type"] == "sample"]
    run = next(s["metrics"] for s in samples if s["case"]["record"] == "run")
    assert "LD_PRELOAD" in run["call_source"]
    assert run["cpu_sample_period_ns"] == 0 and run["cpu_sampling"].startswith("not permitted")  # estimated, and says so
    # Without privilege the buffers are small and the tracer has no priority: the command is held
    # while it catches up, which loses nothing on a quiet machine; under load a few may go, counted.
    assert run["lost_records"] <= 0.01 * run["sampled_faults"]
    summary = summarize_trace(samples, CostModel(400.0, 40.0, "test"))
    document = {"summary": summary}
    a, b = _row(document, "site_a_frames"), _row(document, "site_b_allocate")
    # A lost record is a fault missing from the site it touched (a burst, so usually one site):
    # each site's count is exact to within what was lost, and never above.
    lost = run["lost_records"]
    for row, faults in ((a, 50 * 2048), (b, 65536)):
        assert 0.98 * faults <= row["faults"] + lost and row["faults"] <= 1.02 * faults, (row["site"], lost)
    assert (a["mappings"], a["freed"]) == (50, 50)
    assert [item["kind"] for item in a["advice"]].count("reuse") == 1


def test_no_command_and_unknown_flags_exit_2():
    assert run_memcost("trace").returncode == exit_codes.BAD_ARGUMENTS
    assert run_memcost("trace", "--bogus", "--", "true").returncode == exit_codes.BAD_ARGUMENTS


@needs_tracing
def test_a_command_that_does_not_exist_is_one_clear_line(results_root):
    result = run_memcost("--results-dir", str(results_root), "trace", "--", "/no/such/program")
    assert result.returncode == exit_codes.FAILURE
    assert "cannot run /no/such/program" in result.stderr and "Traceback" not in result.stderr


@needs_tracing
def test_a_library_at_a_path_that_is_not_utf8_is_traced_and_its_site_named(c_program, golden_results, tmp_path):
    """A traced program's bytes are its own: a library at a Latin-1 path (b"libcaf\\xe9.so") ended
    the trace with the json library's "invalid UTF-8 byte"; its frames' module now says U+FFFD
    there, and its faults are charged to its function as any other's. The command line that names
    it is stored the same way, and the report reads it (a lone surrogate in the document stopped
    `memcost report`)."""
    results = tmp_path / "results"
    shutil.copytree(golden_results, results)
    library = os.fsdecode(os.fsencode(tmp_path) + b"/libcaf\xe9.so")  # surrogate-escaped: the bytes reach cc as they are
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-g", "-o", library, str(DATA / "big_mapping_library.c")], check=True)
    result = run_memcost("--results-dir", str(results), "trace", "--", str(c_program("library_loader")), library)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "UTF-8" not in result.stderr
    document = load_document(results / "latest" / "trace.json")
    row = _row(document, "make_big")
    assert row["faults_base"] + row["faults_thp"] * 512 >= 64 * MIB // 4096
    modules = {frame.get("module", "") for frames in stacks_of(document["samples"]).values() for frame in frames}
    assert any(module.endswith("/libcaf\ufffd.so") for module in modules), sorted(modules)
    assert document["summary"]["totals"]["command"][-1].endswith("/libcaf\ufffd.so")
    assert document["params"]["command"][-1].endswith("/libcaf\ufffd.so")
    report = run_memcost("report", str(results / "latest"))
    assert report.returncode == 0, report.stderr


@needs_tracing
def test_ctrl_c_stops_the_command_and_keeps_what_was_recorded(results_root, tmp_path):
    import signal
    import sys
    import time
    root = tmp_path / "results"
    shutil.copytree(results_root / "20260101T000000Z-golden", root / "20260101T000000Z-golden")
    running = tmp_path / "running"
    # A terminal sends Ctrl-C to the whole foreground process group: memcost, the probe, the command.
    process = start_memcost("--results-dir", str(root), "trace", "--", "python3", "-c",
                            "import signal, time; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                            f"b = b\"x\" * (64 << 20); open({str(running)!r}, 'w').close(); time.sleep(60)",
                            folder=tmp_path, start_new_session=True)
    deadline = time.monotonic() + 60
    while not running.exists() and time.monotonic() < deadline:  # the command is running, its pages written
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = finish(process)
    assert "Traceback" not in stderr and "SIGSEGV" not in stderr
    assert process.returncode == exit_codes.INTERRUPTED, stderr
    document = load_document(root / "latest" / "trace.json")
    assert document["summary"]["totals"]["exit_code"] == 128 + signal.SIGINT  # the command's own end, recorded
    assert document["summary"]["totals"]["interrupted"]
    assert document["summary"]["totals"]["faults"] >= (64 << 20) // 4096


@needs_tracing
def test_the_report_has_a_trace_section_with_a_flame_graph(traced, results_root):
    result = run_memcost("report", str(results_root / "latest"))
    assert result.returncode == 0, result.stderr
    page = (results_root / "latest" / "report.html").read_text()
    assert "What a program&#39;s allocations cost (trace)" in page or "What a program's allocations cost (trace)" in page
    assert "<svg" in page and "site_a_frames" in page
    assert "site_a_frames" in (results_root / "latest" / "summary.md").read_text()


@needs_tracing
def test_attaching_to_a_running_process_watches_it_and_leaves_it_running(results_root, tmp_path):
    import sys
    import time
    root = tmp_path / "results"
    shutil.copytree(results_root / "20260101T000000Z-golden", root / "20260101T000000Z-golden")
    # 64 MiB: above glibc's largest mmap threshold (32 MiB), so every block is a fresh mapping.
    target = subprocess.Popen([sys.executable, "-c", "import time\nwhile True:\n    b = b'x' * (64 << 20)\n    del b\n"
                               "    time.sleep(0.02)\n"])
    try:
        time.sleep(0.5)
        result = run_memcost("--results-dir", str(root), "trace", "--pid", str(target.pid), "--seconds", "2")
        assert result.returncode == 0, result.stderr
        assert target.poll() is None  # still running
        document = load_document(root / "latest" / "trace.json")
        totals = document["summary"]["totals"]
        # Each 64 MiB bytes object is a fresh mapping of 16,384 pages, written once.
        assert totals["faults_attributed"] >= 3 * 16384
        assert abs(totals["faults"] - totals["kernel_faults"]) <= 0.02 * totals["kernel_faults"] + 100
        assert any(row["call"] == "mmap" and row["churn"] >= 3 for row in document["summary"]["rows"])
    finally:
        target.kill()
        target.wait()


def test_attaching_to_a_process_that_is_not_there_is_one_line():
    result = run_memcost("trace", "--pid", "99999999")  # above the kernel's largest pid
    assert result.returncode == exit_codes.FAILURE and "no process 99999999" in result.stderr
    assert run_memcost("trace", "--pid", "1", "--", "true").returncode == exit_codes.BAD_ARGUMENTS
    assert run_memcost("trace", "--seconds", "1", "--", "true").returncode == exit_codes.BAD_ARGUMENTS


def test_window_profiles_need_a_folder_and_a_sane_duration(tmp_path):
    afile = tmp_path / "profile.pb.gz"
    afile.write_bytes(b"")
    for args, says in ((["--every", "60s"], "add --export-pprof FOLDER"),
                       (["--every", "60s", "--export-pprof", str(afile)], "is a file"),
                       (["--export-pprof", str(tmp_path)], "is a folder"),
                       (["--every", "0.5s", "--export-pprof", str(tmp_path)], "at least 1"),
                       (["--every", "soon", "--export-pprof", str(tmp_path)], "not a duration")):
        result = run_memcost("trace", *args, "--", "true")
        assert result.returncode == exit_codes.BAD_ARGUMENTS and says in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr


@needs_tracing
def test_a_command_does_not_outlive_a_probe_that_dies():
    import signal
    import time
    from memcost.probe import probe_path
    probe = subprocess.Popen([str(probe_path()), "trace", "--", "sleep", "60"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    children = Path(f"/proc/{probe.pid}/task/{probe.pid}/children")
    deadline = time.monotonic() + 20
    command = None
    while time.monotonic() < deadline and command is None:
        listed = children.read_text().split() if children.exists() else []
        if listed and Path(f"/proc/{listed[0]}/cmdline").read_bytes().startswith(b"sleep"):
            command = int(listed[0])
        else:
            time.sleep(0.05)
    try:
        assert command, "the probe never started the command"
        probe.send_signal(signal.SIGKILL)  # as a crash would end it
        probe.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and Path(f"/proc/{command}").exists() \
                and "Z" not in Path(f"/proc/{command}/stat").read_text().split()[2]:
            time.sleep(0.05)
        alive = Path(f"/proc/{command}").exists() and "Z" not in Path(f"/proc/{command}/stat").read_text().split()[2]
        assert not alive, "the command went on running after its tracer died"
    finally:
        if command and Path(f"/proc/{command}").exists():
            os.kill(command, signal.SIGKILL)
        if probe.poll() is None:
            probe.kill()


@needs_tracing
def test_raw_records_are_kept_on_request_and_reaggregate_to_the_same_sites(sites_program, results_root, tmp_path):
    root = tmp_path / "results"
    shutil.copytree(results_root / "20260101T000000Z-golden", root / "20260101T000000Z-golden")
    result = run_memcost("--results-dir", str(root), "trace", "--raw", "--", str(sites_program), "fresh")
    assert result.returncode == 0, result.stderr
    run_folder = (root / "latest").resolve()
    assert (run_folder / "trace.raw.gz").is_file() and not list(root.glob(".trace.raw.gz.*"))
    before = load_document(run_folder / "trace.json")["summary"]["rows"]
    again = run_memcost("--results-dir", str(root), "report", "--reaggregate", str(run_folder))
    assert again.returncode == 0, again.stderr
    after = load_document(run_folder / "trace.json")["summary"]["rows"]
    assert [(r["site"], r["faults"], r["freed"]) for r in after] == [(r["site"], r["faults"], r["freed"]) for r in before]
    (run_folder / "trace.raw.gz").write_bytes(gzip.compress(b"memcost-trace-raw 1\nf\x01"))  # cut short
    broken = run_memcost("--results-dir", str(root), "report", "--reaggregate", str(run_folder))
    assert broken.returncode == exit_codes.FAILURE and "cut short" in broken.stderr and "Traceback" not in broken.stderr


def test_reaggregating_a_run_without_raw_records_says_how_to_keep_them(tmp_path):
    result = run_memcost("--results-dir", str(tmp_path), "report", "--reaggregate", str(tmp_path))
    assert result.returncode == exit_codes.FAILURE and "memcost trace --raw" in result.stderr


@needs_tracing
def test_a_trace_captured_by_the_probe_alone_imports_priced_by_that_machines_costs(sites_program, results_root, tmp_path):
    from memcost.probe import probe_path
    capture = tmp_path / "trace.jsonl"
    with open(capture, "w") as out:
        probe = subprocess.run([str(probe_path()), "trace", "--", str(sites_program), "fresh"], stdout=out,
                               stderr=subprocess.PIPE, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    lines = [line for line in capture.read_text().splitlines() if line.startswith("{")]  # the program printed too
    capture.write_text("\n".join(lines) + "\n")
    unpriced = run_memcost("--results-dir", str(tmp_path / "empty"), "import", str(capture))
    assert unpriced.returncode == exit_codes.FAILURE and "memcost-probe costs" in unpriced.stderr
    assert not (tmp_path / "empty" / "latest").exists()
    root = tmp_path / "results"
    shutil.copytree(results_root / "20260101T000000Z-golden", root / "20260101T000000Z-golden")
    result = run_memcost("--results-dir", str(root), "import", str(capture))
    assert result.returncode == 0, result.stderr
    document = load_document(root / "latest" / "trace.json")
    assert _row(document, "site_b_allocate")["faults"] == pytest.approx(65536, rel=0.02)
    assert "memcost costs" in document["summary"]["totals"]["cost_source"] or "costs" in document["summary"]["totals"]["cost_source"]


@needs_tracing
def test_compare_of_two_traces_shows_each_sites_faults_before_and_after(sites_program, results_root, tmp_path):
    runs = []
    for mode in ("fresh", "reuse"):
        root = tmp_path / mode
        shutil.copytree(results_root / "20260101T000000Z-golden", root / "20260101T000000Z-golden")
        result = run_memcost("--results-dir", str(root), "trace", "--", str(sites_program), mode)
        assert result.returncode == 0, result.stderr
        runs.append(str((root / "latest").resolve()))
    compared = run_memcost("--results-dir", str(tmp_path), "compare", *runs, "--export-json", str(tmp_path / "c.json"))
    assert compared.returncode == 0, compared.stderr
    rows = json.loads((tmp_path / "c.json").read_text())["experiments"]["trace"]["rows"]
    site_b = next(r for r in rows if r["site"].startswith("site_b_allocate") and r["figure"] == "faults")
    assert site_b["versus_first"][0]["ratio"] == pytest.approx(1.0, abs=0.02)  # the same 256 MiB either way
    assert "one trace a run" in site_b["versus_first"][0]["note"]


@needs_tracing
def test_a_vector_grown_by_push_back_is_charged_to_the_function_that_grew_it(results_root, tmp_path):
    program = tmp_path / "vector_growth"
    subprocess.run(["c++", "-O2", "-g", "-o", str(program), str(DATA / "vector_growth.cpp")],
                   check=True)
    root = tmp_path / "results"
    shutil.copytree(results_root / "20260101T000000Z-golden", root / "20260101T000000Z-golden")
    result = run_memcost("--results-dir", str(root), "trace", "--", str(program))
    assert result.returncode == 0, result.stderr
    document = load_document(root / "latest" / "trace.json")
    top = document["summary"]["rows"][0]
    assert top["site"].startswith("grow_samples") and top["faults"] >= 65536
    # push_back is inlined into grow_samples: its frame is there, marked, and the site is the line that called it.
    frames = stacks_of(document["samples"])[top["stack"]]
    assert any(f["kind"] == "inlined" and "push_back" in f["function"] for f in frames)
    assert top["site"].endswith(f"(vector_growth.cpp:{_line_of('vector_growth.cpp', 'samples.push_back')})")
    growth = [item for item in top["advice"] if item["kind"] == "growth"]
    assert growth and "reserve 256" in growth[0]["text"] and growth[0]["saving_ms"] > 0
    reserved = run_memcost("--results-dir", str(root), "trace", "--", str(program), "reserve")
    assert reserved.returncode == 0, reserved.stderr
    rows = load_document(root / "latest" / "trace.json")["summary"]["rows"]
    assert not [item for row in rows for item in row["advice"] if item["kind"] == "growth"]
    again = run_memcost("--results-dir", str(root), "trace", "--skip-frames", "^grow_samples", "--", str(program))
    assert again.returncode == 0, again.stderr
    assert load_document(root / "latest" / "trace.json")["summary"]["rows"][0]["site"].startswith("main")


def test_mappings_made_side_by_side_in_one_region_keep_their_own_sites(c_program, results_root):
    """Counted in the kernel, a CPU counts a run of faults in one 2 MiB region before moving it out;
    a mapping made in that region meanwhile must still get exactly its own pages (200 rounds of two
    64-page mappings, none unmapped)."""
    result = run_memcost("--results-dir", str(results_root), "trace", "--", str(c_program("adjacent_mappings")))
    assert result.returncode == 0, result.stderr[-2000:]
    rows = load_document(results_root / "latest" / "trace.json")["summary"]["rows"]
    # The helpers end in a tail call to mmap at -O2: the sites are main's two lines that call them.
    lines = {call: _line_of("adjacent_mappings.c", f"= {call}(") for call in ("make_first", "make_second")}
    faults = {call: sum(row["faults"] for row in rows if row["site"] == f"main (adjacent_mappings.c:{line})")
              for call, line in lines.items()}
    assert faults == {"make_first": 200 * 64, "make_second": 200 * 64}, [(row["site"], row["faults"]) for row in rows]


@needs_tracing
def test_a_calibration_is_kept_as_this_hosts_costs_result_and_the_next_trace_reuses_it(tmp_path):
    """Without a `costs` result the first trace calibrates (2.5 s on a 2-vCPU VM); that run is kept,
    so the traces after it do not pay for it again."""
    root = tmp_path / "results"
    first = run_memcost("--results-dir", str(root), "trace", "--", "true")
    assert first.returncode == 0, first.stderr
    assert "calibration run just now, kept as this host's costs result" in first.stdout
    [kept] = [path for path in root.glob("*/costs.json") if path.parent.name != "latest"]
    assert load_document(kept)["params"]["calibration_for"] == "trace"
    second = run_memcost("--results-dir", str(root), "trace", "--", "true")
    assert second.returncode == 0 and "calibration run just now" not in second.stdout
    assert "calibrating fault cost" not in second.stdout + second.stderr
    assert len([path for path in root.glob("*/costs.json") if path.parent.name != "latest"]) == 1
