"""The trace analysis on hand-made records: attribution through munmap, mremap, brk and madvise,
page kinds, advice thresholds, exports. No probe, no kernel: every number here is known."""

import gzip

import pytest

from memcost.analysis import trace as analysis

MIB = 1 << 20
PAGE = 4096
FRAME = {"function": "", "file": "", "line": 0, "module": "", "module_offset": 0}


def stack(stack_id, *names):
    frames = [{**FRAME, "address": 0x1000 + i, "function": name, "file": "/src/app.c", "line": 10 + i,
               "module": "/usr/bin/app"} for i, name in enumerate(names)]
    return {"case": {"record": "stack"}, "metrics": {"stack": stack_id, "frames": frames}}


def call(kind, time_ns, args, result, stack_id=1, duration_ns=1000):
    return {"case": {"record": "call", "call": kind},
            "metrics": {"pid": 7, "tid": 7, "enter_ns": time_ns - duration_ns, "exit_ns": time_ns,
                        "args": list(args) + [0] * (6 - len(args)), "result": result, "stack": stack_id}}


def faults(times, addresses, stack_id=2):
    n = len(times)
    return {"case": {"record": "faults"},
            "metrics": {"pid": [7] * n, "tid": [7] * n, "time_ns": list(times), "address": list(addresses),
                        "stack": [stack_id] * n, "user_mode": [True] * n}}


def run(wall_ms=1000.0):
    return {"case": {"record": "run"}, "metrics": {"exit_code": 0, "wall_ns": int(wall_ms * 1e6), "user_ns": int(4e8),
                                                   "system_ns": int(4e8), "sample_period": 1, "rusage_minor_faults": 0}}


COST = analysis.CostModel(base_us_per_mb=400.0, thp_us_per_mb=40.0, source="test")
BASE = 0x7F0000000000


def pages(start, count, time_ns):
    return [time_ns + i for i in range(count)], [start + i * PAGE for i in range(count)]


def test_faults_go_to_the_mapping_live_at_their_moment():
    # The same address range is mapped twice by two sites; faults follow the mapping of their time.
    t1, a1 = pages(BASE, 100, 2_000)
    t2, a2 = pages(BASE, 50, 20_000)
    samples = [stack(1, "first_site"), stack(3, "second_site"), stack(2, "writer"),
               call("mmap", 1_000, [0, MIB, 3, 0x22], BASE, 1), faults(t1, a1),
               call("munmap", 10_000, [BASE, MIB], 0), call("mmap", 15_000, [0, MIB, 3, 0x22], BASE, 3),
               faults(t2, a2), faults([30_000], [BASE + 8 * MIB]), run()]
    summary = analysis.summarize(samples, COST, "madvise")
    sites = {row["site"].split(" ")[0]: row for row in summary["rows"]}
    assert sites["first_site"]["faults"] == 100 and sites["first_site"]["freed"] == 1
    assert sites["second_site"]["faults"] == 50 and sites["second_site"]["freed"] == 0
    assert summary["totals"]["faults"] == 151 and summary["totals"]["faults_attributed"] == 150
    assert sites["first_site"]["fault_ms"] == pytest.approx(100 * 400 * PAGE / MIB / 1e3)


def test_a_partial_munmap_splits_the_mapping_and_mremap_moves_it():
    moved = BASE + 64 * MIB
    t1, a1 = pages(BASE + MIB, 10, 5_000)       # in the part that is unmapped later
    t2, a2 = pages(moved, 20, 50_000)           # after the remaining 1 MiB moved
    samples = [stack(1, "maker"), stack(2, "writer"),
               call("mmap", 1_000, [0, 2 * MIB, 3, 0x22], BASE), faults(t1, a1),
               call("munmap", 10_000, [BASE + MIB, MIB], 0, duration_ns=5_000),
               call("mremap", 20_000, [BASE, MIB, 2 * MIB, 1], moved, duration_ns=7_000), faults(t2, a2),
               faults([60_000], [BASE]), run()]  # the old place is no longer mapped
    mappings, owner = analysis.attribute(analysis.read(samples))
    assert len(mappings) == 1
    assert mappings[0].faults == 30 and mappings[0].freed_bytes == MIB and mappings[0].length == 3 * MIB
    assert mappings[0].free_ns == 5_000 + 7_000
    assert owner.tolist().count(-1) == 1


def test_brk_growth_is_a_mapping_and_madvise_dontneed_frees_pages():
    heap = 0x5500_0000_0000
    t, a = pages(heap, 64, 5_000)
    samples = [stack(1, "grow_heap"), stack(2, "writer"),
               call("brk", 1_000, [0], heap), call("brk", 2_000, [heap + 4 * MIB], heap + 4 * MIB), faults(t, a),
               call("madvise", 9_000, [heap, MIB, 4], 0, duration_ns=3_000), run()]
    mappings, owner = analysis.attribute(analysis.read(samples))
    assert [(m.call, m.length, m.faults, m.freed_bytes, m.free_ns) for m in mappings] == [
        ("brk", 4 * MIB, 64, MIB, 3_000)]
    assert (owner >= 0).all()


