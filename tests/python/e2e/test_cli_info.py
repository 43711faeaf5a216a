"""`memcost info` and `memcost run` end to end, with the real probe and no terminal."""

import copy
import json

from conftest import run_memcost
from memcost import exit_codes
from memcost.experiments.info import notes
from memcost.results import load_document


def test_info_json_round_trips(tmp_path):
    result = run_memcost("--results-dir", str(tmp_path / "results"), "info", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    path = tmp_path / "info.json"
    path.write_text(result.stdout)
    assert load_document(path) == document
    assert document["experiment"] == "info"
    assert document["context"]["schema_version"] == 1
    assert "type" not in document["context"]
    assert document["summary"]["notes"]
    # Stored like every experiment's document, the same as printed.
    assert load_document(tmp_path / "results" / "latest" / "info.json")["context"] == document["context"]


def test_info_renders_without_a_terminal(tmp_path):
    result = run_memcost("--results-dir", str(tmp_path), "info")
    assert result.returncode == 0, result.stderr
    assert "Machine" in result.stdout and "memcost budget" in result.stdout
    assert "memcost will use at most" in result.stdout  # a note under the table
    assert "In short:" in result.stdout and "Results:" in result.stdout
    assert "\x1b[" not in result.stdout  # no escape codes when stdout is not a terminal


def test_notes_explain_this_machines_settings(kvm_context):
    text = "\n".join(notes(kvm_context))
    assert "THP: madvise — memcost will request huge pages explicitly" in text
    assert "hugetlb 2 MB pool: 0 pages" in text and "nr_hugepages" in text
    assert "hypervisor (KVM)" in text
    assert "free page reporting" in text
    assert "exit code 3" in text


def test_notes_follow_other_settings(kvm_context):
    context = copy.deepcopy(kvm_context)
    context["pages"]["thp"]["enabled"] = "never"
    context["pages"]["hugetlb"][0].update(total_pages=8, free_pages=6, reserved_pages=1)
    context["memory"].update(cgroup_limit_bytes=4 << 30, cgroup_version="v2")
    context["capabilities"]["populate_write"] = False
    text = "\n".join(notes(context))
    assert "THP: never — THP rows will be skipped" in text
    assert "hugetlb 2 MB pool: 8 pages, 5 free (10 MiB usable" in text
    assert "cgroup v2 limit of 4 GiB" in text
    assert "MADV_POPULATE_WRITE" in text


def test_run_stores_the_machine_description(tmp_path):
    result = run_memcost("--results-dir", str(tmp_path), "run", "--only", "info")
    assert result.returncode == 0, result.stderr
    document = load_document(tmp_path / "latest" / "info.json")
    assert document["context"]["memory"]["budget_bytes"] > 0
    assert "memcost run — summary" in result.stdout
    assert not (tmp_path / "latest" / "costs.json").exists()


def test_unknown_command_and_flag_exit_2():
    for arguments in (["no-such-command"], ["info", "--no-such-flag"], []):
        result = run_memcost(*arguments)
        assert result.returncode == exit_codes.BAD_ARGUMENTS, arguments
        assert result.stderr.startswith("memcost: error:")
