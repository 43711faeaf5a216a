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
        from ..results import RunDirectory, machine_label, make_document, reading
        from .info import notes as info_notes
        # `info` (the machine alone) is no experiment: its document is the context and its notes.
        importable = sorted(["info", *(name for name, experiment in REGISTRY.items() if experiment.analyze)])
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
            if name != "info" and not run.samples:  # info is the machine alone: a context line
                raise MemcostError(f"{path} holds no sample: the probe did not get to measure", exit_codes.FAILURE)
            host = run.context.get("host", "")
            if (host, name) in seen:
                raise MemcostError(f"{path} and {seen[(host, name)]} both hold {name} from {host}: import them one at a time",
                                   exit_codes.FAILURE)
            seen[(host, name)] = path
            with reading(str(path)):
                summary, warnings = ({"notes": info_notes(run.context)}, []) if name == "info" \
                    else REGISTRY[name].analyze(run.samples)
            captures.append((path, run, name, summary, warnings))
        directories: dict[str, RunDirectory] = {}
        for path, run, name, summary, warnings in captures:
            host = run.context.get("host", "")
            directory = directories.setdefault(host, RunDirectory(args.results_dir))
            params = {"imported_from": str(path.resolve()), "probe_settings": run.settings}
            if name == "info":
                document = make_document("info", run.context, params, [], summary, run.warnings)
                document["path"] = str(directory.write(document))
            else:
                document = finish(REGISTRY[name], run.context, params, run.samples, summary, run.warnings + warnings,
                                  directory)
            console.print(f"{name} from {machine_label(run.context)}: {document['path']}", markup=False)
        for directory in directories.values():
            console.print(f"Report: memcost report {directory.path}", markup=False)
        return exit_codes.OK
