"""argparse value types shared by the subcommands; a bad value exits 2 with one line."""

from __future__ import annotations

import argparse
from typing import Callable

from ..hugepool import PAGE_SIZES
from ..units import parse_size, parse_size_list


def size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def size_list(text: str) -> list[int]:
    try:
        return parse_size_list(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def _whole_number(text: str, minimum: int, wording: str) -> int:
    try:
        value = int(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from error
    if value < minimum:
        raise argparse.ArgumentTypeError(f"'{text}' must be {wording}")
    return value


def positive_int(text: str) -> int:
    return _whole_number(text, 1, "at least 1")


def non_negative_int(text: str) -> int:
    return _whole_number(text, 0, "0 or more")


def add_budget(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--budget", type=size, metavar="SIZE", help="memory budget (default 80%% of available memory)")


def add_hugepage_reservation(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reserve-hugepages", type=size, metavar="SIZE",
                        help="as root: grow the hugetlb pool by SIZE for this run, restored afterwards")
    parser.add_argument("--hugepage-size", choices=sorted(PAGE_SIZES), default="2M",
                        help="page size of the pool --reserve-hugepages grows (default 2M)")


def choice_list(choices: list[str]) -> Callable[[str], list[str]]:
    """Comma-separated names, each one of `choices`."""
    def parse(text: str) -> list[str]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        unknown = [item for item in items if item not in choices]
        if unknown or not items:
            raise argparse.ArgumentTypeError(f"'{text}': choose from {', '.join(choices)}")
        return items
    return parse
