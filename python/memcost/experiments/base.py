"""What an experiment is, declared once: its options, how it measures, how it summarizes,
its figures, its tables (as data), its plain-language reading, and what `compare` compares.
The terminal, Markdown and HTML outputs are reporters over the same tables."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

# (caption, headings, rows) of plain strings: every output format renders these.
Table = tuple[str, list[str], list[list[str]]]

UNSET = object()


def number(value, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def comma_list(values) -> str:
    return ",".join(str(value) for value in values)


@dataclass(frozen=True)
class Option:
    """One option, from which the command-line flag, the probe's argument and the recorded
    `params` entry are all derived. `default` is the full mode's value (None: the probe's own
    default, capped to the machine); `quick` the value `memcost run` uses when it differs."""
    name: str
    help: str
    default: Any = None
    quick: Any = UNSET
    parse: Optional[Callable[[str], Any]] = None  # argparse type
    metavar: Optional[str] = None
    choices: Optional[list] = None
    flag_only: bool = False                       # a switch (store_true)
    to_probe: Optional[Callable[[Any], str]] = str  # None: the front end uses it, the probe never sees it
    set_by_preset: bool = False                   # a `--preset` chooses it: not given with one
    const: Any = UNSET                            # the flag's value may be left out: then it is this

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        if self.flag_only:
            parser.add_argument(self.flag, action="store_true", help=self.help)
            return
        # No argparse default: a flag not given keeps the mode's value (full or quick).
        optional = {} if self.const is UNSET else {"nargs": "?", "const": self.const}
        parser.add_argument(self.flag, type=self.parse, metavar=self.metavar, choices=self.choices, help=self.help,
                            **optional)


@dataclass(frozen=True)
class Comparison:
    """What `memcost compare` compares for an experiment: the measure's name, the names of the
    key's parts, and the (key, values) each sample contributes (None: it contributes nothing)."""
    measure: str
    key_names: tuple[str, ...]
    values_of: Callable[[dict], Optional[tuple[tuple, list[float]]]]
    # Overlaid figures of the compared runs: (this experiment's comparison, every run's documents
    # by experiment, run names, folder) -> paths.
    figures: Callable[[dict, list, list, Path], list[Path]] = lambda comparison, runs, names, out: []
    # Instead of values_of: (key, values) from the whole document (trace compares its summary's sites).
    rows_of: Optional[Callable[[dict], dict]] = None
    # What a row says when it has too few samples to test (None: the general note, rerun with --reps).
    untested: Optional[str] = None


@dataclass
class Experiment:
    name: str
    title: str                                   # its report section
    summary: str                                 # one line for `--help` and the docs
    options: list[Option] = field(default_factory=list)
    # Runs the probe(s) and returns the stored results document.
    measure: Optional[Callable[[dict, Any], dict]] = None
    # From the probe's samples alone: the summary and the warnings it adds. What `measure` uses,
    # and what `memcost import` uses on a stream captured elsewhere (None: not importable).
    analyze: Optional[Callable[[list], tuple[dict, list]]] = None
    # An experiment of the machine alone (info): its summary from the probe's context line, which is
    # all it reports; what `memcost import` uses on a captured one.
    from_context: Optional[Callable[[dict], dict]] = None
    # The experiment whose summary of the same machine prices this one's (trace: costs); analyze
    # then takes that summary as its second argument.
    prices_from: Optional[str] = None
    figures: Callable[[dict, str, Path], list[Path]] = lambda summary, host, folder: []
    tables: Callable[[dict], list[Table]] = lambda summary: []
    # Lines the terminal prints under the tables (verdicts, explanations).
    notes: Callable[[dict], list[str]] = lambda summary: []
    interpret: Callable[[dict], list[str]] = lambda summary: []
    # SVG drawn from the document itself, inlined in the HTML report.
    drawings: Callable[[dict], list[str]] = lambda document: []
    # A module of report/ that writes the tables, notes, interpretation and drawings instead, where
    # they are too long to sit in the declaration (trace): report.reading() finds it.
    prose: Optional[str] = None
    comparison: Optional[Comparison] = None
    in_suite: bool = True                        # part of `memcost run`

    def values(self, given: Optional[argparse.Namespace] = None, quick: bool = False) -> dict:
        """The options' values: the mode's defaults, overridden by the flags given."""
        values = {}
        for option in self.options:
            value = option.quick if quick and option.quick is not UNSET else option.default
            flag_value = getattr(given, option.name, None) if given is not None else None
            if flag_value is not None and flag_value is not False:
                value = flag_value
            values[option.name] = value
        preset = values.get("preset")
        if preset:
            for option in self.options:
                if not option.set_by_preset:
                    continue
                if given is not None and getattr(given, option.name, None) is not None:
                    from ..errors import MemcostError
                    from ..exit_codes import BAD_ARGUMENTS
                    raise MemcostError(f"--preset {preset} sets {option.flag} itself: leave {option.flag} out",
                                       BAD_ARGUMENTS)
                values[option.name] = None
        return values

    def probe_arguments(self, values: dict) -> list[str]:
        arguments = []
        for option in self.options:
            value = values.get(option.name)
            if option.to_probe is None or value is None or value is False:
                continue
            arguments += [option.flag] if value is True else [option.flag, option.to_probe(value)]
        return arguments

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        for option in self.options:
            option.add_to(parser)
        if any(option.quick is not UNSET for option in self.options):
            parser.add_argument("--quick", action="store_true", help="the short mode `memcost run` uses")
