"""The costs summary over synthetic samples: no probe, exact expectations."""

import pytest

from memcost.analysis import costs

MB = 1 << 20


def _row_sample(page="base", route="os", size=8 * MB, rep=0, warmup=False, **metrics):
    base = {"alloc_ns": 20_000, "free_ns": 10_000, "first_touch_ns": 8 * 700_000, "second_touch_ns": 8 * 60_000,
            "free_after_touch_ns": 8 * 70_000, "first_touch_minor_faults": 2048, "elsewhere_ns": 8 * 5_000,
            "elsewhere_raw_ns": 50_000, "elsewhere_baseline_ns": 10_000, "elsewhere_clamped": False,
            "huge_fraction": 0.0}
    base.update(metrics)
    return {"case": {"part": "rows", "page": page, "route": route, "size_bytes": size, "rep": rep, "warmup": warmup},
            "metrics": base}


def test_row_figures_follow_their_definitions():
    rows = costs.summarize_rows([_row_sample(rep=i) for i in range(3)])
    assert len(rows) == 1
    row = rows[0]
    assert row["alloc_us"] == 20 and row["free_us"] == 10 and row["naive_us"] == 30
    assert row["first_touch_us_per_mb"] == pytest.approx(700)
    assert row["second_touch_us_per_mb"] == pytest.approx(60)
    assert row["fault_us_per_mb"] == pytest.approx(640)
    assert row["free_after_touch_us_per_mb"] == pytest.approx(70)
    assert row["elsewhere_us_per_mb"] == pytest.approx(5)
    # total = alloc per MB + fault + free after touch + elsewhere
    assert row["total_us_per_mb"] == pytest.approx(20 / 8 + 640 + 70 + 5)
    assert row["faults_per_mb"] == 256
    assert row["missed_percent"] == pytest.approx(100 * (1 - 30 / (row["total_us_per_mb"] * 8)))


def test_a_first_touch_without_faults_costs_nothing_to_fault_not_its_noise():
    # glibc recycles a freed 16 MiB block: no fault, and the first write came out faster than the second.
    recycled = [_row_sample(rep=i, route="malloc", first_touch_minor_faults=0, first_touch_ns=8 * 40_000,
                            second_touch_ns=8 * (60_000 + 10_000 * i), free_after_touch_ns=8 * 100) for i in range(3)]
    row = costs.summarize_rows(recycled)[0]
    assert row["fault_us_per_mb"] == 0 and row["faults_per_mb"] == 0
    assert row["total_us_per_mb"] == pytest.approx(20 / 8 + 0.1 + 5)
    # With faults counted, a first write timed faster than the second is noise as well, not a negative cost.
    noisy = costs.summarize_rows([_row_sample(rep=i, first_touch_ns=8 * 50_000) for i in range(3)])[0]
    assert noisy["fault_us_per_mb"] == 0


def test_a_naive_timer_that_sees_it_all_missed_nothing_not_a_negative_share():
    # CI's case: a recycled 16 MiB malloc block, total 2.05 us, naive 2.07 us: the free of a block
    # never touched timed a little slower than the free after the touch.
    recycled = [_row_sample(rep=i, route="malloc", size=16 * MB, alloc_ns=1_000, free_ns=1_100, first_touch_minor_faults=0,
                            first_touch_ns=16 * 40_000, second_touch_ns=16 * 60_000, free_after_touch_ns=900,
                            elsewhere_ns=0) for i in range(3)]
    row = costs.summarize_rows(recycled)[0]
    assert row["naive_us"] > row["total_us_per_mb"] * 16
    assert row["missed_percent"] == 0


def test_warmups_are_left_out_and_medians_resist_outliers():
    samples = [_row_sample(rep=-1, warmup=True, first_touch_ns=8 * 5_000_000)]
    samples += [_row_sample(rep=i, first_touch_ns=8 * t) for i, t in enumerate([700_000, 710_000, 2_000_000])]
    row = costs.summarize_rows(samples)[0]
    assert row["reps"] == 3
    assert row["first_touch_us_per_mb"] == pytest.approx(710)
    assert row["spread"]["first_touch_us_per_mb"]["q3"] > row["spread"]["first_touch_us_per_mb"]["median"]


