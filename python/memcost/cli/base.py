"""The interface every subcommand implements."""

from __future__ import annotations

import argparse

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
        console.print(f"\n[bold]In short:[/bold] {document['summary']['headline']}")
    console.print(f"Results: {document['path']}", markup=False)
