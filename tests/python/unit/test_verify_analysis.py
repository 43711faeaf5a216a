"""trace --verify's decisions without running anything: call-path keys, what cannot be applied,
the refusal rules, the verdicts, and the interleaving and bootstrap helpers (stats.py)."""

from memcost.analysis import verify
from memcost.stats import bootstrap_median_interval, interleaved_order


def _frame(module, offset, kind="native"):
    return {"kind": kind, "module": module, "module_offset": offset, "address": 0, "function": "", "file": "", "line": 0}


def test_a_call_path_key_is_the_return_addresses_outside_the_runtime():
    frames = [_frame("/usr/lib/x86_64-linux-gnu/libc.so.6", 0x100),        # the syscall wrapper
              _frame("/tmp/prog", 0x1233, kind="inlined"),                 # inlined: its caller's address
              _frame("/tmp/prog", 0x1233),
              _frame("/usr/lib/x86_64-linux-gnu/libstdc++.so.6", 0x50),
              _frame("/tmp/prog", 0x2000),
              _frame("", 0, kind="python"),
              _frame("/usr/lib/libfoo.so", 0x10), _frame("/usr/lib/libfoo.so", 0x20), _frame("/tmp/prog", 0x99)]
    # A frame's address is the call, one byte before the return address the preload library sees.
    assert verify.call_path_key(frames) == ["prog:1234", "prog:2001", "libfoo.so:11", "libfoo.so:21"]


def test_code_in_no_module_ends_the_key():
    assert verify.call_path_key([_frame("/tmp/prog", 0x10), _frame("", 0x7f00, kind="native")]) == ["prog:11"]
    assert verify.call_path_key([_frame("", 0x7f00)]) is None


def test_growth_and_the_jvm_are_not_applied_from_outside_and_say_why():
    assert "reserve" in verify._why_not({"runtime": None}, {"kind": "growth"})
    assert "JVM" in verify._why_not({"runtime": "jvm"}, {"kind": "huge_pages"})
    assert verify._why_not({"runtime": None}, {"kind": "reuse"}) is None


def _run(wall, code=0, output="a", faults=100):
    return {"wall_ms": wall, "cpu_ms": wall, "faults": faults, "exit_code": code, "stdout_sha256": output}


def test_a_command_whose_exit_code_varies_is_refused():
    assert "exit code differs" in verify.refusal([_run(100, 0), _run(100, 3), _run(100, 0)])
    assert "exit code differs" in verify.refusal([_run(100), _run(100)], first=_run(100, 1))


def test_a_command_whose_own_time_spreads_over_a_fifth_is_refused():
    assert "varies too much" in verify.refusal([_run(100), _run(150), _run(100), _run(160), _run(90)])
    assert verify.refusal([_run(100), _run(103), _run(99), _run(101), _run(100)]) is None


def _variant():
    return verify.Variant(1, "site", "reuse", "reuse", 50.0, "base", 1 << 20, 2, [["prog:10"]])


def test_a_saving_whose_interval_excludes_zero_is_shown_and_its_ratio_kept():
    baseline = {r: _run(200 + r) for r in range(7)}
    advised = {r: _run(150 + r, faults=10) for r in range(7)}
    result = verify.evaluate(_variant(), baseline, advised, applied=True, seed=1)
    assert result["verified"] and result["verdict"] == "saving shown"
    assert result["measured_saving_ms"] == 50 and result["measured_saving_interval_ms"][0] > 0
    assert result["measured_faults_saved"] == 90 and result["estimate_ratio"] == 1.0


def test_a_saving_within_the_noise_is_not_shown_by_measurement():
    baseline = {r: _run(200 + (7 * r) % 11) for r in range(7)}
    advised = {r: _run(200 + (5 * r) % 11) for r in range(7)}
    result = verify.evaluate(_variant(), baseline, advised, applied=True, seed=1)
    assert not result["verified"] and result["verdict"] == "not shown by measurement"
    assert result["estimate_ratio"] is None


def test_advice_that_changes_the_output_is_unsafe_however_fast():
    baseline = {r: _run(200) for r in range(5)}
    advised = {r: _run(100, output="b" if r == 2 else "a") for r in range(5)}
    result = verify.evaluate(_variant(), baseline, advised, applied=True, seed=1)
    assert result["unsafe"] and not result["verified"] and result["verdict"].startswith("unsafe")


def test_advice_never_applied_is_not_credited():
    baseline = {r: _run(200) for r in range(5)}
    result = verify.evaluate(_variant(), baseline, {r: _run(150) for r in range(5)}, applied=False, seed=1)
    assert not result["verified"] and result["verdict"].startswith("not applied")


