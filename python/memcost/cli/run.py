"""`memcost run`: the default suite, sized to this machine."""

from __future__ import annotations

import argparse

from .. import exit_codes
from ..results import RunDirectory
from . import info
from .base import Command, console


class RunCommand(Command):
    """Run the default suite on defaults sized to this machine and store the results.

    Today the suite is `info`; each experiment adds itself as it lands.
    Results go to RESULTS_DIR/<UTC time>-<host>/, and RESULTS_DIR/latest points there.
    """

    name = "run"

    def run(self, args: argparse.Namespace) -> int:
        document = info.collect()
        info.render(document)
        directory = RunDirectory(args.results_dir, document["context"]["host"])
        path = directory.write(document)
        console.print(f"\nResults: {path}", markup=False)
        return exit_codes.OK
