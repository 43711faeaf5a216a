"""argparse value types shared by the subcommands; a bad value exits 2 with one line."""

from __future__ import annotations

import argparse
from typing import Callable

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


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from error
    if value < 1:
        raise argparse.ArgumentTypeError(f"'{text}' must be at least 1")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from error
    if value < 0:
        raise argparse.ArgumentTypeError(f"'{text}' must be 0 or more")
    return value


def choice_list(choices: list[str]) -> Callable[[str], list[str]]:
    """Comma-separated names, each one of `choices`."""
    def parse(text: str) -> list[str]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        unknown = [item for item in items if item not in choices]
        if unknown or not items:
            raise argparse.ArgumentTypeError(f"'{text}': choose from {', '.join(choices)}")
        return items
    return parse
