"""The interface every subcommand implements."""

from __future__ import annotations

import argparse

from rich.markup import escape

from ..console import console


class Command:
    """A subcommand: its docstring is its help, prepare_parser() its flags, run() its work."""

    name = ""

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        pass

    def run(self, args: argparse.Namespace) -> int:
        raise NotImplementedError


def print_closing(document: dict) -> None:
    """What every experiment prints after its tables: the warnings, the headline, where the results are."""
    if document["warnings"]:
        console.print("[bold]Warnings[/bold]")
        for warning in document["warnings"]:
            console.print(f" • {warning['message']}", markup=False)
    if document["summary"].get("headline"):
        console.print(f"\n[bold]In short:[/bold] {escape(document['summary']['headline'])}")  # "[thp]" is no style
    console.print(f"Results: {document['path']}", markup=False)


class ExperimentCommand(Command):
    """A subcommand that runs one registered experiment: its flags come from the experiment's
    declared options, its output from the terminal reporter over the experiment's tables."""

    experiment_name = ""

    @property
    def experiment(self):
        from ..experiments import REGISTRY
        return REGISTRY[self.experiment_name]

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.experiment_name

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        from .. import export
        self.experiment.add_options(parser)
        export.add_arguments(parser)

    def measure(self, args: argparse.Namespace) -> dict:
        from ..results import RunDirectory
        values = self.experiment.values(args, quick=getattr(args, "quick", False))
        return self.experiment.measure(values, RunDirectory(args.results_dir))

    def run(self, args: argparse.Namespace) -> int:
        from .. import exit_codes, export
        from ..report import terminal
        document = self.measure(args)
        terminal.render(self.experiment, document)
        export.export_requested(document, args)
        return exit_codes.OK
