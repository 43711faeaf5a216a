import json
from datetime import datetime, timezone

import pytest

from memcost.results import SCHEMA_VERSION, ResultsError, RunDirectory, as_text, document_text, load_document, make_document


def _document(experiment="info"):
    return make_document(experiment, {"host": "box"}, params={"reps": 3}, samples=[{"case": {}, "metrics": {}}],
                         summary={"rows": []}, warnings=[])


def test_document_has_the_documented_shape():
    document = _document()
    assert list(document) == ["schema_version", "tool_version", "experiment", "context", "params", "samples",
                              "summary", "warnings"]
    assert document["schema_version"] == SCHEMA_VERSION


def test_run_directory_is_created_only_on_first_write(tmp_path):
    directory = RunDirectory(tmp_path, now=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc))
    assert directory.path is None and not any(tmp_path.iterdir())
    document = _document()
    document["context"]["host"] = "my host"
    path = directory.write(document)
    assert directory.path.name == "20260102T030405Z-my_host"
    assert path == directory.path / "info.json"
    assert (tmp_path / "latest").resolve() == directory.path.resolve()
    assert load_document(tmp_path / "latest" / "info.json")["experiment"] == "info"
    # No temporary files are left behind.
    assert sorted(p.name for p in directory.path.iterdir()) == ["info.json"]


def test_latest_moves_to_the_newest_run(tmp_path):
    first = RunDirectory(tmp_path, now=datetime(2026, 1, 1, tzinfo=timezone.utc))
    second = RunDirectory(tmp_path, now=datetime(2026, 1, 2, tzinfo=timezone.utc))
    first.write(_document())
    second.write(_document())
    assert (tmp_path / "latest").resolve() == second.path.resolve()


def test_two_runs_started_in_the_same_second_keep_both_results(tmp_path):
    second = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    first_run, second_run, third_run = (RunDirectory(tmp_path, now=second) for _ in range(3))
    first = _document()
    first["params"]["reps"] = 1
    first_run.write(first)
    second_run.write(_document())
    third_run.write(_document())
    assert [run.path.name for run in (first_run, second_run, third_run)] == \
        ["20260102T030405Z-box", "20260102T030405Z-box-2", "20260102T030405Z-box-3"]
    assert load_document(first_run.path / "info.json")["params"]["reps"] == 1  # not written over
    assert (tmp_path / "latest").resolve() == third_run.path.resolve()
    # A run's later documents go into its own folder.
    first_run.write(_document("costs"))
    assert sorted(p.name for p in first_run.path.iterdir()) == ["costs.json", "info.json"]


def test_load_document_reports_what_is_wrong(tmp_path):
    with pytest.raises(ResultsError, match="no such results file"):
        load_document(tmp_path / "missing.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ResultsError, match="not a JSON document"):
        load_document(tmp_path / "broken.json")
    (tmp_path / "other.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(ResultsError, match="missing schema_version"):
        load_document(tmp_path / "other.json")
    future = _document()
    future["schema_version"] = SCHEMA_VERSION + 1
    (tmp_path / "future.json").write_text(json.dumps(future))
    with pytest.raises(ResultsError, match="schema version"):
        load_document(tmp_path / "future.json")


def test_a_documents_samples_are_written_one_a_line_and_read_back_the_same():
    from memcost.results import document_text
    document = {"schema_version": 1, "experiment": "trace", "context": {"host": "h"}, "params": {},
                "samples": [{"case": {"record": "stack"}, "metrics": {"frames": [{"function": "a\u0000b ✓"}] * 3}},
                            {"case": {"record": "run"}, "metrics": {}}],
                "summary": {"rows": []}, "warnings": []}
    text = document_text(document)
    assert json.loads(text) == document
    lines = text.splitlines()
    assert sum(line.startswith('  {"case"') for line in lines) == 2  # one line a sample
    assert list(json.loads(text)) == list(document)  # the keys in their order
    assert json.loads(document_text({**document, "samples": []})) == {**document, "samples": []}
    assert json.loads(document_text({"experiment": "info"})) == {"experiment": "info"}


def test_samples_read_from_the_probe_keep_its_text_and_read_back_the_same():
    """A sample line from the probe is written back as the probe wrote it (not encoded again); a line
    with non-ASCII text, or not of the sample's form, is encoded by json as any other."""
    from memcost.probe import _parse_line, _take
    from memcost.results import document_text
    lines = ['{"type":"context","host":"h"}\n',
             '{"type":"sample","case":{"record":"stack"},"metrics":{"frames":[{"function":"f","line":3}]}}\n',
             '{"type":"sample","case":{"record":"stack"},"metrics":{"frames":[{"function":"café"}]}}\n',
             '{"type":"sample","metrics":{"x":1},"case":{"record":"run"}}\n']
    run = None
    for line in lines:
        run = _take(_parse_line(line), run, line)
    texts = [sample.text for sample in run.samples]
    assert texts == ['{"case":{"record":"stack"},"metrics":{"frames":[{"function":"f","line":3}]}}', None, None]
    document = {"experiment": "trace", "samples": run.samples, "summary": {}}
    text = document_text(document)
    assert json.loads(text) == json.loads(json.dumps(document))
    assert '\n  {"case":{"record":"stack"},"metrics":{"frames":[{"function":"f","line":3}]}},\n' in text


def test_a_parameter_with_bytes_that_are_not_utf8_is_stored_with_u_fffd_and_reads_back(tmp_path):
    """A command line or path with a Latin-1 byte reaches Python as a lone surrogate; written as it
    is, the document held an escape that `memcost report` could not print. Stored, it says U+FFFD
    where the byte was, as the probe writes a traced program's bytes."""
    argument = "/data/caf" + b"\xe9".decode("utf-8", "surrogateescape") + ".csv"
    params = {"command": ["sort", argument], "nested": {"path": argument, "n": 3}, "plain": "café"}
    document = make_document("trace", {"host": "h"}, params, [], {}, [])
    assert document["params"] == {"command": ["sort", "/data/caf\ufffd.csv"], "nested": {"path": "/data/caf\ufffd.csv", "n": 3},
                                  "plain": "café"}
    path = tmp_path / "trace.json"
    path.write_text(document_text(document), encoding="utf-8")
    assert json.loads(path.read_text(encoding="utf-8"))["params"]["command"][1] == "/data/caf\ufffd.csv"
    assert as_text("lone \ud800 surrogate") == "lone ? surrogate"  # none that decoding bytes made
    assert params["command"][1] == argument  # what runs the command is left as it was
