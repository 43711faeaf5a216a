"""The experiment registry: each experiment is declared once, in its own module, with its probe
file and docs page beside it; every output format renders the same declared tables."""

import argparse
import json

import pytest

from conftest import ROOT, run_memcost, run_probe
from memcost.experiments import REGISTRY

GOLDEN = ROOT / "tests" / "data" / "run_a"


@pytest.mark.parametrize("name", list(REGISTRY))
def test_an_experiment_is_its_module_its_probe_file_and_its_docs_page(name):
    experiment = REGISTRY[name]
    assert (ROOT / "python" / "memcost" / "experiments" / f"{name}.py").exists()
    experiments = ROOT / "src" / "probe" / "experiments"  # a file, or a folder of one file per concern
    assert (experiments / f"{name}.cpp").exists() or (experiments / name / f"{name}.cpp").exists()
    assert (ROOT / "docs" / f"{name}.md").exists()
    assert experiment.title and experiment.summary
    help_text = run_memcost(name, "--help").stdout
    for option in experiment.options:
        assert option.flag in help_text, f"{name}: {option.flag} is declared but not a flag of `memcost {name}`"


@pytest.mark.parametrize("name", [n for n, e in REGISTRY.items() if e.options])
def test_every_option_the_probe_receives_is_a_flag_the_probe_has(name):
    experiment = REGISTRY[name]
    probe_help = run_probe(name, "--help").stdout
    for option in experiment.options:
        if option.to_probe is not None:
            assert option.flag in probe_help, f"memcost-probe {name} has no {option.flag}"
    # One definition gives the flags, the probe's arguments and the params: they agree.
    given = argparse.Namespace(**{option.name: None for option in experiment.options})
    values = experiment.values(given, quick=True)
    assert set(values) == {option.name for option in experiment.options}
    arguments = experiment.probe_arguments(values)
    for option in experiment.options:
        if option.to_probe is None:
            assert option.flag not in arguments
        elif values[option.name] not in (None, False):
            assert option.flag in arguments


@pytest.mark.parametrize("name", ["info", "costs", "scaling", "bigarray"])
def test_declared_tables_have_rows_as_wide_as_their_headings(name):
    document = json.loads((GOLDEN / f"{name}.json").read_text())
    experiment = REGISTRY[name]
    tables = experiment.tables(document["summary"])
    assert tables, name
    assert sum(len(rows) for _, _, rows in tables) > 0, name  # a golden result has rows to check
    for caption, headings, rows in tables:
        assert isinstance(caption, str) and caption
        assert all(len(row) == len(headings) for row in rows), caption
        assert all(isinstance(cell, str) for row in rows for cell in row), caption
    assert all(isinstance(line, str) for line in experiment.notes(document["summary"]))
    assert experiment.interpret(document["summary"]) or experiment.notes(document["summary"])


def test_run_report_and_compare_take_their_experiments_from_the_registry():
    from memcost.analysis import compare
    from memcost.cli import run
    from memcost.report import EXPERIMENT_ORDER
    suite = [entry.name for entry in run.SUITE]
    assert suite == [name for name, e in REGISTRY.items() if e.in_suite]
    assert suite[0] == "info"  # the machine first, like every other experiment, from its declaration
    assert EXPERIMENT_ORDER == list(REGISTRY)
    source = (ROOT / "python" / "memcost" / "analysis" / "compare.py").read_text()
    for name in REGISTRY:  # compare names no experiment, in either quote style: it asks each one's declaration
        assert f'"{name}"' not in source and f"'{name}'" not in source
