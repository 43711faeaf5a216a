"""The columns that key a fault count are spelled once per language: the probe's
trace::kFaultKeyColumns (src/trace/attribution/attribution.hpp) and the front end's
records.FAULT_KEY. They must name the same columns in the same order."""

import re

from conftest import ROOT
from memcost.analysis.trace.records import FAULT_KEY


def probe_fault_key_columns() -> tuple[str, ...]:
    header = (ROOT / "src" / "trace" / "attribution" / "attribution.hpp").read_text()
    declared = re.search(r"kFaultKeyColumns\s*=\s*\{([^}]*)\}", header)
    assert declared, "attribution.hpp no longer declares kFaultKeyColumns"
    return tuple(re.findall(r'"([^"]+)"', declared.group(1)))


def test_the_probe_and_the_front_end_name_the_same_fault_key_columns_in_the_same_order():
    assert probe_fault_key_columns() == FAULT_KEY


def test_huge_is_the_last_column_so_records_without_it_drop_only_it():
    assert FAULT_KEY[-1] == "huge"
