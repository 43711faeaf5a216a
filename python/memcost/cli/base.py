"""The interface every subcommand implements."""

from __future__ import annotations

import argparse

class Command:
    """A subcommand: its docstring is its help, prepare_parser() its flags, run() its work."""

    name = ""

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        pass

    def run(self, args: argparse.Namespace) -> int:
        raise NotImplementedError


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