def test_estimates_are_corrected_by_earlier_verifications_of_the_site_else_of_their_kind():
    earlier = [{"summary": {"totals": {"command": ["/tmp/prog", "x"]}, "verification": {"variants": [
        {"site": "frames", "kind": "reuse", "page_kind": "base", "action": "reuse", "verified": True, "estimate_ratio": 2.0},
        {"site": "frames", "kind": "reuse", "page_kind": "base", "action": "reuse", "verified": False, "estimate_ratio": None},
        {"site": "table", "kind": "huge_pages", "page_kind": "base", "action": "huge", "verified": True,
         "estimate_ratio": 0.5}]}}}]
    ratios = verify.learned_ratios(earlier)
    assert ratios[("prog", "frames", "reuse")] == (2.0, 1) and ratios[("huge_pages", "base")] == (0.5, 1)
    summary = {"totals": {"command": ["./prog"]},
               "rows": [{"site": "frames", "kind": "base", "advice": [{"kind": "reuse", "saving_ms": 100.0, "text": "a"},
                                                                     {"kind": "parallel", "saving_ms": 10.0, "text": "b"}]},
                        {"site": "other", "kind": "base", "advice": [{"kind": "huge_pages", "saving_ms": 10.0, "text": "c"}]}]}
    verify.correct_estimates(summary, ratios)
    (reuse, parallel), (huge,) = summary["rows"][0]["advice"], summary["rows"][1]["advice"]
    assert reuse["corrected_saving_ms"] == 50.0 and "this site's verification" in reuse["text"]
    assert huge["corrected_saving_ms"] == 20.0 and "huge_pages advice on base pages" in huge["text"]
    assert "corrected_saving_ms" not in parallel


def test_the_interleaved_order_is_a_permutation_each_round_and_follows_its_seed():
    order = interleaved_order(["a", "b", "c", "d"], 6, seed=42)
    assert len(order) == 6 and all(sorted(round_order) == ["a", "b", "c", "d"] for round_order in order)
    assert order == interleaved_order(["a", "b", "c", "d"], 6, seed=42)
    assert order != interleaved_order(["a", "b", "c", "d"], 6, seed=43)
    assert len({tuple(round_order) for round_order in order}) > 1  # not one order repeated


def test_the_bootstrap_interval_holds_the_median_and_tightens_with_agreement():
    low, high = bootstrap_median_interval([10, 11, 12, 13, 14, 15, 16], seed=1)
    assert low <= 13 <= high
    tight = bootstrap_median_interval([13] * 7, seed=1)
    assert tight == (13.0, 13.0)


def test_compare_shows_a_measured_saving_as_a_row_of_its_site():
    from memcost.experiments.trace import compared_rows
    row = {"site": "frames (a.c:3)", "faults": 10, "fault_ms": 1.0, "free_ms": 0.5}
    document = {"summary": {"rows": [row], "verification": {"variants": [
        {"site": "frames (a.c:3)", "kind": "reuse", "action": "reuse", "measured_saving_ms": 42.0},
        {"site": "frames (a.c:3)", "kind": "huge_pages", "action": "tunable", "measured_saving_ms": 9.0}]}}}
    rows = compared_rows(document)
    assert rows[("frames (a.c:3)", "reuse saving ms (measured)")] == [42.0]
    assert rows[("frames (a.c:3)", "faults")] == [10.0] and len(rows) == 4


def test_a_refused_command_keeps_what_was_applied_but_no_saving():
    baseline = {r: _run(200 + r) for r in range(5)}
    result = verify.not_compared(verify.evaluate(_variant(), baseline, {r: _run(150, faults=10) for r in range(5)},
                                                 applied=True, seed=1))
    assert result["measured_saving_ms"] is None and result["estimate_ratio"] is None and not result["verified"]
    assert result["measured_faults_saved"] == 90 and result["verdict"].startswith("not compared")


def _huge_variant(undone_by=None):
    return verify.Variant(1, "site", "huge_pages", "huge", 50.0, "base", 4 << 20, 2, [["prog:10"]],
                          expected_faults_saved=49_152, undone_by=undone_by)


