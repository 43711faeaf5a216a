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
