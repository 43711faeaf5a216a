"""The real probe and the protocol reader."""

import json
import os
import stat

import pytest

from conftest import run_probe
from memcost import exit_codes
from memcost import probe as probe_module
from memcost.probe import ProbeFailed, run_probe as run_probe_api

CONTEXT_KEYS = {"type", "schema_version", "tool_version", "host", "os", "wine", "cpu", "hypervisor", "memory", "pages",
                "limits", "counters", "capabilities", "build", "experiment"}


def test_info_prints_one_json_line_with_the_documented_keys():
    result = run_probe("info")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    context = json.loads(lines[0])
    assert set(context) == CONTEXT_KEYS
    assert context["type"] == "context"
    assert context["schema_version"] == 1
    memory = context["memory"]
    assert 0 < memory["budget_bytes"] <= memory["usable_bytes"] <= memory["total_bytes"]
    assert context["pages"]["base_page_bytes"] >= 4096
    assert context["cpu"]["logical_cpus"] == os.cpu_count()
    for pool in context["pages"]["hugetlb"]:
        assert set(pool) == {"page_size_bytes", "total_pages", "free_pages", "reserved_pages", "surplus_pages",
                             "available_pages"}
        assert pool["available_pages"] == max(pool["free_pages"] - pool["reserved_pages"], 0)
    # The capability layer's verdicts: one per page kind, a reason whenever a kind is not usable.
    verdicts = context["pages"]["verdicts"]
    assert set(verdicts) == {"base", "thp", "hugetlb-2M", "hugetlb-1G"} and verdicts["base"]["usable"]
    for verdict in verdicts.values():
        assert verdict["usable"] or verdict["why_not"]
    for state in context["counters"]["perf"].values():
        # Unavailable is said with a reason, never a silent zero.
        assert state["available"] or state["reason"]


@pytest.mark.parametrize("arguments, says", [
    (["no-such-experiment"], "unknown experiment"),
    (["info", "--no-such-flag"], "--no-such-flag"),
    ([], "subcommand"),
])
def test_bad_arguments_exit_2_with_one_error_line(arguments, says):
    result = run_probe(*arguments)
    assert result.returncode == exit_codes.BAD_ARGUMENTS
    record = json.loads(result.stdout.strip())
    assert record["type"] == "error" and record["code"] == "bad_arguments"
    assert says in record["message"]
    assert len(result.stderr.strip().splitlines()) == 1


def _fake_probe(tmp_path, monkeypatch, script: str):
    path = tmp_path / "fake-probe"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("MEMCOST_PROBE", str(path))


def test_a_killed_probe_is_reported_not_crashed_on(tmp_path, monkeypatch):
    # Issue 10: the OOM killer is named only when the kernel's OOM count moved during the run.
    _fake_probe(tmp_path, monkeypatch, 'echo \'{"type":"context"}\'\nkill -9 $$\n')
    with pytest.raises(ProbeFailed, match=r"killed \(SIGKILL\)$"):
        run_probe_api("costs")
    counts = iter([7, 8])
    monkeypatch.setattr(probe_module, "_oom_kills", lambda: next(counts))
    with pytest.raises(ProbeFailed, match=r"killed \(SIGKILL\) by the kernel's OOM killer"):
        run_probe_api("costs")


def test_probe_error_line_becomes_the_message_and_exit_code(tmp_path, monkeypatch):
    _fake_probe(tmp_path, monkeypatch,
                'echo \'{"type":"context"}\'\n'
                'echo \'{"type":"error","code":"budget","message":"8 GiB exceeds the budget; pass --budget"}\'\n'
                'exit 3\n')
    with pytest.raises(ProbeFailed) as caught:
        run_probe_api("costs")
    assert caught.value.exit_code == exit_codes.NOT_ENOUGH_MEMORY
    assert "pass --budget" in caught.value.message


def test_garbage_on_stdout_is_a_protocol_error(tmp_path, monkeypatch):
    _fake_probe(tmp_path, monkeypatch, 'echo "hello"\n')
    with pytest.raises(ProbeFailed, match="not JSON"):
        run_probe_api("info")


def test_samples_progress_and_warnings_are_collected(tmp_path, monkeypatch):
    _fake_probe(tmp_path, monkeypatch,
                'echo \'{"type":"context","host":"x"}\'\n'
                'echo \'{"type":"progress","done":1,"total":2,"label":"a"}\'\n'
                'echo \'{"type":"sample","case":{"size_bytes":1},"metrics":{"elapsed_ns":5}}\'\n'
                'echo \'{"type":"warning","code":"w","message":"do this"}\'\n')
    progress = []
    run = run_probe_api("x", on_progress=lambda done, total, label: progress.append((done, total, label)))
    assert run.context == {"host": "x"}
    assert run.samples == [{"case": {"size_bytes": 1}, "metrics": {"elapsed_ns": 5}}]
    assert run.warnings == [{"code": "w", "message": "do this"}]
    assert progress == [(1, 2, "a")]


def test_missing_probe_says_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMCOST_PROBE", str(tmp_path / "nothing-here"))
    with pytest.raises(ProbeFailed, match="cannot start"):
        run_probe_api("info")
