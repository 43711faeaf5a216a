"""The probe contract of docs/probe.md, enforced both ways: the probe emits exactly the keys listed
there (small sizes), and the Python analysis reads no key that is not listed."""

import json
import os
import re
from collections import defaultdict

import pytest

from conftest import ROOT, run_probe, summarize_trace, unavailable

DOC = ROOT / "docs" / "probe.md"
ROW = re.compile(r"^\| (\w+) \| (case|metrics) \| `(\w+)` \| [^|]+ \| (.*) \|$")

# Each experiment at the smallest sizes that still run every part.
RUNS = {
    "costs": ["costs", "--sizes", "8M", "--pages", "base,thp", "--routes", "os,malloc", "--reps", "1", "--warmup", "1",
              "--frames", "3", "--threads-size", "16M", "--idle-size", "16M", "--idle-seconds", "0.1",
              "--idle-reps", "1"],
    "scaling": ["scaling", "--counts", "100,200", "--block-sizes", "64K", "--reps", "1"],
    # 128 MiB with a 64 MiB part: serial rows on a part, and the part's check.
    "bigarray": ["bigarray", "--size", "128M", "--reps", "1", "--limit-reps", "1", "--repeat", "2", "--side-by-side", "2",
                 "--serial-part", "64M"],
    "monitor": ["monitor", "--duration", "0.1", "--interval-ms", "50", "--pid", "1"],
    # A command that maps and touches memory: calls, faults and stacks as well as the run. dd's
    # 64 MiB buffer takes 16,384 faults, so the CPU sampled every 100 us lands in the fault handler
    # (fault_time) every time, not by luck.
    "trace": ["trace", "--window-seconds", "1", "--cpu-sample-us", "100", "--", "/bin/sh", "-c",
              "dd if=/dev/zero of=/dev/null bs=64M count=2 2>/dev/null; sleep 1.3"],
}


def contract() -> dict:
    """experiment -> part -> "case"/"metrics" -> key -> conditional (its meaning starts with *when*)."""
    keys: dict = defaultdict(lambda: defaultdict(lambda: {"case": {}, "metrics": {}}))
    experiment = None
    for line in DOC.read_text().splitlines():
        heading = re.match(r"^### `(\w+)`", line)
        if heading:
            experiment = heading.group(1)
            continue
        row = ROW.match(line)
        if row and experiment:
            part, where, key, meaning = row.groups()
            keys[experiment][part][where][key] = meaning.startswith("*")
    return keys


def part_of(experiment: str, case: dict) -> str:
    if experiment == "trace":
        return case["record"]
    return case.get("part", "sweep" if experiment == "scaling" else "")


def samples_of(experiment: str) -> list[dict]:
    result = run_probe(*RUNS[experiment])
    if experiment == "trace" and result.returncode == 4:
        unavailable("tracing needs perf events: " + result.stdout[-300:])
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    return [{"case": r["case"], "metrics": r["metrics"]} for r in records if r["type"] == "sample"]


@pytest.fixture(scope="module")
def emitted() -> dict:
    return {}


@pytest.mark.parametrize("experiment", list(RUNS))
def test_the_probe_emits_exactly_the_documented_keys(experiment, emitted):
    documented = contract()[experiment]
    assert documented, f"docs/probe.md lists no keys for {experiment}"
    samples = samples_of(experiment)
    emitted[experiment] = samples
    seen = defaultdict(lambda: {"case": set(), "metrics": set()})
    for sample in samples:
        part = part_of(experiment, sample["case"])
        assert part in documented, f"{experiment}: part {part!r} is not in docs/probe.md"
        for where in ("case", "metrics"):
            keys = set(sample[where])
            listed = documented[part][where]
            assert keys <= set(listed), f"{experiment}/{part} {where}: not documented: {sorted(keys - set(listed))}"
            required = {key for key, conditional in listed.items() if not conditional}
            assert required <= keys, f"{experiment}/{part} {where}: documented but missing: {sorted(required - keys)}"
            seen[part][where] |= keys
    # Every documented part showed up in the run, so the run covered the contract.
    assert set(seen) == set(documented), f"{experiment}: parts never emitted: {sorted(set(documented) - set(seen))}"


class Recording(dict):
    """A dict that notes every key read from it."""

    def __init__(self, data, reads: set):
        super().__init__(data)
        self.reads = reads

    def __getitem__(self, key):
        self.reads.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.reads.add(key)
        return super().get(key, default)

    def __contains__(self, key):
        self.reads.add(key)
        return super().__contains__(key)


def recorded(experiment: str, samples: list[dict]) -> tuple[list[dict], dict]:
    reads: dict = defaultdict(lambda: {"case": set(), "metrics": set()})
    wrapped = []
    for sample in samples:
        part = part_of(experiment, sample["case"])
        wrapped.append({"case": Recording(sample["case"], reads[part]["case"]),
                        "metrics": Recording(sample["metrics"], reads[part]["metrics"])})
    return wrapped, reads


@pytest.mark.parametrize("experiment", ["costs", "scaling", "bigarray"])
def test_the_analysis_reads_only_documented_keys(experiment, emitted):
    from memcost.analysis import bigarray, compare, costs, scaling
    samples = emitted.get(experiment) or samples_of(experiment)
    wrapped, reads = recorded(experiment, samples)
    summarize = {"costs": costs.summarize, "scaling": scaling.summarize, "bigarray": bigarray.summarize}[experiment]
    summarize(wrapped)
    compare.samples_by_key({"experiment": experiment, "samples": wrapped})
    documented = contract()[experiment]
    for part, where_reads in reads.items():
        for where, keys in where_reads.items():
            unlisted = keys - set(documented[part][where])
            assert not unlisted, f"{experiment}/{part} {where}: the analysis reads undocumented {sorted(unlisted)}"
    assert any(reads[part]["metrics"] for part in reads), "the recording saw no reads at all"


def test_the_monitor_reads_only_documented_keys(emitted):
    from memcost.monitor.stream import Reading
    samples = emitted.get("monitor") or samples_of("monitor")
    wrapped, reads = recorded("monitor", samples)
    for sample in wrapped:
        Reading.from_probe(sample["metrics"], None)
    unlisted = reads["monitor"]["metrics"] - set(contract()["monitor"]["monitor"]["metrics"])
    assert not unlisted and reads["monitor"]["metrics"], unlisted


def test_the_trace_analysis_reads_only_documented_keys(emitted):
    from memcost.analysis.cost_model import CostModel
    samples = emitted.get("trace") or samples_of("trace")
    wrapped, reads = recorded("trace", samples)
    summarize_trace(wrapped, CostModel(base_us_per_mb=500.0, thp_us_per_mb=50.0, source="test"))
    documented = contract()["trace"]
    for part, where_reads in reads.items():
        for where, keys in where_reads.items():
            unlisted = keys - set(documented[part][where])
            assert not unlisted, f"trace/{part} {where}: the analysis reads undocumented {sorted(unlisted)}"
    assert reads["run"]["metrics"], "the recording saw no reads of the run record"