def test_rows_are_ordered_by_page_route_and_size():
    samples = [_row_sample(page="thp", size=16 * MB), _row_sample(route="new"), _row_sample(size=16 * MB),
               _row_sample()]
    order = [(r["page"], r["route"], r["size_bytes"]) for r in costs.summarize_rows(samples)]
    assert order == [("base", "os", 8 * MB), ("base", "os", 16 * MB), ("base", "new", 8 * MB), ("thp", "os", 16 * MB)]


def test_a_huge_page_row_on_base_pages_is_warned_about():
    rows = costs.summarize_rows([_row_sample(page="thp", huge_fraction=0.1), _row_sample(page="hugetlb-2M", huge_fraction=1.0)])
    warnings = costs.row_warnings(rows)
    assert len(warnings) == 1 and warnings[0]["code"] == "not_on_huge_pages"
    assert warnings[0]["message"].startswith("thp os 8 MiB: only 10%")


def _reuse_sample(route, mode, faults, rep=0, frame_ns=1000):
    return {"case": {"part": "reuse", "route": route, "mode": mode, "frame_bytes": 8 * MB, "rep": rep},
            "metrics": {"frames": len(faults), "total_ns": frame_ns * len(faults), "frame_ns": [frame_ns] * len(faults),
                        "frame_minor_faults": faults}}


def test_the_allocator_path_is_read_from_fault_counts():
    samples = [_reuse_sample("malloc", "reallocate", [2049, 2048] + [0] * 8, frame_ns=3000),
               _reuse_sample("malloc", "reuse", [2048] + [0] * 9, frame_ns=1000)]
    result = costs.summarize_reuse(samples)["routes"]["malloc"]
    assert [(r["kind"], r["first_frame"], r["last_frame"]) for r in result["path"]] == [("fresh", 1, 2), ("recycled", 3, 10)]
    assert result["path_text"] == ("frames 1–2: fresh pages from the kernel (2,049 faults/frame); "
                                   "frames 3–10: recycled memory (0 faults/frame)")
    assert result["ratio"] == pytest.approx(3.0)


def _threads_sample(threads, first_ms, second_ms=5):
    return {"case": {"part": "threads", "threads": threads, "size_bytes": 64 * MB, "rep": 0, "warmup": False},
            "metrics": {"first_touch_ns": first_ms * 1_000_000, "second_touch_ns": second_ms * 1_000_000}}


@pytest.mark.parametrize("two_thread_ms, verdict", [(22, "scales:"), (40, "serializes"), (32, "scales partly")])
def test_threads_verdict(two_thread_ms, verdict):
    threads = costs.summarize_threads([_threads_sample(1, 44), _threads_sample(2, two_thread_ms)])
    assert threads[1]["speedup"] == pytest.approx(44 / two_thread_ms)
    assert verdict in costs.threads_verdict(threads)


def test_headline_compares_base_with_huge_pages_at_the_largest_size():
    samples = [_row_sample(size=8 * MB), _row_sample(size=64 * MB, first_touch_ns=64 * 660_000, second_touch_ns=64 * 60_000),
               _row_sample(page="thp", size=64 * MB, first_touch_ns=64 * 160_000, second_touch_ns=64 * 60_000)]
    summary = costs.summarize(samples)
    assert costs.headline(summary) == "first touch costs 600 µs/MB on base pages, 100 on thp (64 MiB buffers)"


def _idle_sample(page, hot_ms, cold_ms, rep=0):
    return {"case": {"part": "idle", "page": page, "size_bytes": 64 * MB, "rep": rep, "idle_seconds": 4.0},
            "metrics": {"hot_first_touch_ns": (hot_ms + 4) * 1_000_000, "hot_second_touch_ns": 4_000_000,
                        "cold_first_touch_ns": (cold_ms + 4) * 1_000_000, "cold_second_touch_ns": 4_000_000}}


def test_idle_memory_that_faults_in_slower_is_called_out():
    idle = costs.summarize_idle([_idle_sample("thp", 6.4, 64), _idle_sample("base", 40, 42)])
    assert [e["page"] for e in idle] == ["base", "thp"]
    assert idle[1]["hot_fault_us_per_mb"] == pytest.approx(100) and idle[1]["ratio"] == pytest.approx(10)
    assert costs.idle_verdict(idle).startswith("memory left free for 4 s costs 10.0× more to fault in again (thp")