def test_huge_pages_that_saved_no_faults_did_not_take_effect_and_the_verdict_says_why():
    """The program's own madvise(MADV_NOHUGEPAGE) right after its mmap undid the advice: 1 fault saved
    of the 49,152 promised is not 'not shown', it is an advice that did not take effect."""
    baseline = {r: _run(200 + r, faults=49_200) for r in range(7)}
    advised = {r: _run(190 + r, faults=49_199) for r in range(7)}
    result = verify.evaluate(_huge_variant("map_base (sites.c:12)"), baseline, advised, applied=True, seed=1)
    assert not result["verified"]
    assert result["verdict"].startswith("did not take effect: it saved 1 faults of the ≈ 49,152")
    assert "madvise(MADV_NOHUGEPAGE) at map_base (sites.c:12)" in result["verdict"]
    # The interposer skipped the program's call, and still no faults went: the kernel's to say why.
    overridden = verify.evaluate(_huge_variant("map_base (sites.c:12)"), baseline, advised, True, 1, overridden=True)
    assert "the kernel gave no huge pages" in overridden["verdict"]
    # Taking effect: 96 faults left of 49,200, and the time shown.
    took = verify.evaluate(_huge_variant(), baseline, {r: _run(150 + r, faults=96) for r in range(7)}, True, 1)
    assert took["verdict"] == "saving shown" and took["measured_faults_saved"] == 49_104


def _pinning_item(site, call_ms, verifiable, saving_ms=None):
    return {"site": site, "call": site.split(" (")[0], "faults": 8192, "call_ms": call_ms, "saving_ms": saving_ms,
            "verifiable": verifiable, "verify": "--verify applies it" if verifiable else
            "not applied by --verify: the CUDA runtime is linked into the program"}


def test_pinning_advice_is_one_variant_for_the_stand_in_and_a_linked_in_runtime_says_why_not():
    from memcost.analysis.trace.records import Trace
    summary = {"rows": [], "pinning": [_pinning_item("cudaHostAlloc (ioctl) ← load_batch (app.c:4)", 120.0, True),
                                       _pinning_item("cudaHostRegister (ioctl) ← stage (app.c:9)", 40.0, False, 30.0),
                                       _pinning_item("cudaMallocHost (ioctl) ← tiny (app.c:12)", 0.5, True)]}
    variants, unverifiable = verify.plan(Trace({}, [], [], {}), summary, {}, threads=4)
    # The call below 1 ms is not worth a rerun; the other two are one variant and one reason.
    assert len(variants) == 1 and len(unverifiable) == 1
    pinned = variants[0]
    assert (pinned.kind, pinned.action, pinned.keys, pinned.estimated_saving_ms) == (verify.PINNED, "pinned", [], None)
    assert pinned.environment == {"MEMCOST_PINNING": f"{pinned.id} {verify.PINNING_MIN_BYTES} 4"}
    assert pinned.spec_lines() == []  # found by the runtime's calls, not by a call path
    assert unverifiable[0]["reason"].startswith("the CUDA runtime is linked into the program")
    assert unverifiable[0]["estimated_saving_ms"] == 30.0
    # Measured without an estimate: the verdict stands, with no estimate to correct.
    baseline = {r: _run(200 + r) for r in range(5)}
    advised = {r: _run(120 + r, faults=10) for r in range(5)}
    result = verify.evaluate(pinned, baseline, advised, applied=True, seed=3)
    assert result["verdict"] == "saving shown" and result["estimate_ratio"] is None
    assert "4 threads" in result["applied"]


def test_verify_only_keeps_the_kinds_asked_for_and_says_why_of_the_others():
    """--verify-only pinned_memory: the pinning advice alone is rerun (a PyTorch script's nine
    advices at 3 rounds each took 30 runs on an H100 host, too few rounds for any one of them)."""
    from memcost.analysis.trace.records import Trace
    summary = {"rows": [], "pinning": [_pinning_item("cudaHostAlloc (ioctl) ← load_batch (app.c:4)", 120.0, True),
                                       _pinning_item("cudaHostAlloc (ioctl) ← stage (app.c:9)", 60.0, True)]}
    every, _ = verify.plan(Trace({}, [], [], {}), summary, {}, threads=4)
    assert [v.kind for v in every] == [verify.PINNED, verify.PINNED]
    kept, unverifiable = verify.plan(Trace({}, [], [], {}), summary, {"verify_only": ["huge_pages"]}, threads=4)
    assert kept == [] and [u["reason"] for u in unverifiable] == ["not asked for (--verify-only huge_pages)"] * 2
    kept, unverifiable = verify.plan(Trace({}, [], [], {}), summary, {"verify_only": ["pinned_memory"]}, threads=4)
    assert [v.id for v in kept] == [1, 2] and unverifiable == []
