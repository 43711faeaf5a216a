"""`memcost run`: the default suite, sized to this machine."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Callable, Optional

from rich.markup import escape
from rich.table import Table

from .. import exit_codes
from ..console import console, fail
from ..errors import MemcostError
from ..results import RunDirectory
from ..runner import suite_progress
from ..experiments import REGISTRY, Experiment
from ..report import terminal
from .. import arguments
from .base import Command
from .report import write_report


@dataclass
class SuiteEntry:
    name: str
    # Measures, stores and prints; returns the results document.
    run: Callable[[RunDirectory, bool], dict]
    # The one-line finding for the closing summary.
    headline: Callable[[dict], Optional[str]]


def _experiment_runner(experiment: Experiment) -> Callable[[RunDirectory, bool], dict]:
    """Its quick mode (the full one with --full), measured, stored and printed."""
    def run(directory: RunDirectory, full: bool) -> dict:
        document = experiment.measure(experiment.values(quick=not full), directory)
        terminal.render(experiment, document)
        return document
    return run


SUITE = [
    SuiteEntry(experiment.name, _experiment_runner(experiment), lambda document: document["summary"].get("headline"))
    for experiment in REGISTRY.values() if experiment.in_suite]


def summary_table(findings: list[tuple[str, str, str]]) -> Table:
    """One row per experiment: its finding and where its results are. The findings come from data
    (a strategy named `... [thp]`), so they are shown as text, never read as markup."""
    table = Table(title="memcost run — summary", title_justify="left")
    table.add_column("experiment", style="bold")
    table.add_column("finding")
    table.add_column("results")
    for name, finding, path in findings:
        table.add_row(escape(name), escape(finding), escape(path))
    return table


class RunCommand(Command):
    """Run the default suite on defaults sized to this machine and store the results.

    The suite: info, then the quick mode of each experiment (--full for the
    full modes). Results go to RESULTS_DIR/<UTC time>-<host>/, and
    RESULTS_DIR/latest points there. Ctrl-C keeps the experiments already done.
    """

    name = "run"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        names = [entry.name for entry in SUITE]
        parser.add_argument("--full", action="store_true", help="run the full modes (takes minutes)")
        parser.add_argument("--only", type=arguments.choice_list(names), metavar="LIST",
                            help=f"run only these: {', '.join(names)}")
        parser.add_argument("--skip", type=arguments.choice_list(names), default=[], metavar="LIST",
                            help="leave these out")

    def run(self, args: argparse.Namespace) -> int:
        directory = RunDirectory(args.results_dir)
        chosen = [e for e in SUITE if (args.only is None or e.name in args.only) and e.name not in args.skip]
        if not chosen:
            raise MemcostError("--only and --skip leave no experiment to run: "
                               f"choose from {', '.join(e.name for e in SUITE)}", exit_codes.BAD_ARGUMENTS)
        findings = []
        failures: list[tuple[str, MemcostError]] = []
        started = time.monotonic()
        try:
            with suite_progress(len(chosen)) as experiment_done:
                for number, entry in enumerate(chosen, start=1):
                    console.rule(f"[bold]{entry.name}[/bold] ({number} of {len(chosen)}, "
                                 f"{time.monotonic() - started:.0f} s into the run)")
                    try:
                        document = entry.run(directory, args.full)
                    except MemcostError as error:
                        # One experiment's failure must not cost the others their results.
                        fail(f"{entry.name}: {error.message}")
                        failures.append((entry.name, error))
                        findings.append((entry.name, f"failed: {error.message}", "—"))
                    else:
                        findings.append((entry.name, entry.headline(document) or "", document["path"]))
                    experiment_done(entry.name)
        except KeyboardInterrupt:
            # Finished experiments keep their results, and get their report.
            if directory.path is not None and findings:
                page, _ = write_report(directory.path)
                fail(f"interrupted; the finished experiments' results and report are in {directory.path} ({page.name})")
                return exit_codes.INTERRUPTED
            raise
        console.rule()
        console.print(summary_table(findings))
        if directory.path is not None:
            page, summary = write_report(directory.path)
            console.print(f"Report: {page}   (Markdown: {summary.name})", markup=False)
        if failures:
            names = ", ".join(name for name, _ in failures)
            fail(f"{len(failures)} of {len(chosen)} experiments failed ({names}); the others' results are kept")
            # The exit code of the first failure: 3 for a budget, 4 for unsupported, 1 otherwise.
            return failures[0][1].exit_code
        return exit_codes.OK
