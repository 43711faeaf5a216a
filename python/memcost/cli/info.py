"""`memcost info`: how this machine hands out memory (declared in experiments/info.py)."""

from __future__ import annotations

import argparse
import json

from .base import ExperimentCommand


class InfoCommand(ExperimentCommand):
    """Describe how this machine hands out memory: pages, pools, limits, counters.

    Prints a table with plain-language notes on what each setting means for
    memcost's experiments, and stores it as a results document like every
    experiment's; --json prints that document instead.
    """

    experiment_name = "info"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        super().prepare_parser(parser)
        parser.add_argument("--json", action="store_true", help="print the results document as JSON")

    def run(self, args: argparse.Namespace) -> int:
        if not args.json:
            return super().run(args)
        from .. import exit_codes
        print(json.dumps(self.measure(args), indent=1))
        return exit_codes.OK
