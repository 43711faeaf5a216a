"""A probe run with reap_later is used as soon as it has said all it had, while it still closes what
it holds (a trace's perf events wait for the kernel), and how it ended is judged by reap()."""
from __future__ import annotations

import time

import pytest

from memcost import probe
from memcost.probe import ProbeFailed, run_probe

CLOSING_S = 1.0


@pytest.fixture
def closing_probe(tmp_path, monkeypatch):
    """A stand-in probe that says one context line and a sample, lets go of its stdout as the
    real one does (os::release_stdout), then goes on for CLOSING_S and exits with $FAKE_EXIT."""
    script = tmp_path / "memcost-probe"
    script.write_text("#!/bin/sh\n"
                      "echo '{\"type\": \"context\", \"host\": \"stand-in\"}'\n"
                      "echo '{\"type\": \"sample\", \"case\": {\"record\": \"run\"}, \"metrics\": {}}'\n"
                      "exec 1>/dev/null\n"
                      f"sleep {CLOSING_S}\n"
                      "exit ${FAKE_EXIT:-0}\n")
    script.chmod(0o755)
    monkeypatch.setenv("MEMCOST_PROBE", str(script))
    yield
    probe._unreaped.clear()


def test_a_run_reaped_later_is_returned_before_the_probe_ends(closing_probe):
    started = time.monotonic()
    run = run_probe("trace", reap_later=True)
    returned = time.monotonic() - started
    assert run.context["host"] == "stand-in" and len(run.samples) == 1
    assert returned < CLOSING_S * 0.8
    probe.reap()
    assert time.monotonic() - started >= CLOSING_S * 0.9  # reap() waited for it
    assert not probe._unreaped


def test_a_probe_that_fails_while_closing_is_said_by_reap(closing_probe, monkeypatch):
    monkeypatch.setenv("FAKE_EXIT", "3")
    run_probe("trace", reap_later=True)  # what it said is there to use
    with pytest.raises(ProbeFailed) as failed:
        probe.reap()
    assert failed.value.exit_code == 3 and not probe._unreaped


def test_without_reap_later_the_probe_is_waited_for_and_judged_at_once(closing_probe, monkeypatch):
    monkeypatch.setenv("FAKE_EXIT", "3")
    started = time.monotonic()
    with pytest.raises(ProbeFailed):
        run_probe("trace")
    assert time.monotonic() - started >= CLOSING_S * 0.9
    assert not probe._unreaped


def test_a_probe_not_reaped_is_waited_for_quietly_before_the_front_end_ends(closing_probe, monkeypatch):
    """A command that ends by an error or a Ctrl-C before reap(): the entry point still waits for
    the probe (none outlives memcost), judging nothing: its own error is the one said."""
    monkeypatch.setenv("FAKE_EXIT", "3")
    run_probe("trace", reap_later=True)
    process = probe._unreaped[-1][1]
    probe.wait_unreaped()
    assert process.returncode == 3 and not probe._unreaped
