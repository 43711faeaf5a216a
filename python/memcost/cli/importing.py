"""`memcost import`: probe output captured on another machine, turned into results."""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import exit_codes
from ..console import console
from ..errors import MemcostError
from .base import Command


class ImportCommand(Command):
    """Turn memcost-probe output captured elsewhere into results that report and compare read.

    On the other machine (a Windows PC, a server without Python), run the probe alone and keep
    its standard output, e.g.:

        memcost-probe.exe info > info.jsonl
        memcost-probe.exe costs > costs.jsonl
        memcost-probe.exe scaling --preset fastmm2019 > scaling.jsonl
        memcost-probe trace -- ./server --once > trace.jsonl      (Linux; priced by that machine's costs)

    Then here: memcost import info.jsonl costs.jsonl scaling.jsonl. Captures of one host go into one results
    directory (one per host when they come from several); summaries, tables and figures are
    computed here exactly as for a run on this machine. See docs/windows.md.
    """

    name = "import"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("files", nargs="+", type=Path, metavar="FILE.jsonl", help="captured probe output")

    def run(self, args: argparse.Namespace) -> int:
        from ..experiments import REGISTRY
        from ..experiments.shared import finish
        from ..probe import read_capture
        from ..results import RunDirectory, machine_label, reading
        importable = sorted(name for name, experiment in REGISTRY.items() if experiment.analyze or experiment.from_context)
        # Everything is read and checked before anything is written: a bad file leaves no results.
        captures = []
        seen: dict[tuple[str, str], Path] = {}
        for path in args.files:
            if not path.is_file():
                raise MemcostError(f"{path}: no such file", exit_codes.FAILURE)
            try:
                run = read_capture(path)
            except UnicodeDecodeError as error:
                raise MemcostError(f"{path} is not text (it is not memcost-probe output)", exit_codes.FAILURE) from error
            except OSError as error:
                raise MemcostError(f"{path}: {error.strerror}", exit_codes.FAILURE) from error
            name = run.context.get("experiment")
            if name not in importable:
                what = f"'{name}'" if name else "an unnamed experiment (a probe older than this memcost)"
                raise MemcostError(f"{path} holds {what}; memcost import reads {', '.join(importable)}", exit_codes.FAILURE)
            if not REGISTRY[name].from_context and not run.samples:  # info is the machine alone: a context line
                raise MemcostError(f"{path} holds no sample: the probe did not get to measure", exit_codes.FAILURE)
            host = run.context.get("host", "")
            if (host, name) in seen:
                raise MemcostError(f"{path} and {seen[(host, name)]} both hold {name} from {host}: import them one at a time",
                                   exit_codes.FAILURE)
            seen[(host, name)] = path
            captures.append([path, run, name, None, None])
        # Experiments priced by another's summary of the same machine (trace by costs) come last.
        analyzed: dict[tuple[str, str], dict] = {}
        for capture in sorted(captures, key=lambda c: bool(REGISTRY[c[2]].prices_from)):
            path, run, name = capture[:3]
            host = run.context.get("host", "")
            with reading(str(path)):
                if REGISTRY[name].from_context:
                    capture[3:] = [REGISTRY[name].from_context(run.context), []]
                elif REGISTRY[name].prices_from:
                    capture[3:] = REGISTRY[name].analyze(run.samples, self._prices(REGISTRY[name].prices_from, host,
                                                                                   analyzed, args.results_dir, path))
                else:
                    capture[3:] = REGISTRY[name].analyze(run.samples)
            analyzed[(host, name)] = capture[3]
        directories: dict[str, RunDirectory] = {}
        for path, run, name, summary, warnings in captures:
            host = run.context.get("host", "")
            directory = directories.setdefault(host, RunDirectory(args.results_dir))
            params = {"imported_from": str(path.resolve()), "probe_settings": run.settings}
            document = finish(REGISTRY[name], run.context, params, run.samples, summary, run.warnings + warnings,
                              directory)
            console.print(f"{name} from {machine_label(run.context)}: {document['path']}", markup=False)
        for directory in directories.values():
            console.print(f"Report: memcost report {directory.path}", markup=False)
        return exit_codes.OK

    @staticmethod
    def _prices(experiment: str, host: str, analyzed: dict, results_root: Path, path: Path) -> dict:
        """The summary of `experiment` for `host`: imported beside it, or already in the results."""
        from ..results import documents_of_host
        if (host, experiment) in analyzed:
            return analyzed[(host, experiment)]
        for _, document in documents_of_host(results_root, experiment, host):
            return document.get("summary", {})
        raise MemcostError(f"{path} is priced by {host}'s `{experiment}` figures, and there are none: capture "
                           f"`memcost-probe {experiment}` on {host} too and import both together", exit_codes.FAILURE)