def test_idle_memory_that_costs_the_same_is_said_so():
    idle = costs.summarize_idle([_idle_sample("base", 40, 42)])
    assert "costs no more" in costs.idle_verdict(idle)


def _split_sample(rep, tasks_ns, steal_ns, size=8 * MB, top=()):
    """A row sample with the elsewhere parts apart, as the probe writes them."""
    return _row_sample(size=size, rep=rep, elsewhere_tasks_ns=tasks_ns, elsewhere_tasks_baseline_ns=1_000,
                       elsewhere_steal_ns=steal_ns, elsewhere_steal_baseline_ns=0.0,
                       elsewhere_top_tasks=[{"name": name, "ns": ns} for name, ns in top])


def test_steal_ticks_are_summed_over_the_repetitions_not_decided_by_one():
    # One 10 ms steal tick in nine repetitions of 8 MiB: 10 ms / 72 MB, not 10 ms / 8 MB in one sample.
    samples = [_split_sample(rep, 8 * 2_000 + 1_000, 10_000_000 if rep == 4 else 0) for rep in range(9)]
    row = costs.summarize_rows(samples)[0]
    assert row["elsewhere_tasks_us_per_mb"] == pytest.approx(2.0)
    assert row["elsewhere_steal_us_per_mb"] == pytest.approx(10_000 / 72)
    assert row["elsewhere_us_per_mb"] == pytest.approx(2.0 + 10_000 / 72)
    assert row["total_us_per_mb"] == pytest.approx(20 / 8 + 640 + 70 + 2.0 + 10_000 / 72)


def test_who_took_the_time_and_a_row_carried_by_one_repetition_are_named():
    # A steal tick and a compaction burst in the same repetition; little else in the others.
    samples = [_split_sample(rep, 1_000 + (8 * 200_000 if rep == 1 else 8 * 1_000), 10_000_000 if rep == 1 else 0,
                             top=[("kcompactd0", 8 * 200_000)] if rep == 1 else [("kworker/0:1", 8 * 1_000)])
               for rep in range(5)]
    summary = costs.summarize(samples)
    row = summary["rows"][0]
    assert [e["name"] for e in row["elsewhere_by"]][:3] == ["steal (hypervisor)", "kcompactd0", "kworker/0:1"]
    assert row["elsewhere_one_repetition"]["rep"] == 1
    assert row["elsewhere_one_repetition"]["share"] > 0.9
    note = summary["elsewhere_notes"][0]
    assert "kcompactd0" in note and "one repetition (#1)" in note


def test_shootdown_summary_per_mb_and_remote_cost():
    samples = []
    for rep in range(3):
        samples.append({"case": {"part": "shootdowns", "mode": "single", "threads": 1, "size_bytes": 256 * MB,
                                 "rep": rep, "warmup": False},
                        "metrics": {"free_after_touch_ns": 256 * 80_000, "tlb_shootdowns": 0}})
        samples.append({"case": {"part": "shootdowns", "mode": "threads", "threads": 2, "size_bytes": 256 * MB,
                                 "rep": rep, "warmup": False},
                        "metrics": {"free_after_touch_ns": 256 * 90_000, "tlb_shootdowns": 8,
                                    "remote_ns_per_shootdown": 5_000}})
    entries = {e["mode"]: e for e in costs.summarize_shootdowns(samples)}
    assert entries["threads"]["shootdowns_per_mb"] == pytest.approx(8 / 256)
    assert entries["threads"]["remote_us_per_mb"] == pytest.approx(8 / 256 * 5)
    assert entries["single"]["remote_us_per_mb"] is None
    assert "sent 8 TLB-shootdown interrupts" in costs.shootdowns_verdict(list(entries.values()))


def test_the_front_end_adds_its_own_flag_to_the_probes_pool_advice():
    from memcost.experiments.costs import with_front_end_hints
    probe_says = {"code": "hugetlb_pool_too_small", "message": "hugetlb-2M pool has 0 free pages, too few for 8 MiB: "
                                                               "run `memcost hugepages reserve 8M --size 2M` as root"}
    [hinted] = with_front_end_hints([probe_says])
    assert hinted["message"].endswith("or pass `--reserve-hugepages 8M --hugepage-size 2M` to `memcost costs`")
    other = {"code": "size_over_budget", "message": "1 GiB is over the memory budget"}
    assert with_front_end_hints([other]) == [other]