def test_one_fault_per_2mb_region_counts_as_thp_only_where_huge_pages_were_possible():
    t, a = [5_000 + i for i in range(8)], [BASE + i * 2 * MIB for i in range(8)]
    records = [stack(1, "maker"), stack(2, "writer"), call("mmap", 1_000, [0, 16 * MIB, 3, 0x22], BASE), faults(t, a), run()]
    advised = records[:3] + [call("madvise", 2_000, [BASE, 16 * MIB, 14], 0)] + records[3:]
    assert analysis.attribute(analysis.read(records), "madvise")[0][0].faults_thp == 0
    assert analysis.attribute(analysis.read(advised), "madvise")[0][0].faults_thp == 8
    assert analysis.attribute(analysis.read(records), "always")[0][0].faults_thp == 8
    assert analysis.attribute(analysis.read(advised), "never")[0][0].faults_thp == 0


def _churn(frames, size=8 * MIB, touched_pages=2048, wall_ms=1000.0):
    records, time = [stack(1, "per_frame", "main"), stack(2, "writer")], 1_000
    for _ in range(frames):
        address = BASE
        records.append(call("mmap", time, [0, size, 3, 0x22], address))
        t, a = pages(address, touched_pages, time + 10)
        records.append(faults(t, a))
        time += 10 + touched_pages + 100
        records.append(call("munmap", time, [address, size], 0, duration_ns=500_000))
        time += 100
    return records + [run(wall_ms)]


def test_reuse_advice_needs_churn_and_a_saving_worth_having():
    churning = analysis.summarize(_churn(50), COST, "madvise")["rows"][0]
    assert churning["churn"] == 50
    reuse = [item for item in churning["advice"] if item["kind"] == "reuse"]
    # 49 of 50 frames' faults (2,048 × 1.5625 µs), frees (0.5 ms) and maps (1 µs) are saved.
    assert reuse and reuse[0]["saving_ms"] == pytest.approx(49 / 50 * 50 * (2048 * 400 * PAGE / MIB / 1e3 + 0.5 + 0.001))
    twice = analysis.summarize(_churn(2), COST, "madvise")["rows"][0]
    assert not [item for item in twice["advice"] if item["kind"] == "reuse"]
    tiny = analysis.summarize(_churn(10, size=64 * 1024, touched_pages=16, wall_ms=10_000), COST, "madvise")["rows"]
    assert all(not row["advice"] for row in tiny)


def test_reuse_advice_uses_the_measured_reuse_cost_for_base_pages():
    measured = analysis.CostModel(400.0, 40.0, "test", reuse_saving_us_per_mb=300.0)
    row = analysis.summarize(_churn(50), measured, "madvise")["rows"][0]
    reuse = next(item for item in row["advice"] if item["kind"] == "reuse")
    assert reuse["saving_ms"] == pytest.approx(49 / 50 * 50 * (8 * 300.0 / 1e3 + 0.001))  # measured reuse cost, and maps


def test_no_huge_page_advice_where_thp_is_off():
    assert not [a for a in analysis.summarize(_churn(5), COST, "never")["rows"][0]["advice"] if a["kind"] == "huge_pages"]
    assert [a for a in analysis.summarize(_churn(5), COST, "madvise")["rows"][0]["advice"] if a["kind"] == "huge_pages"]


def test_exports_total_what_the_summary_counts(tmp_path):
    from memcost.export import folded, pprof
    samples = _churn(5)
    summary = analysis.summarize(samples, COST, "madvise")
    document = {"samples": samples, "summary": summary}
    folded.write(document, tmp_path / "f.txt")
    lines = (tmp_path / "f.txt").read_text().split("\n")
    assert sum(int(line.rsplit(" ", 1)[1]) for line in lines if line) == 5 * 2048
    assert lines[0] == "main_(app.c:11);per_frame_(app.c:10);[touched_by]_writer_(app.c:10) 10240"  # root first
    pprof.write(document, tmp_path / "p.pb.gz")
    profile = pprof._profile_class()()
    profile.ParseFromString(gzip.decompress((tmp_path / "p.pb.gz").read_bytes()))
    assert [profile.string_table[t.type] for t in profile.sample_type] == ["faults", "fault_time", "freed"]
    assert sum(sample.value[0] for sample in profile.sample) == 5 * 2048
    assert sum(sample.value[2] for sample in profile.sample) == 5 * 8 * MIB
